"""Tokenized, memory-mapped splits and length-bucketed token batches.

:func:`prepare_data` turns the configured corpus into a :class:`PreparedData`: the
tokenizer (trained or taken from the cache) and the tokenized training and validation
splits. Each split is an Arrow IPC file under ``{cache_dir}/tokenized/`` keyed by a hash of
the corpus bytes, the tokenizer model and the filter settings, so a second run skips
tokenization and any change to data or tokenizer makes a new file. The file is
memory-mapped: only two small length arrays per split live in Python memory; the
token ids and texts are paged in by the OS when a batch needs them, so corpora larger than
RAM train too.

:class:`TokenBatchSampler` cuts an epoch into batches of at most ``batch_tokens`` padded
positions (``B * max(S, T)``), grouping pairs of similar length so padding stays small
(Vaswani et al. 2017, section 5.1: "sentence pairs were batched together by approximate
sequence length"); batch order is shuffled per epoch, deterministically in (seed, epoch).

:func:`sample_split` re-encodes a training split with sampled segmentations (subword
regularisation, Kudo 2018; BPE-dropout, Provilkov et al. 2020) into a split of the same
pairs, cached beside it: the trainer draws one per epoch and cuts that epoch's batches from
its lengths.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from nmt.config import cfg_get
from nmt.data.corpus import CorpusError, iter_nonempty_pairs, iter_parallel, split_fingerprint
from nmt.data.tokenizer import Tokenizer, tokenizer_from_pairs
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID

log = logging.getLogger("nmt.data")

CACHE_VERSION = 1
_CHUNK_ROWS = 100_000  # pairs per Arrow record batch of a token cache
_ENCODE_ROWS = 10_000  # pairs read and tokenized at a time (bounds the Python objects)
_SCHEMA = pa.schema([("src_ids", pa.list_(pa.int32())), ("tgt_ids", pa.list_(pa.int32())),
                     ("src_text", pa.large_string()), ("tgt_text", pa.large_string()),
                     ("row", pa.int64())])


# ------------------------------------------------------------------------- Batch
@dataclass
class Batch:
    """One padded batch (batch-first; True in a mask marks a real, non-pad position).

    Attributes:
        src: [B, S] int64, subword ids + EOS, PAD-padded.
        src_mask: [B, S] bool.
        tgt_in: [B, T] int64, BOS + y (decoder input, teacher forcing).
        tgt_out: [B, T] int64, y + EOS (what the decoder must predict at each position).
        tgt_mask: [B, T] bool (same for tgt_in and tgt_out).
        indices: [B] int64, row numbers in the :class:`TokenizedSplit` that was collated.
        n_src_tokens: real source positions (EOS included).
        n_tgt_tokens: real ``tgt_out`` positions (EOS included): the loss normaliser.
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor
    indices: torch.Tensor
    n_src_tokens: int
    n_tgt_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device``."""
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                 for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}
        return replace(self, **moved)

    def pin_memory(self) -> Batch:
        """A copy with every tensor in page-locked memory (fast, asynchronous host-to-GPU copies)."""
        pinned = {f.name: getattr(self, f.name).pin_memory()
                  for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}
        return replace(self, **pinned)

    def __len__(self) -> int:
        return int(self.src.shape[0])


def _pad_rows(values: np.ndarray, starts: np.ndarray, lens: np.ndarray, width: int) -> np.ndarray:
    """Rows ``values[starts[k] : starts[k] + lens[k]]`` left-aligned in a PAD matrix
    [B, width] (one vectorised gather)."""
    cols = np.arange(width)
    valid = cols[None, :] < lens[:, None]
    if not values.size:
        return np.full((len(starts), width), PAD_ID, dtype=np.int64)
    pos = np.where(valid, starts[:, None] + cols[None, :], 0)
    return np.where(valid, values[pos], PAD_ID).astype(np.int64)


def make_src_batch(src_ids: Sequence[Sequence[int]], device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Source id lists (no EOS) -> ``(src [B, S], src_mask [B, S])``: EOS appended, PAD-padded.

    An empty list becomes a source of just EOS. Used by search and ``nmt-translate``.
    """
    lens = np.array([len(s) for s in src_ids], dtype=np.int64)
    width = int(lens.max()) + 1 if len(lens) else 1
    src = np.full((len(lens), width), PAD_ID, dtype=np.int64)
    for k, ids in enumerate(src_ids):
        src[k, : len(ids)] = ids
        src[k, len(ids)] = EOS_ID
    src_t = torch.from_numpy(src)
    mask = torch.from_numpy(np.arange(width)[None, :] <= lens[:, None])
    if device is not None:
        src_t, mask = src_t.to(device), mask.to(device)
    return src_t, mask


