"""nmt-train end to end: a CLI run in a subprocess writes every artefact, a SIGKILLed run
resumes to the uninterrupted weights, Hydra's own options, user errors (status 2, one
paragraph naming the key, no traceback) on one process and under torchrun, and
scripts/sweep_table.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO_ROOT,
    TINY_MODEL,
    TINY_TRAIN,
    free_port,
    train,
    write_multilingual_corpus,
)
from omegaconf import OmegaConf
from paused_train import kill_when_paused, popen

from nmt.checkpoint import load_checkpoint
from nmt.cli.train import main
from nmt.config import compose_config
from nmt.inference.translator import load_for_inference

pytestmark = pytest.mark.slow



def _run_cli(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "CI": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "nmt.cli.train", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_end_to_end_cli_writes_every_artefact(overrides, tmp_path):
    run = tmp_path / "run"
    args = overrides + TINY_MODEL + TINY_TRAIN + [
        "train.max_steps=8", "train.eval_every_steps=3", "train.keep_last=2", "train.keep_best=0"]
    proc = _run_cli(args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr

    # Resolved config, tokenizer, checkpoints (step files rotated to keep_last=2, none kept
    # for their BLEU).
    cfg = OmegaConf.load(run / "config.yaml")
    assert cfg.train.max_steps == 8 and cfg.model.d_model == 16 and cfg.run_dir == str(run)
    assert (run / "tokenizer" / "tokenizer.json").is_file()
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["best.pt", "last.pt", "step_6.pt",
                                                        "step_8.pt"]
    last = load_checkpoint(ckpts / "last.pt")
    assert (last["step"], last["scaler"]) == (8, None)
    for key in ("model", "optimizer", "scheduler", "rng", "config", "tokenizer", "trainer",
                "epoch", "batch_in_epoch", "valid_bleu"):
        assert key in last
    assert "train_model" not in last                     # no weight average: one set of weights
    assert last["valid_bleu"] == last["trainer"]["history"][-1]["bleu"]
    assert set(last["rng"][0]) >= {"python", "numpy", "torch"}
    model, tokenizer, _ = load_for_inference(ckpts / "best.pt")
    assert model.num_parameters() > 0 and tokenizer.tgt_vocab_size == 120

    # Plain-text log: one summary line per validation (steps 3, 6, 8) and the final summary.
    log = (run / "train.log").read_text()
    valid_lines = [ln for ln in log.splitlines() if "valid | step" in ln]
    assert len(valid_lines) == 3 and all("bleu" in ln and "tokens/s" in ln for ln in valid_lines)
    assert "params" in log and "peak RSS" in log
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["train_tokens_per_s"] > 0
    assert summary["peak_rss_mb"] > 0 and summary["params"] == model.num_parameters()

    # TensorBoard: train and valid scalars, the alignment image and the attention grids.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "valid/loss",
            "valid/ppl", "valid/bleu"} <= set(tags["scalars"])
    assert sorted(tags["images"]) == ["valid/alignment", "valid/attention"]
    assert [e.step for e in events.Scalars("valid/bleu")] == [3, 6, 8]
    assert [e.step for e in events.Images("valid/attention")] == [3, 6, 8]


@pytest.mark.parametrize("extra", [
    [], ["train.ema_decay=0.9", "data.tokenizer.sampling_alpha=0.5", "train.consistency=simcut"],
    ["data.pairs=[de-en,en-fr]", "data.lang_tag=target", "data.sampling_temperature=2"]],
    ids=["plain", "ema_sampling_simcut", "multilingual"])
def test_sigkill_between_checkpoints_then_resume_equals_uninterrupted_run(overrides, tmp_path,
                                                                          extra):
    # 200 pairs at 1024 tokens make 7 batches per epoch (8 with sampled segmentations): the resumed
    # part crosses epochs. SIGKILLed from outside after step 6 (paused there), two steps past the
    # checkpoint of step 4: the resumed run redoes steps 5 and 6 from it. With a weight average and
    # subword sampling, the average and the second epoch's segmentation are exact too, and so are
    # SimCut's token cutoff and dropout masks (R-Drop's resume: test_torchrun.py). Two directions,
    # en-fr a third the size of de-en (blank French lines): each epoch redraws the oversampled en-fr
    # rows (temperature 2).
    if any(o.startswith("data.pairs=") for o in extra):
        corpus = next(o.split("=", 1)[1] for o in overrides if o.startswith("data.root="))
        write_multilingual_corpus(Path(corpus), fr_every=3)
    base = overrides[:-1] + TINY_MODEL + TINY_TRAIN + [
        "train.batch_tokens=1024", "train.max_steps=12", "train.eval_every_steps=4",
        "train.keep_last=1", "device=cpu", *extra]
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"

    train(compose_config(base + [f"run_dir={full_dir}"]))

    proc = popen([sys.executable, str(REPO_ROOT / "tests" / "e2e" / "paused_train.py"), *base,
                  f"run_dir={killed_dir}"], 6, tmp_path / "pause",
                 {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"})
    assert kill_when_paused(proc, tmp_path / "pause") == -signal.SIGKILL
    assert "train | step 6 " in (killed_dir / "train.log").read_text()   # it got past step 4
    killed = load_checkpoint(killed_dir / "checkpoints" / "last.pt")
    assert (killed["step"], killed["epoch"]) == (4, 0)

    assert main(base + [f"run_dir={killed_dir}"]) == 0          # the same command resumes
    full = load_checkpoint(full_dir / "checkpoints" / "last.pt")
    resumed = load_checkpoint(killed_dir / "checkpoints" / "last.pt")
    weights = ["model", "train_model"] if "train.ema_decay=0.9" in extra else ["model"]
    assert [k for k in ("model", "train_model") if k in full] == weights
    for key in weights:
        assert full[key].keys() == resumed[key].keys()
        for name in full[key]:
            torch.testing.assert_close(resumed[key][name], full[key][name], atol=1e-6, rtol=0,
                                       msg=f"{key}: {name}")
    assert resumed["epoch"] == 1
    assert [h["loss"] for h in resumed["trainer"]["history"]] == \
        pytest.approx([h["loss"] for h in full["trainer"]["history"]], rel=1e-6)


@pytest.mark.parametrize(("override", "words"), [
    ("model=lstm", ["model"]),
    ("model.d_model=30", ["model.d_model=30", "model.heads=4"]),
    ("model.decoder_layers=0", ["model.decoder_layers=0"]),
    ("train.max_steps=abc", ["train.max_steps"]),
    ("data.root=/nonexistent/multi30k", ["/nonexistent/multi30k"]),
    ("run_dir={tmp}/a_file/run", ["run_dir"]),
    ("train.batch_tokens=4", ["train.batch_tokens"]),
])
def test_bad_input_stops_with_one_paragraph_and_status_2(overrides, tmp_path, capsys,
                                                         override, words):
    (tmp_path / "a_file").write_text("not a directory")
    model = [o for o in TINY_MODEL if not o.startswith("model.heads")] + ["model.heads=4"]
    status = main(overrides + model + [override.format(tmp=tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert "nmt-train: error:" in err and "Traceback" not in err
    err = err[err.index("nmt-train: error:"):]              # the paragraph after any log lines
    for word in words:
        assert word in err
    assert not (tmp_path / "run" / "checkpoints").exists()   # nothing trained


def test_cfg_info_and_help_behave_as_hydra_documents(capsys):
    assert main(["--cfg", "job", "model=rnn", "train.lr=0.005"]) == 0
    job = OmegaConf.create(capsys.readouterr().out)
    assert job.model.name == "rnn" and job.train.lr == 0.005 and "hydra" not in job
    assert main(["--cfg", "hydra"]) == 0
    assert "run:" in capsys.readouterr().out
    assert main(["--info", "defaults"]) == 0
    assert "nmt_train" in capsys.readouterr().out
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "model: rnn, transformer" in out and "multi30k_fr_en" in out
    assert "train.resume=force" in out


@pytest.mark.parametrize(("args", "key"), [
    (["train.nokey=1"], "train.nokey"), (["+train.nokey=1"], "train.nokey"),
    (["+nokey=1"], "nokey"), (["train.betas=[0.9,1.5]"], "train.betas"),
    (["train.eps=0"], "train.eps"), (["train.plateau_factor=1.5"], "train.plateau_factor"),
    (["train.resume=maybe"], "train.resume"),
])
def test_user_errors_are_one_paragraph_and_status_2(args, key, capsys, tmp_path):
    assert main([*args, f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-train: error:") and key in err and "Traceback" not in err


def test_compose_config_keeps_the_callers_hydra_context():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_module(config_module="nmt.configs", version_base="1.3"):
        assert compose_config(["model=rnn"]).model.name == "rnn"
        assert GlobalHydra.instance().is_initialized()
        assert compose(config_name="config", overrides=["model=rnn"]).model.name == "rnn"


def test_user_error_on_rank_0_ends_every_rank(tiny_overrides, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1", "GLOO_SOCKET_IFNAME": "lo"}
    # Rank 0 finds the corpus missing while preparing data; rank 1 waits for it.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "nmt.cli.train",
           *[o for o in tiny_overrides if not o.startswith("data.root")], *TINY_MODEL, *TINY_TRAIN,
           f"data.root={tmp_path / 'missing'}", "train.max_steps=1", f"run_dir={tmp_path / 'ddp'}"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    assert proc.stderr.count("nmt-train: error:") == 1 and "missing" in proc.stderr


def test_sweep_table_script_prints_one_row_per_job(tmp_path):
    """scripts/sweep_table.py on a sweep directory: a finished job and one without summary."""
    for name, summary in (("train.lr=0.001", {"steps": 4, "best_bleu": 1.5, "best_step": 4,
                                              "train_tokens_per_s": 900.0, "train_time_s": 60.0,
                                              "stop_reason": "max_steps=4 reached"}),
                          ("train.lr=0.002", None)):
        job = tmp_path / name
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- {name}\n- model=rnn\n")
        if summary:
            (job / "summary.json").write_text(json.dumps(summary))
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "sweep_table.py"),
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "every job: model=rnn" in proc.stdout
    assert "| train.lr=0.001 | train.lr=0.001 | 4 | 1.50 | 4 | 900 | 1.0 |" in proc.stdout
    assert "| not finished |" in proc.stdout
    empty = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "sweep_table.py"),
                            str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "Traceback" not in empty.stderr
