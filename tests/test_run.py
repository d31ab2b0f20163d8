"""nmt.training.run: the config comparisons (resume compatibility, batch order, fine-tuning),
sweep job names and tables, and the run-directory rules through nmt-train (in process):
resume, refuse, finished, force, fine-tune, a given tokenizer."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, write_corpus
from omegaconf import OmegaConf

from nmt.checkpoint import CheckpointError, load_checkpoint, save_atomic
from nmt.cli.sweep import job_dirname, sweep_table
from nmt.cli.train import main
from nmt.config import ConfigError, compose_config, to_plain
from nmt.training.run import (
    BATCH_ORDER_KEYS,
    check_compatible,
    config_changes,
    load_init_from,
)

TINY = [*TINY_MODEL, "train.batch_tokens=256", "train.log_every_steps=2",
        "train.warmup_steps=4", "train.lr=0.01", "search.max_len_b=5", "search.max_len_a=1.0",
        "device=cpu", "train.precision=fp32", "train.ema_decay=null",
        "train.early_stopping_patience=null"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def base(tiny_corpus, cache) -> list[str]:
    return [f"data.root={tiny_corpus}", f"data.cache_dir={cache}", "data.test_split=test",
            "data.tokenizer.vocab_size=120", *TINY]


def _files(run: Path) -> dict[str, tuple[float, str]]:
    """Every file under ``run`` with its mtime and sha256."""
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns,
                                      hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run.rglob("*")) if p.is_file()}


def _saved(*overrides: str) -> dict:
    return {"version": 1, "config": to_plain(compose_config(list(overrides)))}


# ------------------------------------------------------------------ config comparisons
def test_incompatible_config_or_vocabulary_is_named():
    cfg = compose_config(["model.d_model=64", "model.heads=2"])
    saved = {**_saved("model.d_model=64", "model.heads=2"), "model": {"emb": torch.zeros(10, 4)}}
    check_compatible("last.pt", saved, cfg)                       # same config: fine
    with pytest.raises(CheckpointError, match=r"model\.d_model"):
        check_compatible("last.pt", saved, compose_config(["model.d_model=128", "model.heads=2"]))

    class Tiny(torch.nn.Module):
        def __init__(self, vocab):
            super().__init__()
            self.emb = torch.nn.Parameter(torch.zeros(vocab, 4))

    check_compatible("last.pt", saved, cfg, Tiny(10))
    with pytest.raises(CheckpointError, match=r"weight\.emb.*\(10, 4\).*\(12, 4\)"):
        check_compatible("last.pt", saved, cfg, Tiny(12))


def test_dropout_and_subword_sampling_changes_are_allowed_on_resume():
    saved = _saved()
    check_compatible("last.pt", saved, compose_config(["model.dropout=0.3"]))
    sampling = compose_config(["data.tokenizer.sampling_alpha=0.2", "data.tokenizer.nbest_size=8"])
    check_compatible("last.pt", saved, sampling)               # regularisation, not vocabulary
    assert [c.split(":")[0] for c in config_changes(saved, sampling, BATCH_ORDER_KEYS)] == [
        "data.tokenizer.sampling_alpha", "data.tokenizer.nbest_size"]


def test_batch_order_changes_are_named():
    saved = _saved()
    assert config_changes(saved, compose_config(["model.dropout=0.3"]), BATCH_ORDER_KEYS) == []
    changed = config_changes(saved, compose_config(["train.seed=7", "train.accum_steps=2"]),
                             BATCH_ORDER_KEYS)
    assert [c.split(":")[0] for c in changed] == ["train.seed", "train.accum_steps"]
    assert changed[0].endswith("now 7")


def test_config_changes_leave_out_where_and_how_a_run_runs():
    saved = _saved("run_dir=a", "device=cpu")
    assert config_changes(saved, compose_config(["run_dir=b", "device=auto", "train.resume=force",
                                                 "data.cache_dir=elsewhere"])) == []
    assert [c.split(":")[0] for c in config_changes(saved, compose_config(["train.lr=0.5"]))] == \
        ["train.lr"]


def test_fine_tuning_keeps_the_architecture_but_not_the_dropout(tmp_path):
    path = tmp_path / "start.pt"
    save_atomic({**_saved("model=rnn"), "model": {}}, path)
    load_init_from(compose_config(["model=rnn", "model.dropout=0.5", f"train.init_from={path}"]))
    with pytest.raises(CheckpointError, match="model.emb_dim"):
        load_init_from(compose_config(["model=rnn", "model.emb_dim=8", f"train.init_from={path}"]))


# ------------------------------------------------------------------ sweeps
def test_job_dirname_keeps_the_swept_keys(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["nmt-train", "-m", "train.lr=1e-3,2e-3", "model=rnn",
                                      "device=cpu"])
    assert job_dirname(["train.lr=1e-3", "model=rnn", "device=cpu", "train.seed=3"]) == \
        "train.lr=1e-3,train.seed=3"                   # a sweeper's own key (seed) stays
    assert job_dirname(["model=rnn"]) == "default"
    assert job_dirname(["data.root=a/b", "train.warmup_steps=4"]) == "train.warmup_steps=4"
    long = job_dirname([f"train.lr={'1' * 200}"])
    assert len(long) == 130 and long[:120] == f"train.lr={'1' * 200}"[:120]


def test_sweep_table(tmp_path):
    with pytest.raises(ConfigError):
        sweep_table(tmp_path / "none")
    with pytest.raises(ConfigError):
        sweep_table(tmp_path)
    for name, lr in (("b", "0.002"), ("a", "0.001")):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text(
            f"- train.lr={lr}\n- model=rnn\n")
    (tmp_path / "a" / "summary.json").write_text(json.dumps(
        {"steps": 3, "best_bleu": 2.0, "best_step": 3, "train_tokens_per_s": 10.0,
         "train_time_s": 30.0, "stop_reason": "done"}))
    table = sweep_table(tmp_path).splitlines()
    assert table[0] == "every job: model=rnn"
    assert table[3] == "| a | train.lr=0.001 | 3 | 2.00 | 3 | 10 | 0.5 | done |"
    assert table[4] == "| b | train.lr=0.002 | n/a | n/a | n/a | n/a | n/a | not finished |"


# ------------------------------------------------------------------ run directories
def test_multirun_sweep_gives_one_directory_per_job_and_a_table(base, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    status = main(["-m", *base, "train.max_steps=2", "train.eval_every_steps=2",
                   "train.lr=0.001,0.002", "train.warmup_steps=2,4", f"hydra.sweep.dir={sweep}"])
    assert status == 0
    out = capsys.readouterr().out
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["train.lr=0.001,train.warmup_steps=2", "train.lr=0.001,train.warmup_steps=4",
                    "train.lr=0.002,train.warmup_steps=2", "train.lr=0.002,train.warmup_steps=4"]
    for name in jobs:
        job = sweep / name
        cfg = OmegaConf.load(job / "config.yaml")
        lr, warmup = (kv.split("=")[1] for kv in name.split(","))
        assert cfg.run_dir == str(job)
        assert (cfg.train.lr, cfg.train.warmup_steps) == (float(lr), int(warmup))
        overrides = list(OmegaConf.load(job / ".hydra" / "overrides.yaml"))
        assert f"train.lr={lr}" in overrides and f"train.warmup_steps={warmup}" in overrides
        assert json.loads((job / "summary.json").read_text())["steps"] == 2
    # The table at the end of the sweep: one row per job, varying overrides in the rows.
    table = out[out.index("| job |"):].splitlines()
    assert len([row for row in table if row.startswith("| train.lr=")]) == 4
    assert "| train.lr=0.002 train.warmup_steps=4 | 2 |" in out
    assert "| train.lr=0.001 train.warmup_steps=2 | 2 |" in sweep_table(sweep)


def test_changed_setting_is_refused_before_anything_is_written(base, tmp_path, capsys):
    run = tmp_path / "run"
    args = [*base, "train.max_steps=2", f"run_dir={run}"]
    assert main(args) == 0
    before = _files(run)
    assert main([*args, "train.lr=0.02", "model.dropout=0.3"]) == 2
    err = capsys.readouterr().err
    assert "train.lr" in err and "model.dropout" in err and "Traceback" not in err
    assert _files(run) == before


def test_finished_run_rerun_changes_no_file(base, tmp_path, capsys):
    for stop in (["train.max_steps=3"], ["train.max_minutes=1e-6"]):
        run = tmp_path / stop[0].split("=")[0]
        args = [*base, *stop, f"run_dir={run}"]
        assert main(args) == 0
        before = _files(run)
        assert main(args) == 0                            # finished: nothing to do
        assert _files(run) == before
        assert "nothing to do" in capsys.readouterr().err
    # train.resume=force with a new stop setting trains on; the summary spans both segments.
    run = tmp_path / "train.max_steps"
    assert main([*base, "train.max_steps=5", "train.resume=force", f"run_dir={run}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5 and len(summary["segments"]) == 2
    assert [s["end_step"] for s in summary["segments"]] == [3, 5]
    assert summary["segments"][1]["command"].endswith("train.resume=force run_dir=" + str(run))
    assert summary["train_tokens"] > 0 and summary["train_time_s"] > 0
    assert summary["machine"]["cores"] == os.cpu_count() and summary["date"][:4].isdigit()


def test_incompatible_checkpoint_is_refused(base, tmp_path, capsys):
    run = tmp_path / "run"
    args = [*base, "train.max_steps=1", f"run_dir={run}"]
    assert main(args) == 0
    # Any changed setting is refused before anything is written, naming the key ...
    assert main(args + ["model.ff_dim=64"]) == 2
    err = capsys.readouterr().err
    assert "model.ff_dim" in err and "train.resume=force" in err and "Traceback" not in err
    # ... and with train.resume=force a model or vocabulary change is still impossible.
    force = ["train.resume=force"]
    assert main(args + ["model.ff_dim=64"] + force) == 2
    assert "model.ff_dim" in capsys.readouterr().err
    assert main(args + ["data.tokenizer.vocab_size=100"] + force) == 2
    assert "data.tokenizer.vocab_size" in capsys.readouterr().err

    # Other training data -> another tokenizer: refused, and run_dir/tokenizer is untouched.
    tok_dir = run / "tokenizer"
    before = {p.name: p.read_bytes() for p in tok_dir.iterdir()}
    assert main(args + ["data.max_train_pairs=120"] + force) == 2
    assert "last.pt" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tok_dir.iterdir()} == before

    # A changed batch order is allowed with force but named in a warning.
    assert main(args[:-2] + ["train.max_steps=2", "train.seed=7", "train.batch_tokens=300",
                             f"run_dir={run}"] + force) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "WARNING" in err and "train.seed: checkpoint has 1234, now 7" in err
    assert "train.batch_tokens: checkpoint has 256, now 300" in err
    assert "train.accum_steps" not in err


def test_fine_tune_from_a_checkpoint_on_a_second_corpus(base, tmp_path, capsys):
    first = tmp_path / "first"
    assert main([*base, "train.max_steps=3", f"run_dir={first}"]) == 0
    second_corpus = write_corpus(tmp_path / "second", {"train": 60, "val": 8, "test": 8})
    for name in ("train", "val"):                    # other sentences than the first corpus
        text = (second_corpus / f"{name}.de").read_text(encoding="utf-8").replace("Hund", "Pferd")
        (second_corpus / f"{name}.de").write_text(text, encoding="utf-8")
    tuned = tmp_path / "tuned"
    args = [a for a in base if not a.startswith("data.root=")] + [
        f"data.root={second_corpus}", f"train.init_from={first / 'checkpoints' / 'last.pt'}",
        "train.max_steps=2", f"run_dir={tuned}"]
    assert main(args) == 0
    start, done = load_checkpoint(first / "checkpoints" / "last.pt"), \
        load_checkpoint(tuned / "checkpoints" / "last.pt")
    assert done["step"] == 2                          # fresh step count and schedule
    assert done["tokenizer"] == start["tokenizer"]    # the checkpoint's tokenizer, not a new one
    assert any(not torch.equal(done["model"][k], start["model"][k]) for k in start["model"])
    assert "fine-tuning: weights and tokenizer from" in (tuned / "train.log").read_text()
    # Another architecture cannot start from those weights.
    assert main([*args[:-1], "model.ff_dim=64", f"run_dir={tmp_path / 'bad'}"]) == 2
    err = capsys.readouterr().err
    assert "train.init_from" in err and "model.ff_dim" in err


def test_tokenizer_model_reuses_a_trained_tokenizer(base, tmp_path, capsys):
    first = tmp_path / "first"
    assert main([*base, "train.max_steps=1", f"run_dir={first}"]) == 0
    first_tok = load_checkpoint(first / "checkpoints" / "last.pt")["tokenizer"]
    for given in (first / "tokenizer", first / "tokenizer" / "spm.model"):
        run = tmp_path / f"reuse_{given.name}"
        assert main([*base, "train.max_steps=1", f"data.tokenizer.model={given}",
                     f"run_dir={run}"]) == 0
        tok = load_checkpoint(run / "checkpoints" / "last.pt")["tokenizer"]
        assert tok["src_model"] == first_tok["src_model"]
    assert main([*base, "train.max_steps=1", f"data.tokenizer.model={tmp_path / 'none.model'}",
                 f"run_dir={tmp_path / 'x'}"]) == 2
    assert "data.tokenizer.model=" in capsys.readouterr().err