def make_tgt_batch(tgt_ids: Sequence[Sequence[int]], device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Target id lists (no BOS/EOS) -> ``(tgt_in, tgt_out, tgt_mask)``, each [B, T]:
    BOS + y, y + EOS, True at real positions (T = longest + 1). For forced decoding."""
    lens = np.array([len(t) for t in tgt_ids], dtype=np.int64)
    width = int(lens.max()) + 1 if len(lens) else 1
    tgt_in = np.full((len(lens), width), PAD_ID, dtype=np.int64)
    tgt_out = np.full((len(lens), width), PAD_ID, dtype=np.int64)
    for k, ids in enumerate(tgt_ids):
        tgt_in[k, 0] = BOS_ID
        tgt_in[k, 1: len(ids) + 1] = ids
        tgt_out[k, : len(ids)] = ids
        tgt_out[k, len(ids)] = EOS_ID
    mask = torch.from_numpy(np.arange(width)[None, :] <= lens[:, None])
    out = (torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), mask)
    return tuple(t.to(device) for t in out) if device is not None else out


# ------------------------------------------------------------------ TokenizedSplit
class TokenizedSplit:
    """A tokenized split backed by a memory-mapped Arrow IPC file (see module docstring).

    Attributes:
        path: the Arrow file (None for a split held in memory: :meth:`from_ids`,
            :meth:`from_bytes`).
        src_lens: [N] int64, source lengths *including* EOS (= S of a batch of one).
        tgt_lens: [N] int64, ``tgt_out`` lengths *including* EOS (= T of a batch of one).
        rows: [N] int64, the line number of each pair in the raw split (differs from the
            position only in a filtered training split; read on access, not kept in memory).
    """

    def __init__(self, path: str | Path):
        self._open(Path(path))

    def __getstate__(self) -> dict[str, Any]:  # picklable (DataLoader workers, spawn): path only
        return {"path": str(self.path)} if self.path is not None else {"buffer": self._buffer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._open(Path(state["path"]) if "path" in state else None, state.get("buffer"))

    @classmethod
    def from_ids(cls, src_ids: list[list[int]], tgt_ids: list[list[int]], src_texts: Sequence[str],
                 tgt_texts: Sequence[str], rows: np.ndarray) -> TokenizedSplit:
        """A split held in memory (an Arrow IPC buffer, same layout as the files): the given
        id lists (no EOS/BOS), raw texts and original line numbers, unfiltered."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, _SCHEMA) as writer:
            for a in range(0, len(src_ids), _CHUNK_ROWS):
                b = slice(a, a + _CHUNK_ROWS)
                writer.write_batch(_record_batch(src_ids[b], tgt_ids[b], src_texts[b],
                                                 tgt_texts[b], rows[b]))
        return cls.from_bytes(sink.getvalue())

    @classmethod
    def from_bytes(cls, data: bytes | pa.Buffer) -> TokenizedSplit:
        """A split held in memory from the bytes of an Arrow file (:meth:`ipc_bytes`)."""
        split = cls.__new__(cls)
        split._open(None, data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        return split

    def ipc_bytes(self) -> bytes:
        """The Arrow IPC file of this split, as bytes (to send it to other processes)."""
        return self.path.read_bytes() if self.path is not None else self._buffer.to_pybytes()

    def _open(self, path: Path | None, buffer: pa.Buffer | None = None) -> None:
        self.path, self._buffer = path, buffer
        source = pa.memory_map(str(path), "r") if path is not None else pa.BufferReader(buffer)
        self._reader = pa.ipc.open_file(source)
        batches = [self._reader.get_batch(i) for i in range(self._reader.num_record_batches)]
        self._starts = np.cumsum([0] + [rb.num_rows for rb in batches])
        n = int(self._starts[-1])
        self.src_lens, self.tgt_lens = np.empty(n, np.int64), np.empty(n, np.int64)
        self._chunks: list[tuple[np.ndarray, ...]] = []
        for rb, a, b in zip(batches, self._starts[:-1], self._starts[1:], strict=True):
            src, tgt = rb.column("src_ids"), rb.column("tgt_ids")
            s_off, t_off = src.offsets.to_numpy(), tgt.offsets.to_numpy()  # int32, zero-copy
            self._chunks.append((src.values.to_numpy(zero_copy_only=True), s_off,
                                 tgt.values.to_numpy(zero_copy_only=True), t_off))
            np.subtract(s_off[1:], s_off[:-1] - 1, out=self.src_lens[a:b])  # + EOS
            np.subtract(t_off[1:], t_off[:-1] - 1, out=self.tgt_lens[a:b])

    @property
    def rows(self) -> np.ndarray:
        """[N] int64, the line number of each pair in the raw split (differs from the position
        only in a filtered training split); read from the file on each access."""
        rows = [self._reader.get_batch(i).column("row").to_numpy()
                for i in range(self._reader.num_record_batches)]
        return np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.src_lens)

    def _locate(self, i: int) -> tuple[int, int]:
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range for a split of {len(self)} pairs.")
        c = int(np.searchsorted(self._starts, i, side="right") - 1)
        return c, i - int(self._starts[c])

    def src_ids(self, i: int) -> list[int]:
        """Subword ids of source ``i`` (no EOS), as :meth:`Tokenizer.encode_src` gave them."""
        c, j = self._locate(int(i))
        values, off = self._chunks[c][0], self._chunks[c][1]
        return values[off[j]: off[j + 1]].tolist()

    def tgt_ids(self, i: int) -> list[int]:
        """Subword ids of target ``i`` (no BOS/EOS)."""
        c, j = self._locate(int(i))
        values, off = self._chunks[c][2], self._chunks[c][3]
        return values[off[j]: off[j + 1]].tolist()

    def _texts(self, column: str) -> list[str]:
        return [s for i in range(self._reader.num_record_batches)
                for s in self._reader.get_batch(i).column(column).to_pylist()]

    def src_texts(self) -> list[str]:
        """The raw source sentences, in row order."""
        return self._texts("src_text")

    def tgt_texts(self) -> list[str]:
        """The raw target sentences (references), in row order."""
        return self._texts("tgt_text")

    def collate(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """Build the padded :class:`Batch` of the given rows (see :class:`Batch` for shapes).

        Raises:
            IndexError: an index is outside ``[0, len(self))``.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size == 0:
            raise IndexError("collate needs at least one row.")
        if idx.min() < 0 or idx.max() >= len(self):
            raise IndexError(f"rows must lie in [0, {len(self)}), got {idx.min()}..{idx.max()}.")
        s_lens, t_lens = self.src_lens[idx], self.tgt_lens[idx]
        width_s, width_t = int(s_lens.max()), int(t_lens.max())
        src = np.empty((idx.size, width_s), np.int64)
        tgt_in = np.empty((idx.size, width_t), np.int64)
        tgt_out = np.empty((idx.size, width_t), np.int64)
        chunk = np.searchsorted(self._starts, idx, side="right") - 1
        for c in np.unique(chunk):
            sel = np.nonzero(chunk == c)[0]
            local = idx[sel] - self._starts[c]
            s_val, s_off, t_val, t_off = self._chunks[c]
            s_n, t_n = s_lens[sel] - 1, t_lens[sel] - 1
            src[sel] = _pad_rows(s_val, s_off[local], s_n, width_s)
            ys = _pad_rows(t_val, t_off[local], t_n, width_t)
            tgt_out[sel] = ys
            tgt_in[sel, 0] = BOS_ID
            tgt_in[sel, 1:] = ys[:, :-1]
        rows = np.arange(idx.size)
        src[rows, s_lens - 1] = EOS_ID
        tgt_out[rows, t_lens - 1] = EOS_ID
        src_mask = np.arange(width_s)[None, :] < s_lens[:, None]
        tgt_mask = np.arange(width_t)[None, :] < t_lens[:, None]
        tgt_in[~tgt_mask] = PAD_ID
        return Batch(src=torch.from_numpy(src), src_mask=torch.from_numpy(src_mask),
                     tgt_in=torch.from_numpy(tgt_in), tgt_out=torch.from_numpy(tgt_out),
                     tgt_mask=torch.from_numpy(tgt_mask), indices=torch.from_numpy(idx.copy()),
                     n_src_tokens=int(s_lens.sum()), n_tgt_tokens=int(t_lens.sum()))


def _flat_ids(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Id lists as (lengths [N] int64, all ids concatenated [sum] int32)."""
    lens = np.fromiter(map(len, ids), np.int64, count=len(ids))
    return lens, np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lens.sum()))


