"""Which rows make up each training batch: length-bucketed token batches (Vaswani et al.
2017, section 5.1: "sentence pairs were batched together by approximate sequence length"),
optional static shapes (:class:`BatchShapes`), and with several directions (``data.pairs``)
temperature sampling of each epoch's rows by direction (Arivazhagan et al. 2019, sec. 4.2)
or with several training corpora (``data.corpora``) fairseq's upsampling by corpus weight.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nmt.config import ConfigError
from nmt.data.languages import temperature_shares

log = logging.getLogger("nmt.data")


def _least_padding(widths: np.ndarray, buckets: int) -> list[int]:
    """The ``buckets`` lengths (fewer if ``widths`` has fewer distinct values) that pad
    ``widths`` least in total, ``sum (L(w) - w)``: exact dynamic programming over the distinct
    widths v_0 < ... < v_{n-1}, O(buckets * n^2)."""
    vals, counts = np.unique(widths, return_counts=True)
    c, s = (np.concatenate(([0], np.cumsum(x))) for x in (counts, counts * vals))
    # best[j]: least padding of the rows of widths v_0..v_j in m buckets, the last v_j;
    # a bucket of v_i..v_j pads v_j * rows - sum of widths.
    best, choices = vals * c[1:] - s[1:], []
    for m in range(2, min(buckets, len(vals)) + 1):
        new, choice = np.full(len(vals), np.inf), np.zeros(len(vals), np.int64)
        for j in range(m - 1, len(vals)):
            i = np.arange(m - 1, j + 1)      # the last bucket starts at v_i
            total = best[i - 1] + vals[j] * (c[j + 1] - c[i]) - (s[j + 1] - s[i])
            choice[j] = i[np.argmin(total)]
            new[j] = total.min()
        best = new
        choices.append(choice)
    j, lengths = len(vals) - 1, [int(vals[-1])]
    for choice in reversed(choices):
        j = int(choice[j]) - 1
        lengths.append(int(vals[j]))
    return sorted(lengths)


@dataclass(frozen=True)
class BatchShapes:
    """Static batch shapes (``train.shape_buckets``), so that a compiled model and its CUDA
    graphs see a few shapes, not one per batch: a batch whose longest source has ``ws``
    positions and longest target ``wt`` (EOS included) is padded to ``[rows, S]`` and
    ``[rows, T]``, S the first of ``src_lengths`` >= ``ws``, T the first of ``tgt_lengths``
    >= ``wt``, ``rows = batch_tokens // max(S, T)``. :class:`TokenBatchSampler` cuts batches
    that fit."""

    src_lengths: tuple[int, ...]   # ascending; the last >= the longest source
    tgt_lengths: tuple[int, ...]   # ascending; the last >= the longest target
    batch_tokens: int

    @classmethod
    def fit(cls, src_lens: np.ndarray, tgt_lens: np.ndarray, buckets: int,
            batch_tokens: int, multiple: int = 8) -> BatchShapes:
        """Per side (source and target apart) the ``buckets`` lengths that pad its widths least
        in total (:func:`_least_padding`), each rounded up to a multiple of ``multiple`` (8:
        tensor-core tiles; the fused attention kernels would pad to 8 on every call)."""
        def side(lens: np.ndarray) -> tuple[int, ...]:
            rounded = {-(-n // multiple) * multiple for n in _least_padding(lens, buckets)}
            return tuple(sorted(rounded))

        shapes = cls(side(src_lens), side(tgt_lens), int(batch_tokens))
        log.info("static batch lengths: source %s, target %s (rows: batch_tokens // the longer)",
                 shapes.src_lengths, shapes.tgt_lengths)
        return shapes

    @staticmethod
    def bucket(lengths: tuple[int, ...], width: np.ndarray) -> np.ndarray:
        """The first of ``lengths`` (one side's) >= each ``width``; ValueError past the last."""
        k = np.searchsorted(lengths, width)
        if np.any(k >= len(lengths)):
            raise ValueError(f"a side of {int(np.max(width))} positions is longer than the "
                             f"longest static shape ({lengths[-1]})")
        return np.asarray(lengths, dtype=np.int64)[k]

    def shape(self, src_width: int, tgt_width: int) -> tuple[int, int, int]:
        """``(rows, S, T)`` of a batch whose longest source and target have these widths."""
        s = int(self.bucket(self.src_lengths, np.asarray(src_width)))
        t = int(self.bucket(self.tgt_lengths, np.asarray(tgt_width)))
        return self.batch_tokens // max(s, t), s, t


class TokenBatchSampler:
    """Length-bucketed token batches, every row once per epoch: rows sorted by (source
    length, target length) with random tie-breaking, cut greedily into batches with
    ``B * max(S, T) <= batch_tokens`` (lengths with EOS), in shuffled order; all randomness
    from ``np.random.default_rng((seed, epoch))``. ``shuffle=False``: sorted (validation).
    With ``shapes`` rows are sorted by their static lengths first and a pair's width counts as
    the longer of them (``B * max(S, T) <= batch_tokens``: every batch fits its
    :meth:`BatchShapes.shape`).
    With ``groups`` (each row's direction or training corpus or both, [N]) and shuffling, an
    epoch's rows are :meth:`epoch_rows`, drawn by ``temperature`` or, given, the corpora's
    ``weights`` (per group), or both, given each group's direction (``directions``).
    ConfigError when ``batch_tokens`` is smaller than the longest pair."""

    def __init__(self, src_lens: np.ndarray, tgt_lens: np.ndarray, batch_tokens: int,
                 shuffle: bool = True, seed: int = 0, shapes: BatchShapes | None = None,
                 groups: np.ndarray | None = None, temperature: float = 1.0,
                 weights: Sequence[float] | None = None,
                 directions: Sequence[int] | None = None):
        self.src_lens = np.asarray(src_lens, dtype=np.int64)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64)
        self.batch_tokens, self.shuffle, self.seed = int(batch_tokens), bool(shuffle), int(seed)
        self.shapes, self.groups, self.temperature = shapes, groups, float(temperature)
        self.weights = None if weights is None else np.asarray(weights, np.float64)
        self.directions = None if directions is None else np.asarray(directions, np.int64)
        longest = int(np.maximum(self.src_lens, self.tgt_lens).max(initial=0))
        if longest > self.batch_tokens:
            raise ConfigError(f"train.batch_tokens={self.batch_tokens} is smaller than the longest "
                              f"pair ({longest} tokens): raise it or lower data.max_len.")

    def with_lengths(self, src_lens: np.ndarray, tgt_lens: np.ndarray) -> TokenBatchSampler:
        """This sampler's settings over other lengths of the same rows (a resegmented split)."""
        return TokenBatchSampler(src_lens, tgt_lens, self.batch_tokens, self.shuffle, self.seed,
                                 self.shapes, self.groups, self.temperature, self.weights,
                                 self.directions)

    def epoch_rows(self, epoch: int) -> np.ndarray | None:
        """The rows of ``epoch``, drawn group by group.

        How many rows each group gets, for a split of N rows and group g of n_g rows:

        - directions only: N rows, direction d's share ``q_d`` of them, ``q`` the
          :func:`temperature_shares` of the directions' sizes (Arivazhagan et al. 2019,
          sec. 4.2);
        - ``weights`` only: ``w_c n_c`` rows of corpus c, its n_c rows w_c times on average
          (fairseq's upsampling: a corpus's share is proportional to weight x size);
        - both (``directions``: the direction of each group g): ``sum e`` rows, where
          ``e_d = sum w_g n_g`` over direction d's groups; direction d gets its share ``q_d``
          of the temperature shares of ``e``, split among its groups as ``w_g n_g / e_d``
          (T = 1 gives ``w_g n_g``: fairseq's upsampling again).

        Counts are rounded by largest remainders. A group given k x n_g + r rows (r < n_g)
        takes each of its rows k times, then r of them at random without replacement, from
        ``default_rng((seed, epoch, 1))``.

        Returns: the row indices [M] int64, or None (every row once) when there are no groups
        or the counts give every group its size.
        """
        if self.groups is None:
            return None
        sizes = np.bincount(self.groups, minlength=0 if self.weights is None else
                            len(self.weights))
        exact = temperature_shares(sizes, self.temperature) * len(self.groups) \
            if self.weights is None else self.weights * sizes
        if self.directions is not None:   # exact = w_g n_g here
            e = np.bincount(self.directions, weights=exact)
            share = temperature_shares(e, self.temperature)[self.directions] * e.sum()
            exact = share * np.divide(exact, e[self.directions], out=np.zeros_like(exact),
                                      where=e[self.directions] > 0)
        counts = np.floor(exact).astype(np.int64)
        counts[np.argsort(counts - exact, kind="stable")[: round(exact.sum()) - counts.sum()]] += 1
        if np.array_equal(counts, sizes):
            return None
        rng, rows = np.random.default_rng((self.seed, int(epoch), 1)), []
        for d in np.flatnonzero(counts):
            mine = np.flatnonzero(self.groups == d)
            k, rest = divmod(int(counts[d]), len(mine))
            rows += [np.tile(mine, k), rng.choice(mine, rest, replace=False)]
        return np.concatenate(rows)

    def batches(self, epoch: int = 0) -> list[np.ndarray]:
        """The batches of ``epoch``: int64 row-index arrays."""
        rows = self.epoch_rows(epoch) if self.shuffle else None
        src_lens, tgt_lens = (self.src_lens, self.tgt_lens) if rows is None else \
            (self.src_lens[rows], self.tgt_lens[rows])
        n = len(src_lens)
        if n == 0:
            return []
        width = np.maximum(src_lens, tgt_lens)
        keys = (tgt_lens, src_lens)
        if self.shapes is not None:     # sorted by static lengths first: batches of one shape
            s_len = self.shapes.bucket(self.shapes.src_lengths, src_lens)
            t_len = self.shapes.bucket(self.shapes.tgt_lengths, tgt_lens)
            width, keys = np.maximum(s_len, t_len), (*keys, t_len, s_len)
        if self.shuffle:
            rng = np.random.default_rng((self.seed, int(epoch)))
            keys = (rng.random(n), *keys)
        order = np.lexsort(keys)
        width = width[order].tolist()
        order = order if rows is None else rows[order]
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
            log.info("epoch %d: %d batches, %.1f%% of their positions padding", epoch, len(out),
                     100 * self.padding(out))
        return out

    def padding(self, batches: Sequence[np.ndarray]) -> float:
        """The share of padding among the positions of ``batches`` as collated, both sides:
        ``B * (max S + max T)`` per batch, with ``shapes`` ``rows * (S + T)``."""
        real = padded = 0
        for idx in batches:
            s, t = self.src_lens[idx], self.tgt_lens[idx]
            real += int(s.sum()) + int(t.sum())
            if self.shapes is None:
                padded += len(idx) * (int(s.max()) + int(t.max()))
            else:
                rows, s_len, t_len = self.shapes.shape(int(s.max()), int(t.max()))
                padded += rows * (s_len + t_len)
        return 1.0 - real / max(padded, 1)
