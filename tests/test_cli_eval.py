"""nmt-evaluate, nmt-translate, nmt-plot end to end on a tiny checkpoint, and cli.common."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_transformer, write_corpus
from omegaconf import OmegaConf

from nmt.cli import evaluate as cli_evaluate
from nmt.cli import plot as cli_plot
from nmt.cli import translate as cli_translate
from nmt.cli.common import run_task
from nmt.evaluation.alignments import load_alignments


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A tiny (dim-16) untrained Transformer checkpoint with its tokenizer and data config."""
    from nmt.checkpoint import save_atomic

    root = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    cfg, tok, model = tiny_transformer(root, n_test=12)
    path = root / "run" / "checkpoints" / "best.pt"
    save_atomic({"version": 1, "model": model.state_dict(),
                 "config": OmegaConf.to_container(cfg, resolve=True), "tokenizer": tok.state_dict(),
                 "step": 0, "epoch": 0, "batch_in_epoch": 0}, path)
    return path


def _corpus(ckpt: Path) -> Path:
    return ckpt.parents[2] / "corpus"


def test_evaluate_writes_hyps_scores_alignments(ckpt, tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=3", f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "chrF = " in printed and "tok:13a" in printed
    scores = json.loads((out / "scores.json").read_text())
    for key in ("bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_lowercase", "seconds"):
        assert key in scores
    assert scores["beam_size"] == 3 and scores["n_sentences"] == 12 and scores["split"] == "test"
    hyps = (out / "hyps.txt").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 12
    data = load_alignments(out / "alignments.npz")
    assert len(data) == 12
    for i in range(12):
        assert data[i].matrix.shape == (len(data[i].tgt), len(data[i].src))
        np.testing.assert_allclose(data[i].matrix.sum(1), 1.0, atol=1e-5)


def test_evaluate_file_pair_and_data_root_override(ckpt, tmp_path):
    corpus = _corpus(ckpt)
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=1", f"src_file={corpus}/test.de",
                              f"ref_file={corpus}/test.en", f"out_dir={a}"]) == 0
    moved = write_corpus(tmp_path / "moved", {"train": 100, "test": 12})   # same content
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=1", f"data.root={moved}",
                              "split=test", f"out_dir={b}", "save_alignments=false"]) == 0
    assert (a / "hyps.txt").read_text() == (b / "hyps.txt").read_text()
    assert not (b / "alignments.npz").exists()


@pytest.mark.parametrize("args, message", [
    ([], "checkpoint is required"),
    (["checkpoint=/nonexistent.pt"], "no such checkpoint"),
    (["checkpoint=x.pt", "src_file=a.de"], "src_file and ref_file go together"),
    (["checkpoint=x.pt", "beam_size=0"], "beam_size=0"),
    (["checkpoint=x.pt", "beam_size=2", "n_best=3"], "n_best=3 exceeds"),
    (["checkpoint=x.pt", "nonsense=1"], "nonsense"),
    (["stray_argument"], "Error parsing override 'stray_argument'"),
])
def test_evaluate_user_errors_exit_2(args, message, capsys):
    assert cli_evaluate.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-evaluate: error:") and message in " ".join(err.split())
    assert "Traceback" not in err


def test_evaluate_missing_split_file_is_a_corpus_error(ckpt, tmp_path, capsys):
    assert cli_evaluate.main([f"checkpoint={ckpt}", "split=nope", f"out_dir={tmp_path}"]) == 2
    assert "nope" in capsys.readouterr().err