def _list_array(lens: np.ndarray, values: np.ndarray, keep: np.ndarray) -> pa.Array:
    """The rows ``keep`` (bool [N]) of a flat id table (see :func:`_flat_ids`) as an Arrow
    ``list<int32>`` array."""
    offsets = np.zeros(int(keep.sum()) + 1, np.int32)
    np.cumsum(lens[keep], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[np.repeat(keep, lens)]))


def _tokenize_piece(piece: list[tuple[int, str, str]], tokenizer: Tokenizer,
                    max_len: int | None, max_len_ratio: float | None,
                    stats: dict[str, int]) -> pa.RecordBatch:
    """Tokenize and filter (see :func:`write_pairs`) a few pairs into a compact record batch;
    adds the counts to ``stats``."""
    rows, src_t, tgt_t = zip(*piece, strict=True)
    ls, s_ids = _flat_ids(tokenizer.encode_src_batch(src_t))
    lt, t_ids = _flat_ids(tokenizer.encode_tgt_batch(tgt_t))
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
    mask = pa.array(keep)
    return pa.record_batch(
        [_list_array(ls, s_ids, keep), _list_array(lt, t_ids, keep),
         pa.array(src_t, pa.large_string()).filter(mask),
         pa.array(tgt_t, pa.large_string()).filter(mask),
         pa.array(np.asarray(rows, np.int64)[keep])], schema=_SCHEMA)


