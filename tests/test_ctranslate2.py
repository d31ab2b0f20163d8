"""CTranslate2 export (nmt-export) and engine (engine=ctranslate2) against the PyTorch engine.

On the tiny de->en checkpoint of tests/data (d_model 32, one layer each side, trained on the
generated corpus of conftest.py): 200 Multi30k validation sentences (out of its domain: long,
degenerate outputs, many at the maximum length, a hard case for exact agreement) and 200
generated sentences of its own domain (where BLEU means something). Skipped without
``ctranslate2`` (``pip install "nmt[ctranslate2]"``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from conftest import REPO_ROOT, make_pairs

pytest.importorskip("ctranslate2")

import nmt  # noqa: E402
from nmt.config import ConfigError, compose_config, to_plain  # noqa: E402
from nmt.evaluation.alignments import load_alignments  # noqa: E402
from nmt.evaluation.metrics import corpus_scores  # noqa: E402
from nmt.extras.tools.ctranslate2 import (  # noqa: E402
    CTranslate2Translator,
    InputTooLong,  # noqa: E402
    build_spec,
    export,
    require_ctranslate2,
)
from nmt.models.transformer import sinusoidal_positions  # noqa: E402

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
N = 200


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ct2")
    return {q: export(CKPT, root / q, quantization=q) for q in ("float32", "int8")}


@pytest.fixture(scope="module")
def engines(exported) -> dict[str, object]:
    return {"pytorch": nmt.Translator.from_checkpoint(CKPT),
            **{q: CTranslate2Translator.from_dir(d, intra_threads=1) for q, d in exported.items()}}


def _multi30k_val() -> tuple[list[str], list[str]]:
    import os

    root = Path(os.environ.get("NMT_DATA_ROOT", REPO_ROOT.parent / "shared" / "data" / "multi30k"))
    if not (root / "val.de").is_file():
        pytest.skip(f"Multi30k not found at {root} (set NMT_DATA_ROOT)")
    read = [(root / f"val.{lang}").read_text(encoding="utf-8").splitlines()[:N]
            for lang in ("de", "en")]
    return read[0], read[1]


def _generated() -> tuple[list[str], list[str]]:
    pairs = make_pairs(N, seed=1)          # the tiny model's own validation split
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.fixture(scope="module", params=["multi30k_val", "generated"])
def corpus(request) -> tuple[list[str], list[str]]:
    return _multi30k_val() if request.param == "multi30k_val" else _generated()


@pytest.fixture(scope="module")
def greedy(engines, corpus) -> dict[str, list]:
    return {name: engine.translate(corpus[0], beam_size=1) for name, engine in engines.items()}


def _bleu(results, refs) -> float:
    return corpus_scores([r.text for r in results], refs)["bleu"]


# ----------------------------------------------------------------------------- export
def test_export_writes_our_positions_norm_alignment_and_tokenizer(exported, engines):
    directory = exported["float32"]
    names = {p.name for p in directory.iterdir()}
    assert {"model.bin", "config.json", "nmt_export.json", "spm.model", "tokenizer.json"} <= names
    assert any(n.endswith("vocabulary.json") or n.endswith("vocabulary.txt") for n in names)
    info = json.loads((directory / "nmt_export.json").read_text())
    assert info["quantization"] == "float32" and info["norm"] == "pre"
    assert info["alignment"] == {"layer": 0, "heads": 2, "num_heads": 2,   # the mean of 2
                                 "full_context": False}
    assert json.loads((directory / "config.json").read_text())["layer_norm_epsilon"] == 1e-5
    ct2 = engines["float32"]
    assert ct2.tokenizer.fingerprint == engines["pytorch"].tokenizer.fingerprint
    assert ct2.config.model == engines["pytorch"].config.model
    # Our interleaved sin/cos table, not CTranslate2's [sin..., cos...] layout.
    pt = engines["pytorch"]
    spec = build_spec(pt.model, pt.tokenizer, pt.config.model, 64)
    table = sinusoidal_positions(64, 32).numpy()
    np.testing.assert_array_equal(spec.encoder.position_encodings.encodings.numpy(), table)
    np.testing.assert_array_equal(spec.decoder.position_encodings.encodings.numpy(), table)
    value = {name: int(getattr(stack, name).numpy()) for stack, name in (
        (spec.decoder, "alignment_layer"), (spec.decoder, "alignment_heads"),
        (spec.encoder, "pre_norm"), (spec.decoder, "pre_norm"))}
    assert value == {"alignment_layer": 0, "alignment_heads": 2, "pre_norm": 1}


def test_export_refuses_an_rnn_and_an_existing_directory(tmp_path):
    from nmt.checkpoint import save_atomic
    from nmt.data.tokenizer import Tokenizer
    from nmt.models import build_model

    ckpt = torch.load(CKPT, weights_only=True)
    tok = Tokenizer.from_state_dict(ckpt["tokenizer"])
    cfg = compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                          "model.decoder_hidden=8", "model.attention_dim=8", "model.output_dim=8"])
    rnn = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    path = tmp_path / "rnn.pt"
    save_atomic({"version": 1, "model": rnn.state_dict(), "config": to_plain(cfg),
                 "tokenizer": tok.state_dict(), "step": 0, "epoch": 0, "batch_in_epoch": 0}, path)
    with pytest.raises(ConfigError, match="CTranslate2 has no Bahdanau RNN"):
        export(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    from nmt.cli.export import main

    assert main([f"checkpoint={path}", "format=ctranslate2", f"out_dir={tmp_path / 'out'}"]) == 2
    ckpt["config"]["model"]["encoder_drop_residual"] = 0   # Liu et al. 2021: no CT2 layer for it
    save_atomic(ckpt, tmp_path / "liu.pt")
    with pytest.raises(ConfigError, match=r"encoder layer 0's self-attention .* engine=pytorch"):
        export(tmp_path / "liu.pt", tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ConfigError, match="not an empty directory"):
        export(CKPT, tmp_path / "full")


def test_missing_ctranslate2_is_one_paragraph_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ConfigError, match=re.escape('pip install "nmt[ctranslate2]"')):
        require_ctranslate2()


def test_post_norm_gelu_untied_model_scores_and_translates_alike(tmp_path):
    """Every other layout choice: post-norm (no final LayerNorm), gelu, an output projection
    of its own, two decoder layers with the alignment from the first; the int8 export must
    leave the model untouched (CTranslate2 quantizes its arrays in place)."""
    from nmt.data.tokenizer import Tokenizer

    tok = Tokenizer.from_state_dict(torch.load(CKPT, weights_only=True)["tokenizer"])
    cfg = compose_config(["model.d_model=32", "model.heads=4", "model.ff_dim=48",
                          "model.encoder_layers=2", "model.decoder_layers=2", "model.norm=post",
                          "model.activation=gelu", "model.tie_embeddings=false",
                          "model.alignment_layer=0"])
    from nmt.models import build_model

    torch.manual_seed(3)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    export(nmt.Translator(model, tok, cfg), tmp_path / "int8", quantization="int8")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    out = export(nmt.Translator(model, tok, cfg), tmp_path / "fp32", max_positions=128)
    pt, ct2 = nmt.Translator(model, tok, cfg), CTranslate2Translator.from_dir(out, intra_threads=1)
    src, ref = _generated()
    forced_pt, forced_ct2 = pt.score(src[:20], ref[:20]), ct2.score(src[:20], ref[:20])
    for a, b in zip(forced_pt, forced_ct2, strict=True):
        assert a.tokens == b.tokens and a.logprob == pytest.approx(b.logprob, abs=1e-3)
    ours = pt.translate(src[:10], beam_size=1, max_len_a=0.0, max_len_b=12)
    theirs = ct2.translate(src[:10], beam_size=1, max_len_a=0.0, max_len_b=12)
    assert [r.ids for r in theirs] == [r.ids for r in ours]
    for a, b in zip(ours, theirs, strict=True):
        assert b.score == pytest.approx(a.score, abs=1e-4)
        np.testing.assert_allclose(b.alignment, a.alignment, atol=1e-3)


# ----------------------------------------------------------------------- translations
def test_greedy_float32_equals_pytorch(greedy, corpus):
    ours, theirs = greedy["pytorch"], greedy["float32"]
    same = [a.ids == b.ids for a, b in zip(ours, theirs, strict=True)]
    assert sum(same) >= 0.99 * N
    assert abs(_bleu(theirs, corpus[1]) - _bleu(ours, corpus[1])) <= 0.2
    for a, b, equal in zip(ours, theirs, same, strict=True):
        if equal:
            assert b.score == pytest.approx(a.score, abs=1e-4)
            assert b.tokens == a.tokens and b.src_tokens == a.src_tokens


def test_alignments_equal_ours(greedy, engines, corpus):
    for a, b in list(zip(greedy["pytorch"], greedy["float32"], strict=True))[:10]:
        assert a.ids == b.ids and b.alignment.shape == a.alignment.shape
        np.testing.assert_allclose(b.alignment, a.alignment, atol=1e-3)
    sentences = corpus[0][:8]           # beam search (and its first-step attention) too
    ours = engines["pytorch"].translate(sentences, beam_size=5)
    theirs = engines["float32"].translate(sentences, beam_size=5)
    for a, b in zip(ours, theirs, strict=True):
        assert a.ids == b.ids
        np.testing.assert_allclose(b.alignment, a.alignment, atol=1e-3)


def test_int8_bleu_stays_close(greedy, corpus):
    # 8-bit weights cost 0.5 BLEU of this tiny, half-trained model on a CPU with AVX-512
    # (VNNI) and 2.9 on one without (AMD EPYC): CTranslate2 picks other int8
    # kernels there. A broken export scores near 0.
    assert abs(_bleu(greedy["int8"], corpus[1]) - _bleu(greedy["pytorch"], corpus[1])) <= 5.0


def test_beam_search_with_our_length_penalty(engines, corpus):
    sentences = corpus[0][:100]
    ours = engines["pytorch"].translate(sentences, beam_size=5, length_penalty=1.0)
    theirs = engines["float32"].translate(sentences, beam_size=5, length_penalty=1.0)
    assert sum(a.ids == b.ids for a, b in zip(ours, theirs, strict=True)) >= 0.98 * len(sentences)
    for a, b in zip(ours, theirs, strict=True):
        if a.ids == b.ids:
            assert b.score == pytest.approx(a.score, abs=1e-4)


def test_reference_scores_and_sampling(engines):
    src, ref = _generated()
    ours = engines["pytorch"].score(src[:30], ref[:30])
    theirs = engines["float32"].score(src[:30], ref[:30])
    assert [f.tokens for f in theirs] == [f.tokens for f in ours]
    assert [f.logprob for f in theirs] == pytest.approx([f.logprob for f in ours], abs=1e-3)
    ct2 = engines["float32"]
    first, again = (ct2.translate(src[:20], sampling=True, seed=5) for _ in range(2))
    assert [r.text for r in first] == [r.text for r in again]
    # A sample's score is its model log-likelihood (under our length penalty); compare where
    # the text re-tokenizes into the sampled subwords.
    same = [(s, r) for s, r in zip(src[:20], first, strict=True)
            if ct2.tokenizer.encode_tgt_batch([r.text])[0] == r.ids]
    forced = engines["pytorch"].score([s for s, _ in same], [r.text for _, r in same])
    assert len(same) >= 10 and [r.score for _, r in same] == pytest.approx(
        [f.logprob / ((5 + f.tokens) / 6) for f in forced], abs=1e-3)
    cold = ct2.translate(src[:20], sampling=True, temperature=0.0)
    greedy = engines["pytorch"].translate(src[:20], beam_size=1)
    assert [r.text for r in cold] == [r.text for r in greedy]


def test_positions_beyond_the_export_and_all_attention_are_clear_errors(tmp_path, engines):
    """InputTooLong (a ConfigError) names the sentence or pair and the positions, not the
    export's directory: nmt-serve passes its index on to clients."""
    short = CTranslate2Translator.from_dir(export(CKPT, tmp_path / "p", max_positions=16),
                                           intra_threads=1)
    long = "Ein großer Hund läuft im Park mit einem Ball bei Sonnenschein ."
    with pytest.raises(InputTooLong, match="larger max_positions=") as refused:
        short.translate(["Ein Hund .", long], max_len_a=0, max_len_b=6)
    assert (refused.value.index, refused.value.positions) == (1, 16)
    assert str(tmp_path) not in str(refused.value) and isinstance(refused.value, ConfigError)
    with pytest.raises(InputTooLong, match="pair 0 has") as refused:
        short.score([long], ["A dog ."])
    assert str(tmp_path) not in str(refused.value)
    with pytest.raises(ConfigError, match="engine=pytorch"):
        engines["float32"].translate("Ein Hund .", return_attention=True)


