"""Minimum-Bayes-risk selection (nmt/inference/mbr.py): utilities computed by hand on three
candidates, fastchrf against sacreBLEU, and duplicates counted with their multiplicity. The
decoding around it (candidates from the beam or from samples) is in tests/test_translator.py."""

from __future__ import annotations

import math

import fastchrf
import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from nmt.inference.mbr import MbrCost, mbr_select, utility_matrices

# chrF (character 1- to 6-grams, spaces left out, beta = 2) of "ab", "abc", "bcd": for each
# order n with n-grams on both sides, precision P_n and recall R_n; chrF = F_2 of their means,
# 100 * 5 P R / (4 P + R). E.g. u("ab", "abc"): unigrams P 2/2, R 2/3; bigrams P 1/1, R 1/2;
# no trigram in "ab": P = 1, R = 7/12, F_2 = 7/11. u("abc", "bcd"): P = R = (2/3 + 1/2 + 0) / 3.
CHRF_TEXTS = ["ab", "abc", "bcd"]
CHRF_BY_HAND = 100 * np.array([[1, 7 / 11, 5 / 28],
                               [7 / 8, 1, 7 / 18],
                               [5 / 22, 7 / 18, 1]])
# Sentence BLEU, effective order, exp smoothing (a zero count of order n gets 1 / (2^k total)
# for the k-th such order), brevity penalty exp(1 - r / h) when h < r. E.g. u("a b", "a b c"):
# precisions 1, 1 and BP exp(-1/2); u("a b c d", "a b"): 2/4, 1/3, then 1/(2 * 2), 1/(4 * 1).
BLEU_TEXTS = ["a b", "a b c", "a b c d"]
BLEU_BY_HAND = 100 * np.array([[1, math.exp(-1 / 2), math.exp(-1)],
                               [(2 / 3 * 1 / 2 * 1 / 2) ** (1 / 3), 1, math.exp(-1 / 3)],
                               [(1 / 2 * 1 / 3 * 1 / 4 * 1 / 4) ** (1 / 4),
                                (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** (1 / 4), 1]])


@pytest.mark.parametrize("utility,texts,by_hand", [("chrf", CHRF_TEXTS, CHRF_BY_HAND),
                                                   ("bleu", BLEU_TEXTS, BLEU_BY_HAND)])
def test_three_candidates_by_hand(utility, texts, by_hand):
    (matrix,) = utility_matrices([texts], utility)
    np.testing.assert_allclose(matrix, by_hand, rtol=1e-12)
    (choice,) = mbr_select([texts], utility)
    expected = by_hand.mean(axis=1)              # (1 / N) sum_j u(h_i, y_j), u(h, h) included
    assert choice.best == 1 and choice.order == [1, 0, 2]   # the middle one: closest to all
    np.testing.assert_allclose(choice.utility, expected[[1, 0, 2]], rtol=1e-12)
    assert choice.count == [1, 1, 1]


def test_fastchrf_gives_sacrebleus_sentence_chrf():
    """Same values, whitespace included: both leave spaces out of the character n-grams, so
    a doubled space changes nothing; an empty side scores 0 in both."""
    pairs = [("A dog runs .", "A dog walks ."), ("Zwei Mädchen tanzen .", "Zwei Mädchen tanzt ."),
             ("A  big dog", "A big dog"), ("Ab", "ab"), ("", "x"), ("", ""), ("x", "")]
    fast = fastchrf.pairwise_chrf([[h] for h, _ in pairs], [[r] for _, r in pairs])
    slow = [CHRF().sentence_score(h, [r]).score for h, r in pairs]
    np.testing.assert_allclose([f[0][0] for f in fast], slow, rtol=1e-12, atol=1e-12)
    assert slow[2] == 100.0 and slow[4] == slow[5] == 0.0


def test_bleu_utility_is_sacrebleus_effective_order_sentence_bleu():
    (matrix,) = utility_matrices([BLEU_TEXTS], "bleu")
    bleu = BLEU(effective_order=True)
    assert matrix[2, 0] == bleu.sentence_score(BLEU_TEXTS[2], [BLEU_TEXTS[0]]).score


def test_duplicates_are_scored_once_and_counted_with_their_multiplicity(monkeypatch):
    texts = ["abc", "ab", "bcd", "ab", "ab", "ab", "ab"]    # "ab" five times in N = 7
    seen = []
    real = fastchrf.pairwise_chrf
    monkeypatch.setattr(fastchrf, "pairwise_chrf", lambda h, r: seen.append(h) or real(h, r))
    (choice,) = mbr_select([texts], "chrf")
    assert seen == [[["abc", "ab", "bcd"]]]                 # one U x U matrix, U = 3
    # E(ab) = (5 * 100 + 700/11 + 500/28) / 7 = 83.07 beats E(abc) = (5 * 87.5 + 100 + 700/18) / 7
    # = 82.34; without the multiplicity "abc" would win (test above).
    assert choice.order == [1, 0, 2] and choice.count == [5, 1, 1]
    full = np.array([[CHRF().sentence_score(h, [y]).score for y in texts] for h in texts])
    np.testing.assert_allclose(choice.utility, full.mean(axis=1)[[1, 0, 2]], rtol=1e-12)


def test_a_batch_of_sentences_is_each_sentence_alone():
    one, two = mbr_select([["x"], ["ab", "bcd", "abc"]], "chrf")
    assert (one.order, one.utility, one.count) == ([0], [100.0], [1])
    assert two == mbr_select([["ab", "bcd", "abc"]], "chrf")[0] and two.best == 2


def test_costs_add_up_field_by_field():
    parts = [MbrCost(1, 4, 2, 0.5, 0.25), MbrCost(1, 4, 4, 1.5, 0.75)]
    assert sum(parts, MbrCost()) == MbrCost(2, 8, 6, 2.0, 1.0)
