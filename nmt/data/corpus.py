"""Reading parallel corpora (``data.format``): line-aligned files ``{root}/{split}.{lang}``
(``text``, Multi30k's layout), ``{root}/{split}.tsv`` of ``source<TAB>target`` lines (``tsv``; with
several ``data.pairs`` one ``{split}.{src}-{tgt}.tsv`` per direction), or a Hugging Face
``DatasetDict`` (``hf``: a ``save_to_disk`` directory or a hub name) with a
``translation: {lang: text}`` column or one column per language.

Every reader streams raw text, so memory does not grow with the corpus. Bad input raises
:class:`CorpusError`, one sentence naming the file and line, when the stream reaches it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from nmt.config import is_multilingual, parse_pairs

log = logging.getLogger("nmt.data")

_BOM = b"\xef\xbb\xbf"  # the UTF-8 byte order mark


class CorpusError(ValueError):
    """A corpus file is missing, unreadable, misaligned or empty (message names file and line)."""


def _check_file(path: Path) -> None:
    if path.is_dir():
        raise CorpusError(f"{path}: is a directory, not a corpus file; point data.root (or the "
                          "file argument) at the directory that holds the files.")
    if not path.is_file():
        raise CorpusError(f"{path}: file not found.")


def _unreadable(path: Path, err: OSError) -> str:
    return f"{path}: cannot be read ({err.strerror or err}); check the file's permissions."


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 file, streamed, without ``\\n`` / ``\\r\\n``: the package's one
    line reader. Only ``\\n`` ends a line, as for ``wc -l``; a leading byte order mark is
    dropped. CorpusError: missing, unreadable or empty file, or a line that is not UTF-8
    (naming the line and byte offset), raised after the lines before it were yielded."""
    path = Path(path)
    _check_file(path)
    offset, number = 0, 0  # bytes before the current line; lines read so far
    try:
        with path.open("rb") as f:
            for raw in f:
                start = len(_BOM) if number == 0 and raw.startswith(_BOM) else 0
                if start == len(raw):  # a BOM and nothing else
                    break
                number += 1
                end = len(raw) - raw.endswith(b"\n")
                end -= end > start and raw[end - 1] == 0x0D  # \r of \r\n
                try:
                    line = raw[start:end].decode("utf-8")
                except UnicodeDecodeError as err:
                    bad = start + err.start
                    raise CorpusError(f"{path}, line {number}: invalid UTF-8 (byte "
                                      f"0x{raw[bad]:02x} at offset {offset + bad}); re-encode "
                                      "the file as UTF-8.") from None
                offset += len(raw)
                yield line
    except OSError as err:  # PermissionError and friends
        raise CorpusError(_unreadable(path, err)) from None
    if number == 0:
        raise CorpusError(f"{path}: the file is empty; a corpus needs at least one line.")


def iter_text_pair(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    """``(source line, target line)`` of two line-aligned files (CorpusError after both were
    read if their line counts differ)."""
    n_src = n_tgt = 0
    for s, t in itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path)):
        n_src, n_tgt = n_src + (s is not None), n_tgt + (t is not None)
        if n_src == n_tgt:
            yield s, t
    if n_src != n_tgt:
        raise CorpusError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: parallel "
                          "files must be line-aligned.")


def iter_tsv(path: str | Path) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each ``source<TAB>target`` line."""
    for number, line in enumerate(iter_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}, line {number}: expected 2 tab-separated fields "
                              f"(source<TAB>target), found {len(fields)}.")
        yield fields[0], fields[1]


def _load_hf(root: str, split: str):
    """Split ``split`` of the ``DatasetDict`` at ``root`` (a directory, else a hub name)."""
    import datasets  # here, not at the top: it takes a second to import, and few runs use it

    try:
        loaded = (datasets.load_from_disk(root) if Path(root).exists()
                  else datasets.load_dataset(root))
    except Exception as err:  # noqa: BLE001 - library errors become one clear sentence
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CorpusError(f"{root}: cannot load the Hugging Face dataset ({first}).") from None
    if not isinstance(loaded, datasets.DatasetDict):
        raise CorpusError(f"{root}: holds a single {type(loaded).__name__}, not a DatasetDict "
                          f"with named splits such as {split!r}; save a datasets.DatasetDict.")
    if split not in loaded:
        raise CorpusError(f"{root}: the dataset has no split {split!r} "
                          f"(it has {', '.join(loaded.keys())}); set data.*_split.")
    return loaded[split]


def hf_split(root: str, split: str, src_lang: str, tgt_lang: str):
    """``(dataset split, its columns to read)``, checked from its features without reading a
    row: not empty, and both languages in its ``translation`` feature (a ``{lang: text}``
    struct or ``datasets.Translation``) or as columns."""
    ds = _load_hf(root, split)
    where = f"{root} (split {split})"
    if len(ds) == 0:
        raise CorpusError(f"{where}: the dataset split is empty.")
    if "translation" in ds.column_names:
        feature = ds.features["translation"]
        langs = list(getattr(feature, "languages", None) or feature)
        for lang in (src_lang, tgt_lang):
            if lang not in langs:
                raise CorpusError(f"{where}: translation has no {lang!r} field "
                                  f"(it has {', '.join(langs)}); set data.src_lang/tgt_lang.")
        return ds, ["translation"]
    if src_lang in ds.column_names and tgt_lang in ds.column_names:
        return ds, [src_lang, tgt_lang]
    raise CorpusError(f"{where}: no 'translation' column and no {src_lang!r}/{tgt_lang!r} "
                      f"columns (it has {', '.join(ds.column_names)}).")


def iter_hf(root: str, split: str, src_lang: str, tgt_lang: str,
            batch_rows: int = 10_000) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each row of a dataset split, read ``batch_rows`` at a time; a
    missing split or language raises :class:`CorpusError` at the call, a bad row when read."""
    ds, columns = hf_split(root, split, src_lang, tgt_lang)
    return _hf_rows(ds.select_columns(columns), f"{root} (split {split})", src_lang, tgt_lang,
                    batch_rows)


