"""The Python API (nmt.Translator, nmt.plot_alignment, nmt.train; nmt/inference/translator.py)
and the CLI features on it: search settings, n-best lists, forced scores, sampling, ensembles,
batching by tokens, TER and per-sentence files. MBR decoding: tests/test_mbr.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT

import nmt
import nmt.cli.schemas  # noqa: F401 - registers nmt-translate's schema for compose_config
from nmt.config import ConfigError, compose_config
from nmt.extras.decoding.ensemble import Ensemble, ensemble_translator
from nmt.inference.search import length_penalty_factor
from nmt.inference.translator import length_sorted_batches, search_settings
from nmt.models import build_model

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand mit einem Ball .",
           "Eine ältere Frau wartet auf der Brücke .", ""]


SHORT = {"max_len_a": 0.0, "max_len_b": 8}     # untrained models: keep outputs short


@pytest.fixture(scope="module")
def translator() -> nmt.Translator:
    return nmt.Translator.from_checkpoint(CKPT)


def _fresh(model_overrides: list[str]) -> nmt.Translator:
    """A fresh (seeded) model over the tiny checkpoint's tokenizer."""
    import torch

    base = nmt.Translator.from_checkpoint(CKPT)
    cfg = compose_config(model_overrides, validate_fn=None)
    torch.manual_seed(0)
    model = build_model(cfg.model, base.tokenizer.src_vocab_size, base.tokenizer.tgt_vocab_size)
    return nmt.Translator(model, base.tokenizer, base.config)


def test_translate_one_sentence_or_many(translator):
    one = translator.translate(SOURCES[0], beam_size=3)
    assert isinstance(one, nmt.Translation) and one.text
    assert one.alignment.shape == (len(one.tokens), len(one.src_tokens))
    assert one.tokens[-1] == one.src_tokens[-1] == "</s>"
    np.testing.assert_allclose(one.alignment.sum(1), 1.0, atol=1e-5)
    many = translator.translate(SOURCES, beam_size=3)
    assert [r.text for r in many][0] == one.text and many[3].text == ""
    assert translator.translate(SOURCES, beam_size=1)[1].text == translator.translate(
        SOURCES[1], beam_size=1).text


