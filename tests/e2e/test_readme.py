"""The README's quick-start commands run: the main job end to end on a tiny slice.

The main-job line is read from README.md itself, so the README cannot rot: the test runs
exactly that command with extra overrides that shrink it (tiny corpus, tiny model, a few
steps), then checks every artefact the README promises.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, write_corpus

pytestmark = pytest.mark.slow

TINY_TRANSFORMER = ["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                    "model.encoder_layers=1", "model.decoder_layers=1"]


def readme_commands() -> list[str]:
    """The command lines of the README's quick-start block (comments dropped)."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no bash block under '## Quick start'"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_quick_start_has_install_main_job_and_tests():
    install, main_job, tests = readme_commands()
    assert install.startswith("pip install") and "==2.13.0" in install
    assert main_job.startswith("bash scripts/run_multi30k.sh")
    assert tests == "python -m pytest -q"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert install in ci and tests in ci, ".ci/run must install and test exactly as the README says"


def sliced_main_job(tmp_path: Path, corpus: Path, run_dir: Path, repo: Path = REPO_ROOT) -> list[str]:
    """The README's main-job command (its script under ``repo``), shrunk to seconds."""
    _, main_job, _ = readme_commands()
    script, *rest = shlex.split(main_job)[1:]
    return ["bash", str(repo / script), *rest, *TINY_TRANSFORMER,
            f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}", "data.max_train_pairs=150",
            "data.tokenizer.vocab_size=100", "train.max_steps=4", "train.batch_tokens=400",
            f"run_dir={run_dir}", "device=cpu"]


def test_main_job_runs_end_to_end_on_a_tiny_slice(tmp_path: Path):
    corpus = write_corpus(tmp_path / "multi30k", {"train": 200, "val": 12, "test_2016_flickr": 12})
    run_dir = tmp_path / "run"
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(sliced_main_job(tmp_path, corpus, run_dir), cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    for name in ("config.yaml", "train.log", "summary.json", "checkpoints/best.pt",
                 "checkpoints/last.pt"):
        assert (run_dir / name).exists(), name
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4
    for split, n in (("val", 12), ("test_2016_flickr", 12)):
        for suffix in ("", "_greedy"):
            out = run_dir / "eval" / f"{split}{suffix}"
            scores = json.loads((out / "scores.json").read_text())
            assert scores["n_sentences"] == n
            assert scores["beam_size"] == (1 if suffix else 5)
            assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
            assert len((out / "hyps.txt").read_text(encoding="utf-8").splitlines()) == n
    # The length penalty is chosen on val alone (beam 5 over the script's grid), then val and
    # test are translated with it; nothing of the test split takes part in the choice.
    swept = [json.loads(p.read_text())
             for p in sorted((run_dir / "eval" / "val_length_penalty").glob("*/scores.json"))]
    assert sorted(s["length_penalty"] for s in swept) == [0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0]
    assert {(s["split"], s["beam_size"]) for s in swept} == {("val", 5)}
    assert sorted(p.name for p in (run_dir / "eval" / "val_length_penalty").iterdir()) == [
        "0.6", "1.0", "1.4", "1.8", "2.2", "2.6", "3.0", "multirun.yaml"]   # one directory per alpha
    top = max(s["bleu"] for s in swept)
    alpha = min((s["length_penalty"] for s in swept if s["bleu"] >= top - 0.01),
                key=lambda a: (round(abs(a - 1.0), 6), a))
    for split in ("val", "test_2016_flickr"):
        assert json.loads((run_dir / "eval" / split / "scores.json").read_text())["length_penalty"] == alpha
    assert not list((run_dir / "eval").glob("test_2016_flickr_length_penalty*"))
    with np.load(run_dir / "eval" / "test_2016_flickr" / "alignments.npz") as npz:
        assert int(npz["count"]) == 12
    pngs = sorted((run_dir / "eval" / "heatmaps").glob("*.png"))
    assert len(pngs) == 5
    # The job ends with the results table: BLEU, chrF and the sacreBLEU signature.
    assert "test BLEU beam 5" in proc.stdout and "nrefs:1|case:mixed" in proc.stdout


def test_main_job_reads_a_hugging_face_dataset_saved_locally(tmp_path: Path):
    """data/README.md's Hugging Face route: other split names, read from the config."""
    import datasets
    from conftest import make_pairs

    def split(n: int, seed: int) -> datasets.Dataset:
        pairs = make_pairs(n, seed)
        return datasets.Dataset.from_dict({"de": [p[0] for p in pairs], "en": [p[1] for p in pairs]})

    local = tmp_path / "multi30k_hf"
    datasets.DatasetDict({"train": split(200, 0), "validation": split(10, 1),
                          "test": split(10, 2)}).save_to_disk(str(local))
    run_dir = tmp_path / "run"
    cmd = sliced_main_job(tmp_path, local, run_dir) + [
        "data.format=hf", "data.valid_split=validation", "data.test_split=test"]
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for split_name in ("validation", "test", "validation_greedy", "test_greedy"):
        scores = json.loads((run_dir / "eval" / split_name / "scores.json").read_text())
        assert scores["n_sentences"] == 10 and scores["split"] == split_name.split("_")[0]
    assert len(list((run_dir / "eval" / "heatmaps").glob("*.png"))) == 5
    assert "| transformer | de->en |" in proc.stdout


def test_main_job_stops_at_once_on_a_typo_in_its_overrides(tmp_path: Path):
    _, main_job, _ = readme_commands()
    proc = subprocess.run([*shlex.split(main_job), "trian.lr=0.002", f"run_dir={tmp_path / 'r'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("nmt-train: error:") and "trian" in proc.stderr
    assert not (tmp_path / "r").exists()
