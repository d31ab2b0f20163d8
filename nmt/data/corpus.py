"""Reading parallel corpora: plain-text file pairs, TSV files and Hugging Face datasets.

Formats (``data.format``):

``text``  line-aligned files ``{root}/{split}.{lang}`` (Multi30k's layout).
``tsv``   one file ``{root}/{split}.tsv`` with lines ``source<TAB>target``.
``hf``    a Hugging Face dataset: ``root`` is a directory written by ``save_to_disk``
          (read with ``datasets.load_from_disk``) or a hub name (``datasets.load_dataset``).
          Rows carry ``translation: {src_lang: ..., tgt_lang: ...}`` or one column per language.

Every reader streams: ``iter_*`` yield one line or pair at a time, so memory does not grow
with the corpus (:func:`iter_parallel` is what data preparation uses); ``read_*`` collect the
same stream into lists for inputs that fit in memory (evaluation, forced alignment).
Everything returned here is raw and unfiltered, one string per line with the line break
removed. Bad input raises :class:`CorpusError` with one sentence that names the file, the
line and the problem, as soon as the stream reaches it. Training-only cleaning (empty pairs,
length filters) happens in :func:`iter_nonempty_pairs` and
:func:`nmt.data.batching.prepare_data`; validation and test splits are never filtered.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from nmt.config import cfg_get

log = logging.getLogger("nmt.data")


class CorpusError(ValueError):
    """A corpus file is missing, unreadable, misaligned or empty (message names file and line)."""


_BOM = b"\xef\xbb\xbf"  # the UTF-8 byte order mark
_HF_BATCH_ROWS = 10_000  # rows per batch read from a Hugging Face dataset


# ------------------------------------------------------------------ plain-text files
def _check_file(path: Path) -> None:
    """Raise :class:`CorpusError` unless ``path`` is an existing regular file."""
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, not a corpus file; point data.root (or the "
                          "file argument) at the directory that holds the files.")
    if not path.is_file():
        raise CorpusError(f"{path}: file not found.")


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 file one at a time, without line breaks (``\\n`` or ``\\r\\n``).

    Reads the file as a stream (memory does not grow with its size). Only ``\\n`` separates
    lines (not the other Unicode line separators), so files stay aligned with ``wc -l``. A
    leading UTF-8 byte order mark is removed. The checks run as the lines are read: an error
    in line ``k`` is raised after lines ``1..k-1`` were yielded.

    Raises:
        CorpusError: the path is missing, is a directory, cannot be read (permissions or
            another OS error), is not valid UTF-8 (names the line and the byte offset in the
            file), or is empty.
    """
    path = Path(path)
    _check_file(path)
    try:
        f = path.open("rb")
    except OSError as err:  # PermissionError and friends
        raise CorpusError(_unreadable(path, err)) from None
    with f:
        offset, number = 0, 0  # bytes before the current line; lines read so far
        try:
            for raw in f:
                start, end = 0, len(raw)
                if number == 0 and raw.startswith(_BOM):
                    start = len(_BOM)
                    if end == start:  # a BOM and nothing else
                        break
                number += 1
                if raw.endswith(b"\n"):
                    end -= 1
                if end > start and raw[end - 1: end] == b"\r":
                    end -= 1
                try:
                    line = raw[start:end].decode("utf-8")
                except UnicodeDecodeError as err:
                    bad = start + err.start
                    raise CorpusError(f"{path}, line {number}: invalid UTF-8 (byte "
                                      f"0x{raw[bad]:02x} at offset {offset + bad}); re-encode "
                                      "the file as UTF-8.") from None
                offset += len(raw)
                yield line
        except OSError as err:
            raise CorpusError(_unreadable(path, err)) from None
    if number == 0:
        raise CorpusError(f"{path}: the file is empty; a corpus needs at least one line.")


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 file as a list (:func:`iter_lines`, for files that fit in memory).

    Raises:
        CorpusError: see :func:`iter_lines`.
    """
    return list(iter_lines(path))


def iter_text_pair(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    """``(source line, target line)`` of two line-aligned files, streamed.

    Raises:
        CorpusError: a file is missing / not UTF-8 / empty (see :func:`iter_lines`), or the
            line counts differ (raised when the shorter file ends, after counting the rest of
            the longer one; the message names both files and both counts).
    """
    src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
    n = 0
    for s in src_lines:
        t = next(tgt_lines, None)
        if t is None:
            n_src = n + 1 + sum(1 for _ in src_lines)
            raise CorpusError(_misaligned(src_path, n_src, tgt_path, n))
        n += 1
        yield s, t
    rest = sum(1 for _ in tgt_lines)
    if rest:
        raise CorpusError(_misaligned(src_path, n, tgt_path, n + rest))


def _misaligned(src_path: str | Path, n_src: int, tgt_path: str | Path, n_tgt: int) -> str:
    return (f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: parallel files must be "
            "line-aligned.")


def read_text_pair(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    """Read two line-aligned files (e.g. ``nmt-evaluate``'s source and reference files).

    Returns:
        (source lines, target lines), equally long.

    Raises:
        CorpusError: see :func:`iter_text_pair`.
    """
    return _unzip(iter_text_pair(src_path, tgt_path))


def iter_tsv(path: str | Path) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each ``source<TAB>target`` line, streamed.

    Raises:
        CorpusError: missing / not UTF-8 / empty file, or a line without exactly one tab.
    """
    for number, line in enumerate(iter_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}, line {number}: expected 2 tab-separated fields "
                              f"(source<TAB>target), found {len(fields)}.")
        yield fields[0], fields[1]