def _record_batch(s_ids: list[list[int]], t_ids: list[list[int]], src_t: Sequence[str],
                  tgt_t: Sequence[str], rows: np.ndarray) -> pa.RecordBatch:
    keep = np.ones(len(s_ids), bool)
    return pa.record_batch([_list_array(*_flat_ids(s_ids), keep),
                            _list_array(*_flat_ids(t_ids), keep),
                            pa.array(list(src_t), pa.large_string()),
                            pa.array(list(tgt_t), pa.large_string()),
                            pa.array(np.asarray(rows, np.int64))], schema=_SCHEMA)


def write_split(path: str | Path, src_texts: Sequence[str], tgt_texts: Sequence[str],
                tokenizer: Tokenizer, rows: Sequence[int] | None = None,
                max_len: int | None = None, max_len_ratio: float | None = None,
                chunk_rows: int | None = None) -> dict[str, int]:
    """:func:`write_pairs` for pairs given as two lists.

    Args:
        rows: original line numbers (default ``0..N-1``).
        path, tokenizer, max_len, max_len_ratio, chunk_rows: see :func:`write_pairs`.

    Raises:
        ValueError: the lists (and ``rows``) differ in length.
        OSError: see :func:`write_pairs`.
    """
    rows = range(len(src_texts)) if rows is None else rows
    return write_pairs(path, zip(rows, src_texts, tgt_texts, strict=True), tokenizer, max_len,
                       max_len_ratio, chunk_rows)


