"""The scripts in scripts/: a user error is one paragraph and exit status 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, write_corpus


def _script(name: str, *args: str, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / name), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_bench_data_names_files_of_different_length(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", {"train": 20, "val": 5})
    (corpus / "train.en").write_text("only one line\n", encoding="utf-8")
    proc = _script("bench_data.py", f"data.root={corpus}", f"data.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("bench_data.py: error:")
    assert f"{corpus}/train.de has 20 lines but {corpus}/train.en has 1" in " ".join(proc.stderr.split())


def test_bench_data_replicate_prints_first_preparation_figures_and_ratios(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", {"train": 30, "val": 5})
    proc = _script("bench_data.py", "--fresh-cache", "--replicate", "3", f"data.root={corpus}",
                   "data.tokenizer.vocab_size=60", "data.tokenizer.input_sentence_size=40")
    assert proc.returncode == 0, proc.stderr
    figures = dict(item.split("=", 1) for item in proc.stdout.strip().splitlines()[-1].split())
    assert figures["n_pairs"] == "30" and figures["n_pairs_x3"] == "90"
    assert figures["cache_hit"] == figures["cache_hit_x3"] == "0"      # both first preparations
    for key in ("tokenize_s", "prepare_peak_rss_mb", "tokenizer_train_s", "prepare_s"):
        assert float(figures[key]) >= 0 and float(figures[key + "_x3"]) >= 0
    assert float(figures["prepare_rss_ratio"]) == pytest.approx(
        float(figures["prepare_peak_rss_mb_x3"]) / float(figures["prepare_peak_rss_mb"]), abs=0.01)
    assert "tokenize_time_ratio" in figures and "prepare_time_ratio" in figures  # 0.00 s: nan


def test_missing_corpus_names_data_root_the_variable_and_the_download_script(tmp_path):
    proc = _script("bench_data.py", f"data.root={tmp_path / 'nowhere'}")
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in err
    for words in (f"data.root={tmp_path / 'nowhere'}", "NMT_DATA_ROOT", "scripts/download_multi30k.sh"):
        assert words in err


@pytest.mark.parametrize(("name", "args", "message"), [
    ("bench_decode.py", [], "give checkpoint=PATH or random=transformer|rnn"),
    ("bench_model.py", ["train.nokey=1"], "train.nokey"),
    ("results_table.py", [], "give one or more run directories"),
    ("results_table.py", ["/nonexistent/run"], "/nonexistent/run/config.yaml: not found"),
    ("sweep_table.py", ["/nonexistent/sweep"], "/nonexistent/sweep is not a directory"),
])
def test_script_user_errors(name, args, message):
    proc = _script(name, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"{name}: error:") and message in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
