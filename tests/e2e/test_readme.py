"""The README's commands run: the quick start's main job end to end on a tiny slice, and the
usage block line by line.

The lines are read from README.md itself, so the README cannot rot: the tests run exactly
those commands with extra overrides that shrink them (tiny corpus, tiny model, a few steps),
then check what the README promises. The CTranslate2 block is run by
tests/test_ctranslate2.py; every other bash or Python block of the README must be run here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    REPO_ROOT,
    TINY_MODEL,
    TINY_TRAIN,
    make_pairs,
    write_corpus,
    write_multilingual_corpus,
)

pytestmark = pytest.mark.slow

TINY_TRANSFORMER = ["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                    "model.encoder_layers=1", "model.decoder_layers=1"]


def readme_commands() -> list[str]:
    """The command lines of the README's quick-start block (comments dropped)."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no bash block under '## Quick start'"
    return [ln.strip() for ln in block.group(1).splitlines()
            if ln.strip() and not ln.startswith("#")]


def readme_blocks() -> list[tuple[str, str, str]]:
    """``(heading, language, text)`` of every fenced code block of the README, in order."""
    blocks, heading, fence = [], "", None
    for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("```"):
            if fence is None:
                fence = (heading, line[3:].strip(), [])
            else:
                blocks.append((fence[0], fence[1], "".join(fence[2])))
                fence = None
        elif fence is not None:
            fence[2].append(line)
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    return blocks


def readme_block(heading: str, lang: str) -> str:
    """The first ``lang`` code block of the README section titled ``heading``."""
    texts = [text for h, lng, text in readme_blocks() if (h, lng) == (heading, lang)]
    assert texts, f"README.md has no {lang} block under '{heading}'"
    return texts[0]


# The README sections whose code blocks a test runs (any other block would be untested).
RUN_BY = {("Quick start", "bash"): "test_readme.py", ("Usage", "bash"): "test_readme.py",
          ("Usage", "python"): "test_readme.py",
          ("Serving with CTranslate2", "bash"): "test_ctranslate2.py",
          ("Alignments", "bash"): "test_readme.py", ("Multilingual", "bash"): "test_readme.py",
          ("Hugging Face Marian (OPUS-MT)", "bash"): "test_marian.py"}


def test_every_code_block_of_the_readme_is_run_by_a_test():
    assert {(heading, lang) for heading, lang, _ in readme_blocks()} == set(RUN_BY)


def test_quick_start_has_install_main_job_and_tests():
    install, main_job, tests = readme_commands()
    assert install.startswith("pip install") and "==2.13.0" in install
    assert main_job.startswith("bash scripts/run_multi30k.sh")
    assert tests == "python -m pytest -q"
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert install in ci and tests in ci, ".ci/run must install and test exactly as the README says"
    venv = ci.index("python -m venv")   # in a fresh virtual environment, as a newcomer installs
    assert venv < ci.index("source") < ci.index(install) < ci.index(tests)