def test_search_settings_default_to_the_command_lines_yaml_and_are_checked_once():
    """The Python API's defaults are those of configs/search/default.yaml and sampling.yaml,
    as nmt-translate composes them (but its own batch_sentences=100); MBR is no search
    setting (nmt.extras.decoding.mbr)."""
    cli = compose_config(["checkpoint=x"], config_name="translate", validate_fn=None)
    assert search_settings() == {**{k: cli[k] for k in search_settings()}, "batch_sentences": 200}
    assert search_settings(beam_size=1, top_p=None)["beam_size"] == 1
    for bad in ({"beam": 3}, {"n_best": 6}, {"temperature": -1.0}, {"top_k": -1}, {"top_p": 1.5},
                {"decoding": "mbr"}, {"mbr": {"num": 4}}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            search_settings(**bad)


def test_n_best_is_sorted_and_scores_are_forced_scores_under_the_length_penalty(translator):
    result = translator.translate(SOURCES[1], beam_size=4, n_best=4, length_penalty=1.0)
    scores = [h.score for h in result.hypotheses]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    assert result.hypotheses[0] == dataclasses.replace(result, hypotheses=[])
    forced = translator.score([SOURCES[1]] * 4, [h.text for h in result.hypotheses])
    for h, f in zip(result.hypotheses, forced, strict=True):
        assert f.tokens == len(h.ids) + 1
        assert h.score == pytest.approx(f.logprob / length_penalty_factor(f.tokens, 1.0), abs=1e-4)
        assert f.ppl == pytest.approx(np.exp(-f.logprob / f.tokens))


def test_score_checks_pairs(translator):
    with pytest.raises(ConfigError, match="2 sources but 1 targets"):
        translator.score(["a", "b"], ["c"])
    assert translator.score([], []) == []


def test_sampling_is_seeded_and_greedy_at_temperature_zero(translator):
    a = translator.translate(SOURCES, sampling=True, seed=7)
    b = translator.translate(SOURCES, sampling=True, seed=7)
    assert [r.text for r in a] == [r.text for r in b]
    greedy = translator.translate(SOURCES, beam_size=1)
    cold = translator.translate(SOURCES, sampling=True, temperature=0.0)
    assert [r.text for r in cold] == [r.text for r in greedy]
    with pytest.raises(ConfigError, match="top_p"):
        translator.translate(SOURCES[0], sampling=True, top_p=0.0)


def test_batching_by_tokens_changes_nothing_but_the_batches(translator):
    assert length_sorted_batches([3, 9, 5, 9, 1], 10, 18) == [[1, 3], [2, 0, 4]]   # 2x9, 3x5
    assert length_sorted_batches([3, 9, 5, 9, 1], 10, 14) == [[1], [3], [2, 0], [4]]
    assert length_sorted_batches([3, 9, 5], 2, 0) == [[1, 2], [0]]
    assert length_sorted_batches([30], 4, 8) == [[0]]          # longer than the limit: alone
    full = translator.translate(SOURCES, beam_size=2)
    small = translator.translate(SOURCES, beam_size=2, batch_tokens=20)
    assert [r.text for r in small] == [r.text for r in full]
    assert [r.score for r in small] == pytest.approx([r.score for r in full], abs=1e-5)


def test_ensemble_of_a_model_with_itself_equals_the_model(translator, tmp_path):
    twice = ensemble_translator([CKPT, CKPT])
    assert isinstance(twice.model, Ensemble)
    assert not isinstance(ensemble_translator([CKPT]).model, Ensemble)   # one: the model alone
    single = translator.translate(SOURCES, beam_size=3)
    double = twice.translate(SOURCES, beam_size=3)
    assert [r.text for r in double] == [r.text for r in single]
    assert [r.score for r in double] == pytest.approx([r.score for r in single], abs=1e-4)


def test_ensemble_needs_one_vocabulary(tmp_path):
    import torch

    other = tmp_path / "other.pt"
    ckpt = torch.load(CKPT, weights_only=True)
    from nmt.data.tokenizer import Tokenizer, train_sentencepiece

    model_bytes = train_sentencepiece(["ein hund", "a dog", "zwei katzen"] * 20, "unigram", 30, 1.0)
    ckpt["tokenizer"] = Tokenizer(model_bytes).state_dict()
    torch.save(ckpt, other)
    with pytest.raises(Exception, match="another tokenizer|do not fit"):
        ensemble_translator([CKPT, other])
    with pytest.raises(ConfigError, match="at least one"):
        ensemble_translator([])


def test_the_core_loads_one_checkpoint_and_points_to_the_ensemble_room():
    assert nmt.Translator.from_checkpoint([CKPT]).model.all_attention   # a list of one
    for paths in ([CKPT, CKPT], []):
        with pytest.raises(ConfigError, match="nmt.extras.decoding.ensemble.ensemble_translator"):
            nmt.Translator.from_checkpoint(paths)


def test_plot_alignment_of_a_result_or_a_matrix(translator):
    result = translator.translate(SOURCES[0], beam_size=2)
    fig = nmt.plot_alignment(result)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == result.src_tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == result.tokens
    fig = nmt.plot_alignment(np.eye(2), ["a", "b"], ["x", "y"])
    assert fig.axes
    with pytest.raises(ValueError, match="needs src_tokens and tgt_tokens"):
        nmt.plot_alignment(np.eye(2))


def test_train_from_python_returns_the_summary(tiny_overrides):
    summary = nmt.train([*tiny_overrides, "model.d_model=16", "model.heads=2", "model.ff_dim=32",
                         "model.encoder_layers=1", "model.decoder_layers=1", "train.max_steps=2",
                         "train.batch_tokens=256", "search.max_len_b=3", "device=cpu"])
    assert summary["steps"] == 2 and summary["stop_reason"] == "max_steps=2 reached"
    again = nmt.train([*tiny_overrides, "model.d_model=16", "model.heads=2", "model.ff_dim=32",
                       "model.encoder_layers=1", "model.decoder_layers=1", "train.max_steps=2",
                       "train.batch_tokens=256", "search.max_len_b=3", "device=cpu"])
    run_dir = Path(tiny_overrides[-1].split("=", 1)[1])
    assert again == json.loads((run_dir / "summary.json").read_text())


# ------------------------------------------------------- capture_attention
@pytest.fixture(scope="module")
def transformer() -> nmt.Translator:
    """2 encoder and 3 decoder layers, 2 heads, alignment from the middle decoder layer."""
    return _fresh(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                   "model.encoder_layers=2", "model.decoder_layers=3", "model.alignment_layer=1"])