def _hf_rows(ds, where: str, src_lang: str, tgt_lang: str, batch_rows: int
             ) -> Iterator[tuple[str, str]]:
    """The rows of :func:`iter_hf`, lazily; CorpusError naming a row that is not two strings."""
    i = 0
    for batch in ds.iter(batch_size=batch_rows):
        rows = batch.get("translation")
        src = [r[src_lang] for r in rows] if rows is not None else batch[src_lang]
        tgt = [r[tgt_lang] for r in rows] if rows is not None else batch[tgt_lang]
        for s, t in zip(src, tgt, strict=True):
            if not isinstance(s, str) or not isinstance(t, str):
                raise CorpusError(f"{where}, row {i}: expected two strings, got "
                                  f"{type(s).__name__} and {type(t).__name__}.")
            i += 1
            yield s, t


def _direction(data_cfg: Any, direction: tuple[str, str] | None) -> tuple[str, str]:
    return direction or (str(data_cfg.src_lang), str(data_cfg.tgt_lang))


def split_paths(data_cfg: Any, split: str, direction: tuple[str, str] | None = None) -> list[Path]:
    """The files a ``text`` or ``tsv`` split is read from ([] for ``hf``), checked to exist:
    ``{split}.{src}`` and ``{split}.{tgt}``, or ``{split}.tsv``; with several ``data.pairs``
    one TSV per direction, ``{split}.{src}-{tgt}.tsv``. ``direction``: (src, tgt), default
    ``data.src_lang``, ``data.tgt_lang``."""
    root, (src, tgt) = Path(str(data_cfg.root)), _direction(data_cfg, direction)
    tsv = f"{split}.{src}-{tgt}.tsv" if is_multilingual(data_cfg) else f"{split}.tsv"
    paths = {"text": [root / f"{split}.{src}", root / f"{split}.{tgt}"],
             "tsv": [root / tsv]}.get(data_cfg.format, [])
    for path in paths:
        if not path.exists():
            raise CorpusError(f"{path}: file not found (split {split!r}, data.root={root}): "
                              "set data.root=DIR or NMT_DATA_ROOT, or fetch Multi30k with "
                              "bash scripts/download_multi30k.sh DIR.")
        _check_file(path)
    return paths


def iter_parallel(data_cfg: Any, split: str, direction: tuple[str, str] | None = None
                  ) -> Iterator[tuple[str, str]]:
    """``(source, target)`` of each pair of split ``split`` in ``direction`` (default
    ``data.src_lang`` -> ``data.tgt_lang``), raw; a missing file, split or language raises
    :class:`CorpusError` at the call, other errors when read."""
    if data_cfg.format == "hf":
        return iter_hf(str(data_cfg.root), split, *_direction(data_cfg, direction))
    return (iter_text_pair if data_cfg.format == "text" else iter_tsv)(
        *split_paths(data_cfg, split, direction))


def with_root(data_cfg: Any, root: str | None) -> Any:
    """A copy of a ``data`` section (a checkpoint's) that reads from ``root`` (None: its own
    ``data.root``), as nmt-evaluate's ``data.root=DIR`` asks."""
    data = OmegaConf.create(OmegaConf.to_container(data_cfg, resolve=True))
    data.root = str(root or data.root)
    return data


def check_split(data_cfg: Any, split: str, direction: tuple[str, str]) -> None:
    """CorpusError, naming what is missing, unless split ``split`` has ``direction`` (src, tgt),
    found without reading its text: the files exist (``text``, ``tsv``), or the dataset has
    the split and both languages (``hf``)."""
    if data_cfg.format == "hf":
        hf_split(str(data_cfg.root), split, *direction)
    else:
        split_paths(data_cfg, split, direction)