def sliced_main_job(tmp_path: Path, corpus: Path, run_dir: Path, repo: Path = REPO_ROOT
                    ) -> list[str]:
    """The README's main-job command (its script under ``repo``), shrunk to seconds."""
    _, main_job, _ = readme_commands()
    script, *rest = shlex.split(main_job)[1:]
    return ["bash", str(repo / script), *rest, *TINY_TRANSFORMER,
            f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.max_train_pairs=150",
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
    # one directory per alpha
    assert sorted(p.name for p in (run_dir / "eval" / "val_length_penalty").iterdir()) == [
        "0.6", "1.0", "1.4", "1.8", "2.2", "2.6", "3.0", "multirun.yaml"]
    top = max(s["bleu"] for s in swept)
    alpha = min((s["length_penalty"] for s in swept if s["bleu"] >= top - 0.01),
                key=lambda a: (round(abs(a - 1.0), 6), a))
    for split in ("val", "test_2016_flickr"):
        scores = json.loads((run_dir / "eval" / split / "scores.json").read_text())
        assert scores["length_penalty"] == alpha
    assert not list((run_dir / "eval").glob("test_2016_flickr_length_penalty*"))
    with np.load(run_dir / "eval" / "test_2016_flickr" / "alignments.npz") as npz:
        assert int(npz["count"]) == 12
    pngs = sorted((run_dir / "eval" / "heatmaps").glob("*.png"))
    assert len(pngs) == 5
    # The job ends with the results table: BLEU, chrF and the sacreBLEU signature.
    assert "test BLEU beam 5" in proc.stdout and "nrefs:1|case:mixed" in proc.stdout


def test_multilingual_main_job_fine_tunes_for_zero_resource_directions(tmp_path: Path):
    """data=multi30k_multi on a tiny 4-language corpus runs the zero-resource stages by default
    (ZERO_RESOURCE=0 skips them): the base model's 12 directions; two rounds, each a
    back-translation through English with the latest model and a fine-tuning from it on the 6
    real and 6 synthetic directions; and the table of the last round's model, zero-resource
    rows beside the base's pivot."""
    sizes = {"train": 200, "val": 12, "test_2016_flickr": 12}
    corpus = write_multilingual_corpus(tmp_path / "multi30k", sizes)
    for split in sizes:                     # Czech stand-in: the German side, upper-cased
        text = (corpus / f"{split}.de").read_text(encoding="utf-8")
        (corpus / f"{split}.cs").write_text(text.upper(), encoding="utf-8")
    run_dir = tmp_path / "run"
    cmd = sliced_main_job(tmp_path, corpus, run_dir) + ["data=multi30k_multi",
                                                        "data.tokenizer.vocab_size=160"]
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "ZR_STEPS": "2 3",
           "LENGTH_PENALTIES": "1.0"}
    env.pop("ZERO_RESOURCE", None)
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    zr = run_dir / "zero_resource"
    model = run_dir / "checkpoints" / "best.pt"      # each round translates with the latest
    for round_dir, steps in ((zr / "round1", 2), (zr / "round2", 3)):
        report = json.loads((round_dir / "bt" / "train.backtranslation.json").read_text())
        assert report["checkpoint"] == str(model)
        assert sorted(report["directions"]) == ["cs-de", "cs-fr", "de-cs", "de-fr", "fr-cs",
                                                "fr-de"]
        tuned = json.loads((round_dir / "ft" / "summary.json").read_text())
        assert tuned["steps"] == steps and len(tuned["best_bleu_directions"]) == 12
        model = round_dir / "ft" / "checkpoints" / "best.pt"
    assert json.loads((zr / "eval" / "cs-de" / "scores.json").read_text())["checkpoint"] == str(
        model)
    kinds = [r["direction"] for r in json.loads((zr / "eval" / "directions.json").read_text())
             ["directions"]]
    assert kinds == ["supervised"] * 6 + ["zero-resource"] * 6
    table = (zr / "table.md").read_text(encoding="utf-8").splitlines()
    assert table == proc.stdout.splitlines()[-len(table):]
    rows = [line.split(" | ") for line in table[2:14]]
    assert [(r[1], r[3]) for r in rows] == [("supervised", "direct")] * 6 + [
        ("zero-resource", "en")] * 6
    assert table[14].startswith("| mean of 6 | supervised |")
    assert table[15].startswith("| mean of 6 | zero-resource |") and "tuned / base" in table[15]