def write_pairs(path: str | Path, pairs: Iterable[tuple[int, str, str]], tokenizer: Tokenizer,
                max_len: int | None = None, max_len_ratio: float | None = None,
                chunk_rows: int | None = None) -> dict[str, int]:
    """Tokenize a stream of pairs and write them as an Arrow IPC file, chunk by chunk.

    Reads 10,000 pairs at a time (fewer when ``chunk_rows`` is smaller), tokenizes and
    filters them into compact Arrow arrays and lets the Python strings and id lists go;
    every ``chunk_rows`` kept pairs are written as one Arrow record batch. Memory is bounded
    by one chunk however long the stream is, and the ids, texts and rows written do not
    depend on ``chunk_rows`` (only the file's record batches do). The file appears
    atomically (temp file + rename) once the stream has ended without error.

    Args:
        path: the Arrow file to write.
        pairs: ``(row, source text, target text)``; ``row`` is the pair's line number in the
            raw split (kept in the file, see :attr:`TokenizedSplit.rows`).
        tokenizer: gives the ids (``encode_src_batch`` / ``encode_tgt_batch``).
        max_len, max_len_ratio: training filters, in subword tokens without EOS: pairs with
            a side longer than ``max_len`` or ``max(len) / max(min(len), 1) > max_len_ratio``
            are dropped. ``None`` keeps every pair (validation and test).
        chunk_rows: kept pairs per record batch (default 100,000: about 60 MB for Multi30k-
            like sentences, and few record batches for :meth:`TokenizedSplit.collate`,
            whose time per batch grows with the number of record batches it touches).

    Returns:
        ``{"pairs": kept, "too_long": n, "bad_ratio": n}``.

    Raises:
        ValueError: ``chunk_rows`` < 1.
        OSError: the directory of ``path`` cannot be created or written (the temporary
            file is removed; an existing ``path`` is left as it was). Errors of the stream
            (e.g. :class:`CorpusError`) propagate the same way: no file is left behind.
    """
    chunk_rows = _CHUNK_ROWS if chunk_rows is None else int(chunk_rows)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows={chunk_rows} must be at least 1.")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stats = {"pairs": 0, "too_long": 0, "bad_ratio": 0}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    stream, read = iter(pairs), min(chunk_rows, _ENCODE_ROWS)
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
            pending: list[pa.RecordBatch] = []  # tokenized pairs not yet written
            n_pending, ended = 0, False
            while not ended:
                piece = list(itertools.islice(stream, read))
                ended = len(piece) < read
                if piece:
                    pending.append(_tokenize_piece(piece, tokenizer, max_len, max_len_ratio,
                                                   stats))
                    n_pending += pending[-1].num_rows
                    del piece
                while n_pending >= chunk_rows or (ended and n_pending):
                    table = pa.Table.from_batches(pending, schema=_SCHEMA)
                    writer.write_table(table.slice(0, chunk_rows).combine_chunks())
                    rest = table.slice(chunk_rows)
                    pending, n_pending = rest.to_batches(), rest.num_rows
                    del table, rest
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return stats


