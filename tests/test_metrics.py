"""nmt.evaluation.metrics: BLEU against Papineni's formula by hand, TER by counted edits,
per-sentence BLEU / chrF against sacreBLEU, and the signatures."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import sacrebleu

from nmt.evaluation.metrics import corpus_scores, sentence_scores

REF = "the cat sat on the mat"  # 6 reference words


def test_perfect_hypothesis_scores_bleu_100_and_ter_0():
    s = corpus_scores([REF, "A dog runs ."], [REF, "A dog runs ."])
    assert s["bleu"] == pytest.approx(100.0) and s["chrf"] == pytest.approx(100.0)
    assert s["ter"] == 0.0
    assert "tok:tercom" in s["ter_signature"] and "case:lc" in s["ter_signature"]


@pytest.mark.parametrize("hyp,edits", [
    ("the cat sat on mat", 1),          # 1 insertion ("the")
    ("the dog sat on the mat", 1),      # 1 substitution
    ("sat on the mat the cat", 1),      # 1 shift of the phrase "the cat"
    ("The Cat sat on the mat", 0),      # TER is case-insensitive by default
    ("cat the sat on", 3),              # 1 shift ("cat" after "the"), 2 insertions ("the mat")
    ("on the mat", 3),                  # 3 insertions ("the cat sat")
])
def test_ter_is_edits_per_reference_word(hyp, edits):
    assert corpus_scores([hyp], [REF])["ter"] == pytest.approx(100.0 * edits / 6)


def test_corpus_ter_pools_edits_over_reference_words():
    # 1 edit / 6 words and 2 edits / 2 words: corpus TER = 3 / 8, not the mean of 1/6 and 1.
    s = corpus_scores(["the cat sat on mat", "x y"], [REF, "a b"])
    assert s["ter"] == pytest.approx(100.0 * 3 / 8)
    assert corpus_scores([], [])["ter"] == 0.0


def test_sentence_scores_match_sacrebleu_sentence_api():
    hyps = ["Ein Mann fährt Rad .", "the cat sat on the mat", ""]
    refs = ["Ein Mann fährt Fahrrad .", "The cat sat on the mat", "Hallo"]
    s = sentence_scores(hyps, refs)
    assert s["bleu"] == pytest.approx([sacrebleu.sentence_bleu(h, [r]).score
                                       for h, r in zip(hyps, refs, strict=True)])
    assert s["chrf"] == pytest.approx([sacrebleu.sentence_chrf(h, [r]).score
                                       for h, r in zip(hyps, refs, strict=True)])
    assert 0.0 < s["bleu"][0] < 100.0 and s["bleu"][2] == 0.0
    assert "eff:yes" in s["bleu_signature"] and "nc:6" in s["chrf_signature"]
    perfect = sentence_scores([REF], [REF])
    assert perfect["bleu"] == pytest.approx([100.0]) and perfect["chrf"] == pytest.approx([100.0])
    empty = sentence_scores([], [])
    assert empty["bleu"] == [] and empty["chrf"] == [] and empty["bleu_signature"]
    with pytest.raises(ValueError):
        sentence_scores(["a"], [])


# ------------------------------------------------------------------- corpus BLEU
def test_corpus_scores_match_sacrebleu_and_carry_signatures():
    hyps = ["Ein Mann fährt Rad .", "the cat sat on the mat"]
    refs = ["Ein Mann fährt Fahrrad .", "The cat sat on the mat"]
    s = corpus_scores(hyps, refs)
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    lowercase = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score
    assert s["bleu_lowercase"] == pytest.approx(lowercase)
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    assert s["bleu_lowercase"] > s["bleu"]                      # "the" vs "The"
    assert "tok:13a" in s["bleu_signature"] and "case:mixed" in s["bleu_signature"]
    assert "case:lc" in s["bleu_lowercase_signature"] and "nc:6" in s["chrf_signature"]
    assert s["hyp_len"] == 11 and s["ref_len"] == 11


def test_corpus_scores_perfect_empty_and_mismatch():
    assert corpus_scores(["a b c d e"], ["a b c d e"])["bleu"] == pytest.approx(100.0)
    assert corpus_scores([], [])["bleu"] == 0.0
    with pytest.raises(ValueError):
        corpus_scores(["a"], [])


def _modified_precision(hyps: list[list[str]], refs: list[list[str]], n: int) -> tuple[int, int]:
    """Papineni et al. (2002), 2.1: n-gram matches clipped by the reference count, summed over
    the corpus -> (clipped matches, hypothesis n-grams)."""
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
