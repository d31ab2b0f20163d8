"""One step's batch: rows of a tokenized split padded into a :class:`Batch` (:func:`collate`,
what a training step runs), and the source / target batches of search and forced decoding
(:func:`make_src_batch`, :func:`make_tgt_batch`). Which rows form a batch:
:mod:`nmt.data.sampler`; the tokenized, cached splits: :mod:`nmt.data.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:
    from nmt.data.pipeline import TokenizedSplit
    from nmt.data.sampler import BatchShapes


@dataclass
class Batch:
    """One padded batch of B pairs (PAD past each row's end)."""

    src: torch.Tensor          # [B, S] int64: ids + EOS
    src_mask: torch.Tensor     # [B, S] bool: True at real positions
    tgt_in: torch.Tensor       # [B, T] int64: BOS + y (teacher forcing)
    tgt_out: torch.Tensor      # [B, T] int64: y + EOS (targets; a target-side tag is PAD here)
    n_src_tokens: int          # real positions of src, EOS included
    n_tgt_tokens: int          # targets of tgt_out that are not PAD (the loss normaliser)
    links: torch.Tensor | None = None  # [n, 3] int64 (row, tgt_out position, src position):
    #                            subword links of guided alignment (data.alignments), else None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:   # page-locked, for asynchronous host-to-GPU copies
        return self._map(torch.Tensor.pin_memory)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        return replace(self, **{f.name: fn(getattr(self, f.name)) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})

    def __len__(self) -> int:
        return int(self.src.shape[0])


def _pad_rows(values: np.ndarray, starts: np.ndarray, lens: np.ndarray, width: int) -> np.ndarray:
    """Rows ``values[starts[k] : starts[k] + lens[k]]`` left-aligned in a PAD matrix [B, width]."""
    cols = np.arange(width)
    valid = cols[None, :] < lens[:, None]
    if not values.size:
        return np.full((len(starts), width), PAD_ID, dtype=np.int64)
    pos = np.where(valid, starts[:, None] + cols[None, :], 0)
    return np.where(valid, values[pos], PAD_ID).astype(np.int64)


def _padded(rows: list[list[int]], device: torch.device | str | None) -> tuple[torch.Tensor, ...]:
    """Id lists in a PAD-filled int64 [B, W] and its bool mask [B, W] (True at the ids)."""
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    ids = np.full((len(rows), int(lens.max(initial=1))), PAD_ID, dtype=np.int64)
    for k, r in enumerate(rows):
        ids[k, : len(r)] = r
    mask = np.arange(ids.shape[1])[None, :] < lens[:, None]
    out = (torch.from_numpy(ids), torch.from_numpy(mask))
    return tuple(t.to(device) for t in out) if device is not None else out


def make_src_batch(src_ids: Sequence[Sequence[int]], device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Source id lists (no EOS) -> ``(src, src_mask)`` [B, S], EOS appended (search, scoring)."""
    return _padded([[*s, EOS_ID] for s in src_ids], device)


def make_tgt_batch(tgt_ids: Sequence[Sequence[int]], device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Target id lists (no BOS/EOS) -> ``(tgt_in, tgt_out, tgt_mask)`` [B, T] (forced decoding)."""
    tgt_in, mask = _padded([[BOS_ID, *t] for t in tgt_ids], device)
    return tgt_in, _padded([[*t, EOS_ID] for t in tgt_ids], device)[0], mask


def _pad_batch(batch: Batch, rows: int) -> Batch:
    """``batch`` grown to ``rows`` rows: PAD ids, targets PAD (no loss), the first source
    position unmasked (no attention row without keys, whose softmax would be NaN)."""
    extra = rows - len(batch)
    if extra < 0:
        raise ValueError(f"{len(batch)} rows do not fit the static shape of {rows} rows")

    def grow(t: torch.Tensor, value) -> torch.Tensor:
        return torch.cat((t, t.new_full((extra, t.shape[1]), value)))

    src_mask = grow(batch.src_mask, False)
    src_mask[len(batch):, 0] = True
    return replace(batch, src=grow(batch.src, PAD_ID), src_mask=src_mask,
                   tgt_in=grow(batch.tgt_in, PAD_ID), tgt_out=grow(batch.tgt_out, PAD_ID))


def target_tokens(split: TokenizedSplit, indices: np.ndarray) -> int:
    """The targets of these rows that a loss counts: subwords and EOS, no tag."""
    return int(split.tgt_lens[indices].sum()) - (len(indices) if split.target_tag else 0)


def collate(split: TokenizedSplit, indices: Sequence[int] | np.ndarray,
            shapes: BatchShapes | None = None) -> Batch:
    """The padded :class:`Batch` of rows ``indices`` of ``split``, in their order; with
    ``shapes`` padded to its static shape (:meth:`BatchShapes.shape`, padding rows by
    :func:`_pad_batch`). A target-side tag (``split.target_tag``) is decoder input only."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    s_lens, t_lens = split.src_lens[idx], split.tgt_lens[idx]
    width_s, width_t = int(s_lens.max()), int(t_lens.max())
    if shapes is not None:
        n_rows, width_s, width_t = shapes.shape(width_s, width_t)
    src = np.empty((idx.size, width_s), np.int64)
    tgt_in = np.empty((idx.size, width_t), np.int64)
    tgt_out = np.empty((idx.size, width_t), np.int64)
    chunk = np.searchsorted(split.starts, idx, side="right") - 1
    for c in np.unique(chunk):
        sel = np.nonzero(chunk == c)[0]
        local = idx[sel] - split.starts[c]
        s_val, s_off, t_val, t_off = split.chunks[c]
        s_n, t_n = s_lens[sel] - 1, t_lens[sel] - 1
        src[sel] = _pad_rows(s_val, s_off[local], s_n, width_s)
        ys = _pad_rows(t_val, t_off[local], t_n, width_t)
        tgt_out[sel] = ys
        tgt_in[sel, 0] = BOS_ID
        tgt_in[sel, 1:] = ys[:, :-1]
    rows = np.arange(idx.size)
    src[rows, s_lens - 1] = EOS_ID
    tgt_out[rows, t_lens - 1] = EOS_ID
    if split.target_tag:
        tgt_out[:, 0] = PAD_ID          # the tag: decoder input only
    src_mask = np.arange(width_s)[None, :] < s_lens[:, None]
    tgt_in[~(np.arange(width_t)[None, :] < t_lens[:, None])] = PAD_ID
    batch = Batch(src=torch.from_numpy(src), src_mask=torch.from_numpy(src_mask),
                  tgt_in=torch.from_numpy(tgt_in), tgt_out=torch.from_numpy(tgt_out),
                  n_src_tokens=int(s_lens.sum()), n_tgt_tokens=target_tokens(split, idx),
                  links=None if split.links is None else _batch_links(split, idx, chunk))
    return batch if shapes is None else _pad_batch(batch, n_rows)


def _batch_links(split: TokenizedSplit, idx: np.ndarray, chunk: np.ndarray) -> torch.Tensor:
    """The links of rows ``idx`` (in chunks ``chunk``) as :attr:`Batch.links` [n, 3]."""
    parts = [np.zeros((0, 3), np.int64)]
    for row, (i, c) in enumerate(zip(idx, chunk, strict=True)):
        values, off = split.links[c]
        j = i - split.starts[c]
        pairs = values[off[j]: off[j + 1]].reshape(-1, 2)
        parts.append(np.column_stack((np.full(len(pairs), row), pairs)))
    return torch.from_numpy(np.concatenate(parts).astype(np.int64))
