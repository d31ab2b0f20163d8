"""Subword sampling (nmt/extras/training/subword_sampling.py).

Sampled segmentations that repeat with the seed, epoch splits with a fallback and a cache, and the
trainer's hook. The epochs of a training run: tests/test_trainer.py; the exact resume:
tests/e2e/test_train_cli.py; rank 0's draw sent to the other ranks: tests/e2e/test_torchrun.py."""

from __future__ import annotations

import threading

import pytest
from conftest import train_tokenizer
from omegaconf import OmegaConf
from test_batching import WordTokenizer

from nmt.config import ConfigError, compose_config
from nmt.data.batching import collate
from nmt.data.corpus import iter_text_pair
from nmt.data.pipeline import TokenizedSplit, prepare_data, write_pairs
from nmt.data.vocab import EOS_ID, PAD_ID
from nmt.extras.training import subword_sampling
from nmt.extras.training.subword_sampling import encode_sampled, resampler, sample_split
from nmt.training.hooks import TrainingHooks
from nmt.training.trainer import train


@pytest.mark.parametrize(("model_type", "alpha", "nbest_size"),
                         [("unigram", 0.5, -1), ("unigram", 0.5, 8), ("bpe", 0.2, -1)])
def test_sampled_segmentations_decode_to_the_text_and_repeat_with_the_seed(
        tmp_path, tiny_corpus, model_type, alpha, nbest_size):
    """Subword regularisation (Kudo 2018; BPE-dropout): another segmentation of the same text,
    the same one for the same seed (also from another thread), another for another seed."""
    pairs = list(iter_text_pair(tiny_corpus / "train.de", tiny_corpus / "train.en"))
    tok_cfg = OmegaConf.create({"type": model_type, "vocab_size": 120, "character_coverage": 1.0,
                                "joint": False, "input_sentence_size": 1000})
    tok = train_tokenizer(tok_cfg, pairs, tmp_path)
    src, tgt = [s for s, _ in pairs[:50]], [t for _, t in pairs[:50]]
    first = encode_sampled(tok, src, tgt, alpha, nbest_size, seed=(1234, 0))
    again: list = []
    thread = threading.Thread(target=lambda: again.append(
        encode_sampled(tok, src, tgt, alpha, nbest_size, seed=(1234, 0))))
    thread.start()
    thread.join()
    assert again[0] == first
    other = encode_sampled(tok, src, tgt, alpha, nbest_size, seed=(1234, 1))
    assert other != first
    s_ids, t_ids = first
    pieces = ["".join(tok.src_pieces(ids)).replace("\u2581", " ").strip() for ids in s_ids]
    assert pieces == src
    assert [tok.decode_tgt(ids) for ids in t_ids] == tgt
    assert s_ids != tok.encode_src_batch(src) and t_ids != tok.encode_tgt_batch(tgt)


def test_sample_split_keeps_pairs_and_falls_back_beyond_the_longest_side(tmp_path, monkeypatch):
    # ids: a=10 b=11 c=12 | x=13 y=14 z=15 w=16. Each side is bounded by its own longest: the
    # source's "a b c" (3 tokens), the target's "z w x y" (4). A pair with a longer sampled side
    # keeps its best segmentation (pairs 0, 1 and 3: "b b" sampled is 4 > 3 source tokens); the
    # other takes the sampled one. The "sampling" doubles every word's id, seed ignored.
    src, tgt = ["a b c", "a", "", "b b"], ["x y", "z w x y", "x", ""]
    write_pairs(tmp_path / "s.arrow", zip(src, tgt, strict=True), WordTokenizer())
    hand_split = TokenizedSplit(tmp_path / "s.arrow")

    def doubled(tokenizer, src_texts, tgt_texts, alpha, nbest_size, seed):
        def double(texts):
            return [[i for i in ids for _ in range(2)] for ids in tokenizer.encode_src_batch(texts)]
        return double(src_texts), double(tgt_texts)

    monkeypatch.setattr(subword_sampling, "encode_sampled", doubled)
    split = sample_split(hand_split, WordTokenizer(), 0.5, -1, seed=(1, 0), cache=False)
    assert split.path is None and len(split) == 4
    assert [split.src_ids(i) for i in range(4)] == [[10, 11, 12], [10], [], [11, 11]]
    assert [split.tgt_ids(i) for i in range(4)] == [[13, 14], [15, 16, 13, 14], [13, 13], []]
    assert split.src_lens.tolist() == [4, 2, 1, 3] and split.tgt_lens.tolist() == [3, 5, 3, 1]
    assert split.src_texts() == hand_split.src_texts()
    b = collate(split, [3, 2])
    assert b.src.tolist() == [[11, 11, EOS_ID], [EOS_ID, PAD_ID, PAD_ID]]
    again = TokenizedSplit.from_bytes(split.ipc_bytes())
    assert again.tgt_ids(2) == [13, 13] and again.path is None


