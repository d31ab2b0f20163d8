"""nmt-backtranslate end to end on the tiny corpus.

A tiny en-de model trained a few steps back-translates English into a tagged synthetic corpus, which
a de-en run then trains on through data.corpora (its pairs counted, the <BT> tag in their source
ids); the zero-shot pairs of a multilingual model (pivot=en), trained on through data.corpora;
streaming in chunks; one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO_ROOT, TINY_MODEL, TINY_TRAIN, train, write_multilingual_corpus
from test_evaluate_cli import user_error

from nmt.cli import backtranslate as cli
from nmt.config import ConfigError, compose_config

pytestmark = pytest.mark.slow


def _base(root: Path, corpus: Path) -> list[str]:
    return [f"data.root={corpus}", f"data.cache_dir={root / 'cache'}", "data.test_split=test",
            "data.tokenizer.vocab_size=120", *TINY_MODEL, *TINY_TRAIN]


@pytest.fixture(scope="module")
def en_de(tmp_path_factory) -> tuple[Path, Path]:
    """``(checkpoint, corpus)``: a tiny en-de Transformer trained 3 steps on the tiny corpus
    (de, en and a stand-in fr, 200 training pairs)."""
    root = tmp_path_factory.mktemp("bt")
    corpus = write_multilingual_corpus(root / "corpus")
    train(compose_config(_base(root, corpus) + ["data.src_lang=en", "data.tgt_lang=de",
                                                "train.max_steps=3", f"run_dir={root / 'en_de'}"]))
    return root / "en_de" / "checkpoints" / "last.pt", corpus


def _mono(path: Path, corpus: Path, n: int = 30) -> Path:
    """``n`` English lines of the training split, a blank line and a line of 200 words."""
    lines = (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:n]
    path.write_text("\n".join([*lines[:5], "", *lines[5:], "word " * 200]) + "\n", encoding="utf-8")
    return path


def test_tagged_corpus_is_trained_on_through_data_corpora(en_de, tmp_path, capsys):
    ckpt, corpus = en_de
    out = tmp_path / "bt"
    assert cli.main([f"checkpoint={ckpt}", f"input={_mono(tmp_path / 'mono.en', corpus)}",
                     f"out_dir={out}", "tag=true", "beam_size=2", "chunk_lines=7"]) == 0
    # 32 lines: the blank one and the 200-word one (over data.max_len=100 subwords) skipped.
    err = capsys.readouterr().err
    assert "de-en: 32 lines -> 30 pairs; skipped 1 blank, 1 over 100 subwords (line 32)" in err
    # the progress, a line per chunk of 7 lines
    assert "INFO back-translation en-de: 7 lines read, 6 pairs" in err
    assert "INFO back-translation en-de: 32 lines read, 30 pairs" in err
    synthetic = (out / "bt.de").read_text(encoding="utf-8").splitlines()
    real = (out / "bt.en").read_text(encoding="utf-8").splitlines()
    assert len(synthetic) == len(real) == 30 and all(s.startswith("<BT> ") for s in synthetic)
    assert real == (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:30]
    manifest = json.loads((out / "bt.backtranslation.json").read_text())
    assert manifest["directions"]["de-en"] == {"lines": 32, "pairs": 30, "blank": 1,
                                               "too_long": 1, "first_too_long": 32}

    # de-en on the real corpus and the synthetic one (weight 2), <BT> reserved as one piece.
    from nmt.data.pipeline import prepare_data

    cfg = compose_config(_base(tmp_path, corpus) + [
        "data.tokenizer.bt_tag=true", f"data.corpora=[{{split: bt, root: {out}, weight: 2}}]",
        "train.max_steps=2", f"run_dir={tmp_path / 'de_en'}"])
    assert train(cfg)["steps"] == 2
    data = prepare_data(cfg.data)                             # the run's caches: a cache hit
    bt = data.tokenizer.bt_tag_id
    assert bt is not None and data.tokenizer.src_pieces([bt]) == ["<BT>"]
    assert data.weights == [1.0, 2.0]
    assert np.bincount(data.train.groups).tolist() == [200, 30]   # every synthetic pair read
    table = pa.ipc.open_file(pa.memory_map(str(data.train.path))).read_all()
    for ids, group in zip(table["src_ids"].to_pylist(), table["corpus"].to_pylist(), strict=True):
        assert (bt in ids[:2]) == (group == 1)                # "▁ <BT> ..." in the sources


def test_pivot_writes_the_zero_shot_pairs_of_a_multilingual_model(tmp_path, capsys):
    corpus = write_multilingual_corpus(tmp_path / "corpus", {"train": 40, "val": 4, "test": 4})
    train(compose_config(_base(tmp_path, corpus) + [
        "data.pairs=[de-en,en-de,fr-en,en-fr]", "train.max_steps=1", f"run_dir={tmp_path / 'm'}"]))
    out = tmp_path / "zs"
    assert cli.main([f"checkpoint={tmp_path / 'm' / 'checkpoints' / 'last.pt'}", "pivot=en",
                     f"out_dir={out}", "split=train", "tag=true", "beam_size=1",
                     "chunk_lines=16"]) == 0
    err = capsys.readouterr().err
    assert "fr-de: 40 lines -> 40 pairs" in err and "de-fr: 40 lines -> 40 pairs" in err
    # without a direction, a multilingual model is refused (it translated as its data.src_lang /
    # tgt_lang, de-en, whatever the input), by nmt-backtranslate and nmt-translate alike
    from nmt.cli import translate

    ckpt = tmp_path / "m" / "checkpoints" / "last.pt"
    mono = _mono(tmp_path / "mono.en", corpus, n=4)
    for main, prog, args in ((cli.main, "nmt-backtranslate", [f"out_dir={tmp_path / 'bt'}"]),
                             (translate.main, "nmt-translate", [])):
        for direction in ([], ["tgt_lang=de"]):
            assert main([f"checkpoint={ckpt}", f"input={mono}", *args, *direction]) == 2
            assert "a multilingual model (trained on de-en, en-de, fr-en, en-fr): name the " \
                "direction with src_lang= and tgt_lang=" in user_error(capsys, prog)
    assert translate.main([f"checkpoint={ckpt}", f"input={mono}", "src_lang=en", "tgt_lang=de",
                           f"output={tmp_path / 'out.de'}"]) == 0
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").splitlines()) == 6
    for x, y in (("fr", "de"), ("de", "fr")):   # x: English translated into x; y: real
        rows = [r.split("\t") for r in (out / f"train.{x}-{y}.tsv").read_text(
            encoding="utf-8").splitlines()]
        assert [t for _, t in rows] == (corpus / f"train.{y}").read_text(
            encoding="utf-8").splitlines()
        assert all(s.startswith("<BT> ") for s, _ in rows)
    # the layout of a multilingual data.format=tsv split
    from nmt.data.corpus import iter_parallel

    data = compose_config([f"data.root={out}", "data.format=tsv",
                           "data.pairs=[de-en,fr-de]"]).data
    assert len(list(iter_parallel(data, "train", ("fr", "de")))) == 40
    # the zero-resource run: the text corpus's real directions, the synthetic ones through
    # data.corpora (format tsv), one cache with a group per (direction, corpus)
    run = tmp_path / "zr"
    train(compose_config(_base(tmp_path, corpus) + [
        "data.pairs=[de-en,en-de,fr-en,en-fr,de-fr,fr-de]",
        "data.train_pairs=[de-en,en-de,fr-en,en-fr]",
        f"data.corpora=[{{split: train, root: {out}, format: tsv, pairs: [de-fr, fr-de]}}]",
        "data.tokenizer.bt_tag=true", "train.max_steps=1", f"run_dir={run}"]))
    splits = [pa.ipc.open_file(pa.memory_map(str(f))) for f in
              (tmp_path / "cache" / "tokenized").glob("train-*.arrow")]
    grouped = [f for f in splits if "group" in f.schema.names]
    assert len(grouped) == 1
    groups = grouped[0].read_all().column("group").to_numpy()
    # 4 real directions, then 2 synthetic (a 1-step model's: some dropped by data.max_len_ratio)
    counts = np.bincount(groups).tolist()
    assert counts[:4] == [40] * 4 and len(counts) == 6 and min(counts[4:]) > 0
    assert (run / "checkpoints" / "last.pt").is_file()
    # its corpus holds nmt-backtranslate's report: synthetic, so what only it holds is
    # zero-resource to the evaluator (not supervised), the untrained rest zero-shot
    from nmt.extras.decoding.multilingual import direction_kind
    from nmt.inference.translator import Translator

    zr = Translator.from_checkpoint(run / "checkpoints" / "last.pt")
    assert zr.config.data.corpora[0].synthetic is True
    assert [direction_kind(zr, *d) for d in (("de", "en"), ("de", "fr"), ("fr", "de"))] == [
        "supervised", "zero-resource", "zero-resource"]


def test_it_streams_chunk_by_chunk(en_de, tmp_path):
    """No more than ``chunk_lines`` lines are read ahead of the ones translated."""
    from nmt.extras.decoding.backtranslate import backtranslate
    from nmt.inference.translator import Translator

    translator = Translator.from_checkpoint(en_de[0])
    asked: list[int] = []
    translate_with = translator.translate_with

    def counting(texts, settings, **kwargs):
        asked.append(len(texts))
        return translate_with(texts, settings, **kwargs)

    translator.translate_with = counting
    ahead = []

    def lines():
        for i in range(10):
            ahead.append(i - sum(asked))      # lines read but not yet translated, before line i
            yield f"A dog runs {i} ."

    report = backtranslate(translator, lines(), tmp_path / "s", "bt",
                           translator.search_settings(beam_size=1), chunk_lines=3)
    assert asked == [3, 3, 3, 1] and max(ahead) == 2 and report.pairs == 10


def test_sampling_draws_each_chunk_from_the_runs_one_generator(en_de, tmp_path):
    """One line six times in chunks of two: each chunk samples with its own seed from the run's
    generator (one seed for every chunk gave [a, b, a, b, a, b]); the run repeats with its seed."""
    from nmt.extras.decoding.backtranslate import backtranslate
    from nmt.inference.translator import Translator

    translator = Translator.from_checkpoint(en_de[0])
    settings = translator.search_settings(sampling=True, top_k=0, seed=3)
    runs = []
    for k in range(2):
        backtranslate(translator, ["A dog runs in the snow ."] * 6, tmp_path / str(k), "bt",
                      settings, chunk_lines=2)
        runs.append((tmp_path / str(k) / "bt.de").read_text(encoding="utf-8").splitlines())
    assert runs[0] == runs[1]
    chunks = [runs[0][i:i + 2] for i in (0, 2, 4)]
    assert chunks[0] != chunks[1] and chunks[1] != chunks[2]


def test_a_stopped_run_resumes_to_the_corpus_of_an_uninterrupted_one(en_de, tmp_path):
    """Sampled, in chunks of two: a run interrupted at its third chunk, started again with the
    same settings, reads on after its second chunk and writes the uninterrupted run's corpus
    (each chunk's seed included)."""
    from nmt.extras.decoding.backtranslate import backtranslate
    from nmt.inference.translator import Translator

    translator = Translator.from_checkpoint(en_de[0])
    settings = translator.search_settings(sampling=True, top_k=0, seed=5)
    lines = [f"A dog runs {i} times in the snow ." for i in range(7)]
    backtranslate(translator, lines, tmp_path / "whole", "bt", settings, chunk_lines=2)
    translate_with, asked = translator.translate_with, []

    def stopping(texts, settings, **kwargs):
        asked.append(texts[0])
        if len(asked) == 3:
            raise KeyboardInterrupt
        return translate_with(texts, settings, **kwargs)

    translator.translate_with = stopping
    with pytest.raises(KeyboardInterrupt):
        backtranslate(translator, lines, tmp_path / "stopped", "bt", settings, chunk_lines=2)
    assert not (tmp_path / "stopped" / "bt.de").exists()
    report = backtranslate(translator, lines, tmp_path / "stopped", "bt", settings,
                           chunk_lines=2)
    assert asked == [lines[0], lines[2], lines[4], lines[4], lines[6]] and report.pairs == 7
    for name in ("bt.de", "bt.en"):
        assert (tmp_path / "stopped" / name).read_bytes() == \
            (tmp_path / "whole" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "stopped").iterdir()) == ["bt.de", "bt.en"]


