"""Minimum-Bayes-risk (MBR) decoding, a room of its own: of a sentence's candidate translations,
the one with the highest expected utility against the model's other translations.

MBR is off by default (``decoding=search``; its measurements: docs/results.md, "MBR decoding";
docs/studies.md), so the core knows nothing of it. It comes in through two seams:
``translate_with(..., search=...)`` of :class:`~nmt.inference.translator.TranslatorBase` (the
candidates and the choice, in place of the search) and :class:`MbrTranslator`, a translator like any
other to the evaluator, to :class:`~nmt.extras.decoding.pivot.Pivot` and to nmt-translate's stream::

    from nmt.extras.decoding.mbr import MbrTranslator, evaluate_mbr, mbr_settings, mbr_translate

    result = mbr_translate(translator, "Ein Hund läuft .", num=16, utility="chrf")
    result.text, result.utility, result.mbr_cost   # expected utility (0-100), the cost
    [h.text for h in result.hypotheses]            # the distinct candidates, best first
    mbr = MbrTranslator(translator, mbr_settings(candidates="sample", num=8))
    mbr.translate(["Ein Hund .", "Zwei Hunde ."], top_p=0.9, seed=1)   # translate's settings
    evaluate_mbr(translator, sources, references, {"beam_size": 5},
                 settings=mbr_settings(compare_beam=True)).scores["search_baseline"]

    nmt-evaluate checkpoint=... split=val decoding=mbr mbr.num=16 mbr.utility=chrf \\
        mbr.compare_beam=true
    nmt-translate checkpoint=... decoding=mbr mbr.candidates=sample < input.de > output.en

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

Candidates are either N samples (epsilon sampling, Freitag et al. 2023; the expectation is
then over the model's sample distribution) or the beam's N-best list (the default), which
this estimate weights uniformly (each n-best entry counts 1 / N, whatever its model score).

Utilities (0-100, higher is better; ``h`` the hypothesis, ``y`` the pseudo-reference):

* ``chrf``: sentence chrF (Popović 2015; character 1- to 6-grams, beta 2, whitespace left out)
  by ``fastchrf.pairwise_chrf`` (Vamvas & Sennrich 2024), which gives the values of sacreBLEU's
  ``CHRF().sentence_score(h, [y])`` (tests/test_mbr.py checks them), in one call per batch.
* ``bleu``: sacreBLEU's sentence BLEU with effective order (``BLEU(effective_order=True)``:
  13a tokens, exponential smoothing), one ``sentence_score`` per ordered pair; asymmetric.

Settings: the ``mbr`` section of configs/mbr.yaml (typed for the command line in
nmt/cli/schemas.py), checked where they enter by :func:`mbr_settings`; :func:`check_search`
refuses the search settings MBR cannot take.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from nmt.config import ConfigError, config_file, to_plain
from nmt.evaluation.evaluate import Evaluation, evaluate_split
from nmt.extras.decoding import EngineDecoder
from nmt.inference.search import Hypothesis
from nmt.inference.translator import Translation
from nmt.runtime import progress_enabled

CHOICES = {"candidates": ("beam", "sample"), "utility": ("chrf", "bleu")}
SAMPLING = ("temperature", "top_k", "top_p", "seed")   # the samples' search settings
_DEFAULTS = to_plain(config_file("mbr.yaml").mbr)      # the command line's are the Python API's


# ------------------------------------------------------------------------ the selection
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


# ------------------------------------------------------------------------- the settings
def mbr_settings(**overrides: Any) -> dict:
    """The ``mbr`` section of configs/mbr.yaml (``candidates``, ``num``, ``utility``,
    ``epsilon``, ``compare_beam``) with ``overrides`` (None keeps the default), checked where
    they enter, as plain values. ConfigError naming the key: an unknown one, ``candidates`` or
    ``utility`` not one of :data:`CHOICES`, ``num`` not an integer >= 1, ``epsilon`` outside
    [0, 1), ``compare_beam`` not a bool."""
    if unknown := set(overrides) - set(_DEFAULTS):
        raise ConfigError(f"unknown MBR setting(s) {', '.join(sorted(unknown))}: use "
                          f"{', '.join(_DEFAULTS)}.")
    settings = {**_DEFAULTS, **{k: v for k, v in overrides.items() if v is not None}}
    for key, allowed in CHOICES.items():
        if settings[key] not in allowed:
            raise ConfigError(f"mbr.{key}={settings[key]!r}: use {' or '.join(allowed)}.")
        settings[key] = str(settings[key])   # a command line's choice: its value
    num, epsilon = settings["num"], settings["epsilon"]
    if isinstance(num, bool) or not isinstance(num, int):
        raise ConfigError(f"mbr.num={num!r} must be an integer.")
    if num < 1:
        raise ConfigError(f"mbr.num={num} must be > 0.")
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0 <= epsilon < 1:
        raise ConfigError(f"mbr.epsilon={epsilon} must lie in [0, 1) (0 = no epsilon cut).")
    if not isinstance(settings["compare_beam"], bool):
        raise ConfigError(f"mbr.compare_beam={settings['compare_beam']!r} must be true or false.")
    return {**settings, "epsilon": float(epsilon)}


def check_search(settings: Mapping) -> None:
    """ConfigError for search settings MBR cannot take: ``sampling=true`` (MBR draws its own
    candidates) or ``n_best`` > 1 (it returns one translation per sentence)."""
    if settings["sampling"]:
        raise ConfigError("sampling=true draws one translation per sentence; decoding=mbr draws "
                          "its own candidates: drop sampling=true and use "
                          "mbr.candidates=sample (temperature, top_k, top_p, seed apply).")
    if settings["n_best"] > 1:
        raise ConfigError(f"n_best={settings['n_best']} with decoding=mbr: MBR returns one "
                          "translation per sentence (mbr.num sets its candidates); drop n_best.")


# ------------------------------------------------------------------------- the decoding
@dataclass
class MbrTranslation(Translation):
    """A :class:`~nmt.inference.translator.Translation` chosen by MBR: ``utility``, its
    expected utility (0-100, the equation of the module docstring), and ``mbr_cost``, this
    sentence's share of the cost (wall-clock seconds: no part of ``==``); ``hypotheses``: the
    distinct candidates by expected utility, as MbrTranslations without list and cost (``[0]``
    is this one). ``to_dict`` gives ``mbr_cost`` as a dict (None in the list)."""

    utility: float | None = None
    mbr_cost: MbrCost | None = field(default=None, repr=False, compare=False)


class MbrTranslator(EngineDecoder):
    """``translator`` (a :class:`~nmt.inference.translator.Translator` or
    :class:`~nmt.extras.tools.ctranslate2.CTranslate2Translator`) decoding by MBR with ``settings``
    of :func:`mbr_settings`: ``translate`` / ``translate_with`` as the engine's, returning
    :class:`MbrTranslation` objects, and ``search_settings`` as the engine's that also refuses what
    MBR cannot take (:func:`check_search`); what :class:`~nmt.extras.decoding.EngineDecoder` passes
    on (``score``, ``config``, ``device``, ...) is the engine's; candidates come from its
    ``hypotheses``. ``quiet``: no progress bar (else a tqdm bar on a terminal, unless $CI).
    ConfigError: ``mbr.epsilon`` > 0 with samples on an engine without ``epsilon_sampling``. Nothing
    is stored per call: one MbrTranslator serves many threads."""

    def __init__(self, translator, settings: Mapping, quiet: bool = False) -> None:
        if (settings["candidates"] == "sample" and settings["epsilon"] > 0
                and not translator.epsilon_sampling):
            raise ConfigError(f"{type(translator).__name__} cannot do mbr.epsilon > 0 (epsilon "
                              "sampling: engine=pytorch; or mbr.epsilon=0).")
        super().__init__(translator)
        self.settings, self.quiet = dict(settings), quiet

    def search_settings(self, **overrides: Any) -> dict:
        """The engine's ``search_settings`` (the samples' and the beam's settings), and
        :func:`check_search`."""
        settings = self.translator.search_settings(**overrides)
        check_search(settings)
        return settings

    def translate(self, sentences: str | Sequence[str], *, return_attention: bool = False,
                  tgt_lang: str | None = None, src_lang: str | None = None,
                  alignment: bool = True, **search: Any
                  ) -> MbrTranslation | list[MbrTranslation]:
        """One raw sentence -> an :class:`MbrTranslation`, a list -> a list in input order;
        ``search``: the engine's ``translate`` settings (the sampling ones are the samples',
        ``batch_sentences`` the sentences per chunk), checked once (:meth:`search_settings`)."""
        return self.translate_with(sentences, self.search_settings(**search),
                                   return_attention=return_attention, tgt_lang=tgt_lang,
                                   src_lang=src_lang, alignment=alignment)

    def translate_with(self, sentences: str | Sequence[str], settings: Mapping, *,
                       return_attention: bool = False, tgt_lang: str | None = None,
                       src_lang: str | None = None, alignment: bool = True
                       ) -> MbrTranslation | list[MbrTranslation]:
        """:meth:`translate` with settings that :meth:`search_settings` checked already."""
        chosen: list = []   # this call's (utilities, costs), filled by the search callback

        def search(src_ids: list[list[int]], settings: dict) -> list[list[Hypothesis]]:
            found, *rest = self._select(src_ids, settings)
            chosen.extend(rest)
            return found

        results = self.translator.translate_with(sentences, settings, search=search,
                                                 return_attention=return_attention,
                                                 tgt_lang=tgt_lang, src_lang=src_lang,
                                                 alignment=alignment)
        single = isinstance(sentences, str)
        out = [_chosen(r, u, c) for r, u, c in zip([results] if single else results, *chosen,
                                                   strict=True)]
        return out[0] if single else out

    def _select(self, src_ids: Sequence[Sequence[int]], settings: Mapping
                ) -> tuple[list[list[Hypothesis]], list[list[float]], list[MbrCost]]:
        """Per sentence its distinct candidates by expected utility (best first), those
        utilities and its cost (its chunk's seconds shared evenly by the chunk's sentences).

        ``candidates="beam"`` takes the n-best list of a beam search with ``beam_size =
        n_best = num`` (uniform weights 1 / N over it); ``"sample"`` draws ``num`` samples per
        sentence with the sampling settings and ``epsilon``, as ``num`` copies of its row in
        one batch. Sentences go longest first in chunks of ``batch_sentences`` (candidates
        drawn, then selected); each chunk's samples come from a generator seeded with
        ``seed``, so they are a function of seed, input and batch_sentences, as nmt-translate's
        chunks."""
        mbr, engine, chunk_size = self.settings, self.translator, int(settings["batch_sentences"])
        num = int(mbr["num"])
        if mbr["candidates"] == "beam":
            search, sampling, copies = {**settings, "beam_size": num, "n_best": num}, None, 1
        else:
            search = {**settings, "batch_sentences": chunk_size * num,
                      "batch_tokens": int(settings["batch_tokens"]) * num}
            sampling = {**{k: settings[k] for k in SAMPLING}, "epsilon": mbr["epsilon"]}
            copies = num
        found: list = [None] * len(src_ids)
        utilities: list = [None] * len(src_ids)
        costs: list = [None] * len(src_ids)
        order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]), reverse=True)
        show = not self.quiet and progress_enabled()
        with tqdm(total=len(src_ids), unit="sent", disable=not show, leave=False,
                  dynamic_ncols=True, desc=f"MBR ({mbr['candidates']} x{num}, {mbr['utility']})"
                  ) as bar:
            for start in range(0, len(order), chunk_size):
                chunk = order[start:start + chunk_size]
                begin = time.perf_counter()
                rows = engine.hypotheses([src_ids[i] for i in chunk for _ in range(copies)],
                                         search, sampling)
                candidates = [[h for hyps in rows[k * copies:(k + 1) * copies] for h in hyps]
                              for k in range(len(chunk))]
                middle = time.perf_counter()
                choices = mbr_select([[engine.tokenizer.decode_tgt(h.tokens) for h in hyps]
                                      for hyps in candidates], mbr["utility"])
                shares = [t / len(chunk) for t in (middle - begin, time.perf_counter() - middle)]
                for i, hyps, choice in zip(chunk, candidates, choices, strict=True):
                    found[i], utilities[i] = [hyps[k] for k in choice.order], choice.utility
                    costs[i] = MbrCost(1, len(hyps), len(choice.order), *shares)
                bar.update(len(chunk))
        return found, utilities, costs


def _chosen(result: Translation, utilities: list[float], cost: MbrCost) -> MbrTranslation:
    """``result`` (its hypotheses: the distinct candidates, best first) as MbrTranslations."""
    n_best = [MbrTranslation(**{f.name: getattr(h, f.name) for f in dataclasses.fields(h)},
                             utility=u) for h, u in zip(result.hypotheses, utilities, strict=True)]
    return dataclasses.replace(n_best[0], hypotheses=n_best, attention=result.attention,
                               mbr_cost=cost)


def mbr_translate(translator, sentences: str | Sequence[str], *, candidates: str | None = None,
                  num: int | None = None, utility: str | None = None,
                  epsilon: float | None = None, quiet: bool = False, **kwargs: Any
                  ) -> MbrTranslation | list[MbrTranslation]:
    """MBR decoding of ``sentences`` (a string or a list) by ``translator``: the settings of
    :func:`mbr_settings` (None: configs/mbr.yaml's), ``kwargs`` those of
    :meth:`MbrTranslator.translate` (search and sampling settings, ``return_attention``,
    ``tgt_lang``, ``src_lang``). ConfigError: a bad setting, or one the engine cannot serve."""
    settings = mbr_settings(candidates=candidates, num=num, utility=utility, epsilon=epsilon)
    return MbrTranslator(translator, settings, quiet).translate(sentences, **kwargs)


# ---------------------------------------------------------------------- the evaluation
BASELINE_KEYS = ("beam_size", "length_penalty", "bleu", "chrf", "bleu_lowercase", "seconds",
                 "ms_per_sentence")


def evaluate_mbr(translator, src_texts: Sequence[str], ref_texts: Sequence[str],
                 search: dict | None = None, *, settings: Mapping,
                 evaluate: Callable[..., Evaluation] = evaluate_split, quiet: bool = False,
                 **kwargs: Any) -> Evaluation:
    """``evaluate(MbrTranslator(translator, settings, quiet), src_texts, ref_texts,
    search=search, **kwargs)``: :func:`~nmt.evaluation.evaluate.evaluate_split`, or
    nmt-evaluate's :func:`~nmt.extras.decoding.multilingual.evaluate_direction` (``src_lang``,
    ``tgt_lang``, ``pivot`` in ``kwargs``), with in its scores ``mbr``: ``settings`` (and the
    sampling ones with ``candidates=sample``), ``generation_seconds``, ``selection_seconds``,
    ``candidates_per_s``, ``n_candidates`` and ``distinct_per_sentence`` (:class:`MbrCost`).
    With ``settings["compare_beam"]`` also ``search_baseline``: the same sentences evaluated
    first (so it pays the warm-up, as any search) by the search those settings name without
    MBR, measured alike: its :data:`BASELINE_KEYS`, to weigh the two side by side."""
    baseline = None
    if settings["compare_beam"]:
        base = evaluate(translator, src_texts, ref_texts,
                        search={**(search or {}), "return_attention": False}, **kwargs)
        baseline = {k: base.scores[k] for k in BASELINE_KEYS}
    evaluation = evaluate(MbrTranslator(translator, settings, quiet), src_texts, ref_texts,
                          search=search, **kwargs)
    cost = sum((r.mbr_cost for r in evaluation.results), MbrCost())
    sampled = settings["candidates"] == "sample"
    evaluation.scores["mbr"] = {
        **settings, **({k: evaluation.settings[k] for k in SAMPLING} if sampled else {}),
        "generation_seconds": round(cost.generation_seconds, 3),
        "selection_seconds": round(cost.selection_seconds, 3),
        "candidates_per_s": round(cost.candidates_per_s, 1), "n_candidates": cost.candidates,
        "distinct_per_sentence": round(cost.distinct / max(cost.sentences, 1), 2)}
    if baseline is not None:
        evaluation.scores["search_baseline"] = baseline
    return evaluation