def test_help_prints_usage_and_config(capsys):
    assert cli_evaluate.main(["--help", "beam_size=7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nmt-evaluate: translate") and "beam_size: 7" in out
    assert "checkpoint: ???" in out and "--cfg job|hydra|all" in out


def test_run_task_propagates_bugs():
    from omegaconf import OmegaConf

    def boom(cfg):
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        run_task(OmegaConf.create({}), boom, prog="x", validate_fn=None)


def test_translate_matches_evaluate_and_n_best_format(ckpt, tmp_path):
    corpus = _corpus(ckpt)
    lines = (corpus / "test.de").read_text(encoding="utf-8").splitlines()
    inp = tmp_path / "in.de"
    inp.write_text("\n".join(lines[:5] + [""] + lines[5:]) + "\n", encoding="utf-8")
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={tmp_path / 'o'}",
                               "beam_size=3", "batch_sentences=4"]) == 0
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=3", f"out_dir={tmp_path / 'e'}"]) == 0
    got = (tmp_path / "o").read_text(encoding="utf-8").split("\n")
    expected = (tmp_path / "e" / "hyps.txt").read_text(encoding="utf-8").split("\n")
    assert got == expected[:5] + [""] + expected[5:]          # same order, empty line kept
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={tmp_path / 'n'}",
                               "beam_size=3", "n_best=2"]) == 0
    rows = [r.split(" ||| ") for r in (tmp_path / "n").read_text(encoding="utf-8").splitlines()]
    assert [int(r[0]) for r in rows if r[0] != "5"] == [i for i in range(13) if i != 5 for _ in (0, 1)]
    assert all(len(r) == 3 and float(r[2]) <= 0 for r in rows)
    assert rows[0][1] == expected[0]


def test_translate_streams_chunk_by_chunk(ckpt):
    """Output of the first chunk is written before the second chunk is read."""
    from nmt.inference.translator import Translator

    translator = Translator.from_checkpoint(ckpt)
    out = io.StringIO()
    seen: list[int] = []

    def source():
        for i in range(6):
            seen.append(len(out.getvalue().splitlines()))
            yield f"Ein Hund läuft {i} .\n"

    cfg = {"beam_size": 2, "length_penalty": 1.0, "max_len_a": 1.0, "max_len_b": 2,
           "batch_sentences": 3, "n_best": 1}
    assert cli_translate.translate_stream(translator, source(), out, cfg) == 6
    assert seen == [0, 0, 0, 3, 3, 3] and len(out.getvalue().splitlines()) == 6