@pytest.mark.parametrize("search", [{"beam_size": 1}, {"beam_size": 3, "n_best": 2},
                                    {"sampling": True, "seed": 5}])
def test_return_attention_head_mean_at_the_alignment_layer_is_the_alignment(transformer, search):
    results = transformer.translate(SOURCES, return_attention=True, **search, **SHORT)
    for r in results:
        t, s = len(r.tokens), len(r.src_tokens)
        a = r.attention
        assert {k: v.shape for k, v in a.items()} == {
            "cross": (3, 2, t, s), "decoder": (3, 2, t, t), "encoder": (2, 2, s, s)}
        assert all(v.dtype == np.float32 for v in a.values())
        np.testing.assert_allclose(a["cross"][1].mean(0), r.alignment, atol=1e-5)
        for w in a.values():
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(a["decoder"], k=1) == 0)          # causal
        assert all(h.attention is None for h in r.hypotheses[1:])  # only the chosen one
    assert transformer.translate(SOURCES[0], **search, **SHORT).attention is None


def test_rnn_attention_is_alpha_alone():
    rnn = _fresh(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                  "model.decoder_hidden=8", "model.attention_dim=8", "model.output_dim=8"])
    for r in rnn.translate(SOURCES, beam_size=2, return_attention=True, **SHORT):
        assert list(r.attention) == ["cross"]
        assert r.attention["cross"].shape == (1, 1, len(r.tokens), len(r.src_tokens))
        np.testing.assert_allclose(r.attention["cross"][0, 0], r.alignment, atol=1e-5)


def test_capture_attention_runs_in_eval_mode_and_restores_the_mode(transformer):
    from nmt.inference.translator import capture_attention

    ids = [[5, 6, 7], [8]], [[9, 10], [11, 12, 13]]
    expected = capture_attention(transformer.model, *ids)
    transformer.model.train()
    try:
        got = capture_attention(transformer.model, *ids)
        assert transformer.model.training
    finally:
        transformer.model.eval()
    for g, e in zip(got, expected, strict=True):
        assert g.keys() == e.keys() and all(np.array_equal(g[k], e[k]) for k in g)


def test_capabilities_are_attributes_and_an_ensemble_cannot_return_attention(translator):
    twice = ensemble_translator([CKPT, CKPT])
    assert (translator.all_attention, twice.all_attention) == (True, False)
    assert translator.epsilon_sampling and twice.epsilon_sampling
    with pytest.raises(ConfigError, match="return_attention"):
        twice.translate(SOURCES[0], return_attention=True, **SHORT)


