"""Guided alignment end to end: nmt-train with train.alignment_loss_weight aligns the corpus
with eflomal once and trains; nmt-align then reads the supervised head; a run SIGKILLed from
outside resumes to the uninterrupted weights with the loss on."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys

import pytest
import torch
from conftest import REPO_ROOT, TINY_MODEL, TINY_TRAIN
from paused_train import kill_when_paused, popen

from nmt.checkpoint import load_checkpoint
from nmt.cli.align import main as align_main
from nmt.cli.train import main
from nmt.config import compose_config
from nmt.training.trainer import train

pytestmark = pytest.mark.slow

GUIDED = ["train.alignment_loss_weight=0.05", "model.alignment_heads=1"]


def _links_of(run) -> str:
    """The links file a run tokenized with (its log's line)."""
    line = next(x for x in (run / "train.log").read_text().splitlines() if "word links of" in x)
    return line.split("word links of ", 1)[1].split(";")[0]


def test_nmt_train_and_nmt_train_api_align_with_eflomal_then_train_a_guided_head(
        overrides, tmp_path, capsys):
    pytest.importorskip("eflomal")
    import nmt

    run, api_run = tmp_path / "run", tmp_path / "api"
    args = overrides[:-1] + TINY_MODEL + TINY_TRAIN + GUIDED + [
        "train.max_steps=4", "train.eval_every_steps=4"]
    nmt.train(args + [f"run_dir={api_run}"])      # the Python API: the teacher runs first
    log = (api_run / "train.log").read_text()
    assert "eflomal aligns 200 pairs de-en" in log and "word links (grow-diag-final-and)" in log
    links = _links_of(api_run)
    assert "/alignments/" in links and len(open(links).read().splitlines()) == 200
    assert " | alignment_loss " in log
    saved = load_checkpoint(api_run / "checkpoints" / "last.pt")
    assert saved["config"]["data"]["alignments"] is None     # the teacher's: recorded apart
    record = {"path": links, "sha256": hashlib.sha256(open(links, "rb").read()).hexdigest()}
    assert saved["trainer"]["links"] == record
    assert json.loads((api_run / "summary.json").read_text())["links"] == record
    assert main(args + [f"run_dir={run}"]) == 0   # the CLI, the same config: the same links
    assert f"alignments: cache hit {links}" in (run / "train.log").read_text()
    assert main(args + [f"run_dir={run}"]) == 0   # the same command: finished
    capsys.readouterr()
    corpus = overrides[0].split("=", 1)[1]
    assert align_main([f"checkpoint={run / 'checkpoints' / 'last.pt'}",
                       f"src_file={corpus}/test.de", f"tgt_file={corpus}/test.en",
                       f"out={tmp_path / 'links.txt'}", "threshold=0.3"]) == 0
    assert len((tmp_path / "links.txt").read_text().splitlines()) == 20


def test_sigkill_then_resume_equals_uninterrupted_run_with_the_alignment_loss(overrides, tmp_path):
    # Word i <-> word i links stand in for eflomal's (no extra needed); as in
    # test_train_cli.py: 7 batches an epoch, killed from outside after step 6, resumed from 4.
    corpus = overrides[0].split("=", 1)[1]
    pairs = zip(*(open(f"{corpus}/train.{lang}").read().splitlines() for lang in ("de", "en")),
                strict=True)
    links = tmp_path / "links.txt"
    links.write_text("".join(
        " ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split())))) + "\n"
        for s, t in pairs))
    base = overrides[:-1] + TINY_MODEL + TINY_TRAIN + GUIDED + [
        f"data.alignments={links}", "train.batch_tokens=1024", "train.max_steps=12",
        "train.eval_every_steps=4", "train.keep_last=1", "device=cpu"]
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    train(compose_config(base + [f"run_dir={full_dir}"]))
    proc = popen([sys.executable, str(REPO_ROOT / "tests" / "e2e" / "paused_train.py"), *base,
                  f"run_dir={killed_dir}"], 6, tmp_path / "pause",
                 {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"})
    assert kill_when_paused(proc, tmp_path / "pause") == -signal.SIGKILL
    assert load_checkpoint(killed_dir / "checkpoints" / "last.pt")["step"] == 4
    assert main(base + [f"run_dir={killed_dir}"]) == 0
    full = load_checkpoint(full_dir / "checkpoints" / "last.pt")
    resumed = load_checkpoint(killed_dir / "checkpoints" / "last.pt")
    for name in full["model"]:
        torch.testing.assert_close(resumed["model"][name], full["model"][name], atol=1e-6, rtol=0)
    aligns = [[float(line.rsplit("| alignment_loss ", 1)[1].split()[0])
               for line in (d / "train.log").read_text().splitlines()
               if "| alignment_loss " in line]
              for d in (full_dir, killed_dir)]
    assert aligns[0] and aligns[1][-3:] == pytest.approx(aligns[0][-3:], rel=1e-5)
    assert json.loads((killed_dir / "summary.json").read_text())["steps"] == 12