def test_main_job_reads_a_hugging_face_dataset_saved_locally(tmp_path: Path):
    """data/README.md's Hugging Face route: other split names, read from the config."""
    import datasets
    from conftest import make_pairs

    def split(n: int, seed: int) -> datasets.Dataset:
        pairs = make_pairs(n, seed)
        return datasets.Dataset.from_dict({"de": [p[0] for p in pairs],
                                           "en": [p[1] for p in pairs]})

    local = tmp_path / "multi30k_hf"
    datasets.DatasetDict({"train": split(200, 0), "validation": split(10, 1),
                          "test": split(10, 2)}).save_to_disk(str(local))
    run_dir = tmp_path / "run"
    cmd = sliced_main_job(tmp_path, local, run_dir) + [
        "data.format=hf", "data.valid_split=validation", "data.test_split=test"]
    # one length penalty: the search itself is the tiny slice's test above
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "LENGTH_PENALTIES": "1.0"}
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


def usage_commands() -> list[list[str]]:
    """The command lines of the README's usage block, split into words (comments dropped)."""
    return [words for line in readme_block("Usage", "bash").splitlines()
            if (words := shlex.split(line, comments=True))]


def _run_in_process(words: list[str]) -> int:
    """Run ``nmt-<tool> ARGS [< in] [> out]`` through the tool's ``main`` in this process."""
    from nmt.cli import align, backtranslate, evaluate, plot, train, translate

    tools = {"nmt-train": train.main, "nmt-evaluate": evaluate.main,
             "nmt-translate": translate.main, "nmt-plot": plot.main, "nmt-align": align.main,
             "nmt-backtranslate": backtranslate.main}
    args, redirect, rest = [], {}, iter(words[1:])
    for word in rest:
        if word in ("<", ">"):
            redirect[word] = next(rest)
        else:
            args.append(word)
    with pytest.MonkeyPatch.context() as patch, ExitStack() as files:
        if "<" in redirect:
            patch.setattr(sys, "stdin", files.enter_context(open(redirect["<"], encoding="utf-8")))
        if ">" in redirect:
            out = files.enter_context(open(redirect[">"], "w", encoding="utf-8"))
            patch.setattr(sys, "stdout", out)
        return tools[words[0]](args)


