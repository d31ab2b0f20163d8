"""nmt-evaluate end to end on a tiny untrained checkpoint (in process, through ``main``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_transformer, write_corpus

from nmt.cli import evaluate as cli_evaluate
from nmt.config import to_plain
from nmt.evaluation.alignments import load_alignments

pytestmark = pytest.mark.slow


def tiny_checkpoint(root: Path) -> Path:
    """A tiny (dim-16) untrained Transformer checkpoint with its tokenizer and data config
    (corpus in ``<root>/corpus``: 100 train and 12 test pairs)."""
    from nmt.checkpoint import save_atomic

    torch.manual_seed(0)
    cfg, tok, model = tiny_transformer(root, n_test=12)
    path = root / "run" / "checkpoints" / "best.pt"
    save_atomic({"version": 1, "model": model.state_dict(),
                 "config": to_plain(cfg), "tokenizer": tok.state_dict(),
                 "step": 0, "epoch": 0, "batch_in_epoch": 0}, path)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("cli"))


def corpus_of(ckpt: Path) -> Path:
    return ckpt.parents[2] / "corpus"


def user_error(capsys, prog: str) -> str:
    """stderr of a run that exited with status 2: one paragraph, no traceback."""
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error:") and "Traceback" not in err, err
    return " ".join(err.split())


def test_evaluate_writes_hyps_scores_alignments(ckpt, tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=3", f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "chrF = " in printed and "tok:13a" in printed
    scores = json.loads((out / "scores.json").read_text())
    for key in ("bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_lowercase", "seconds"):
        assert key in scores
    assert scores["beam_size"] == 3 and scores["n_sentences"] == 12 and scores["split"] == "test"
    assert scores["weights"] == "inference" and scores["checkpoint"] == str(ckpt)
    hyps = (out / "hyps.txt").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 12
    data = load_alignments(out / "alignments.npz")
    assert len(data) == 12
    for i in range(12):
        assert data[i].matrix.shape == (len(data[i].tgt), len(data[i].src))
        np.testing.assert_allclose(data[i].matrix.sum(1), 1.0, atol=1e-5)


def test_evaluate_default_out_dir_is_beside_the_checkpoint(ckpt, capsys):
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=1", "save_alignments=false"]) == 0
    assert (ckpt.parent / "eval_test_beam1" / "hyps.txt").is_file()


def test_evaluate_file_pair_and_data_root_override(ckpt, tmp_path):
    corpus = corpus_of(ckpt)
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=1", f"src_file={corpus}/test.de",
                              f"ref_file={corpus}/test.en", f"out_dir={a}"]) == 0
    moved = write_corpus(tmp_path / "moved", {"train": 100, "test": 12})   # same content
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=1", f"data.root={moved}",
                              "split=test", f"out_dir={b}", "save_alignments=false"]) == 0
    assert (a / "hyps.txt").read_text() == (b / "hyps.txt").read_text()
    assert json.loads((a / "scores.json").read_text())["split"] == "test.de"
    assert not (b / "alignments.npz").exists()


@pytest.mark.parametrize("args, key", [
    ([], "checkpoint"),
    (["checkpoint=x.pt", "src_file=a.de"], "ref_file"),
    (["checkpoint=x.pt", "src_file=a.de", "ref_file=a.en", "split=test"], "split"),
    (["checkpoint=x.pt", "beam_size=0"], "beam_size"),
    (["checkpoint=x.pt", "beam_size=2", "n_best=3"], "n_best"),
    (["checkpoint=x.pt", "beam_size=two"], "beam_size"),
    (["checkpoint=x.pt", "attention=some"], "attention"),
    (["checkpoint=x.pt", "attention=all", "save_alignments=false"], "save_alignments"),
    (["checkpoint=[x.pt,y.pt]", "attention=all"], "attention"),
    (["engine=onnx", "checkpoint=x.pt"], "engine"),
    (["checkpoint=x.pt", "weights=best"], "weights"),
    (["checkpoint=x.pt", "nonsense=1"], "nonsense"),
    (["stray_argument"], "stray_argument"),
    (["checkpoint=/nonexistent.pt"], "/nonexistent.pt"),
])
def test_evaluate_user_errors_exit_2_naming_the_key(args, key, capsys):
    assert cli_evaluate.main(args) == 2
    assert key in user_error(capsys, "nmt-evaluate")


def test_a_file_of_random_bytes_is_not_a_checkpoint(tmp_path, capsys):
    path = tmp_path / "random.pt"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    assert cli_evaluate.main([f"checkpoint={path}"]) == 2
    err = user_error(capsys, "nmt-evaluate")
    assert str(path) in err and "not a checkpoint" in err


def test_evaluate_missing_split_file_is_a_corpus_error(ckpt, tmp_path, capsys):
    assert cli_evaluate.main([f"checkpoint={ckpt}", "split=nope", f"out_dir={tmp_path}"]) == 2
    assert "nope" in user_error(capsys, "nmt-evaluate")


def test_unwritable_out_dir_exits_2_before_translating(ckpt, tmp_path, capsys, monkeypatch):
    import nmt.evaluation.evaluate as evaluation

    blocker = tmp_path / "a_file"
    blocker.write_text("x")

    def no_translation(*args, **kwargs):
        raise AssertionError("translated although out_dir cannot be written")

    monkeypatch.setattr(evaluation, "evaluate_split", no_translation)
    assert cli_evaluate.main([f"checkpoint={ckpt}", f"out_dir={blocker / 'eval'}"]) == 2
    assert "out_dir" in user_error(capsys, "nmt-evaluate")


def test_help_prints_usage_and_config(capsys):
    assert cli_evaluate.main(["--help", "beam_size=7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nmt-evaluate: translate") and "beam_size: 7" in out
    assert "checkpoint: ???" in out and "--cfg job|hydra|all" in out
