"""Atomic checkpoint writes, step-file rotation, RNG round trip, incompatibility messages."""

import random

import numpy as np
import pytest
import torch

import nmt.checkpoint as ckpt_mod
from nmt.config import compose_config
from nmt.inference.loader import load_for_inference
from nmt.checkpoint import (
    CheckpointError,
    CheckpointManager,
    batch_order_changes,
    check_compatible,
    load_checkpoint,
    rng_state,
    save_atomic,
    set_rng_state,
)


def _ckpt(step: int, **extra) -> dict:
    return {"version": 1, "step": step, "model": {"w": torch.full((3,), float(step))}, **extra}


def test_crash_during_save_leaves_previous_last_loadable(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "last.pt"
    save_atomic(_ckpt(1), path)
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")       # bytes hit the temporary file, then the "crash"
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(ckpt_mod.torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        save_atomic(_ckpt(2), path)
    monkeypatch.setattr(ckpt_mod.torch, "save", real_save)
    assert load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]   # no temp file left


def test_torn_file_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "last.pt"
    bad.write_bytes(b"\x80garbage")
    with pytest.raises(CheckpointError, match="last.pt"):
        load_checkpoint(bad)


def test_manager_keeps_last_k_and_links_last_and_best(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in range(1, 6):
        manager.save(_ckpt(step), step, is_best=step == 3)
    assert [p.name for p in manager.step_files()] == ["step_4.pt", "step_5.pt"]
    assert load_checkpoint(manager.last)["step"] == 5
    assert load_checkpoint(manager.best)["step"] == 3     # survives deletion of step_3.pt
    none_kept = CheckpointManager(tmp_path / "k0", keep_last=0)
    none_kept.save(_ckpt(7), 7, is_best=True)
    assert sorted(p.name for p in (tmp_path / "k0").iterdir()) == ["best.pt", "last.pt"]


def test_kept_steps_space_the_newest_and_add_the_best():
    manager = CheckpointManager("unused", keep_last=3, keep_best=2, min_gap=50)
    steps = [100, 200, 266, 300, 400, 532, 600, 604]
    # Newest first: 604, (600 is 4 before it), 532, 400 -> the 3 "last"; none of them is
    # among the best two (200 and 300 tie at 9.0 with 532: the earlier steps win).
    scores = {100: 1.0, 200: 9.0, 266: 3.0, 300: 9.0, 400: 2.0, 532: 9.0, 600: 8.0}
    assert manager.kept_steps(steps, scores) == {604, 532, 400, 200, 300}
    assert manager.kept_steps(steps) == {604, 532, 400}                 # no scores: last only
    manager.keep_last, manager.min_gap = 2, 1
    assert manager.kept_steps(steps, scores) == {604, 600, 200, 300}


def test_manager_keeps_the_best_step_files_with_keep_last_0(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0, keep_best=1)
    scores = {}
    for step, bleu in ((1, 5.0), (2, 7.0), (3, 6.0)):
        scores[step] = bleu
        manager.save(_ckpt(step, valid_bleu=bleu), step, is_best=step == 2, scores=scores)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt", "step_2.pt"]
    assert load_checkpoint(manager.last)["step"] == 3          # last.pt outlives its step file


def test_rng_state_round_trip():
    state = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(2))
    set_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])


def test_incompatible_config_or_vocabulary_is_named():
    from omegaconf import OmegaConf

    cfg = compose_config(["model.d_model=64", "model.heads=2"])
    saved = {"version": 1, "config": OmegaConf.to_container(cfg), "model": {"emb": torch.zeros(10, 4)}}
    check_compatible("last.pt", saved, cfg)                       # same config: fine
    other = compose_config(["model.d_model=128", "model.heads=2"])
    with pytest.raises(CheckpointError, match=r"model\.d_model: checkpoint has 64, now 128"):
        check_compatible("last.pt", saved, other)

    class Tiny(torch.nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.emb = torch.nn.Parameter(torch.zeros(vocab, 4))

    check_compatible("last.pt", saved, cfg, Tiny(10))
    with pytest.raises(CheckpointError, match=r"weight emb: checkpoint has shape \(10, 4\), now \(12, 4\)"):
        check_compatible("last.pt", saved, cfg, Tiny(12))


def test_dropout_and_subword_sampling_changes_are_allowed_on_resume():
    from omegaconf import OmegaConf

    cfg = compose_config([])
    saved = {"version": 1, "config": OmegaConf.to_container(cfg)}
    check_compatible("last.pt", saved, compose_config(["model.dropout=0.3"]))
    sampling = compose_config(["data.tokenizer.sampling_alpha=0.2", "data.tokenizer.nbest_size=8"])
    check_compatible("last.pt", saved, sampling)               # regularisation, not vocabulary
    assert [c.split(":")[0] for c in batch_order_changes(saved, sampling)] == [
        "data.tokenizer.sampling_alpha", "data.tokenizer.nbest_size"]


@pytest.mark.parametrize("tokenizer", [{"version": 99}, None,
                                       {"version": 1, "joint": True, "src_model": b"junk",
                                        "tgt_model": None, "settings": {}}])
def test_unusable_tokenizer_state_is_a_checkpoint_error_naming_the_file(tmp_path, tokenizer):
    from omegaconf import OmegaConf

    path = tmp_path / "last.pt"
    save_atomic({"version": 1, "config": OmegaConf.to_container(compose_config([])),
                 "tokenizer": tokenizer, "model": {}}, path)
    with pytest.raises(CheckpointError, match="the saved tokenizer cannot be rebuilt") as err:
        load_for_inference(path)
    assert str(path) in str(err.value) and err.value.__suppress_context__


def test_batch_order_changes_are_named():
    from omegaconf import OmegaConf

    saved = {"config": OmegaConf.to_container(compose_config([]))}
    assert batch_order_changes(saved, compose_config(["model.dropout=0.3"])) == []
    changed = batch_order_changes(saved, compose_config(["train.seed=7", "train.accum_steps=2"]))
    assert [c.split(":")[0] for c in changed] == ["train.seed", "train.accum_steps"]
    assert changed[0].endswith("now 7")
