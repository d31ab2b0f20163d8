"""Checkpoint averaging (Vaswani et al. 2017, 6.1): exact means, file selection, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import tiny_transformer

from nmt.checkpoint import CheckpointError, load_checkpoint, save_atomic
from nmt.cli import average as cli_average
from nmt.cli.average import average_checkpoints
from nmt.config import to_plain
from nmt.inference.translator import load_for_inference


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory with step_1/2/3.pt of one tiny Transformer whose float weights are
    the constants 1, 2 and 6 (integer buffers, if any, untouched) and whose validation BLEU
    is 20, 30 and 20."""
    root = tmp_path_factory.mktemp("avg")
    cfg, tok, model = tiny_transformer(root, n_test=6)
    for step, value, bleu in ((1, 1.0, 20.0), (2, 2.0, 30.0), (3, 6.0, 20.0)):
        weights = {k: torch.full_like(v, value) if v.is_floating_point() else v.clone()
                   for k, v in model.state_dict().items()}
        save_atomic({"version": 1, "model": weights,
                     "config": to_plain(cfg),
                     "tokenizer": tok.state_dict(), "step": step, "epoch": step - 1,
                     "batch_in_epoch": 0, "optimizer": {"dummy": step}, "valid_bleu": bleu},
                    root / "run" / "checkpoints" / f"step_{step}.pt")
    return root / "run"


def test_average_is_the_exact_mean_and_keeps_the_newest_metadata(run_dir):
    ckpts = run_dir / "checkpoints"
    avg = average_checkpoints([ckpts / "step_1.pt", ckpts / "step_3.pt", ckpts / "step_2.pt"])
    for name, t in avg["model"].items():
        if t.is_floating_point():
            assert t.dtype == torch.float32
            assert torch.equal(t, torch.full_like(t, 3.0)), name   # (1 + 6 + 2) / 3
    assert avg["step"] == 3 and avg["epoch"] == 2
    assert "optimizer" not in avg and len(avg["averaged_from"]) == 3


def test_cli_averages_the_newest_step_files_into_a_loadable_checkpoint(run_dir, capsys):
    assert cli_average.main([f"run_dir={run_dir}", "last=2"]) == 0
    out = run_dir / "checkpoints" / "avg_last2.pt"
    assert "step_2.pt, step_3.pt" in capsys.readouterr().out
    weights = load_checkpoint(out)["model"]
    w = next(t for t in weights.values() if t.is_floating_point())
    assert torch.equal(w, torch.full_like(w, 4.0))                 # (2 + 6) / 2
    model, tokenizer, cfg = load_for_inference(out)
    assert cfg.model.d_model == 16 and not model.training


def test_cli_averages_the_best_by_validation_bleu_ties_going_to_the_earlier_step(run_dir, capsys):
    assert cli_average.main([f"run_dir={run_dir}", "best=2"]) == 0
    assert "step_1.pt, step_2.pt" in capsys.readouterr().out      # 30, then 20 at step 1 (not 3)
    w = next(t for t in load_checkpoint(run_dir / "checkpoints" / "avg_best2.pt")["model"].values()
             if t.is_floating_point())
    assert torch.equal(w, torch.full_like(w, 1.5))                 # (1 + 2) / 2


def test_cli_with_an_explicit_list(run_dir, tmp_path):
    ckpts = run_dir / "checkpoints"
    out = tmp_path / "avg.pt"
    assert cli_average.main([f"checkpoints=[{ckpts / 'step_1.pt'},{ckpts / 'step_2.pt'}]",
                             f"out={out}"]) == 0
    w = next(t for t in load_checkpoint(out)["model"].values() if t.is_floating_point())
    assert torch.equal(w, torch.full_like(w, 1.5))


@pytest.mark.parametrize("args, key", [
    (["last=5"], "last=5"), (["last=1"], "last=1"), (["best=1"], "best=1"), (["best=4"], "best=4"),
    (["last=2", "out={ckpts}/step_3.pt"], "out="),
])
def test_cli_refuses_bad_selections_with_exit_2(run_dir, capsys, args, key):
    ckpts = run_dir / "checkpoints"
    args = [a.format(ckpts=ckpts) for a in args]
    assert cli_average.main([f"run_dir={run_dir}", *args]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


def test_neither_or_both_sources_or_a_missing_run_dir_is_refused(run_dir, tmp_path, capsys):
    assert cli_average.main(["out=x.pt"]) == 2
    assert "run_dir" in capsys.readouterr().err
    assert cli_average.main([f"run_dir={tmp_path / 'nope'}"]) == 2
    assert "nope" in capsys.readouterr().err


def test_checkpoints_of_another_model_are_refused_naming_both_files(run_dir, tmp_path):
    ckpts = run_dir / "checkpoints"
    other = load_checkpoint(ckpts / "step_1.pt")
    other["config"]["model"]["d_model"] = 32
    save_atomic(other, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match=r"other\.pt cannot be averaged with .*step_2\.pt"
                                              r".*model\.d_model"):
        average_checkpoints([ckpts / "step_2.pt", tmp_path / "other.pt"])
    with pytest.raises(CheckpointError, match="at least two"):
        average_checkpoints([ckpts / "step_2.pt"])