def _serve(words: list[str], cwd: Path) -> tuple[subprocess.Popen, int, list[str]]:
    """Start the README's ``nmt-serve`` line on a port the OS picks (``serve.port=0``); returns
    the process, the port from its log line ``nmt-serve: listening on http://HOST:PORT/`` and
    its log (stderr lines, read on in a thread)."""
    proc = subprocess.Popen([sys.executable, "-m", "nmt.cli.serve", *words[1:], "serve.port=0",
                             "device=cpu"],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    for line in proc.stderr:
        log.append(line)
        if found := re.search(r"nmt-serve: listening on http://\S+:(\d+)/", line):
            threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
            return proc, int(found.group(1)), log
    proc.wait(timeout=60)
    pytest.fail(f"nmt-serve did not start: {''.join(log)[-3000:]}")


def _curl(words: list[str], port: int) -> tuple[int, dict]:
    """The README's ``curl`` line (URL, -H headers, -d body), sent with urllib to ``port``."""
    url = next(w for w in words if w.startswith("http")).replace(":8000/", f":{port}/")
    headers = dict(w.split(": ", 1) for flag, w in pairwise(words) if flag == "-H")
    body = next(w for flag, w in pairwise(words) if flag == "-d")
    request = urllib.request.Request(url, body.encode(), headers)
    with urllib.request.urlopen(request, timeout=60) as reply:
        return reply.status, json.loads(reply.read())


def test_usage_commands_run_one_after_the_other(tmp_path: Path, monkeypatch):
    """The README's usage block in a scratch directory, line by line on a tiny corpus: train,
    torchrun, evaluate, translate, plot, align, back-translation and training on it, serve and
    a request to it; then the Python block."""
    corpus = write_corpus(tmp_path / "multi30k", {"train": 200, "val": 12, "test_2016_flickr": 12})
    (tmp_path / "input.de").write_text("".join(de + "\n" for de, _ in make_pairs(5, seed=7)),
                                       encoding="utf-8")
    mono = [de for de, _ in make_pairs(6, seed=8)]
    (tmp_path / "mono.de").write_text("".join(de + "\n" for de in mono), encoding="utf-8")
    shrink = [*TINY_MODEL, *TINY_TRAIN, f"data.root={corpus}",
              f"data.cache_dir={tmp_path / 'cache'}", "data.tokenizer.vocab_size=120",
              "train.max_steps=40", "device=cpu"]
    monkeypatch.chdir(tmp_path)
    commands = usage_commands()
    assert [c[0] for c in commands] == ["nmt-train", "torchrun", "nmt-evaluate", "nmt-translate",
                                        "nmt-plot", "nmt-align", "nmt-backtranslate", "nmt-train",
                                        "nmt-serve", "curl"]
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    server = port = log = None
    try:
        for words in commands:
            if words[0] == "torchrun":    # the same program, on a free port of its own choosing
                proc = subprocess.run([sys.executable, "-m", "torch.distributed.run",
                                       "--standalone", *words[1:], *shrink, "train.max_steps=4"],
                                      cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=300)
                assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
            elif words[0] == "nmt-serve":
                server, port, log = _serve(words, tmp_path)
            elif words[0] == "curl":
                status, body = _curl(words, port)
                assert status == 200 and len(body["translations"]) == 1
                assert isinstance(body["translations"][0]["translation"], str)
            else:
                extra = shrink if words[0] == "nmt-train" else []
                assert _run_in_process(words + extra) == 0, words
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, "".join(log)[-3000:]
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()

    assert json.loads((tmp_path / "runs/tf/summary.json").read_text())["steps"] == 40
    assert json.loads((tmp_path / "runs/tf_ddp/summary.json").read_text())["steps"] == 4
    scores = json.loads((tmp_path / "runs/tf/eval/scores.json").read_text())
    assert scores["n_sentences"] == 12 and scores["beam_size"] == 5
    assert len((tmp_path / "output.en").read_text(encoding="utf-8").splitlines()) == 5
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "links.txt").read_text(encoding="utf-8").splitlines()) == 5
    real = (tmp_path / "runs/bt/bt.de").read_text(encoding="utf-8").splitlines()
    synthetic = (tmp_path / "runs/bt/bt.en").read_text(encoding="utf-8").splitlines()
    assert real and real == [de for de in mono if de in real] and len(synthetic) == len(real)
    assert all(s.startswith("<BT> ") for s in synthetic)
    assert json.loads((tmp_path / "runs/bt_en_de/summary.json").read_text())["steps"] == 40

    import matplotlib.pyplot as plt

    exec(compile(readme_block("Usage", "python"), "README.md", "exec"), {})   # noqa: S102
    plt.close("all")


