"""TER in the corpus scores and per-sentence BLEU / chrF: hand-checked values and sacreBLEU."""

from __future__ import annotations

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
    with pytest.raises(ValueError, match="pair up"):
        sentence_scores(["a"], [])
