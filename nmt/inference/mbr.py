"""Minimum-Bayes-risk (MBR) decoding: of a sentence's candidate translations, the one with the
highest expected utility against the model's other translations.

MBR (Kumar & Byrne 2004) picks the hypothesis with the least expected loss, i.e. the highest
expected utility ``u`` under the model distribution; with N translations ``y_1 .. y_N`` drawn
from the model as pseudo-references, the Monte-Carlo estimate (Freitag et al. 2022, §2;
Eikema & Aziz 2020) is::

    h* = argmax_{h in H}  (1 / N) * sum_{j=1..N} u(h, y_j)

Here the candidates ``H`` are the pseudo-references themselves (the usual "sampling-based"
MBR), so each sentence needs the N x N utility matrix. Identical candidates are scored once:
with ``U`` distinct texts ``y'_k`` of multiplicity ``m_k`` (``sum_k m_k = N``), the sum above is
``(1 / N) * sum_k m_k * u(h, y'_k)``, exactly the same value on a U x U matrix. ``u(h, h)`` is
part of the sum (a candidate drawn twice is its own evidence twice).

Candidates are either N samples (epsilon sampling, Freitag et al. 2023, is the default; the
expectation is then over the model's sample distribution) or the beam's N-best list, which
this estimate weights uniformly (each n-best entry counts 1 / N, whatever its model score).

Utilities (0-100, higher is better; ``h`` the hypothesis, ``y`` the pseudo-reference):

* ``chrf``: sentence chrF (Popović 2015; character 1- to 6-grams, beta 2, whitespace left out)
  by ``fastchrf.pairwise_chrf`` (Vamvas & Sennrich 2024), which gives the values of sacreBLEU's
  ``CHRF().sentence_score(h, [y])`` (tests/test_mbr.py checks them), in one call per batch.
* ``bleu``: sacreBLEU's sentence BLEU with effective order (``BLEU(effective_order=True)``:
  13a tokens, exponential smoothing), one ``sentence_score`` per ordered pair; asymmetric.

Only the detokenized texts enter: this module knows nothing of models and search. The driver
that draws candidates and calls :func:`mbr_select` is
:meth:`nmt.inference.translator.TranslatorBase.translate` (``decoding="mbr"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

import numpy as np


@dataclass
class MbrChoice:
    """MBR's decision for one sentence. ``order``: an index into the candidate list for each
    distinct text (its first occurrence), by expected utility, best first (ties: the earlier
    candidate first), so ``order[0]`` is the choice; ``utility``: their expected utilities
    (0-100, the equation of the module docstring); ``count``: their multiplicities."""

    order: list[int]
    utility: list[float]
    count: list[int]

    @property
    def best(self) -> int:
        """Index of the chosen candidate in the list given to :func:`mbr_select`."""
        return self.order[0]


@dataclass
class MbrCost:
    """The cost of MBR over ``sentences``: ``candidates`` (drawn, N per sentence), ``distinct``
    (the texts scored, summed over sentences), wall-clock ``generation_seconds`` (search or
    sampling of the candidates) and ``selection_seconds`` (detokenization, utility matrices and
    the argmax). Costs add up: ``sum(costs, MbrCost())`` is the cost of all of them."""

    sentences: int = 0
    candidates: int = 0
    distinct: int = 0
    generation_seconds: float = 0.0
    selection_seconds: float = 0.0

    def __add__(self, other: MbrCost) -> MbrCost:
        return MbrCost(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def candidates_per_s(self) -> float:
        """Candidates generated and scored per second of the whole call."""
        return self.candidates / max(self.generation_seconds + self.selection_seconds, 1e-9)


def utility_matrices(texts: Sequence[Sequence[str]], utility: str) -> list[np.ndarray]:
    """Per sentence the float64 [U, U] matrix ``M[i, j] = u(texts[i], texts[j])`` (0-100) of its
    texts (hypothesis i against pseudo-reference j), for a batch of sentences; ``utility``:
    ``"chrf"`` or ``"bleu"`` (``mbr.utility``, checked where it enters)."""
    if utility == "chrf":
        import fastchrf

        lists = [list(t) for t in texts]
        return [np.asarray(m, dtype=np.float64).reshape(len(t), len(t))
                for m, t in zip(fastchrf.pairwise_chrf(lists, lists), lists, strict=True)]
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    return [np.array([[bleu.sentence_score(h, [y]).score for y in t] for h in t],
                     dtype=np.float64).reshape(len(t), len(t)) for t in texts]


def mbr_select(candidates: Sequence[Sequence[str]], utility: str = "chrf") -> list[MbrChoice]:
    """MBR over each sentence's candidate texts (a batch; N >= 1 per sentence, order given by
    the caller: it breaks ties), with uniform weight 1 / N per candidate: the equation of the
    module docstring, with duplicates scored once and counted with their multiplicity."""
    distinct: list[list[str]] = []
    firsts: list[list[int]] = []
    counts: list[np.ndarray] = []
    for texts in candidates:
        index: dict[str, int] = {}
        first, count = [], []
        for j, text in enumerate(texts):
            if text not in index:
                index[text] = len(first)
                first.append(j)
                count.append(0)
            count[index[text]] += 1
        distinct.append(list(index))
        firsts.append(first)
        counts.append(np.array(count, dtype=np.float64))
    out = []
    for matrix, first, count in zip(utility_matrices(distinct, utility), firsts, counts,
                                    strict=True):
        expected = matrix @ count / count.sum()              # [U]
        rank = np.argsort(-expected, kind="stable")          # ties: the earlier candidate
        out.append(MbrChoice(order=[first[k] for k in rank],
                             utility=[float(expected[k]) for k in rank],
                             count=[int(count[k]) for k in rank]))
    return out
