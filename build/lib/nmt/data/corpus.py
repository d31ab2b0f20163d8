"""Reading parallel corpora: plain-text file pairs, TSV files and Hugging Face datasets.

Formats (``data.format``):

``text``  line-aligned files ``{root}/{split}.{lang}`` (Multi30k's layout).
``tsv``   one file ``{root}/{split}.tsv`` with lines ``source<TAB>target``.
``hf``    a Hugging Face dataset: ``root`` is a directory written by ``save_to_disk``
          (read with ``datasets.load_from_disk``) or a hub name (``datasets.load_dataset``).
          Rows carry ``translation: {src_lang: ..., tgt_lang: ...}`` or one column per language.

Everything returned here is raw and unfiltered, one string per line with the line break
removed. Bad input raises :class:`CorpusError` with one sentence that names the file, the
line and the problem. Training-only cleaning (empty pairs, length filters) happens in
:func:`drop_empty_pairs` and :func:`nmt.data.batching.prepare_data`; validation and test
splits are never filtered.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from nmt.config import cfg_get

log = logging.getLogger("nmt.data")


class CorpusError(ValueError):
    """A corpus file is missing, unreadable, misaligned or empty (message names file and line)."""


# ------------------------------------------------------------------ plain-text files
def _check_file(path: Path) -> None:
    """Raise :class:`CorpusError` unless ``path`` is an existing regular file."""
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, not a corpus file; point data.root (or the "
                          "file argument) at the directory that holds the files.")
    if not path.is_file():
        raise CorpusError(f"{path}: file not found.")


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 file, without line breaks (``\\n`` or ``\\r\\n``).

    Only ``\\n`` separates lines (not the other Unicode line separators), so files stay
    aligned with ``wc -l``. A leading UTF-8 byte order mark is removed (``utf-8-sig``).

    Raises:
        CorpusError: the path is missing, is a directory, cannot be read (permissions or
            another OS error), is not valid UTF-8 (names the line), or is empty.
    """
    path = Path(path)
    _check_file(path)
    try:
        data = path.read_bytes()
    except OSError as err:  # PermissionError and friends
        raise CorpusError(f"{path}: cannot be read ({err.strerror or err}); check the file's "
                          "permissions.") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raw = err.object  # the bytes after a BOM, which utf-8-sig's offsets refer to
        offset = err.start + len(data) - len(raw)
        line = raw.count(b"\n", 0, err.start) + 1
        raise CorpusError(f"{path}, line {line}: invalid UTF-8 (byte 0x{raw[err.start]:02x} "
                          f"at offset {offset}); re-encode the file as UTF-8.") from None
    if not text:
        raise CorpusError(f"{path}: the file is empty; a corpus needs at least one line.")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_text_pair(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    """Read two line-aligned files (e.g. ``nmt-evaluate``'s source and reference files).

    Returns:
        (source lines, target lines), equally long.

    Raises:
        CorpusError: a file is missing / not UTF-8 / empty, or the line counts differ
            (the message names both files and both counts).
    """
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: "
                          "parallel files must be line-aligned.")
    return src, tgt


def read_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """Read ``source<TAB>target`` lines.

    Raises:
        CorpusError: missing / not UTF-8 / empty file, or a line without exactly one tab.
    """
    src, tgt = [], []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}, line {number}: expected 2 tab-separated fields "
                              f"(source<TAB>target), found {len(fields)}.")
        src.append(fields[0])
        tgt.append(fields[1])
    return src, tgt


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


def read_hf(root: str, split: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """Read a split of a Hugging Face dataset (local ``save_to_disk`` dir or hub name).

    Rows need ``translation: {src_lang: str, tgt_lang: str}`` or columns named after the
    two languages. The dataset must be a ``DatasetDict`` (named splits): a single saved
    ``Dataset`` is refused rather than used for every split.

    Raises:
        CorpusError: the dataset cannot be loaded, is not a ``DatasetDict``, lacks the split
            or the language fields, or the split is empty.
    """
    ds = _load_hf(root, split)
    where = f"{root} (split {split})"
    if len(ds) == 0:
        raise CorpusError(f"{where}: the dataset split is empty.")
    if "translation" in ds.column_names:
        rows = ds["translation"]
        rows = rows[:] if not isinstance(rows, list) else rows
        first = rows[0]
        for lang in (src_lang, tgt_lang):
            if lang not in first:
                raise CorpusError(f"{where}: translation has no {lang!r} field "
                                  f"(it has {', '.join(first)}); set data.src_lang/tgt_lang.")
        src = [r[src_lang] for r in rows]
        tgt = [r[tgt_lang] for r in rows]
    elif src_lang in ds.column_names and tgt_lang in ds.column_names:
        src, tgt = list(ds[src_lang]), list(ds[tgt_lang])
    else:
        raise CorpusError(f"{where}: no 'translation' column and no {src_lang!r}/{tgt_lang!r} "
                          f"columns (it has {', '.join(ds.column_names)}).")
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        if not isinstance(s, str) or not isinstance(t, str):
            raise CorpusError(f"{where}, row {i}: expected two strings, got "
                              f"{type(s).__name__} and {type(t).__name__}.")
    return src, tgt


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


def read_parallel(data_cfg: Any, split: str) -> tuple[list[str], list[str]]:
    """Read one split of the configured corpus, raw and unfiltered.

    Args:
        data_cfg: the ``data`` config section (format, root, src_lang, tgt_lang).
        split: split name, e.g. ``data.train_split`` (``train``) or ``test_2016_flickr``.

    Returns:
        (source sentences, target sentences), equally long.

    Raises:
        CorpusError: see :func:`read_text_pair`, :func:`read_tsv`, :func:`read_hf`.
    """
    fmt = cfg_get(data_cfg, "format")
    if fmt == "text":
        return read_text_pair(*check_split_files(data_cfg, split))
    if fmt == "tsv":
        return read_tsv(check_split_files(data_cfg, split)[0])
    if fmt == "hf":
        return read_hf(str(cfg_get(data_cfg, "root")), split, cfg_get(data_cfg, "src_lang"),
                       cfg_get(data_cfg, "tgt_lang"))
    raise CorpusError(f"data.format={fmt!r} is not one of text, tsv, hf.")


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


def drop_empty_pairs(src: list[str], tgt: list[str], where: str = "train"
                     ) -> tuple[list[str], list[str], list[int]]:
    """Remove pairs whose source or target is empty or white space only (training only).

    Returns:
        (kept sources, kept targets, kept row numbers); the number dropped is logged on the
        ``nmt.data`` logger.

    Raises:
        CorpusError: nothing is left.
    """
    keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if s.strip() and t.strip()]
    dropped = len(src) - len(keep)
    if dropped:
        log.info("%s: dropped %d empty or whitespace-only pairs of %d", where, dropped, len(src))
    if not keep:
        raise CorpusError(f"{where}: the corpus is empty (all {len(src)} pairs are empty or "
                          "whitespace-only).")
    if dropped:
        return [src[i] for i in keep], [tgt[i] for i in keep], keep
    return src, tgt, keep