def read_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """Read ``source<TAB>target`` lines into two lists.

    Raises:
        CorpusError: see :func:`iter_tsv`.
    """
    return _unzip(iter_tsv(path))


def _unzip(pairs: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    src, tgt = [], []
    for s, t in pairs:
        src.append(s)
        tgt.append(t)
    return src, tgt


def _unreadable(path: Path, err: OSError) -> str:
    return f"{path}: cannot be read ({err.strerror or err}); check the file's permissions."


# ------------------------------------------------------------------ Hugging Face
def _load_hf(root: str, split: str):
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        raise CorpusError("data.format=hf needs the `datasets` package: pip install datasets.") from None
    path = Path(root)
    try:
        if path.exists():
            loaded = datasets.load_from_disk(str(path))
        else:
            loaded = datasets.load_dataset(root)
    except Exception as err:  # noqa: BLE001 - library errors become one clear sentence
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CorpusError(f"{root}: cannot load the Hugging Face dataset ({first}).") from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise CorpusError(
            f"{root}: holds a single {type(loaded).__name__}, not a DatasetDict with named "
            f"splits, so split {split!r} cannot be told apart from the others; save it as "
            "datasets.DatasetDict({'train': ..., 'validation': ...}).save_to_disk(...).")
    if split not in loaded:
        raise CorpusError(f"{root}: the dataset has no split {split!r} "
                          f"(it has {', '.join(loaded.keys())}); set data.*_split.")
    return loaded[split]


def iter_hf(root: str, split: str, src_lang: str, tgt_lang: str,
            batch_rows: int = _HF_BATCH_ROWS) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each row of a Hugging Face dataset split, streamed.

    The split (a local ``save_to_disk`` dir or a hub name) is memory-mapped Arrow; it is read
    ``batch_rows`` rows at a time, never as one list. Rows need
    ``translation: {src_lang: str, tgt_lang: str}`` or columns named after the two languages.
    The dataset must be a ``DatasetDict`` (named splits): a single saved ``Dataset`` is refused
    rather than used for every split.

    Raises:
        CorpusError: the dataset cannot be loaded, is not a ``DatasetDict``, lacks the split
            or the language fields, the split is empty, or a row holds a non-string (names
            the row, counted from 0).
    """
    ds = _load_hf(root, split)
    where = f"{root} (split {split})"
    if len(ds) == 0:
        raise CorpusError(f"{where}: the dataset split is empty.")
    if "translation" in ds.column_names:
        first = ds[0]["translation"]
        for lang in (src_lang, tgt_lang):
            if lang not in first:
                raise CorpusError(f"{where}: translation has no {lang!r} field "
                                  f"(it has {', '.join(first)}); set data.src_lang/tgt_lang.")

        def columns(batch: dict) -> tuple[list, list]:
            rows = batch["translation"]
            return [r[src_lang] for r in rows], [r[tgt_lang] for r in rows]

        ds = ds.select_columns(["translation"])
    elif src_lang in ds.column_names and tgt_lang in ds.column_names:
        def columns(batch: dict) -> tuple[list, list]:
            return batch[src_lang], batch[tgt_lang]

        ds = ds.select_columns([src_lang, tgt_lang])
    else:
        raise CorpusError(f"{where}: no 'translation' column and no {src_lang!r}/{tgt_lang!r} "
                          f"columns (it has {', '.join(ds.column_names)}).")
    i = 0
    for batch in ds.iter(batch_size=batch_rows):
        for s, t in zip(*columns(batch), strict=True):
            if not isinstance(s, str) or not isinstance(t, str):
                raise CorpusError(f"{where}, row {i}: expected two strings, got "
                                  f"{type(s).__name__} and {type(t).__name__}.")
            i += 1
            yield s, t


def read_hf(root: str, split: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """Read a split of a Hugging Face dataset into two lists (see :func:`iter_hf`).

    Raises:
        CorpusError: see :func:`iter_hf`.
    """
    return _unzip(iter_hf(root, split, src_lang, tgt_lang))


# ------------------------------------------------------------------ dispatch
def split_paths(data_cfg: Any, split: str) -> list[Path]:
    """The files a ``text`` or ``tsv`` split is read from ([] for ``hf``)."""
    root, fmt = Path(str(cfg_get(data_cfg, "root"))), cfg_get(data_cfg, "format")
    if fmt == "text":
        return [root / f"{split}.{cfg_get(data_cfg, 'src_lang')}",
                root / f"{split}.{cfg_get(data_cfg, 'tgt_lang')}"]
    if fmt == "tsv":
        return [root / f"{split}.tsv"]
    return []


def check_split_files(data_cfg: Any, split: str) -> list[Path]:
    """The files of a ``text``/``tsv`` split, after checking that they exist.

    Raises:
        CorpusError: a file is missing; the message names it, ``data.root``, the
            ``NMT_DATA_ROOT`` variable and ``scripts/download_multi30k.sh``.
    """
    paths = split_paths(data_cfg, split)
    for path in paths:
        if not path.exists():
            root = cfg_get(data_cfg, "root")
            raise CorpusError(
                f"{path}: file not found (split {split!r} under data.root={root}). Point "
                "data.root=DIR or the NMT_DATA_ROOT environment variable at the corpus "
                "directory, or fetch Multi30k with bash scripts/download_multi30k.sh DIR.")
    return paths


def iter_parallel(data_cfg: Any, split: str) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each pair of one split of the configured corpus, raw and
    unfiltered, streamed: memory does not grow with the corpus.

    Args:
        data_cfg: the ``data`` config section (format, root, src_lang, tgt_lang).
        split: split name, e.g. ``data.train_split`` (``train``) or ``test_2016_flickr``.

    Raises:
        CorpusError: ``data.format`` is unknown, or a file is missing (both at the call);
            see :func:`iter_text_pair`, :func:`iter_tsv`, :func:`iter_hf` for the errors
            raised while reading.
    """
    fmt = cfg_get(data_cfg, "format")
    if fmt == "text":
        return iter_text_pair(*check_split_files(data_cfg, split))
    if fmt == "tsv":
        return iter_tsv(check_split_files(data_cfg, split)[0])
    if fmt == "hf":
        return iter_hf(str(cfg_get(data_cfg, "root")), split, cfg_get(data_cfg, "src_lang"),
                       cfg_get(data_cfg, "tgt_lang"))
    raise CorpusError(f"data.format={fmt!r} is not one of text, tsv, hf.")


def read_parallel(data_cfg: Any, split: str) -> tuple[list[str], list[str]]:
    """Read one split of the configured corpus into two lists, raw and unfiltered (for
    splits that fit in memory: evaluation; training streams with :func:`iter_parallel`).

    Args:
        data_cfg: the ``data`` config section (format, root, src_lang, tgt_lang).
        split: split name, e.g. ``data.train_split`` (``train``) or ``test_2016_flickr``.

    Returns:
        (source sentences, target sentences), equally long.

    Raises:
        CorpusError: see :func:`iter_parallel`.
    """
    return _unzip(iter_parallel(data_cfg, split))


def split_fingerprint(data_cfg: Any, split: str) -> str:
    """sha256 identifying a split's content, computed without building Python strings.

    ``text``/``tsv``: the bytes of the files (streamed). ``hf``: the dataset's own
    fingerprint. Used as cache key, so a changed corpus is re-tokenized.

    Raises:
        CorpusError: a file is missing, a directory or unreadable, or the dataset cannot be
            loaded.
    """
    h = hashlib.sha256(f"{cfg_get(data_cfg, 'format')}|{split}|{cfg_get(data_cfg, 'src_lang')}|"
                       f"{cfg_get(data_cfg, 'tgt_lang')}".encode())
    if cfg_get(data_cfg, "format") == "hf":
        ds = _load_hf(str(cfg_get(data_cfg, "root")), split)
        h.update(str(getattr(ds, "_fingerprint", "")).encode())
        return h.hexdigest()
    for path in check_split_files(data_cfg, split):
        _check_file(path)
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError as err:
            raise CorpusError(f"{path}: cannot be read ({err.strerror or err}); check the "
                              "file's permissions.") from None
        h.update(b"\x00file\x00")
    return h.hexdigest()


def iter_nonempty_pairs(pairs: Iterable[tuple[str, str]], where: str = "train",
                        report: bool = True) -> Iterator[tuple[int, str, str]]:
    """``(row, source, target)`` of the pairs whose sides are both non-blank (training only).

    Streams: ``row`` is the pair's position in ``pairs`` (its line number minus one in a
    text corpus). Pairs with an empty or white-space-only side are skipped; their number is
    logged on the ``nmt.data`` logger when the stream ends (``report=False``: not logged, for
    a second pass over the same corpus).

    Raises:
        CorpusError: the stream ends and no pair was kept (raised at its end).
    """
    kept = total = 0
    for total, (s, t) in enumerate(pairs, start=1):
        if s.strip() and t.strip():
            kept += 1
            yield total - 1, s, t
    dropped = total - kept
    if dropped and report:
        log.info("%s: dropped %d empty or whitespace-only pairs of %d", where, dropped, total)
    if not kept:
        raise CorpusError(f"{where}: the corpus is empty (all {total} pairs are empty or "
                          "whitespace-only).")


def drop_empty_pairs(src: list[str], tgt: list[str], where: str = "train"
                     ) -> tuple[list[str], list[str], list[int]]:
    """Remove pairs whose source or target is empty or white space only (training only;
    lists: see :func:`iter_nonempty_pairs` for the streamed form).

    Returns:
        (kept sources, kept targets, kept row numbers); the number dropped is logged on the
        ``nmt.data`` logger.

    Raises:
        CorpusError: nothing is left.
    """
    rows, src_kept, tgt_kept = [], [], []
    for row, s, t in iter_nonempty_pairs(zip(src, tgt, strict=True), where):
        rows.append(row)
        src_kept.append(s)
        tgt_kept.append(t)
    return src_kept, tgt_kept, rows
