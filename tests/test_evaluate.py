"""nmt.evaluation.evaluate: evaluate_split's scores and timing, the files write_outputs
writes (atomically), and BLEU 100 end to end for a model that has learnt its test pairs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import fit_pairs, make_pairs, train_tokenizer

from nmt.config import ConfigError, compose_config
from nmt.evaluation.alignments import load_alignments
from nmt.evaluation.evaluate import Evaluation, evaluate_split, write_outputs
from nmt.evaluation.metrics import corpus_scores
from nmt.inference.translator import Translator
from nmt.models import build_model

PAIRS = make_pairs(60, 0)
SRC, REF = [p[0] for p in PAIRS], [p[1] for p in PAIRS]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer({"type": "unigram", "vocab_size": 80, "character_coverage": 1.0,
                            "joint": True, "input_sentence_size": 1000}, PAIRS,
                           tmp_path_factory.mktemp("cache"))


def test_evaluate_split_and_write_outputs(tokenizer, tmp_path):
    cfg = compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                          "model.decoder_hidden=16", "model.attention_dim=16",
                          "model.output_dim=16"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval()
    translator = Translator(model, tokenizer, cfg)
    search = {"beam_size": 2, "length_penalty": 1.0, "max_len_a": 1.0, "max_len_b": 2,
              "batch_sentences": 7, "n_best": 2}
    src, ref = SRC[:10] + [""], REF[:10] + [""]
    evaluation = evaluate_split(translator, src, ref, search)
    scores, results = evaluation.scores, evaluation.results
    hyps = [r.text for r in results]
    assert len(results) == 11 and hyps[10] == ""
    assert hyps == [tokenizer.decode_tgt(r.ids) for r in results]
    assert scores["n_sentences"] == 11 and scores["beam_size"] == 2 and scores["seconds"] > 0
    assert scores["bleu"] == pytest.approx(corpus_scores(hyps, ref)["bleu"])
    assert scores["n_tgt_tokens"] == sum(len(r.ids) + 1 for r in results)
    # Reference loss: the mean forced log-probability per subword.
    forced = translator.score(src, ref)
    loss = -sum(f.logprob for f in forced) / sum(f.tokens for f in forced)
    assert scores["loss"] == pytest.approx(loss, abs=1e-4)
    assert scores["ppl"] == pytest.approx(math.exp(loss), rel=1e-3)

    out = tmp_path / "out"
    written = write_outputs(out, evaluation)
    assert written == ["hyps.txt", "scores.json", "sentences.tsv", "nbest.txt", "alignments.npz"]
    assert sorted(p.name for p in out.iterdir()) == sorted(written)    # no temporary files left
    assert (out / "hyps.txt").read_text(encoding="utf-8") == "".join(h + "\n" for h in hyps)
    assert json.loads((out / "scores.json").read_text(encoding="utf-8")) == scores
    data = load_alignments(out / "alignments.npz")
    src_ids = tokenizer.encode_src_batch(src)
    for i in range(11):
        assert data[i].matrix.shape == (len(results[i].ids) + 1, len(src_ids[i]) + 1)
        assert data[i].src[-1] == "</s>" and data[i].tgt[-1] == "</s>"
    rows = (out / "sentences.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0].split("\t")[:4] == ["index", "bleu", "chrf", "model_score"] and len(rows) == 12
    assert rows[0].split("\t")[7] == "source"
    assert [r.split("\t")[7] for r in rows[1:]] == src      # as given: no pieces, tags or <unk>
    assert [float(r.split("\t")[3]) for r in rows[1:]] == pytest.approx(
        [r.score for r in results], abs=1e-4)
    nbest = [r.split("\t")
             for r in (out / "nbest.txt").read_text(encoding="utf-8").splitlines()[1:]]
    assert [(int(r[0]), int(r[1])) for r in nbest[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert nbest[0][3] == hyps[0]
    with pytest.raises(ValueError):
        evaluate_split(translator, src[:2], ref[:1], search)


def test_return_attention_stores_every_weight(tokenizer, tmp_path):
    """``nmt-evaluate attention=all``: every layer's and head's weights go into the npz."""
    cfg = compose_config(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                          "model.encoder_layers=1", "model.decoder_layers=2"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval()
    search = {"beam_size": 2, "max_len_a": 0.0, "max_len_b": 6, "return_attention": True}
    write_outputs(tmp_path, evaluate_split(Translator(model, tokenizer, cfg), SRC[:3], REF[:3],
                                           search, score_references=False))
    item = load_alignments(tmp_path / "alignments.npz")[2]
    t, s = len(item.tgt), len(item.src)
    assert {k: v.shape for k, v in item.attention.items()} == {
        "cross": (2, 2, t, s), "decoder": (2, 2, t, t), "encoder": (1, 2, s, s)}
    np.testing.assert_allclose(item.attention["cross"][-1].mean(0), item.matrix, atol=1e-3)


def test_write_outputs_into_an_unwritable_place_names_out_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="out_dir="):
        write_outputs(blocker / "eval", Evaluation(results=[], sources=[], references=[],
                                                   scores={"bleu": 0.0}, sentences={}))


def test_learnt_translations_score_bleu_100_through_the_whole_path(tokenizer):
    """Tokenize, search, detokenize, sacreBLEU: a model that has learnt the pairs scores 100."""
    src, ref = SRC[:6], REF[:6]
    assert len(set(ref)) == 6 and any("ü" in s or "ß" in s or "ä" in s for s in src)
    cfg = compose_config(["model.d_model=32", "model.heads=2", "model.ff_dim=64",
                          "model.encoder_layers=1", "model.decoder_layers=1", "model.dropout=0.0",
                          "model.attention_dropout=0.0", "model.activation_dropout=0.0"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    loss = fit_pairs(model, list(zip(tokenizer.encode_src_batch(src),
                                     tokenizer.encode_tgt_batch(ref), strict=True)), steps=150)
    assert loss < 0.01
    translator = Translator(model, tokenizer, cfg)
    for beam in (1, 4):
        search = {"beam_size": beam, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 5,
                  "batch_sentences": 4, "n_best": 1}
        evaluation = evaluate_split(translator, src, ref, search)
        assert [r.text for r in evaluation.results] == ref
        scores = evaluation.scores
        assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)
        assert scores["ter"] == pytest.approx(0.0) and scores["loss"] < 0.01   # refs: learnt


def test_evaluate_split_checks_its_settings_once(tokenizer, monkeypatch):
    """search_settings once per split: the translations run on the checked settings
    (translate_with), which the evaluation keeps; nothing else joins the scores (MBR's come
    from nmt.extras.decoding.mbr, tests/test_mbr.py)."""
    from nmt.inference import translator as translator_module

    calls = []
    check = translator_module.validate_decoding
    monkeypatch.setattr(translator_module, "validate_decoding",
                        lambda settings: calls.append(1) or check(settings))
    cfg = compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                          "model.decoder_hidden=16", "model.attention_dim=16",
                          "model.output_dim=16"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size).eval()
    search = {"beam_size": 2, "max_len_a": 0.0, "max_len_b": 4, "batch_sentences": 1,
              "return_attention": False}
    evaluation = evaluate_split(Translator(model, tokenizer, cfg), SRC[:3], REF[:3], search)
    assert len(calls) == 1
    assert evaluation.settings == translator_module.search_settings(
        beam_size=2, max_len_a=0.0, max_len_b=4, batch_sentences=1)
    assert not {"decoding", "mbr", "search_baseline"} & set(evaluation.scores)