def sample_split(split: TokenizedSplit, tokenizer: Tokenizer, alpha: float, nbest_size: int,
                 seed: int | Sequence[int], cache: bool = True) -> TokenizedSplit:
    """The pairs of a training split with sampled segmentations, drawn once per ``seed``.

    Subword regularisation (Kudo 2018, "Subword Regularization"): every pair's raw texts are
    re-encoded by :meth:`Tokenizer.encode_sampled` -- a unigram model samples a segmentation
    with probability proportional to ``P(x)^alpha`` (from all of them with ``nbest_size=-1``,
    else from the ``nbest_size`` best), a BPE model drops each merge with probability
    ``alpha`` (BPE-dropout, Provilkov et al. 2020). The same pairs as ``split``, in the same
    order, with the same ``rows``; the length filters are not applied again, but a pair whose
    sampled segmentation has a side longer than the longest side in ``split`` keeps its
    segmentation from ``split``, so no batch outgrows the ``train.batch_tokens`` check.

    SentencePiece's sampling is reproducible for a seed within one process only (its
    generator draws differently in another process, measured with sentencepiece 0.2.3), so
    the draw is cached as an Arrow file beside ``split``'s, keyed by the settings and
    ``seed``: a resumed run, and every later run with the same seed, reads the same ids.

    Args:
        split: the tokenized training split (best segmentation; its texts are re-encoded).
        alpha, nbest_size: ``data.tokenizer.sampling_alpha`` (> 0), ``data.tokenizer.nbest_size``.
        seed: the draw's identity, e.g. ``(train.seed, epoch)``.
        cache: read / write the draw beside ``split`` (when ``split`` has a file).

    Returns:
        A :class:`TokenizedSplit`; ``decode`` of its ids gives the texts back.

    Raises:
        OSError: the cache directory cannot be written.
    """
    path = None
    if cache and split.path is not None:
        key = _key(split.path.name, float(alpha), int(nbest_size),
                   [int(x) for x in np.atleast_1d(seed)])
        path = split.path.with_name(f"{split.path.stem}.sampled-{key}.arrow")
        if path.is_file():
            return TokenizedSplit(path)
    src_texts, tgt_texts = split.src_texts(), split.tgt_texts()
    src_ids, tgt_ids = tokenizer.encode_sampled(src_texts, tgt_texts, alpha, nbest_size, seed)
    limit = int(max(split.src_lens.max(initial=1), split.tgt_lens.max(initial=1))) - 1
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if len(s) > limit or len(t) > limit:
            src_ids[i], tgt_ids[i] = split.src_ids(i), split.tgt_ids(i)
    sampled = TokenizedSplit.from_ids(src_ids, tgt_ids, src_texts, tgt_texts, split.rows)
    if path is None:
        return sampled
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(sampled.ipc_bytes())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return TokenizedSplit(path)


