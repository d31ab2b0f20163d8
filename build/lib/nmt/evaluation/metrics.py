"""BLEU, chrF and TER with sacreBLEU (Post 2018), on detokenized text.

Corpus scores (:func:`corpus_scores`) are what results tables report; per-sentence scores
(:func:`sentence_scores`) serve error analysis and data selection. Every score comes with
sacreBLEU's signature, which names the settings that make it reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF, TER


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """BLEU (13a tokenization, cased), lowercased BLEU, chrF and TER of detokenized hypotheses.

    TER (Snover et al. 2006, "A Study of Translation Edit Rate with Targeted Human
    Annotation") is 100 * (insertions + deletions + substitutions + shifts of word
    sequences) / reference words, summed over the corpus; lower is better. sacreBLEU's
    defaults (tercom tokenization, case-insensitive) are used, as its signature records.

    Args:
        hyps: one detokenized hypothesis per sentence.
        refs: the reference of each sentence (same length as ``hyps``).

    Returns:
        dict with ``bleu``, ``bleu_signature``, ``bleu_lowercase``,
        ``bleu_lowercase_signature``, ``chrf``, ``chrf_signature``, ``ter``,
        ``ter_signature`` (scores in 0..100; TER can exceed 100) and
        the BLEU details ``bleu_precisions`` (1- to 4-gram, %), ``bleu_bp`` (brevity
        penalty), ``hyp_len``, ``ref_len`` (13a tokens). An empty corpus scores 0.

    Raises:
        ValueError: ``hyps`` and ``refs`` differ in length.
    """
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must pair up.")
    # sacreBLEU knows the number of references only after scoring (the signature has it),
    # so an empty corpus is scored as one empty pair and reported as 0.
    empty = not hyps
    if empty:
        hyps, refs = [""], [""]
    bleu_metric, bleu_lc_metric, chrf_metric = BLEU(), BLEU(lowercase=True), CHRF()
    ter_metric = TER()
    bleu = bleu_metric.corpus_score(hyps, [refs])
    bleu_lc = bleu_lc_metric.corpus_score(hyps, [refs])
    chrf = chrf_metric.corpus_score(hyps, [refs])
    ter = ter_metric.corpus_score(hyps, [refs])
    return {
        "bleu": 0.0 if empty else float(bleu.score),
        "bleu_signature": str(bleu_metric.get_signature()),
        "bleu_lowercase": 0.0 if empty else float(bleu_lc.score),
        "bleu_lowercase_signature": str(bleu_lc_metric.get_signature()),
        "chrf": 0.0 if empty else float(chrf.score),
        "chrf_signature": str(chrf_metric.get_signature()),
        "ter": 0.0 if empty else float(ter.score),
        "ter_signature": str(ter_metric.get_signature()),
        "bleu_precisions": [0.0 if empty else float(p) for p in bleu.precisions],
        "bleu_bp": 0.0 if empty else float(bleu.bp),
        "hyp_len": 0 if empty else int(bleu.sys_len),
        "ref_len": 0 if empty else int(bleu.ref_len),
    }


def sentence_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """Per-sentence BLEU and chrF of detokenized hypotheses (sacreBLEU's sentence API).

    Sentence BLEU uses effective n-gram order (``effective_order=True``: n-gram orders
    with no match in a short sentence are left out instead of zeroing the score, as
    sacreBLEU recommends for sentence level) and exponential smoothing; chrF is the
    corpus metric applied to one sentence. The mean of sentence scores is *not* the corpus
    score: report :func:`corpus_scores` for a test set.

    Args:
        hyps: one detokenized hypothesis per sentence.
        refs: the reference of each sentence (same length as ``hyps``).

    Returns:
        dict with ``bleu`` and ``chrf``: lists of floats in 0..100, one per sentence in
        input order (empty lists for no sentences); ``bleu_signature`` and
        ``chrf_signature``.

    Raises:
        ValueError: ``hyps`` and ``refs`` differ in length.
    """
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must pair up.")
    bleu_metric, chrf_metric = BLEU(effective_order=True), CHRF()
    bleu = [float(bleu_metric.sentence_score(h, [r]).score) for h, r in zip(hyps, refs, strict=True)]
    chrf = [float(chrf_metric.sentence_score(h, [r]).score) for h, r in zip(hyps, refs, strict=True)]
    if not hyps:  # the signatures need one scored pair (number of references)
        bleu_metric.sentence_score("", [""])
        chrf_metric.sentence_score("", [""])
    return {
        "bleu": bleu,
        "bleu_signature": str(bleu_metric.get_signature()),
        "chrf": chrf,
        "chrf_signature": str(chrf_metric.get_signature()),
    }
