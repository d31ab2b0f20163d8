"""nmt-translate end to end on a tiny untrained checkpoint: files, stdin, streaming, n-best."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from test_evaluate_cli import corpus_of, tiny_checkpoint, user_error

from nmt.cli import evaluate as cli_evaluate
from nmt.cli import translate as cli_translate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("cli"))


def test_translate_matches_evaluate_and_n_best_format(ckpt, tmp_path):
    lines = (corpus_of(ckpt) / "test.de").read_text(encoding="utf-8").splitlines()
    inp = tmp_path / "in.de"
    inp.write_text("\n".join(lines[:5] + [""] + lines[5:]) + "\n", encoding="utf-8")
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={tmp_path / 'o'}",
                               "beam_size=3", "batch_sentences=4"]) == 0
    assert cli_evaluate.main([f"checkpoint={ckpt}", "beam_size=3",
                              f"out_dir={tmp_path / 'e'}"]) == 0
    got = (tmp_path / "o").read_text(encoding="utf-8").split("\n")
    expected = (tmp_path / "e" / "hyps.txt").read_text(encoding="utf-8").split("\n")
    assert got == expected[:5] + [""] + expected[5:]          # same order, empty line kept
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={tmp_path / 'n'}",
                               "beam_size=3", "n_best=2"]) == 0
    rows = [r.split(" ||| ") for r in (tmp_path / "n").read_text(encoding="utf-8").splitlines()]
    assert [int(r[0]) for r in rows if r[0] != "5"] == [i for i in range(13) if i != 5
                                                        for _ in (0, 1)]
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
            yield f"Ein Hund läuft {i} ."

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


def test_invalid_utf8_file_and_stdin_exit_2_naming_the_line(ckpt, tmp_path, capsys, monkeypatch):
    data = b"Ein Hund .\nZwei \xff Katzen .\n"
    inp = tmp_path / "bad.de"
    inp.write_bytes(data)
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}",
                               f"output={tmp_path / 'o'}", "beam_size=1"]) == 2
    assert f"{inp}, line 2" in user_error(capsys, "nmt-translate")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert cli_translate.main([f"checkpoint={ckpt}", f"output={tmp_path / 'o2'}",
                               "beam_size=1"]) == 2
    assert "<stdin>, line 2" in user_error(capsys, "nmt-translate")


def test_line_ends_lone_carriage_return_and_empty_input(ckpt, tmp_path):
    inp = tmp_path / "cr.de"
    inp.write_bytes("Ein Hund\rläuft .\nZwei Männer .\r\n\n".encode())
    out = tmp_path / "cr.en"
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={inp}", f"output={out}",
                               "beam_size=1"]) == 0
    got = out.read_bytes()
    assert b"\r" not in got and got.count(b"\n") == 3 and got.endswith(b"\n\n")
    (tmp_path / "empty.de").write_bytes(b"")
    assert cli_translate.main([f"checkpoint={ckpt}", f"input={tmp_path / 'empty.de'}",
                               f"output={out}"]) == 0
    assert out.read_bytes() == b""


@pytest.mark.parametrize("args, key", [
    (["input={tmp}/missing.de"], "input"),
    (["input={tmp}/in.de", "output={tmp}/a_file/o.txt"], "output"),
    (["sampling=maybe"], "sampling"),
    (["batch_sentences=0"], "batch_sentences"),
])
def test_translate_user_errors_exit_2_naming_the_key(ckpt, tmp_path, capsys, args, key):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "in.de").write_text("Ein Hund .\n", encoding="utf-8")
    argv = [f"checkpoint={ckpt}", *(a.format(tmp=tmp_path) for a in args)]
    assert cli_translate.main(argv) == 2
    assert key in user_error(capsys, "nmt-translate")