def test_a_translation_is_a_plain_value(translator):
    """No cycle: asdict, ==, pickle and JSON (to_dict: arrays as nested lists) work; the n-best
    list is the result's own field, and its [0] is the result without it."""
    import pickle

    result = translator.translate(SOURCES[1], beam_size=3, n_best=3, return_attention=True, **SHORT)
    plain = dataclasses.asdict(result)
    assert [h["text"] for h in plain["hypotheses"]] == [h.text for h in result.hypotheses]
    assert all(h["hypotheses"] == [] for h in plain["hypotheses"])
    assert plain["alignment"].shape == result.alignment.shape and plain["attention"].keys() == \
        result.attention.keys()
    loaded = json.loads(json.dumps(result.to_dict()))
    assert loaded.keys() == plain.keys()
    assert {k: loaded[k] for k in ("text", "tokens", "src_tokens", "ids", "score")} == \
        {k: plain[k] for k in ("text", "tokens", "src_tokens", "ids", "score")}
    assert loaded["alignment"] == result.alignment.tolist()
    assert {k: np.asarray(v).shape for k, v in loaded["attention"].items()} == \
        {k: v.shape for k, v in result.attention.items()}
    np.testing.assert_array_equal(np.asarray(loaded["attention"]["cross"], np.float32),
                                  result.attention["cross"])
    assert [h["text"] for h in loaded["hypotheses"]] == [h.text for h in result.hypotheses]
    assert [h["alignment"] for h in loaded["hypotheses"]] == \
        [h.alignment.tolist() for h in result.hypotheses]
    again = translator.translate(SOURCES[1], beam_size=3, n_best=3, **SHORT)
    assert again == result and pickle.loads(pickle.dumps(result)) == result   # arrays aside
    assert again != translator.translate(SOURCES[1], beam_size=3, n_best=2, **SHORT)
    assert result.hypotheses[1] != result and result.hypotheses[1].hypotheses == []
    assert result.hypotheses[0] == dataclasses.replace(result, hypotheses=[]) != result


def test_translate_with_checked_settings_is_translate(translator):
    settings = search_settings(beam_size=3, n_best=2, **SHORT)
    assert translator.translate_with(SOURCES, settings) == \
        translator.translate(SOURCES, beam_size=3, n_best=2, **SHORT)
    assert translator.translate_with(SOURCES[0], settings, tgt_lang="en") == \
        translator.translate(SOURCES[0], beam_size=3, n_best=2, **SHORT)


def test_weights_other_than_inference_or_trained_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"^weights='x': use inference or trained\.$"):
        nmt.Translator.from_checkpoint(CKPT, weights="x")