@dataclass(frozen=True)
class Corpus:
    """One training corpus (:func:`training_corpora`): split ``split`` read with the data
    section ``data`` (its own ``root`` and ``format``), at most its first ``limit`` pairs
    (None: all), drawn by ``weight``: fairseq's upsampling, each pair ``weight`` times per
    epoch on average, so a corpus's share of an epoch is proportional to weight x size
    (:meth:`~nmt.data.sampler.TokenBatchSampler.epoch_rows`). ``pairs``: the directions it
    holds (None: every direction of the model)."""

    data: Any
    split: str
    weight: float = 1.0
    limit: int | None = None
    pairs: tuple[tuple[str, str], ...] | None = None

    def holds(self, direction: tuple[str, str]) -> bool:
        return self.pairs is None or tuple(direction) in self.pairs


def training_corpora(data_cfg: Any) -> list[Corpus]:
    """``data.corpora`` prepared once, the list every reader of the training data takes:
    ``data.train_split`` (weight 1, its first ``data.max_train_pairs``, the directions of
    ``data.train_pairs``), then each of ``data.corpora``, read from its own ``root`` (default
    ``data.root``) as its ``format`` (default ``data.format``) says, holding its ``pairs``."""
    def held(pairs: Any) -> tuple | None:
        return None if pairs is None else tuple(parse_pairs(pairs))

    return [Corpus(data_cfg, str(data_cfg.train_split), 1.0, data_cfg.max_train_pairs,
                   held(data_cfg.get("train_pairs")))] + [
        Corpus(OmegaConf.merge(data_cfg, {"root": str(c.root or data_cfg.root),
                                          "format": str(c.get("format") or data_cfg.format)}),
               str(c.split), float(c.weight), None, held(c.get("pairs")))
        for c in data_cfg.get("corpora") or ()]


def iter_training(corpora: Sequence[Corpus], direction: tuple[str, str] | None = None
                  ) -> Iterator[tuple]:
    """The raw pairs of ``corpora`` (:func:`training_corpora`) in ``direction`` (default the
    config's), in order, but those corpora that do not hold it, each cut to its first
    ``limit`` (the rest still read, so a broken corpus is a CorpusError whatever the cap),
    as ``(source, target, corpus index)`` (one shape, however many corpora)."""
    for k, corpus in enumerate(corpora):
        if direction is not None and not corpus.holds(direction):
            continue
        pairs = iter_parallel(corpus.data, corpus.split, direction)
        if corpus.limit is not None:
            head = itertools.islice(pairs, int(corpus.limit))
            pairs = itertools.chain(head, filter(lambda _: False, pairs))
        yield from ((s, t, k) for s, t in pairs)


def split_fingerprint(data_cfg: Any, split: str, direction: tuple[str, str] | None = None) -> str:
    """sha256 of a split's content in ``direction`` (as :func:`iter_parallel`), the key of its
    caches: its files' bytes (``text``, ``tsv``; hashed once per process while their path,
    size and mtime stay the same) or the dataset's own fingerprint (``hf``)."""
    head = "|".join([data_cfg.format, split, *_direction(data_cfg, direction)])
    if data_cfg.format == "hf":
        ds = _load_hf(str(data_cfg.root), split)
        return hashlib.sha256((head + str(getattr(ds, "_fingerprint", ""))).encode()).hexdigest()
    stats = [(path, path.stat()) for path in split_paths(data_cfg, split, direction)]
    return _files_digest(head, tuple((str(path.resolve()), stat.st_size, stat.st_mtime_ns)
                                     for path, stat in stats))


@functools.lru_cache(maxsize=64)
def _files_digest(head: str, files: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 of ``head`` and the bytes of ``files`` ((path, size, mtime): the cache key)."""
    h = hashlib.sha256(head.encode())
    for path, _, _ in files:
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError as err:
            raise CorpusError(_unreadable(Path(path), err)) from None
        h.update(b"\x00file\x00")
    return h.hexdigest()


def iter_nonempty_pairs(pairs: Iterable[tuple], where: str = "train",
                        report: bool = True) -> Iterator[tuple]:
    """The pairs (``(source, target, ...)`` tuples) whose sides are both non-blank (training
    only), the number skipped logged if ``report``; CorpusError if none was kept."""
    kept = total = 0
    for pair in pairs:
        total += 1
        if pair[0].strip() and pair[1].strip():
            kept += 1
            yield pair
    if total > kept and report:
        log.info("%s: dropped %d empty or whitespace-only pairs of %d", where, total - kept, total)
    if not kept:
        raise CorpusError(f"{where}: the corpus is empty (all {total} pairs are blank).")