def test_bad_input_is_one_line_and_writes_nothing(en_de, tmp_path, capsys):
    ckpt, corpus = en_de
    (tmp_path / "empty.en").write_bytes(b"")
    args = [f"checkpoint={ckpt}", f"out_dir={tmp_path / 'o'}"]
    for extra, message in (
            ([f"input={tmp_path / 'none.en'}"], "none.en: file not found."),
            ([f"input={tmp_path / 'empty.en'}"], "empty.en: the file is empty"),
            ([], "input is required"),
            ([f"input={tmp_path / 'empty.en'}", "pivot=en"],
             "pivot=en reads the model's own corpus"),
            (["pivot=en", "format=text"], "drop format=text"),
            ([f"input={corpus / 'train.en'}", "n_best=2", "beam_size=2"], "n_best=2"),
            ([f"input={corpus / 'train.en'}", "pivot=en"], "pivot=en reads")):
        assert cli.main(args + extra) == 2, extra
        assert message in user_error(capsys, "nmt-backtranslate"), extra
    # every line read (the progress line), none kept: the error after it
    assert cli.main(args + [f"input={corpus / 'train.en'}", "max_len=2"]) == 2
    err = capsys.readouterr().err
    assert "INFO back-translation en-de: 200 lines read, 0 pairs\nnmt-backtranslate: error: " \
        "no line was back-translated" in err and "Traceback" not in err
    assert not any((tmp_path / "o").glob("*"))                 # nothing left behind
    (tmp_path / "o" / "bt.de").write_text("x\n")
    assert cli.main(args + [f"input={corpus / 'train.en'}"]) == 2
    assert "bt.de exists" in user_error(capsys, "nmt-backtranslate")
    (tmp_path / "o" / "bt.de").unlink()
    (tmp_path / "o" / "bt.backtranslation.json").write_text("{}\n")   # another run's report
    assert cli.main(args + [f"input={corpus / 'train.en'}"]) == 2
    assert "bt.backtranslation.json exists: nmt-backtranslate does not overwrite a corpus or its " \
        "report" in user_error(capsys, "nmt-backtranslate")


def test_bt_tag_with_a_given_tokenizer_without_it_is_refused(en_de, tmp_path):
    ckpt, corpus = en_de
    cfg = compose_config(_base(tmp_path, corpus) + [
        "data.tokenizer.bt_tag=true", f"data.tokenizer.model={ckpt.parents[1] / 'tokenizer'}",
        "train.max_steps=1", f"run_dir={tmp_path / 'r'}"])
    with pytest.raises(ConfigError, match="bt_tag=true, but the tokenizer given .* has no <BT>"):
        train(cfg)


def test_help_loads_no_torch():
    code = ("import contextlib, io, sys\nfrom nmt.cli.backtranslate import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    status = main(['--help'])\n"
            "assert status == 0 and out.getvalue().startswith('nmt-backtranslate'), "
            "out.getvalue()\n"
            "print(sorted(m for m in ('torch', 'sentencepiece', 'nmt.extras') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