# ------------------------------------------------------------------ sampler
class TokenBatchSampler:
    """Length-bucketed token batches: every row exactly once per epoch.

    Rows are sorted by (source length, target length) with random tie-breaking, cut
    greedily into batches with ``B * max(S, T) <= batch_tokens`` (S, T: lengths incl. EOS),
    and the batch order is shuffled. Everything random comes from
    ``np.random.default_rng((seed, epoch))``, so the batches of an epoch are reproducible.
    With ``shuffle=False`` the order is the sorted one (for validation).

    Raises:
        ValueError: ``batch_tokens`` is smaller than the longest pair.
    """

    def __init__(self, src_lens: np.ndarray, tgt_lens: np.ndarray, batch_tokens: int,
                 shuffle: bool = True, seed: int = 0):
        self.src_lens = np.asarray(src_lens, dtype=np.int64)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64)
        if self.src_lens.shape != self.tgt_lens.shape:
            raise ValueError(f"src_lens {self.src_lens.shape} and tgt_lens {self.tgt_lens.shape} differ.")
        self.batch_tokens, self.shuffle, self.seed = int(batch_tokens), bool(shuffle), int(seed)
        longest = int(np.maximum(self.src_lens, self.tgt_lens).max()) if len(self.src_lens) else 0
        if longest > self.batch_tokens:
            raise ValueError(f"train.batch_tokens={self.batch_tokens} is smaller than the longest "
                             f"pair ({longest} tokens): raise train.batch_tokens or lower data.max_len.")

    def batches(self, epoch: int = 0) -> list[np.ndarray]:
        """The batches of ``epoch``: a list of int64 row-index arrays."""
        n = len(self.src_lens)
        if n == 0:
            return []
        if self.shuffle:
            rng = np.random.default_rng((self.seed, int(epoch)))
            order = np.lexsort((rng.random(n), self.tgt_lens, self.src_lens))
        else:
            order = np.lexsort((self.tgt_lens, self.src_lens))
        width = np.maximum(self.src_lens, self.tgt_lens)[order].tolist()
        cuts, start, cur, limit = [], 0, 0, self.batch_tokens
        for i, w in enumerate(width):
            m = cur if cur > w else w
            if (i - start + 1) * m > limit:
                cuts.append(i)
                start, cur = i, w
            else:
                cur = m
        out = np.split(order.astype(np.int64), cuts)
        if self.shuffle:
            out = [out[k] for k in rng.permutation(len(out))]
        return out

    def __len__(self) -> int:
        """Number of batches of epoch 0 (other epochs differ by at most a few)."""
        return len(self.batches(0))


def pad_efficiency(batches: Sequence[np.ndarray], src_lens: np.ndarray, tgt_lens: np.ndarray
                   ) -> float:
    """Real tokens / padded positions over ``batches``: sum(S_i + T_i) / sum(B * (S + T))."""
    real = padded = 0
    for b in batches:
        s, t = src_lens[b], tgt_lens[b]
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return real / padded if padded else 1.0