def test_sampled_epochs_of_a_real_tokenizer_are_cached_per_seed(tiny_cfg):
    data = prepare_data(tiny_cfg.data)
    tok, train_split = data.tokenizer, data.train
    first = sample_split(train_split, tok, 0.5, -1, seed=(1234, 0))
    assert first.path.parent == train_split.path.parent
    assert first.path.name.startswith(train_split.path.stem + ".sampled-")
    n = len(train_split)

    def ids(split):
        return [split.src_ids(i) + [-1] + split.tgt_ids(i) for i in range(n)]

    cached = sample_split(train_split, tok, 0.5, -1, seed=(1234, 0))          # read, not drawn
    redrawn = sample_split(train_split, tok, 0.5, -1, seed=(1234, 0), cache=False)
    other = sample_split(train_split, tok, 0.5, -1, seed=(1234, 1))
    assert cached.path == first.path and ids(cached) == ids(first) == ids(redrawn)
    assert redrawn.path is None and other.path != first.path
    assert sum(a != b for a, b in zip(ids(first), ids(other), strict=True)) > n // 2
    assert sum(first.src_ids(i) != train_split.src_ids(i) for i in range(n)) > n // 2
    assert [tok.decode_tgt(first.src_ids(i)) for i in range(n)] == train_split.src_texts()
    assert [tok.decode_tgt(first.tgt_ids(i)) for i in range(n)] == train_split.tgt_texts()
    assert max(first.src_lens.max(), first.tgt_lens.max()) <= max(train_split.src_lens.max(),
                                                                  train_split.tgt_lens.max())
    moved = TokenizedSplit.from_bytes(first.ipc_bytes())                 # what DDP ranks get
    assert moved.path is None and ids(moved) == ids(first)


def test_the_resampler_is_the_hook_of_the_setting_and_the_trainer_wants_it(tiny_overrides,
                                                                           tmp_path):
    """resampler(cfg) is None with sampling off; the trainer refuses a setting without its
    hook (or a hook without the setting) before it reads data or writes a file."""
    plain = compose_config(tiny_overrides)
    sampled = compose_config(tiny_overrides + ["data.tokenizer.sampling_alpha=0.5",
                                               "data.tokenizer.nbest_size=8"])
    assert resampler(plain) is None
    hook = resampler(sampled)
    assert (hook.alpha, hook.nbest_size, hook.seed) == (0.5, 8, sampled.train.seed)
    with pytest.raises(ConfigError, match="sampling_alpha=0.5 needs a resampler hook"):
        train(sampled)
    with pytest.raises(ConfigError, match="sampling_alpha=None takes no resampler hook"):
        train(plain, hooks=TrainingHooks(resampler=hook))
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_sampling_trains_with_static_shapes_per_side(tiny_overrides):
    """``train.shape_buckets`` bounds each side by its own longest shape; a sampled side
    longer than its side's longest keeps the best segmentation, so setup and every epoch fit."""
    import nmt

    summary = nmt.train(tiny_overrides + ["data.tokenizer.sampling_alpha=0.1",
                                          "train.shape_buckets=2", "train.shape_multiple=1",
                                          "train.max_epochs=2", "train.max_steps=null",
                                          "train.eval_every_steps=null"])
    assert summary["epochs_done"] == 2 and summary["steps"] > 0
