"""Metrics (BLEU against the formula by hand), alignment files, heatmaps, evaluate_split, and
BLEU 100 end to end for a model that has learnt its test pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sacrebleu
import torch
from conftest import make_pairs
from matplotlib.figure import Figure

from nmt.evaluation.metrics import corpus_scores
from nmt.evaluation.evaluate import evaluate_split, write_outputs
from nmt.evaluation.alignments import load_alignments, save_alignments
from nmt.evaluation.plot import plot_alignment


# ------------------------------------------------------------------------------ metrics
def test_corpus_scores_match_sacrebleu_and_carry_signatures():
    hyps = ["Ein Mann fährt Rad .", "the cat sat on the mat"]
    refs = ["Ein Mann fährt Fahrrad .", "The cat sat on the mat"]
    s = corpus_scores(hyps, refs)
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert s["bleu_lowercase"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score)
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert s["bleu_lowercase"] > s["bleu"]                      # "the" vs "The"
    assert "tok:13a" in s["bleu_signature"] and "case:mixed" in s["bleu_signature"]
    assert "case:lc" in s["bleu_lowercase_signature"] and "nc:6" in s["chrf_signature"]
    assert s["hyp_len"] == 11 and s["ref_len"] == 11


def test_corpus_scores_perfect_empty_and_mismatch():
    assert corpus_scores(["a b c d e"], ["a b c d e"])["bleu"] == pytest.approx(100.0)
    assert corpus_scores([], [])["bleu"] == 0.0
    with pytest.raises(ValueError, match="pair up"):
        corpus_scores(["a"], [])


def _modified_precision(hyps: list[list[str]], refs: list[list[str]], n: int) -> tuple[int, int]:
    """Papineni et al. (2002), 2.1: n-gram matches clipped by the reference count, summed over
    the corpus -> (clipped matches, hypothesis n-grams)."""
    from collections import Counter

    def grams(words):
        return Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))

    matched = total = 0
    for h, r in zip(hyps, refs, strict=True):
        h_grams, r_grams = grams(h), grams(r)
        matched += sum(min(c, r_grams[g]) for g, c in h_grams.items())
        total += sum(h_grams.values())
    return matched, total


def test_modified_precision_clips_counts_papineni_example():
    # Papineni et al. (2002), 2.1, example 2: modified unigram precision 2/7.
    hyp, ref = ["the"] * 7, "the cat is on the mat".split()
    assert _modified_precision([hyp], [ref], 1) == (2, 7)


def test_corpus_bleu_equals_hand_computed_papineni_formula():
    hyps = ["the cat sat on the mat", "a man is riding a bike in the park"]
    refs = ["the cat sat on the red mat", "a man is riding a bike in the big park today"]
    h_words, r_words = [h.split() for h in hyps], [r.split() for r in refs]
    # Counted by hand, per sentence (the two sentences' counts add up: corpus precision):
    # 1-grams 6/6 + 9/9; 2-grams 4/5 ("the mat") + 7/8 ("the park"); 3-grams 3/4 + 6/7;
    # 4-grams 2/3 + 5/6.
    by_hand = [(15, 15), (11, 13), (9, 11), (7, 9)]
    assert [_modified_precision(h_words, r_words, n) for n in (1, 2, 3, 4)] == by_hand
    c, r = 6 + 9, 7 + 11                                   # hypothesis and reference lengths
    bp = math.exp(1 - r / c) if c < r else 1.0             # brevity penalty: exp(-0.2)
    bleu = 100 * bp * math.exp(sum(math.log(m / t) for m, t in by_hand) / 4)
    assert bleu == pytest.approx(100 * math.exp(-0.2) * (7 / 13) ** 0.25)   # = 70.13
    s = corpus_scores(hyps, refs)
    assert s["bleu"] == pytest.approx(bleu, abs=0.01)
    assert s["bleu_bp"] == pytest.approx(bp, abs=1e-4)
    assert s["bleu_precisions"] == pytest.approx([100 * m / t for m, t in by_hand], abs=0.01)
    assert (s["hyp_len"], s["ref_len"]) == (c, r)
    # Corpus BLEU is not the mean of sentence BLEUs (the first sentence alone has bp ~0.85).
    assert s["bleu"] != pytest.approx(sum(corpus_scores([h], [f])["bleu"]
                                          for h, f in zip(hyps, refs, strict=True)) / 2, abs=0.5)


# --------------------------------------------------------------------------- alignments
def test_alignments_round_trip_without_pickle(tmp_path):
    mats = [np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], np.float32), np.ones((1, 1), np.float32)]
    src = [["▁Größe", "</s>"], ["</s>"]]
    tgt = [["▁size", "▁ß", "</s>"], ["</s>"]]
    save_alignments(tmp_path / "a.npz", mats, src, tgt)
    raw = np.load(tmp_path / "a.npz", allow_pickle=False)       # plain arrays only
    assert int(raw["count"]) == 2 and raw["align_0"].dtype == np.float32
    data = load_alignments(tmp_path / "a.npz")
    assert len(data) == 2
    np.testing.assert_array_equal(data[0].matrix, mats[0])
    assert data[0].src == src[0] and data[0].tgt == tgt[0] and data[-1].tgt == ["</s>"]
    with pytest.raises(IndexError):
        data[2]


def test_save_alignments_rejects_shape_mismatch(tmp_path):
    with pytest.raises(ValueError, match="does not match"):
        save_alignments(tmp_path / "a.npz", [np.zeros((2, 3))], [["a", "b"]], [["x", "y"]])
    with pytest.raises(ValueError, match="not an alignments file"):
        load_alignments(tmp_path / "missing.npz")


# --------------------------------------------------------------------------------- plot
def test_plot_alignment_labels_colorbar_and_size(tmp_path):
    src = ["▁Ein", "▁Mädchen", "▁läuft", "▁über", "▁die", "▁Straße", "</s>"]
    tgt = ["▁A", "▁girl", "▁runs", "▁across", "▁the", "▁street", "</s>"]
    fig = plot_alignment(np.eye(7, dtype=np.float32), src, tgt, tmp_path / "sub" / "f.png")
    assert isinstance(fig, Figure) and (tmp_path / "sub" / "f.png").stat().st_size > 1000
    ax, bar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert bar.get_ylim() == pytest.approx((0.0, 1.0))
    long = plot_alignment(np.full((55, 60), 1 / 60), [f"▁wört{i}" for i in range(60)],
                          [f"▁w{i}" for i in range(55)])
    assert long.get_figwidth() > fig.get_figwidth() and long.get_figheight() > fig.get_figheight()
    with pytest.raises(ValueError, match="does not match"):
        plot_alignment(np.zeros((2, 2)), ["a"], ["b", "c"])


# ----------------------------------------------------------------------- evaluate_split
def test_evaluate_split_and_write_outputs(tmp_path):
    from nmt.config import compose_config
    from nmt.data.tokenizer import train_or_load_tokenizer
    from nmt.models import build_model

    pairs = make_pairs(60, 0)
    src, ref = [p[0] for p in pairs], [p[1] for p in pairs]
    cfg = compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                          "model.decoder_hidden=16", "model.attention_dim=16", "model.output_dim=16"])
    tok = train_or_load_tokenizer({"type": "unigram", "vocab_size": 80, "character_coverage": 1.0,
                                   "joint": True, "input_sentence_size": 1000}, "de", "en", src, ref, tmp_path / "cache")
    torch.manual_seed(0)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size).eval()
    from nmt.inference.translator import Translator

    translator = Translator(model, tok, cfg)
    search = {"beam_size": 2, "length_penalty": 1.0, "max_len_a": 1.0, "max_len_b": 2,
              "batch_sentences": 7, "n_best": 2}
    evaluation = evaluate_split(translator, src[:10] + [""], ref[:10] + [""], search)
    hyps, scores, results = evaluation.hyps, evaluation.scores, evaluation.results
    src_ids = tok.encode_src_batch(src[:10] + [""])
    assert len(hyps) == len(results) == 11 and hyps[10] == ""
    assert hyps == [tok.decode_tgt(r.ids) for r in results]
    assert scores["n_sentences"] == 11 and scores["beam_size"] == 2 and scores["seconds"] > 0
    assert scores["bleu"] == pytest.approx(corpus_scores(hyps, ref[:10] + [""])["bleu"])
    assert scores["n_tgt_tokens"] == sum(len(r.ids) + 1 for r in results)
    # Reference loss: the mean forced log-probability per subword.
    forced = translator.score(src[:10] + [""], ref[:10] + [""])
    loss = -sum(f.logprob for f in forced) / sum(f.tokens for f in forced)
    assert scores["loss"] == pytest.approx(loss, abs=1e-4) and scores["ppl"] == pytest.approx(math.exp(loss), rel=1e-3)
    written = write_outputs(tmp_path / "out", evaluation)
    assert written == ["hyps.txt", "scores.json", "sentences.tsv", "nbest.txt", "alignments.npz"]
    lines = (tmp_path / "out" / "hyps.txt").read_text(encoding="utf-8").split("\n")
    assert lines[:-1] == hyps and lines[-1] == ""
    data = load_alignments(tmp_path / "out" / "alignments.npz")
    for i in range(11):
        assert data[i].matrix.shape == (len(results[i].ids) + 1, len(src_ids[i]) + 1)
        assert data[i].src[-1] == "</s>" and data[i].tgt[-1] == "</s>"
    rows = (tmp_path / "out" / "sentences.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0].split("\t")[:4] == ["index", "bleu", "chrf", "model_score"] and len(rows) == 12
    assert [float(r.split("\t")[3]) for r in rows[1:]] == pytest.approx([r.score for r in results], abs=1e-4)
    nbest = [r.split("\t") for r in (tmp_path / "out" / "nbest.txt").read_text(encoding="utf-8").splitlines()[1:]]
    assert [(int(r[0]), int(r[1])) for r in nbest[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert nbest[0][3] == hyps[0]
    with pytest.raises(ValueError):
        evaluate_split(translator, src[:2], ref[:1], search)


# ------------------------------------------------------------------- BLEU, end to end
def test_learnt_translations_score_bleu_100_through_the_whole_path(tmp_path):
    """Tokenize, search, detokenize, sacreBLEU: a model that has learnt the pairs scores 100."""
    from conftest import fit_pairs

    from nmt.config import compose_config
    from nmt.data.tokenizer import train_or_load_tokenizer
    from nmt.inference.translator import Translator
    from nmt.models import build_model

    pairs = make_pairs(60, 0)
    tok = train_or_load_tokenizer({"type": "unigram", "vocab_size": 80, "character_coverage": 1.0,
                                   "joint": True, "input_sentence_size": 1000}, "de", "en", [p[0] for p in pairs],
                                  [p[1] for p in pairs], tmp_path / "cache")
    src, ref = [p[0] for p in pairs[:6]], [p[1] for p in pairs[:6]]
    assert len(set(ref)) == 6 and any("ü" in s or "ß" in s or "ä" in s for s in src)
    cfg = compose_config(["model.d_model=32", "model.heads=2", "model.ff_dim=64",
                          "model.encoder_layers=1", "model.decoder_layers=1", "model.dropout=0.0",
                          "model.attention_dropout=0.0", "model.activation_dropout=0.0"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    loss = fit_pairs(model, list(zip(tok.encode_src_batch(src), tok.encode_tgt_batch(ref),
                                     strict=True)), steps=150)
    assert loss < 0.01
    translator = Translator(model, tok, cfg)
    for beam in (1, 4):
        search = {"beam_size": beam, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 5,
                  "batch_sentences": 4, "n_best": 1}
        evaluation = evaluate_split(translator, src, ref, search)
        assert evaluation.hyps == ref
        scores = evaluation.scores
        assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)
        assert scores["ter"] == pytest.approx(0.0) and scores["loss"] < 0.01   # refs: learnt