# ------------------------------------------------------------------ prepare_data
@dataclass
class PreparedData:
    """What training needs from the data side."""

    tokenizer: Tokenizer
    train: TokenizedSplit
    valid: TokenizedSplit


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([CACHE_VERSION, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()[:24]


def load_split(data_cfg: Any, split: str, tokenizer: Tokenizer) -> TokenizedSplit:
    """A split tokenized without any filtering (validation / test), cached like training.

    The split is streamed into the cache (:func:`write_pairs`), never held as lists.

    Raises:
        CorpusError: the split's files are missing, unreadable, not UTF-8, empty or
            misaligned (see :func:`nmt.data.corpus.iter_parallel`).
    """
    path = Path(str(cfg_get(data_cfg, "cache_dir"))) / "tokenized" / \
        f"{split}-{_key(split_fingerprint(data_cfg, split), tokenizer.fingerprint)}.arrow"
    if path.is_file():
        log.info("%s: token cache hit %s", split, path)
    else:
        pairs = ((row, s, t) for row, (s, t) in enumerate(iter_parallel(data_cfg, split)))
        stats = write_pairs(path, pairs, tokenizer)
        log.info("%s: tokenized %d pairs -> %s", split, stats["pairs"], path)
    return TokenizedSplit(path)


def training_pairs(data_cfg: Any, report: bool = True) -> Iterator[tuple[int, str, str]]:
    """``(row, source, target)`` of the training pairs, streamed: the first
    ``data.max_train_pairs`` pairs of ``data.train_split`` without the empty ones.

    The pairs beyond ``max_train_pairs`` are still read (not kept), so a misaligned or
    broken corpus is an error whatever the cap.

    Args:
        data_cfg: the ``data`` config section.
        report: log the number of dropped empty pairs (once per preparation, not per pass).

    Raises:
        CorpusError: see :func:`nmt.data.corpus.iter_parallel` and
            :func:`nmt.data.corpus.iter_nonempty_pairs` (no pair left).
    """
    split = str(cfg_get(data_cfg, "train_split"))
    max_pairs = cfg_get(data_cfg, "max_train_pairs")
    pairs = iter_parallel(data_cfg, split)
    if max_pairs is not None:
        pairs = _first(pairs, int(max_pairs))
    return iter_nonempty_pairs(pairs, where=split, report=report)


def _first(stream: Iterator[tuple[str, str]], n: int) -> Iterator[tuple[str, str]]:
    """The first ``n`` items of ``stream``; then reads (and so checks) the rest, unused."""
    yield from itertools.islice(stream, n)
    for _ in stream:
        pass


def prepare_data(data_cfg: Any, run_dir: str | Path | None = None,
                 tokenizer: Tokenizer | None = None) -> PreparedData:
    """Tokenizer + tokenized, cached training and validation splits.

    ``tokenizer`` (a fine-tuning run's, or ``data.tokenizer.model``'s) is used as it is;
    without one, a tokenizer is trained on the training split (or found in the cache).

    Training split (:func:`training_pairs`): first ``max_train_pairs`` pairs, empty pairs
    dropped (count logged), the tokenizer trained on a sample of what is left
    (``data.tokenizer.input_sentence_size``), then pairs beyond ``max_len`` /
    ``max_len_ratio`` dropped (count logged). Validation split: every pair, unfiltered. When
    ``run_dir`` is given the tokenizer model(s) are copied to ``run_dir/tokenizer/``.

    The corpus is streamed, never held in memory: one pass hashes its bytes (the cache key),
    one samples the tokenizer's training sentences, one tokenizes it into the cache chunk by
    chunk, so preparing a corpus larger than memory needs about as much memory as Multi30k.
    On a cache hit neither the corpus texts nor the tokenizer training run: only the
    corpus bytes are hashed.

    Raises:
        CorpusError: unreadable or empty corpus, or no training pair left after filtering.
        ConfigError: the tokenizer settings do not fit the corpus (e.g. a too small
            ``data.tokenizer.vocab_size``).
    """
    cache = Path(str(cfg_get(data_cfg, "cache_dir")))
    split = str(cfg_get(data_cfg, "train_split"))
    max_pairs = cfg_get(data_cfg, "max_train_pairs")
    train_id = _key(split_fingerprint(data_cfg, split), max_pairs)
    if tokenizer is None:
        tokenizer = tokenizer_from_pairs(
            cfg_get(data_cfg, "tokenizer"), str(cfg_get(data_cfg, "src_lang")),
            str(cfg_get(data_cfg, "tgt_lang")),
            lambda: ((s, t) for _, s, t in training_pairs(data_cfg, report=False)), cache,
            data_hash=train_id)
    max_len, ratio = int(cfg_get(data_cfg, "max_len")), float(cfg_get(data_cfg, "max_len_ratio"))
    path = cache / "tokenized" / f"{split}-{_key(train_id, tokenizer.fingerprint, max_len, ratio)}.arrow"
    if path.is_file():
        log.info("%s: token cache hit %s", split, path)
    else:
        stats = write_pairs(path, training_pairs(data_cfg), tokenizer, max_len, ratio)
        log.info("%s: %d pairs kept; dropped %d longer than max_len=%d and %d with length ratio "
                 "> %g -> %s", split, stats["pairs"], stats["too_long"], max_len,
                 stats["bad_ratio"], ratio, path)
        if stats["pairs"] == 0:
            path.unlink()
            raise CorpusError(f"{split}: no training pair is left after the length filters "
                              f"(data.max_len={max_len}, data.max_len_ratio={ratio}).")
    train = TokenizedSplit(path)
    valid = load_split(data_cfg, str(cfg_get(data_cfg, "valid_split")), tokenizer)
    if run_dir is not None:
        tokenizer.save(Path(run_dir) / "tokenizer")
    return PreparedData(tokenizer=tokenizer, train=train, valid=valid)