def test_mbr_on_ctranslate2_over_its_beam_or_samples_without_epsilon(engines):
    from nmt.extras.decoding.mbr import mbr_translate

    ct2, src = engines["float32"], _generated()[0][:4]
    beam, sample = {"candidates": "beam", "num": 3}, {"candidates": "sample", "num": 3}
    ours = mbr_translate(engines["pytorch"], src, **beam)
    assert [r.text for r in mbr_translate(ct2, src, **beam)] == [r.text for r in ours]
    sampled = mbr_translate(ct2, src, **sample, epsilon=0.0, top_p=0.9)
    assert [r.mbr_cost.candidates for r in sampled] == [3] * 4 and all(r.text for r in sampled)
    assert not ct2.epsilon_sampling and not ct2.all_attention
    with pytest.raises(ConfigError, match="CTranslate2Translator cannot do mbr.epsilon > 0"):
        mbr_translate(ct2, src, **sample)


# --------------------------------------------------------------------- command line
def readme_serving_commands() -> list[str]:
    """The nmt-* lines of the README's "Serving with CTranslate2" block."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Serving with CTranslate2.*?```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no bash block under '## Serving with CTranslate2'"
    return [ln.split("#")[0].strip() for ln in block.group(1).splitlines()
            if ln.strip().startswith("nmt-")]


def test_readme_commands_round_trip_to_the_same_files(tmp_path, capsys):
    """The README's export / translate / evaluate lines (paths moved to tmp_path) write what
    the PyTorch engine writes from the checkpoint."""
    from nmt.cli import evaluate, export, translate

    (tmp_path / "data").mkdir()
    src, ref = (tmp_path / "data" / "test.de", tmp_path / "data" / "test.en")
    pairs = make_pairs(24, seed=2)
    src.write_text("".join(p[0] + "\n" for p in pairs), encoding="utf-8")
    ref.write_text("".join(p[1] + "\n" for p in pairs), encoding="utf-8")
    ct2_run, pt_run = tmp_path / "ct2run", tmp_path / "ptrun"
    swap = {"runs/tf/checkpoints/best.pt": str(CKPT), "runs/tf/": f"{ct2_run}/",
            "split=test_2016_flickr": f"src_file={src} ref_file={ref}", "input.de": str(src),
            "output.en": str(ct2_run / "output.en")}
    tools = {"nmt-export": export.main, "nmt-translate": translate.main,
             "nmt-evaluate": evaluate.main}
    lines = readme_serving_commands()
    assert [ln.split()[0] for ln in lines] == ["nmt-export", "nmt-export", "nmt-translate",
                                               "nmt-evaluate"]
    pytorch_twins = []
    for line in lines:
        for old, new in swap.items():
            line = line.replace(old, new)
        assert "runs/" not in line
        tool, *args = shlex.split(line)
        assert tools[tool](args) == 0, capsys.readouterr().err
        if tool != "nmt-export":     # the same command with the checkpoint and engine=pytorch
            twin = [a.replace(str(ct2_run), str(pt_run)) for a in args
                    if not a.startswith(("engine=", "model_dir="))]
            pytorch_twins.append((tool, [*twin, f"checkpoint={CKPT}"]))
    pt_run.mkdir()
    for tool, args in pytorch_twins:
        assert tools[tool](args) == 0, capsys.readouterr().err
    int8 = (ct2_run / "output.en").read_text(encoding="utf-8").splitlines()
    ours = (pt_run / "output.en").read_text(encoding="utf-8").splitlines()
    # int8 against float32 on this half-trained tiny model: see test_int8_bleu_stays_close.
    assert len(int8) == len(ours) == 24
    assert sacrebleu.corpus_bleu(int8, [ours]).score >= 40
    ct2_dir, pt_dir = ct2_run / "eval_ct2", pt_run / "eval_ct2"
    for name in ("hyps.txt", "sentences.tsv"):
        assert ((ct2_dir / name).read_text(encoding="utf-8")
                == (pt_dir / name).read_text(encoding="utf-8"))
    a = json.loads((ct2_dir / "scores.json").read_text())
    b = json.loads((pt_dir / "scores.json").read_text())
    assert (a["engine"], a["quantization"], a["checkpoint"]) == ("ctranslate2", "float32",
                                                                 str(CKPT))
    timing = {"seconds", "ms_per_sentence", "sents_per_s", "tgt_tokens_per_s", "engine",
              "model_dir", "quantization"}
    # pytest.approx takes no list inside a dict (pytest >= 9.2): the n-gram precisions apart.
    assert a.pop("bleu_precisions") == pytest.approx(b.pop("bleu_precisions"), abs=1e-3)
    assert {k: v for k, v in a.items() if k not in timing} == pytest.approx(
        {k: v for k, v in b.items() if k not in timing}, abs=1e-3)
    ours = load_alignments(pt_dir / "alignments.npz")
    theirs = load_alignments(ct2_dir / "alignments.npz")
    assert len(theirs) == len(ours) == 24
    for i in range(24):
        assert (theirs[i].src, theirs[i].tgt) == (ours[i].src, ours[i].tgt)
        np.testing.assert_allclose(theirs[i].matrix, ours[i].matrix, atol=1e-3)
    # n-best lists too
    for engine, out in ((["engine=ctranslate2", f"model_dir={ct2_run / 'ct2'}"],
                         tmp_path / "n_ct2"),
                        ([f"checkpoint={CKPT}"], tmp_path / "n_pt")):
        assert evaluate.main([*engine, f"src_file={src}", f"ref_file={ref}", "beam_size=4",
                              "n_best=3", f"out_dir={out}"]) == 0
    assert ((tmp_path / "n_ct2" / "nbest.txt").read_text()
            == (tmp_path / "n_pt" / "nbest.txt").read_text())


@pytest.mark.parametrize("args, key", [
    (["engine=ctranslate2"], "model_dir"),
    (["engine=ctranslate2", f"checkpoint={CKPT}", "model_dir=x"], "checkpoint"),
    (["model_dir=x", f"checkpoint={CKPT}"], "model_dir"),
    (["engine=onnx", "model_dir=x"], "engine"),
    (["engine=ctranslate2", "model_dir=/nonexistent"], "model_dir"),
    (["engine=ctranslate2", "model_dir=x", "attention=all"], "attention"),
    (["engine=ctranslate2", "model_dir=x", "weights=trained"], "weights"),
    ([f"checkpoint={CKPT}", "weights=ema"], "weights"),
])
def test_evaluate_engine_errors(args, key, capsys):
    from nmt.cli import evaluate

    assert evaluate.main([*args, "src_file=a.de", "ref_file=a.en"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-evaluate: error:") and key in err and "Traceback" not in err


@pytest.mark.parametrize("args, key", [
    (["format=onnx"], "format"), (["quantization=int4"], "quantization"),
    (["max_positions=1"], "max_positions"),
])
def test_export_setting_errors(args, key, tmp_path, capsys):
    from nmt.cli import export

    assert export.main([f"checkpoint={CKPT}", f"out_dir={tmp_path / 'x'}", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-export: error:") and key in err and "Traceback" not in err


def test_bench_decode_adds_ctranslate2_columns(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_decode",
                                                  REPO_ROOT / "scripts" / "bench_decode.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src, ref = _generated()
    (tmp_path / "s.de").write_text("\n".join(src[:12]) + "\n", encoding="utf-8")
    (tmp_path / "s.en").write_text("\n".join(ref[:12]) + "\n", encoding="utf-8")
    threads = torch.get_num_threads()
    try:
        assert bench.main([f"checkpoint={CKPT}", f"src_file={tmp_path / 's.de'}",
                           f"ref_file={tmp_path / 's.en'}", "repeats=1", "threads=1",
                           "device=cpu"]) == 0
    finally:
        torch.set_num_threads(threads)
    fields = dict(kv.split("=") for kv in capsys.readouterr().out.strip().splitlines()[-1].split())
    for key in ("beam5_sents_per_s", "ct2_fp32_beam5_sents_per_s", "ct2_int8_beam5_sents_per_s",
                "ct2_fp32_greedy_sents_per_s", "ct2_int8_greedy_sents_per_s"):
        assert float(fields[key]) > 0
    assert fields["ct2_fp32_greedy_bleu"] == fields["greedy_bleu"]
    assert fields["ct2_fp32_beam5_bleu"] == fields["beam5_bleu"]
