"""The data pipeline: corpus -> tokenizer -> tokenized, memory-mapped splits (the Arrow cache).

:func:`prepare_data` gives the tokenizer and the tokenized training and validation splits. A split
is an Arrow IPC file under ``{cache_dir}/tokenized/`` named by a hash of the corpus bytes, the
tokenizer and the filters (a second run skips tokenization, any change makes a new file),
memory-mapped: only two length arrays per split live in Python memory. With several directions
(``data.pairs``) the training split holds every direction, each pair's language tag at the id level
(:func:`nmt.data.languages.add_tag`) and its direction (column ``direction``), the texts untagged;
validation is one split per direction. With several training corpora (``data.corpora``) each pair's
corpus index is in column ``corpus``, with both each pair's group (:func:`training_groups`: a
direction of a corpus) in column ``group``. Which rows form a batch: :mod:`nmt.data.sampler`; a
batch of rows: :func:`nmt.data.batching.collate`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nmt.config import ConfigError
from nmt.data.corpus import (
    Corpus,
    CorpusError,
    iter_nonempty_pairs,
    iter_parallel,
    iter_training,
    split_fingerprint,
    training_corpora,
)
from nmt.data.languages import (
    BT_TAG,
    add_tag,
    directions,
    is_multilingual,
    lang_tag,
    languages,
    target_languages,
    trained_directions,
)
from nmt.data.links import links_fingerprint, piece_links, with_links
from nmt.data.tokenizer import Tokenizer, tokenizer_from_pairs
from nmt.runtime import atomic_path

log = logging.getLogger("nmt.data")

CACHE_VERSION = 2  # part of every cache key; 2: the Arrow files lost their "row" column
_CHUNK_ROWS = 100_000  # pairs per Arrow record batch of a token cache
_ENCODE_ROWS = 10_000  # pairs read and tokenized at a time (bounds the Python objects)
_SCHEMA = pa.schema([("src_ids", pa.list_(pa.int32())), ("tgt_ids", pa.list_(pa.int32())),
                     ("src_text", pa.large_string()), ("tgt_text", pa.large_string())])
# links (data.alignments): per pair its subword links, flattened (target pos, source pos)
# pairs; direction: its index in data.pairs' trained directions; corpus: its index in
# training_corpora (data.corpora); group: its index in training_groups (both)
_LINKS = pa.field("links", pa.list_(pa.int32()))
_GROUPS = {name: pa.field(name, pa.int16()) for name in ("direction", "corpus", "group")}
Tags = Sequence[tuple[int | None, int | None]]   # per direction: (source tag id, target tag id)


class TokenizedSplit:
    """A tokenized split: a memory-mapped Arrow IPC file, or one held in memory.

    ``path`` is None for a split from :meth:`from_bytes`. Rule: with ``target_tag``
    (``data.lang_tag=target``, as M2M-100, Fan et al. 2021) every target starts with a language
    tag, decoder input after BOS that :func:`~nmt.data.batching.collate` leaves out of the
    targets.

    Attributes, N rows:

    - ``src_lens`` / ``tgt_lens`` [N] int64: the lengths of ``src`` and ``tgt_out``, EOS
      included;
    - ``starts`` [chunks + 1]: the first row of each record batch;
    - ``chunks``: per record batch its (source ids, offsets, target ids, offsets), zero-copy;
    - ``links``: per record batch the links' (values, offsets), or None;
    - ``groups`` [N] int64: each row's direction (column ``direction``), training corpus
      (column ``corpus``) or both (column ``group``), or None.
    """

    target_tag: bool = False

    def __init__(self, path: str | Path, target_tag: bool = False):
        self._open(Path(path))
        self.target_tag = target_tag

    @classmethod
    def from_bytes(cls, data: bytes | pa.Buffer) -> TokenizedSplit:
        """A split held in memory from :meth:`ipc_bytes` (the Arrow file, sent to other ranks)."""
        split = cls.__new__(cls)
        split._open(None, data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        return split

    @classmethod
    def from_ids(cls, src_ids: list[list[int]], tgt_ids: list[list[int]],
                 src_texts: Sequence[str], tgt_texts: Sequence[str]) -> TokenizedSplit:
        """A split held in memory of these pairs: ids without EOS, and their texts."""
        with pa.ipc.new_file(sink := pa.BufferOutputStream(), _SCHEMA) as writer:
            for b in (slice(a, a + _CHUNK_ROWS) for a in range(0, len(src_ids), _CHUNK_ROWS)):
                writer.write_batch(_record_batch(src_ids[b], tgt_ids[b], src_texts[b],
                                                 tgt_texts[b]))
        return cls.from_bytes(sink.getvalue())

    def ipc_bytes(self) -> bytes:
        return self.path.read_bytes() if self.path is not None else self._buffer.to_pybytes()

    def _open(self, path: Path | None, buffer: pa.Buffer | None = None) -> None:
        self.path, self._buffer = path, buffer
        source = pa.memory_map(str(path), "r") if path is not None else pa.BufferReader(buffer)
        self._reader = pa.ipc.open_file(source)
        batches = [self._reader.get_batch(i) for i in range(self._reader.num_record_batches)]
        self.starts = np.cumsum([0] + [rb.num_rows for rb in batches])
        n = int(self.starts[-1])
        self.src_lens, self.tgt_lens = np.empty(n, np.int64), np.empty(n, np.int64)
        self.chunks: list[tuple[np.ndarray, ...]] = []
        self.links = [] if "links" in self._reader.schema.names else None  # (values, offsets)
        group = next((g for g in _GROUPS if g in self._reader.schema.names), None)
        self.groups = None if group is None else np.concatenate(
            [rb.column(group).to_numpy() for rb in batches]).astype(np.int64)
        for rb, a, b in zip(batches, self.starts[:-1], self.starts[1:], strict=True):
            src, tgt = rb.column("src_ids"), rb.column("tgt_ids")
            s_off, t_off = src.offsets.to_numpy(), tgt.offsets.to_numpy()  # int32, zero-copy
            self.chunks.append((src.values.to_numpy(zero_copy_only=True), s_off,
                                tgt.values.to_numpy(zero_copy_only=True), t_off))
            np.subtract(s_off[1:], s_off[:-1] - 1, out=self.src_lens[a:b])  # + EOS
            np.subtract(t_off[1:], t_off[:-1] - 1, out=self.tgt_lens[a:b])
            if self.links is not None:
                col = rb.column("links")
                self.links.append((col.values.to_numpy(zero_copy_only=True),
                                   col.offsets.to_numpy()))

    def __len__(self) -> int:
        return len(self.src_lens)

    def _ids(self, i: int, side: int) -> list[int]:
        c = int(np.searchsorted(self.starts, i, side="right") - 1)
        j = i - int(self.starts[c])
        values, off = self.chunks[c][2 * side], self.chunks[c][2 * side + 1]
        return values[off[j]: off[j + 1]].tolist()

    def src_ids(self, i: int) -> list[int]:   # without EOS
        return self._ids(int(i), 0)

    def tgt_ids(self, i: int) -> list[int]:   # without BOS/EOS
        return self._ids(int(i), 1)

    def _texts(self, column: str) -> list[str]:
        return [s for i in range(self._reader.num_record_batches)
                for s in self._reader.get_batch(i).column(column).to_pylist()]

    def src_texts(self) -> list[str]:   # the raw sentences, in row order
        return self._texts("src_text")

    def tgt_texts(self) -> list[str]:
        return self._texts("tgt_text")


def _lengths(ids: list[list[int]]) -> np.ndarray:
    return np.fromiter(map(len, ids), np.int64, count=len(ids))


def _list_array(ids: list[list[int]], keep: np.ndarray) -> pa.ListArray:
    """The id lists where ``keep`` is true as an Arrow list<int32> column."""
    lens = _lengths(ids)
    values = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lens.sum()))
    offsets = np.zeros(int(keep.sum()) + 1, np.int32)
    np.cumsum(lens[keep], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[np.repeat(keep, lens)]))


def _record_batch(src_ids: list[list[int]], tgt_ids: list[list[int]], src_texts: Sequence[str],
                  tgt_texts: Sequence[str], keep: np.ndarray | None = None,
                  links: list[list[int]] | None = None, groups: np.ndarray | None = None,
                  group: str | None = None) -> pa.RecordBatch:
    """The pairs where ``keep`` (bool [N]; default all) is true, as an Arrow record batch
    (with ``links``, flattened subword links per pair, the ``links`` column; with ``groups``
    [N], the column ``group``: ``direction``, ``corpus`` or ``group``)."""
    keep = np.ones(len(src_ids), bool) if keep is None else keep
    columns = [_list_array(ids, keep) for ids in (src_ids, tgt_ids)]
    for texts in (src_texts, tgt_texts):
        columns.append(pa.array(list(texts), pa.large_string()).filter(pa.array(keep)))
    if links is not None:
        columns.append(_list_array(links, keep))
    if groups is not None:
        columns.append(pa.array(groups[keep].astype(np.int16)))
    return pa.record_batch(columns, schema=_schema(links is not None, group))


def _schema(links: bool, group: str | None) -> pa.Schema:
    return pa.schema([*_SCHEMA, *[_LINKS] * links, *([] if group is None else [_GROUPS[group]])])


def _tokenize_piece(piece: list[tuple], tokenizer: Tokenizer, max_len: int | None,
                    max_len_ratio: float | None, stats: dict[str, int], tags: Tags | None = None,
                    group: str | None = None) -> pa.RecordBatch:
    """The pairs tokenized, tagged and filtered (:func:`write_pairs`); adds the counts to
    ``stats``."""
    src_t, tgt_t, *word_links = zip(*piece, strict=True)
    s_ids, t_ids = tokenizer.encode_src_batch(src_t), tokenizer.encode_tgt_batch(tgt_t)
    dirs = np.asarray(word_links.pop(), np.int64) if group is not None else None
    if tags is not None:   # the tags join the lengths the filters see
        s_ids, t_ids = ([ids if tags[d][side] is None else add_tag(ids, tags[d][side])
                         for ids, d in zip(side_ids, dirs, strict=True)]
                        for side, side_ids in enumerate((s_ids, t_ids)))
    ls, lt = _lengths(s_ids), _lengths(t_ids)
    keep = np.ones(len(ls), bool)
    if max_len is not None:
        too_long = (ls > max_len) | (lt > max_len)
        stats["too_long"] += int(too_long.sum())
        keep &= ~too_long
    if max_len_ratio is not None:
        ratio = np.maximum(ls, lt) / np.maximum(np.minimum(ls, lt), 1)
        bad = keep & (ratio > max_len_ratio)
        stats["bad_ratio"] += int(bad.sum())
        keep &= ~bad
    stats["pairs"] += int(keep.sum())
    links = None
    if word_links:  # (source, target, word links) triples: the subword links per pair
        links = [piece_links(w, tokenizer.src_pieces(s), tokenizer.tgt_pieces(t), src, tgt)
                 for w, s, t, src, tgt in zip(word_links[0], s_ids, t_ids, src_t, tgt_t,
                                              strict=True)]
        stats["unmatched"] = stats.get("unmatched", 0) + sum(x is None for x in links)
        links = [[] if x is None else x.ravel().tolist() for x in links]
    return _record_batch(s_ids, t_ids, src_t, tgt_t, keep, links, dirs, group)


def write_pairs(path: str | Path, pairs: Iterable[tuple], tokenizer: Tokenizer,
                max_len: int | None = None, max_len_ratio: float | None = None,
                links: bool = False, tags: Tags | None = None, group: str | None = None
                ) -> dict[str, int]:
    """Tokenize a stream of ``(source, target)`` texts into the Arrow file ``path`` (written
    only if the stream ends without error); returns ``{"pairs": kept, "too_long": n,
    "bad_ratio": n}``. Dropped (subwords, no EOS): a side longer than ``max_len``, or
    ``max(len) / max(min(len), 1) > max_len_ratio`` (None: no filter). Memory stays within
    one record batch of 100,000 pairs, tokenized 10,000 at a time. With ``links`` the stream
    holds ``(source, target, word links)`` (:func:`~nmt.data.links.with_links`) and the file
    the subword links (``"unmatched"``: pairs whose words could not be matched, no links).
    With ``group`` (``direction``, ``corpus`` or ``group``) each pair's last item is its
    group, kept in that column; ``tags`` (per group its tag ids, :func:`tag_ids`) tag the ids.
    """
    stats = {"pairs": 0, "too_long": 0, "bad_ratio": 0}
    stream, chunk_rows = iter(pairs), _CHUNK_ROWS
    schema = _schema(links, group)
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, \
            pa.ipc.new_file(sink, schema) as writer:
        pending = schema.empty_table()  # tokenized pairs not yet written
        piece_rows = min(chunk_rows, _ENCODE_ROWS)
        for piece in iter(lambda: list(itertools.islice(stream, piece_rows)), []):
            kept = _tokenize_piece(piece, tokenizer, max_len, max_len_ratio, stats, tags, group)
            pending = pa.concat_tables([pending, pa.Table.from_batches([kept])])
            while pending.num_rows >= chunk_rows:
                writer.write_table(pending.slice(0, chunk_rows).combine_chunks())
                pending = pending.slice(chunk_rows)
        if pending.num_rows:
            writer.write_table(pending.combine_chunks())
    return stats


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    train: TokenizedSplit
    valids: dict[str, TokenizedSplit]   # per direction "src-tgt", in data.pairs order
    weights: list[float] | None = None  # per group (train.groups), its corpus's; None: one corpus
    directions: list[int] | None = None  # per group, its direction; None: a group is one of them
    links: dict | None = None   # guided alignment's word links: {"path", "sha256"}; None: none

    @property
    def valid(self) -> TokenizedSplit:   # the first direction's (a bilingual run's only one)
        return next(iter(self.valids.values()))


def cache_key(*parts: Any) -> str:   # of a cache file's name: 24 hex digits
    return hashlib.sha256(json.dumps([CACHE_VERSION, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()[:24]


def tag_ids(data_cfg: Any, tokenizer: Tokenizer) -> list[tuple[int | None, int | None]
                                                                  ] | None:
    """Per direction of ``data_cfg`` (:func:`~nmt.data.languages.directions`) the ids of its
    ``(source-side, target-side)`` tag by ``data.lang_tag``, one of them None; None for a
    bilingual model. ConfigError: a tag missing from the tokenizer (``Tokenizer.tag_id``)."""
    if not is_multilingual(data_cfg):
        return None
    side = int(data_cfg.lang_tag == "target")
    return [tuple(tokenizer.tag_id(tgt) if k == side else None for k in (0, 1))
            for _, tgt in directions(data_cfg)]


def load_split(data_cfg: Any, split: str, tokenizer: Tokenizer, direction: int = 0
               ) -> TokenizedSplit:
    """A split tokenized without filtering (validation, test), cached like training; of a
    multilingual config, its ``direction``-th direction, tagged."""
    tags, pair = tag_ids(data_cfg, tokenizer), directions(data_cfg)[direction]
    fingerprint = [split_fingerprint(data_cfg, split, pair), tokenizer.fingerprint]
    fingerprint += [] if tags is None else [str(data_cfg.lang_tag)]
    path = Path(str(data_cfg.cache_dir)) / "tokenized" / f"{split}-{cache_key(*fingerprint)}.arrow"
    if path.is_file():
        log.info("%s: token cache hit %s", split, path)
    else:
        pairs = iter_parallel(data_cfg, split, pair)
        pairs = pairs if tags is None else ((s, t, direction) for s, t in pairs)
        stats = write_pairs(path, pairs, tokenizer, tags=tags,
                            group=None if tags is None else "direction")
        log.info("%s %s: tokenized %d pairs -> %s", split, "-".join(pair), stats["pairs"], path)
    return TokenizedSplit(path, target_tag=tags is not None and tags[direction][1] is not None)


def training_pairs(corpora: Sequence[Corpus], report: bool = True, links: str | None = None,
                   direction: tuple[str, str] | None = None) -> Iterator[tuple]:
    """The pairs of the training ``corpora`` (:func:`~nmt.data.corpus.training_corpora`, read
    by :func:`~nmt.data.corpus.iter_training`; in ``direction``, default the config's) but the
    empty ones (their number logged when ``report``): ``(source, target, corpus index)``, with
    ``links`` (a Pharaoh file, one line per pair in that order; past the cap of a capped split
    unread) ``(source, target, word links, corpus index)``."""
    pairs = iter_training(corpora, direction)
    if links is not None:
        pairs = with_links(pairs, links, whole=corpora[0].limit is None)
    where = corpora[0].split + ("" if direction is None else " " + "-".join(direction))
    return iter_nonempty_pairs(pairs, where=where, report=report)


def _language_texts(data_cfg: Any, corpora: Sequence[Corpus]
                    ) -> dict[str, Callable[[], Iterator[str]]]:
    """Per language, a function streaming its training sentences from every trained direction."""
    def texts(lang: str) -> Iterator[str]:
        for pair in trained_directions(data_cfg):
            if lang in pair:
                side = pair.index(lang)
                yield from (p[side] for p in training_pairs(corpora, False, direction=pair))
    return {lang: functools.partial(texts, lang) for lang in languages(data_cfg)}


def training_groups(data_cfg: Any, corpora: Sequence[Corpus]
                    ) -> list[tuple[tuple[str, str], Corpus]]:
    """The groups the training split is drawn by: ``(direction, corpus)`` for each direction of
    ``data_cfg`` in ``data.pairs`` order and each of ``corpora`` that holds it
    (:meth:`~nmt.data.corpus.Corpus.holds`). A direction no corpus holds is validated only (a
    strict zero-shot direction); CorpusError: no corpus holds any direction."""
    groups = [(pair, c) for pair in directions(data_cfg) for c in corpora if c.holds(pair)]
    if not groups:
        raise CorpusError("no training corpus holds a direction of data.pairs: check "
                          "data.train_pairs and data.corpora[*].pairs.")
    return groups


def check_bt_tag(data_cfg: Any, groups: Sequence[tuple[tuple[str, str], Corpus]]) -> None:
    """ConfigError when a training corpus's first source starts with ``<BT>`` (a tagged
    back-translation, ``nmt-backtranslate tag=true``) and ``data.tokenizer.bt_tag`` is false:
    the tag would be cut into subwords of text, and no input would carry it as one token."""
    if data_cfg.tokenizer.get("bt_tag"):
        return
    for pair, corpus in groups:
        first = next(iter_parallel(corpus.data, corpus.split, pair), None)
        if first is not None and first[0].startswith(BT_TAG + " "):
            raise ConfigError(
                f"{corpus.data.root} split {corpus.split} ({'-'.join(pair)}): its sources start "
                f"with {BT_TAG} (a tagged back-translation), but data.tokenizer.bt_tag=false "
                "would cut the tag into subwords: set data.tokenizer.bt_tag=true.")


def prepare_data(data_cfg: Any, tokenizer: Tokenizer | None = None) -> PreparedData:
    """The tokenizer and the tokenized, cached training and validation splits of ``data_cfg``.
    ``tokenizer`` (fine-tuning's, or ``data.tokenizer.model``'s) is used as it is; else one is
    trained on :func:`training_pairs` (or found in the cache). Only training pairs are length
    filtered. The corpus is streamed: one pass hashes its bytes (the cache key, all a cache
    hit reads), one samples the tokenizer's sentences, one tokenizes it into the cache. With
    several directions, the tokenizer is multilingual (a sample balanced across languages,
    the target languages' tags) and the training split holds every trained direction of every
    corpus (:func:`training_groups`), in turn; validation, every direction of ``data.pairs``."""
    cache, split, pairs = Path(str(data_cfg.cache_dir)), str(data_cfg.train_split), \
        directions(data_cfg)
    corpora = training_corpora(data_cfg)   # data.corpora, prepared once
    groups = training_groups(data_cfg, corpora)
    fingerprints = [split_fingerprint(c.data, c.split, pair) for c in corpora
                    for pair in pairs if c.holds(pair)]
    train_id = cache_key(fingerprints[0] if len(fingerprints) == 1 else fingerprints,
                         data_cfg.max_train_pairs)
    multi = is_multilingual(data_cfg)
    if tokenizer is None:
        tokenizer = tokenizer_from_pairs(
            data_cfg.tokenizer, str(data_cfg.src_lang), str(data_cfg.tgt_lang),
            lambda: (p[:2] for p in training_pairs(corpora, report=False)), cache, train_id,
            _language_texts(data_cfg, corpora) if multi else None,
            [lang_tag(lang) for lang in target_languages(data_cfg)])
    max_len, ratio = int(data_cfg.max_len), float(data_cfg.max_len_ratio)
    links = data_cfg.get("alignments")  # guided alignment's word links: key and column
    linked = [] if links is None else [links_fingerprint(links)]
    linked += [str(data_cfg.lang_tag)] if multi else []
    key = cache_key(train_id, tokenizer.fingerprint, max_len, ratio, *linked)
    path = cache / "tokenized" / f"{split}-{key}.arrow"
    tags = tag_ids(data_cfg, tokenizer)
    # the cache column: per direction, per corpus (one direction) or per (direction, corpus)
    group = ("group" if len(corpora) > 1 else "direction") if multi else \
        "corpus" if len(corpora) > 1 else None
    if path.is_file():
        log.info("%s: token cache hit %s", split, path)
    else:
        check_bt_tag(data_cfg, groups)   # what a cache holds was checked when it was written
        if multi:
            stream = itertools.chain.from_iterable(
                ((s, t, g) for s, t, _ in training_pairs([c], direction=pair))
                for g, (pair, c) in enumerate(groups))
        else:   # the corpus index is a column only with several corpora
            stream = training_pairs(corpora, links=links)
            stream = stream if group else (p[:-1] for p in stream)
        stats = write_pairs(path, stream, tokenizer, max_len, ratio, links=links is not None,
                            tags=tags and [tags[pairs.index(pair)] for pair, _ in groups],
                            group=group)
        log.info("%s: %d pairs kept; dropped %d longer than max_len=%d and %d with length ratio "
                 "> %g -> %s", split, stats["pairs"], stats["too_long"], max_len,
                 stats["bad_ratio"], ratio, path)
        if links is not None:
            log.info("%s: word links of %s; %d pairs without them (words unmatched)", split,
                     links, stats.get("unmatched", 0))
        if stats["pairs"] == 0:
            path.unlink()
            raise CorpusError(f"{split}: no training pair is left after the length filters "
                              f"(data.max_len={max_len}, data.max_len_ratio={ratio}).")
    valids = {"-".join(pair): load_split(data_cfg, str(data_cfg.valid_split), tokenizer, k)
              for k, pair in enumerate(pairs)}
    return PreparedData(tokenizer, TokenizedSplit(path, target_tag=tags is not None and
                                                  tags[0][1] is not None), valids,
                        None if len(corpora) == 1 else [c.weight for _, c in groups],
                        [pairs.index(p) for p, _ in groups] if group == "group" else None,
                        None if links is None else {"path": str(links), "sha256": linked[0]})
