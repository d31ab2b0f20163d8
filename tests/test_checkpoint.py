"""Atomic checkpoint writes, step-file rotation, RNG round trip, incompatibility messages."""

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from omegaconf import OmegaConf

import nmt.checkpoint as ckpt_mod
from nmt.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_atomic,
    set_rng_state,
    upgrade_config,
)
from nmt.config import ConfigError, compose_config, to_plain
from nmt.inference.translator import load_for_inference


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


@pytest.mark.parametrize("tokenizer", [{"version": 99}, None,
                                       {"version": 1, "joint": True, "src_model": b"junk",
                                        "tgt_model": None, "settings": {}}])
def test_unusable_tokenizer_state_is_a_checkpoint_error_naming_the_file(tmp_path, tokenizer):

    path = tmp_path / "last.pt"
    save_atomic({"version": 1, "config": to_plain(compose_config([])),
                 "tokenizer": tokenizer, "model": {}}, path)
    with pytest.raises(CheckpointError, match="the saved tokenizer cannot be rebuilt") as err:
        load_for_inference(path)
    assert str(path) in str(err.value) and err.value.__suppress_context__


def test_random_bytes_are_not_a_checkpoint(tmp_path):
    path = tmp_path / "random.pt"
    path.write_bytes(random.Random(0).randbytes(4096))
    with pytest.raises(CheckpointError, match="random.pt: not a checkpoint"):
        load_checkpoint(path)


GOLDEN = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"


def test_checkpoint_with_code_is_never_unpickled(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"version": 1, "model": Evil()}, path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        load_checkpoint(path)
    assert not Path("pwned").exists()


def test_checkpoint_of_2026_11_22_loads_and_translates():
    from nmt.data.languages import directions
    from nmt.inference.translator import decode

    expected = json.loads(GOLDEN.with_suffix(".json").read_text(encoding="utf-8"))
    model, tok, cfg = load_for_inference(GOLDEN)
    assert cfg.model.d_model == 32 and cfg.train.resume == "auto"   # a key added since: defaulted
    assert cfg.train.consistency_alpha is None                       # 5.0 then, unused: null
    assert cfg.data.pairs is None and directions(cfg.data) == [("de", "en")]   # bilingual: no tags
    for name, beam in (("greedy", 1), ("beam3", 3)):
        search = {"beam_size": beam, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 10,
                  "batch_sentences": 10, "batch_tokens": 0, "n_best": 1}
        hyps = decode(model, tok.encode_src_batch(expected["source"]), search)
        assert [tok.decode_tgt(h[0].tokens) for h in hyps] == expected[name]
        assert [h[0].score for h in hyps] == pytest.approx(expected[f"{name}_scores"], abs=1e-3)


def test_upgrade_config_fills_new_keys_and_runs_migrations(monkeypatch):
    import nmt.checkpoint as config

    saved = OmegaConf.to_container(compose_config(["model=rnn"]))
    del saved["model"]["maxout"], saved["train"]["init_from"]       # "older" checkpoint
    for key in ("ema_decay", "keep_best", "consistency"):           # added later
        del saved["train"][key]
    del saved["data"]["tokenizer"]["sampling_alpha"], saved["data"]["tokenizer"]["nbest_size"]
    cfg = upgrade_config(saved)
    assert cfg.model.maxout is True and cfg.train.init_from is None
    assert (cfg.train.ema_decay, cfg.train.keep_best, cfg.train.consistency) == (None, 5, "none")
    assert (cfg.data.tokenizer.sampling_alpha, cfg.data.tokenizer.nbest_size) == (None, -1)
    # The Transformer's default is a moving average now; a config from before the key ran
    # without one, and says so after the upgrade (a config that sets it keeps its value).
    transformer = OmegaConf.to_container(compose_config(["model=transformer"]))
    assert transformer["train"]["ema_decay"] == 0.999
    assert upgrade_config(transformer).train.ema_decay == 0.999
    del transformer["train"]["ema_decay"]
    assert upgrade_config(transformer).train.ema_decay is None
    # 2 -> 3: a run without a regulariser stored consistency_alpha 5.0, now null; a method keeps
    # the weight it trained with.
    for method, stored, upgraded in (("none", 5.0, None), ("rdrop", 5.0, 5.0)):
        old = {**saved, "train": {**saved["train"], "consistency": method,
                                  "consistency_alpha": stored}}
        assert upgrade_config(old, version=2).train.consistency_alpha == upgraded
    # A renamed key: version 1 -> 2 moves train.lr to train.peak_lr (simulated).
    monkeypatch.setattr(config, "CONFIG_VERSION", 2)
    monkeypatch.setitem(config.MIGRATIONS, 1, lambda t: {**t, "train": {
        **{k: v for k, v in t["train"].items() if k != "lr"}, "peak_lr": t["train"]["lr"]}})

    def defaults_v2(name):
        tree = OmegaConf.to_container(compose_config([f"model={name}"], validate_fn=None))
        tree["train"]["peak_lr"] = tree["train"].pop("lr")
        cfg = OmegaConf.create(tree)
        OmegaConf.set_struct(cfg, True)
        return cfg

    monkeypatch.setattr(config, "_defaults_for", defaults_v2)
    with pytest.raises(ConfigError, match="train.lr, which this nmt does not know"):
        upgrade_config({**saved, "train": {**saved["train"], "lr": 0.5}}, version=2)
    assert upgrade_config({**saved, "train": {**saved["train"], "lr": 0.5}}, 1).train.peak_lr == 0.5
    with pytest.raises(ConfigError, match="version 3, newer"):
        upgrade_config(saved, version=3)
