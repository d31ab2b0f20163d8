"""The scripts in scripts/: a user error is one paragraph and exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, write_corpus

pytestmark = pytest.mark.slow


def _script(name: str, *args: str, cwd=REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / name), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def _user_error(proc: subprocess.CompletedProcess, name: str) -> str:
    """stderr of a script that exited with status 2: one paragraph, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"{name}: error:") and "Traceback" not in proc.stderr
    return " ".join(proc.stderr.split())


def test_bench_data_names_files_of_different_length(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", {"train": 20, "val": 5})
    (corpus / "train.en").write_text("only one line\n", encoding="utf-8")
    proc = _script("bench_data.py", f"data.root={corpus}", f"data.cache_dir={tmp_path / 'c'}")
    err = _user_error(proc, "bench_data.py")
    assert f"{corpus}/train.de" in err and f"{corpus}/train.en" in err


def test_bench_data_replicate_prints_first_preparation_figures_and_ratios(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", {"train": 30, "val": 5})
    proc = _script("bench_data.py", "--fresh-cache", f"data.root={corpus}", "--replicate", "3",
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
    err = _user_error(proc, "bench_data.py")
    for words in (f"data.root={tmp_path / 'nowhere'}", "NMT_DATA_ROOT",
                  "scripts/download_multi30k.sh"):
        assert words in err


@pytest.mark.parametrize(("name", "args", "key"), [
    ("bench_decode.py", [], "checkpoint"),
    ("bench_decode.py", ["random=rnn", "beam_size=0"], "beam_size"),
    # flags and overrides in any order: the override after the flags is read (and refused)
    ("bench_model.py", ["model=rnn", "--steps", "1", "train.nokey=1"], "train.nokey"),
    ("bench_model.py", ["model=rnn", "--compile", "--compare-precision"], "--compile"),
    ("bench_data.py", ["--batch-tokens", "100", "data.nokey=1"], "data.nokey"),
    ("align_hansards.py", ["fr_en=x.pt"], "en_fr"),
    ("results_table.py", [], "run director"),
    ("results_table.py", ["/nonexistent/run"], "/nonexistent/run/config.yaml"),
    ("sweep_table.py", ["/nonexistent/sweep"], "/nonexistent/sweep"),
    ("bench_serve.py", ["--clients", "2"], "checkpoint is required"),
    ("bench_serve.py", ["checkpoint=x.pt", "--clients", "0"], "--clients"),
])
def test_script_user_errors(name, args, key):
    assert key in _user_error(_script(name, *args), name)


def _write_scores(path, **scores):
    import json

    path.mkdir(parents=True)
    base = {"checkpoint": "runs/x/checkpoints/best.pt", "split": "val", "beam_size": 5,
            "weights": "inference", "bleu_bp": 1.0, "chrf": 60.0}
    (path / "scores.json").write_text(json.dumps({**base, **scores}))


def test_best_length_penalty_takes_the_best_bleu_and_breaks_ties_towards_1(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        from best_length_penalty import best_length_penalty
    finally:
        sys.path.pop(0)
    swept = [(0.6, 40.0), (1.0, 40.5), (2.4, 41.2), (3.0, 41.1)]
    assert best_length_penalty([{"length_penalty": a, "bleu": b} for a, b in swept]) == 2.4
    # 1.4 and 2.2 tie with the top (within 0.01): the one closest to 1.0 wins, whatever the order
    tied = [(3.0, 41.0), (2.2, 41.195), (1.4, 41.2), (0.6, 39.0)]
    assert best_length_penalty([{"length_penalty": a, "bleu": b} for a, b in tied]) == 1.4
    # equally far from 1.0 on both sides: the shorter-output side (smaller alpha)
    assert best_length_penalty([{"length_penalty": a, "bleu": 40.0} for a in (1.4, 0.6)]) == 0.6

    sweep = tmp_path / "val_length_penalty"
    for alpha, bleu in [(1.0, 40.5), (1.8, 41.3), (2.6, 41.0)]:
        _write_scores(sweep / str(alpha), length_penalty=alpha, bleu=bleu)
    proc = _script("best_length_penalty.py", str(sweep))
    assert proc.returncode == 0 and proc.stdout == "1.8\n"
    assert "41.30" in proc.stderr and "<- chosen" in proc.stderr


def test_best_length_penalty_user_errors(tmp_path):
    proc = _script("best_length_penalty.py", str(tmp_path))
    assert "scores.json" in _user_error(proc, "best_length_penalty.py")
    _write_scores(tmp_path / "1.0", length_penalty=1.0, bleu=40.0)
    _write_scores(tmp_path / "2.0", length_penalty=2.0, bleu=41.0, split="test_2016_flickr")
    err = _user_error(_script("best_length_penalty.py", str(tmp_path)), "best_length_penalty.py")
    assert str(tmp_path / "2.0" / "scores.json") in err and "split" in err


def test_results_table_pastes_val_and_test_scores_of_a_run(tmp_path):
    run = tmp_path / "run"
    (run / "config.yaml").parent.mkdir(parents=True)
    (run / "config.yaml").write_text("model: {name: transformer}\n"
                                     "data: {src_lang: de, tgt_lang: en, "
                                     "valid_split: val, test_split: test_2016_flickr}\n")
    (run / "summary.json").write_text(json.dumps({
        "params": 7_578_624, "wall_time_s": 3601.0, "train_tokens_per_s": 3210.4,
        "peak_rss_mb": 3432.0,
        "machine": {"cores": 2, "cpu": "Xeon"}, "device": "cpu", "date": "2026-11-22"}))
    scores = {"val": {"bleu": 43.68, "chrf": 63.08, "bleu_lowercase": 45.04, "length_penalty": 2.4},
              "test_2016_flickr": {"bleu": 41.96, "chrf": 61.5, "bleu_lowercase": 43.21,
                                   "length_penalty": 2.4, "beam_size": 5, "decoding": "search",
                                   "ms_per_sentence": 21.34,
                                   "bleu_signature": "nrefs:1|case:mixed",
                                   "chrf_signature": "nrefs:1|nc:6"},
              "test_2016_flickr_greedy": {"bleu": 40.04}}
    for name, values in scores.items():
        (run / "eval" / name).mkdir(parents=True)
        (run / "eval" / name / "scores.json").write_text(json.dumps(values))
    proc = _script("results_table.py", str(run))
    assert proc.returncode == 0, proc.stderr
    header, _, cells, signatures = proc.stdout.strip().splitlines()
    table = dict(zip(header.strip("| ").split(" | "), cells.strip("| ").split(" | "), strict=True))
    assert table == {
        "model": "transformer", "data": "de->en", "params": "7.6M", "train min": "60",
        "train tok/s": "3210", "peak RSS GiB": "3.4", "length penalty": "2.4",
        "val BLEU beam 5": "43.7", "val chrF beam 5": "63.1",
        "val BLEU lc beam 5": "45.0", "test BLEU greedy": "40.0", "test BLEU beam 5": "42.0",
        "test chrF beam 5": "61.5", "test BLEU lc beam 5": "43.2", "decoding": "beam 5",
        "test s per 1k sentences": "21.3", "machine": "2 cores Xeon, cpu",
        "date": "2026-11-22"}
    assert signatures == f"{run}: BLEU nrefs:1|case:mixed | chrF nrefs:1|nc:6"