def test_console_script_translate_reads_stdin(ckpt, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    text = "Ein großer Hund läuft im Park .\nZwei Mädchen tanzen .\n"
    res = subprocess.run([sys.executable, "-m", "nmt.cli.translate", f"checkpoint={ckpt}",
                          "beam_size=2"], input=text.encode(), capture_output=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr.decode()
    assert len(res.stdout.decode("utf-8").split("\n")) == 3     # two lines + final newline


def test_plot_single_range_all_and_errors(ckpt, tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=2", f"out_dir={out}"]) == 0
    npz = out / "alignments.npz"
    assert cli_plot.main([f"alignments={npz}", "index=3", f"out={tmp_path / 'one.png'}"]) == 0
    assert (tmp_path / "one.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli_plot.main([f"alignments={npz}", "index=2:5", f"out={tmp_path / 'r'}"]) == 0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "align_0002.png", "align_0003.png", "align_0004.png"]
    from nmt.evaluation.alignments import save_alignments

    small = tmp_path / "small.npz"
    save_alignments(small, [np.eye(2, dtype=np.float32)] * 2, [["a", "ö"]] * 2, [["x", "ß"]] * 2)
    assert cli_plot.main([f"alignments={small}", "index=all", f"out={tmp_path / 'all'}"]) == 0
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["align_0000.png", "align_0001.png"]
    capsys.readouterr()
    assert cli_plot.main([f"alignments={npz}", "index=12", f"out={tmp_path / 'x.png'}"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert cli_plot.main([f"alignments={tmp_path / 'no.npz'}", f"out={tmp_path / 'x.png'}"]) == 2
    assert cli_plot.main([f"alignments={npz}", "index=all", f"out={tmp_path / 'x.png'}"]) == 2
    capsys.readouterr()
    assert cli_plot.main([f"alignments={npz}", "cmap=no_such_map", f"out={tmp_path / 'x.png'}"]) == 2
    assert "cmap='no_such_map' is not a matplotlib colormap" in capsys.readouterr().err
    assert cli_plot.main([f"alignments={npz}", "dpi=0", f"out={tmp_path / 'x.png'}"]) == 2
    assert "dpi=0 must be a positive number" in capsys.readouterr().err
    assert cli_plot.main([f"alignments={npz}", "dpi=high", f"out={tmp_path / 'x.png'}"]) == 2
    assert "dpi" in capsys.readouterr().err


# ------------------------------------------------------- input decoding, unwritable outputs
def test_utf8_lines_split_on_newline_only_and_name_bad_line():
    lines = list(cli_translate.utf8_lines(io.BytesIO(b"a\rb\nc\r\n\xc3\xa4"), "x"))
    assert lines == ["a\rb\n", "c\r\n", "ä"]
    assert list(cli_translate.chunks(lines, 2)) == [["a\rb", "c"], ["ä"]]
    from nmt.data.corpus import CorpusError

    bad = cli_translate.utf8_lines(io.BytesIO(b"ok\nfine\nbad \xff byte\n"), "in.de")
    assert next(bad) == "ok\n" and next(bad) == "fine\n"
    with pytest.raises(CorpusError, match=r"in.de, line 3: invalid UTF-8 \(byte 0xff at offset 12\)"):
        next(bad)


def test_translate_invalid_utf8_file_and_stdin_exit_2(ckpt, tmp_path, capsys, monkeypatch):
    data = b"Ein Hund .\nZwei \xff Katzen .\n"
    inp = tmp_path / "bad.de"
    inp.write_bytes(data)
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}",
                               f"output={tmp_path / 'o'}", "beam_size=1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("nmt-translate: error:") and f"{inp}, line 2: invalid UTF-8" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli_translate.main([f"checkpoint={ckpt}", f"output={tmp_path / 'o2'}",
                               "beam_size=1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "<stdin>, line 2: invalid UTF-8" in err and "Traceback" not in err


def test_translate_lone_carriage_return_keeps_line_alignment(ckpt, tmp_path):
    inp = tmp_path / "cr.de"
    inp.write_bytes("Ein Hund\rläuft .\nZwei Männer .\r\n\n".encode())
    out = tmp_path / "cr.en"
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={out}",
                               "beam_size=1"]) == 0
    got = out.read_bytes()
    assert b"\r" not in got and got.count(b"\n") == 3 and got.endswith(b"\n\n")


def test_unwritable_outputs_exit_2_before_any_work(ckpt, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    inp = tmp_path / "in.de"
    inp.write_text("Ein Hund .\n", encoding="utf-8")
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}",
                               f"output={blocker / 'o.txt'}"]) == 2
    assert f"output={blocker / 'o.txt'}: cannot write" in " ".join(capsys.readouterr().err.split())

    import nmt.evaluation.evaluate as evaluation

    def no_translation(*args, **kwargs):
        raise AssertionError("translated although out_dir cannot be written")

    monkeypatch.setattr(evaluation, "evaluate_split", no_translation)
    assert cli_evaluate.main([f"checkpoint={ckpt}", f"out_dir={blocker / 'eval'}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("nmt-evaluate: error:") and f"out_dir={blocker / 'eval'}" in err
    from nmt.config import ConfigError

    with pytest.raises(ConfigError, match="out_dir=.*cannot write"):
        evaluation.write_outputs(blocker / "eval", evaluation.Evaluation(
            results=[], references=[], scores={"bleu": 0.0}, sentences={}))

    from nmt.evaluation.alignments import save_alignments

    npz = tmp_path / "small.npz"
    save_alignments(npz, [np.eye(2, dtype=np.float32)], [["a", "b"]], [["x", "y"]])
    for out in (blocker / "one.png", blocker / "dir"):
        index = "0" if out.suffix else "all"
        assert cli_plot.main([f"alignments={npz}", f"index={index}", f"out={out}"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert err.startswith("nmt-plot: error: out=") and "cannot write" in err
    assert cli_plot.main([f"alignments={npz}", f"out={tmp_path}"]) == 2
    assert "is a directory" in capsys.readouterr().err
