"""Batching: exact batches of a hand-made split (collate, static shapes, search's source
batches) and the sampler's invariants. The pipeline that writes splits: tests/test_pipeline.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.config import ConfigError
from nmt.data import pipeline
from nmt.data.batching import collate, make_src_batch
from nmt.data.pipeline import TokenizedSplit, write_pairs
from nmt.data.sampler import BatchShapes, TokenBatchSampler
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID


def pad_efficiency(batches, src_lens, tgt_lens):
    """Real tokens / padded positions over ``batches``: sum(S_i + T_i) / sum(B * (S + T))."""
    real = sum(int(src_lens[b].sum() + tgt_lens[b].sum()) for b in batches)
    return real / sum(len(b) * int(src_lens[b].max() + tgt_lens[b].max()) for b in batches)


class WordTokenizer:
    """Test double: one fixed id per letter-word (a=10 b=11 c=12 x=13 y=14 z=15 w=16 ...)."""

    fingerprint = "words"
    vocab = {w: 10 + i for i, w in enumerate("a b c x y z w d e f g u v".split())}

    def _enc(self, text):
        return [self.vocab[w] for w in text.split()]

    def encode_src_batch(self, texts):
        return [self._enc(t) for t in texts]

    encode_tgt_batch = encode_src_batch


def write_hand_split(tmp_path: Path) -> TokenizedSplit:
    # ids: a=10 b=11 c=12 | x=13 y=14 z=15 w=16
    src = ["a b c", "a", "", "b b"]
    tgt = ["x y", "z w x y", "x", ""]
    write_pairs(tmp_path / "s.arrow", zip(src, tgt, strict=True), WordTokenizer())
    return TokenizedSplit(tmp_path / "s.arrow")


@pytest.fixture
def hand_split(tmp_path):
    return write_hand_split(tmp_path)


def test_collate_exact_values(hand_split):
    split = hand_split
    assert len(split) == 4
    assert split.src_lens.tolist() == [4, 2, 1, 3]  # + EOS
    assert split.tgt_lens.tolist() == [3, 5, 2, 1]
    assert split.src_ids(0) == [10, 11, 12] and split.tgt_ids(1) == [15, 16, 13, 14]
    assert split.src_texts() == ["a b c", "a", "", "b b"]
    assert split.tgt_texts()[1] == "z w x y"

    b = collate(split, [1, 0, 2])
    P, E, S = PAD_ID, EOS_ID, BOS_ID
    assert b.src.tolist() == [[10, E, P, P], [10, 11, 12, E], [E, P, P, P]]
    assert b.src_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert b.tgt_in.tolist() == [[S, 15, 16, 13, 14], [S, 13, 14, P, P], [S, 13, P, P, P]]
    assert b.tgt_out.tolist() == [[15, 16, 13, 14, E], [13, 14, E, P, P], [13, E, P, P, P]]
    assert (b.n_src_tokens, b.n_tgt_tokens) == (7, 10)
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == torch.int64
    assert b.src_mask.dtype == torch.bool
    # tgt_in is tgt_out shifted right by one, BOS in front
    real = b.tgt_in[:, 1:] != P
    assert torch.equal(b.tgt_in[:, 1:][real], b.tgt_out[:, :-1][real])

    empty_tgt = collate(split, [3])
    assert empty_tgt.tgt_in.tolist() == [[S]] and empty_tgt.tgt_out.tolist() == [[E]]
    moved = b.to("cpu")
    assert torch.equal(moved.src, b.src) and moved.n_tgt_tokens == 10 and len(moved) == 3


def test_multi_chunk_split_collates_like_single(tmp_path, monkeypatch):
    src = [" ".join("abcdefg"[: 1 + i % 7]) for i in range(23)]
    tgt = [" ".join("uvwxyz"[: 1 + (i * 3) % 6]) for i in range(23)]
    write_pairs(tmp_path / "one.arrow", zip(src, tgt, strict=True), WordTokenizer())
    monkeypatch.setattr(pipeline, "_CHUNK_ROWS", 5)
    write_pairs(tmp_path / "many.arrow", zip(src, tgt, strict=True), WordTokenizer())
    one, many = TokenizedSplit(tmp_path / "one.arrow"), TokenizedSplit(tmp_path / "many.arrow")
    assert len(many.chunks) == 5 and len(one.chunks) == 1
    idx = [22, 0, 5, 6, 11, 17, 3]
    a, b = collate(one, idx), collate(many, idx)
    for name in ("src", "src_mask", "tgt_in", "tgt_out"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert many.src_ids(17) == one.src_ids(17) and many.tgt_texts() == tgt


def test_make_src_batch():
    src, mask = make_src_batch([[5, 6, 7], [], [9]])
    assert src.tolist() == [[5, 6, 7, EOS_ID], [EOS_ID, 0, 0, 0], [9, EOS_ID, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert src.dtype == torch.int64 and mask.dtype == torch.bool


def _lens(n=500, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 40, n)
    return src, np.clip(src + rng.integers(-5, 6, n), 1, None)


def test_sampler_covers_each_row_once_within_budget():
    src, tgt = _lens()
    sampler = TokenBatchSampler(src, tgt, batch_tokens=200, seed=3)
    for epoch in range(3):
        batches = sampler.batches(epoch)
        rows = np.concatenate(batches)
        assert sorted(rows.tolist()) == list(range(len(src)))
        for b in batches:
            assert len(b) * max(src[b].max(), tgt[b].max()) <= 200
    assert pad_efficiency(sampler.batches(0), src, tgt) > 0.8


def test_static_lengths_pad_least_and_batches_take_their_fixed_shape(hand_split):
    # Source widths 2, 1, 3, 5, 9; two lengths: {3, 9} pads 1+2+0+4+0 = 7 positions, {5, 9}
    # pads 3+4+2+0+0 = 9, {2, 9} pads 0+1+6+4+0 = 11: the dynamic programme picks (3, 9).
    # Target widths 1, 2, 2, 4, 3 are bucketed apart: (2, 4).
    src, tgt = np.array([2, 1, 3, 5, 9]), np.array([1, 2, 2, 4, 3])
    two = BatchShapes.fit(src, tgt, 2, 20, multiple=1)
    assert (two.src_lengths, two.tgt_lengths) == ((3, 9), (2, 4))
    one = BatchShapes.fit(src, tgt, 1, 20, multiple=1)
    assert (one.src_lengths, one.tgt_lengths) == ((9,), (4,))
    # each width
    assert BatchShapes.fit(src, tgt, 9, 20, multiple=1).src_lengths == (1, 2, 3, 5, 9)
    rounded = BatchShapes.fit(src, tgt, 9, 20)                  # multiples of 8
    assert (rounded.src_lengths, rounded.tgt_lengths) == ((8, 16), (8,))
    shapes = BatchShapes((3, 9), (2, 4), 20)
    assert shapes.shape(3, 2) == (6, 3, 2) and shapes.shape(4, 1) == (2, 9, 2)
    assert shapes.shape(2, 4) == (5, 3, 4)                      # rows: the longer side, 4
    assert shapes.bucket(shapes.src_lengths, np.array([3, 4, 9])).tolist() == [3, 9, 9]
    with pytest.raises(ValueError, match="longer than the longest static shape"):
        shapes.shape(10, 1)
    # hand_split: src_lens [4, 2, 1, 3], tgt_lens [3, 5, 2, 1]; rows 1, 2: source 2 -> 2,
    # target 5 -> 6, in a 12-token budget 2 rows (3 rows of 6 positions would not fit).
    shapes = BatchShapes((2, 6), (2, 6), 12)
    one = collate(hand_split, [1, 2], shapes)
    plain = collate(hand_split, [1, 2])
    assert one.src.shape == (2, 2) and one.tgt_in.shape == one.tgt_out.shape == (2, 6)
    assert torch.equal(one.src, plain.src) and torch.equal(one.tgt_in[:, :5], plain.tgt_in)
    padded = collate(hand_split, [2], BatchShapes((2,), (2,), 12))      # 1 real row of 6
    P, E, S = PAD_ID, EOS_ID, BOS_ID
    assert padded.src.tolist() == [[E, P]] + [[P, P]] * 5
    assert padded.src_mask.tolist() == [[1, 0]] * 6          # no row without a key
    assert padded.tgt_in.tolist() == [[S, 13]] + [[P, P]] * 5
    assert padded.tgt_out.tolist() == [[13, E]] + [[P, P]] * 5       # padding rows: no loss
    assert (padded.n_src_tokens, padded.n_tgt_tokens) == (1, 2)


def test_sampler_with_static_shapes_keeps_the_budget_and_few_shapes():
    src, tgt = _lens()
    shapes = BatchShapes.fit(src, tgt, 4, 200)
    sampler = TokenBatchSampler(src, tgt, batch_tokens=200, seed=3, shapes=shapes)
    for lengths, lens in ((shapes.src_lengths, src), (shapes.tgt_lengths, tgt)):
        assert len(lengths) <= 4 and all(n % 8 == 0 for n in lengths)
        assert lens.max() <= lengths[-1] < lens.max() + 8
    seen = set()
    for epoch in range(3):
        batches = sampler.batches(epoch)
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(src)))
        for b in batches:
            rows, s_len, t_len = shapes.shape(int(src[b].max()), int(tgt[b].max()))
            assert len(b) <= rows and rows * max(s_len, t_len) <= 200
            seen.add((rows, s_len, t_len))
    assert len(seen) <= 16
    # padding: 1 - real / positions, both sides, [B, S] + [B, T]
    plain = TokenBatchSampler(np.array([2, 3]), np.array([4, 1]), 100)
    assert plain.padding([np.array([0, 1])]) == pytest.approx(1 - 10 / 14)
    static = TokenBatchSampler(np.array([2, 3]), np.array([4, 1]), 100,
                               shapes=BatchShapes((5,), (8,), 10))
    assert static.padding([np.array([0, 1])]) == pytest.approx(1 - 10 / 13)   # 1 row x (5 + 8)


def test_sampler_deterministic_in_seed_and_epoch():
    src, tgt = _lens()
    a = TokenBatchSampler(src, tgt, 300, seed=7)
    b = TokenBatchSampler(src, tgt, 300, seed=7)
    same = [np.array_equal(x, y) for x, y in zip(a.batches(2), b.batches(2), strict=True)]
    assert all(same)
    flat = [np.concatenate(a.batches(e)).tolist() for e in (0, 1)]
    assert flat[0] != flat[1]  # another epoch, another order
    assert np.concatenate(TokenBatchSampler(src, tgt, 300, seed=8).batches(2)).tolist() != \
        np.concatenate(a.batches(2)).tolist()
    fixed = TokenBatchSampler(src, tgt, 300, shuffle=False)
    order = np.concatenate(fixed.batches(0))
    assert np.all(np.diff(src[order]) >= 0)  # sorted by length, for validation
    assert np.array_equal(order, np.concatenate(fixed.batches(5)))


def test_sampler_rejects_too_small_budget():
    with pytest.raises(ConfigError, match="batch_tokens=10"):
        TokenBatchSampler(np.array([3, 12]), np.array([4, 5]), batch_tokens=10)


def test_multi30k_pad_efficiency(multi30k_root):
    """Length bucketing on the real corpus (word counts + EOS stand in for subword lengths;
    scripts/bench_data.py measures the subword figure)."""
    from nmt.data.corpus import iter_text_pair

    pairs = list(iter_text_pair(multi30k_root / "train.de", multi30k_root / "train.en"))
    src_lens = np.array([len(s.split()) + 1 for s, _ in pairs])
    tgt_lens = np.array([len(t.split()) + 1 for _, t in pairs])
    batches = TokenBatchSampler(src_lens, tgt_lens, 4096, seed=1).batches(0)
    assert pad_efficiency(batches, src_lens, tgt_lens) >= 0.9
    assert sum(len(b) for b in batches) == 29000