# ---------------------------------------------------------------- the CLIs on the API
def test_evaluate_writes_ter_loss_sentences_and_n_best(tmp_path, capsys):
    from conftest import write_corpus

    from nmt.cli import evaluate as cli_evaluate

    corpus = write_corpus(tmp_path / "corpus", {"test": 6})
    out = tmp_path / "eval"
    assert cli_evaluate.main([f"checkpoint={CKPT}", f"src_file={corpus / 'test.de'}",
                              f"ref_file={corpus / 'test.en'}", "beam_size=3", "n_best=3",
                              f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert "TER = " in printed and "reference loss" in printed
    scores = json.loads((out / "scores.json").read_text())
    assert scores["ter_signature"].startswith("nrefs:1|case:lc|tok:tercom")
    assert scores["loss"] > 0 and scores["ppl"] == pytest.approx(np.exp(scores["loss"]), rel=1e-3)
    nbest = (out / "nbest.txt").read_text(encoding="utf-8").splitlines()
    assert nbest[0] == "index\trank\tscore\ttext" and len(nbest) == 1 + 6 * 3
    hyps = (out / "hyps.txt").read_text(encoding="utf-8").splitlines()
    assert [r.split("\t")[3] for r in nbest[1::3]] == hyps          # BLEU uses the first
    assert len((out / "sentences.tsv").read_text(encoding="utf-8").splitlines()) == 7


def test_sampling_ranges_are_checked_before_the_checkpoint_loads(tmp_path, capsys):
    from nmt.cli import evaluate as cli_evaluate
    from nmt.cli import translate as cli_translate

    missing = tmp_path / "missing.pt"             # never read: the check comes first
    for cli, extra in ((cli_translate, []), (cli_evaluate, ["src_file=a", "ref_file=b"])):
        for bad in ("temperature=-1", "top_k=-2", "top_p=1.5", "top_p=0"):
            assert cli.main([f"checkpoint={missing}", *extra, "sampling=true", bad]) == 2
            err = capsys.readouterr().err
            assert bad.split("=")[0] in err and "missing.pt" not in err and "Traceback" not in err


def test_translate_cli_samples_and_ensembles(tmp_path):
    from nmt.cli import translate as cli_translate

    inp = tmp_path / "in.de"
    inp.write_text("\n".join(SOURCES[:3]) + "\n", encoding="utf-8")
    copy = tmp_path / "copy.pt"
    shutil.copyfile(CKPT, copy)
    outs = {}
    for name, args in (("single", [f"checkpoint={CKPT}"]),
                       ("ensemble", [f"checkpoint=[{CKPT},{copy}]"]),
                       ("sample1", [f"checkpoint={CKPT}", "sampling=true", "seed=3"]),
                       ("sample2", [f"checkpoint={CKPT}", "sampling=true", "seed=3"])):
        assert cli_translate.main([*args, f"input={inp}", f"output={tmp_path / name}"]) == 0
        outs[name] = (tmp_path / name).read_text(encoding="utf-8")
    assert outs["single"] == outs["ensemble"] and outs["sample1"] == outs["sample2"]
    assert len(outs["sample1"].splitlines()) == 3


# ------------------------------------------------------------------ full-context alignment
def _model_alignment(model, src_text: str, tgt_ids: list[int], tokenizer) -> np.ndarray:
    """The model's alignment [T+1, S+1] of one pair: one teacher-forced pass, as trained."""
    import torch

    from nmt.data.batching import make_src_batch, make_tgt_batch

    src, src_mask = make_src_batch(tokenizer.encode_src_batch([src_text]))
    with torch.no_grad():
        return model(src, src_mask, make_tgt_batch([tgt_ids])[0])[1][0].numpy()


def test_full_context_alignment_of_every_hypothesis_only_when_asked():
    full = _fresh(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                   "model.decoder_layers=2", "model.alignment_layer=0"])
    full.model.alignment_full_context = full.alignment_full_context = True
    passes = []   # (everything, pairs) per teacher-forced pass after search
    attention = full.attention
    full.attention = lambda s, t, settings, everything=True: (
        passes.append((everything, len(t))) or attention(s, t, settings, everything))
    search = {"beam_size": 3, "n_best": 3, **SHORT}
    results = full.translate(SOURCES[:3], **search)
    assert passes == [(False, 9)]   # one pass over every hypothesis of every sentence
    for src, r in zip(SOURCES, results, strict=False):
        assert r.alignment is r.hypotheses[0].alignment and len(r.hypotheses) == 3
        for h in r.hypotheses:
            np.testing.assert_allclose(h.alignment, _model_alignment(
                full.model, src, h.ids, full.tokenizer), rtol=0, atol=1e-6)
    passes.clear()
    text_only = full.translate(SOURCES[:3], **search, alignment=False)
    assert passes == []   # nmt-translate, back-translation, a pivot's first step: no pass
    assert [[h.text for h in r.hypotheses] for r in text_only] == \
        [[h.text for h in r.hypotheses] for r in results]
    assert all(h.alignment is None for r in text_only for h in [r, *r.hypotheses])
    with_all = full.translate(SOURCES[:3], **search, return_attention=True)
    assert passes == [(True, 3), (False, 6)]   # the best's comes with return_attention's
    for a, b in zip(with_all, results, strict=True):
        for x, y in zip(a.hypotheses, b.hypotheses, strict=True):
            np.testing.assert_allclose(x.alignment, y.alignment, rtol=0, atol=1e-6)
    # an ensemble with a full-context member reads its teacher-forced mean too
    causal = _fresh(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                     "model.decoder_layers=2", "model.alignment_layer=0"]).model
    assert not Ensemble([causal]).alignment_full_context
    mixed = nmt.Translator(Ensemble([full.model, causal]), full.tokenizer, full.config)
    assert mixed.alignment_full_context
    r = mixed.translate(SOURCES[0], **search)
    for h in r.hypotheses:
        np.testing.assert_allclose(h.alignment, np.mean([_model_alignment(
            m, SOURCES[0], h.ids, full.tokenizer) for m in (full.model, causal)], 0),
            rtol=0, atol=1e-6)