def test_alignments_recipe_trains_both_directions_and_writes_scored_links(tmp_path: Path):
    """The README's alignment recipe (after its install line), scripts/align_text.sh, end to
    end on a tiny corpus: the text joins training as a weighted corpus, both guided directions
    train on the teacher's links of everything they read, nmt-align keeps the links they agree
    on for the text and scores the gold."""
    pytest.importorskip("eflomal")
    corpus = write_corpus(tmp_path / "multi30k", {"train": 120, "val": 10})
    for path in corpus.glob("*.de"):       # the generated German side stands in for French
        path.rename(path.with_suffix(".fr"))
    pairs = [(t, s) for s, t in make_pairs(12, 21)]                 # en ||| "fr"
    (tmp_path / "pairs.txt").write_text("".join(f"{s} ||| {t}\n" for s, t in pairs),
                                        encoding="utf-8")
    gold = tmp_path / "gold.txt"                                    # the final dots, 1-based
    gold.write_text("".join(f"{len(s.split())}-{len(t.split())}\n" for s, t in pairs))
    block = readme_block("Alignments", "bash").replace("\\\n", " ")
    commands = [words for line in block.splitlines() if (words := shlex.split(line, comments=True))]
    assert [c[:2] for c in commands] == [["pip", "install"], ["bash", "scripts/align_text.sh"]]
    shrink = [*TINY_TRANSFORMER[:-1], "model.decoder_layers=2", "data.tokenizer.vocab_size=100",
              "device=cpu", f"data.cache_dir={tmp_path / 'cache'}", "search.max_len_b=5",
              "train.log_every_steps=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STEPS": "6", "PYTHON": sys.executable,
           "NMT_DATA_ROOT": str(corpus), "GOLD": str(gold), "GOLD_ONE_BASED": "true"}
    script = str(REPO_ROOT / commands[1][1])
    proc = subprocess.run(["bash", script, *commands[1][2:], *shrink], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = tmp_path / "runs" / "align_en_fr"
    assert "12 pairs to align, 120 training pairs, weight 3" in proc.stdout
    assert len((run / "links.txt").read_text().splitlines()) == 12
    scores = json.loads((run / "aer.json").read_text())
    assert scores["symmetrize"] == "agreement" and 0.0 <= scores["aer"] <= 1.0
    for direction in ("en_fr", "fr_en"):
        log = (run / direction / "train.log").read_text()
        assert "eflomal aligns 132 pairs" in log and "| alignment_loss " in log


def test_multilingual_commands_train_evaluate_and_translate(tmp_path: Path, monkeypatch, capsys):
    """The README's multilingual block on a tiny 4-language corpus (de, en, fr and a stand-in
    cs): one model for the 6 English-centric directions, all 12 directions scored, a zero-shot
    direction through the pivot, and a translation into a chosen language."""
    sizes = {"train": 200, "val": 12, "test_2016_flickr": 12}
    corpus = write_multilingual_corpus(tmp_path / "multi30k", sizes)
    for split in sizes:                     # Czech stand-in: the German side, upper-cased
        text = (corpus / f"{split}.de").read_text(encoding="utf-8")
        (corpus / f"{split}.cs").write_text(text.upper(), encoding="utf-8")
    block = readme_block("Multilingual", "bash").replace("\\\n", " ")
    commands = [words for line in block.splitlines() if (words := shlex.split(line, comments=True))]
    multi = "checkpoint=runs/multi/checkpoints/best.pt"
    assert [c[:2] for c in commands] == [["nmt-train", "model=transformer"],
                                         ["nmt-evaluate", multi], ["nmt-evaluate", multi],
                                         ["nmt-translate", multi]]
    monkeypatch.chdir(tmp_path)
    shrink = [*TINY_MODEL, *TINY_TRAIN, f"data.root={corpus}",
              f"data.cache_dir={tmp_path / 'cache'}", "data.tokenizer.vocab_size=160",
              "train.max_steps=6", "device=cpu"]
    assert _run_in_process(commands[0] + shrink) == 0
    summary = json.loads((tmp_path / "runs/multi/summary.json").read_text())
    assert summary["steps"] == 6 and len(summary["best_bleu_directions"]) == 6
    assert _run_in_process(commands[1] + ["max_len_b=5", "device=cpu"]) == 0
    table = json.loads((tmp_path / "runs/multi/eval/directions.json").read_text())
    kinds = [row["direction"] for row in table["directions"]]
    assert len(kinds) == 12 and kinds.count("zero-shot") == 6
    for row in table["directions"]:
        assert (tmp_path / "runs/multi/eval" / f"{row['src']}-{row['tgt']}" / "hyps.txt").is_file()
    assert _run_in_process(commands[2] + ["max_len_b=5", "device=cpu"]) == 0
    pivot = json.loads((tmp_path / "runs/multi/de_fr_pivot/scores.json").read_text())
    assert pivot["n_sentences"] == 12
    (tmp_path / "runs/multi/in.de").write_text("ein hund läuft\n", encoding="utf-8")
    capsys.readouterr()
    assert _run_in_process(commands[3] + ["max_len_b=5", "device=cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
