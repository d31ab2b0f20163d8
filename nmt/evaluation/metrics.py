"""BLEU, chrF and TER with sacreBLEU (Post 2018), on detokenized text.

Corpus scores (:func:`corpus_scores`) are what results tables report; per-sentence scores
(:func:`sentence_scores`) serve error analysis and data selection. Every score comes with
sacreBLEU's signature, which names the settings that make it reproducible. The mean of
sentence scores is *not* the corpus score.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF, TER


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """Cased BLEU (13a tokenization), lowercased BLEU, chrF and TER, each with its signature.

    TER (Snover et al. 2006) is 100 * (insertions + deletions + substitutions + shifts of
    word sequences) / reference words, summed over the corpus; lower is better (sacreBLEU's
    defaults: tercom tokenization, case-insensitive). Scores are in 0..100 (TER can exceed
    100), plus the BLEU details ``bleu_precisions`` (1- to 4-gram, %), ``bleu_bp`` (brevity
    penalty), ``hyp_len`` and ``ref_len`` (13a tokens). An empty corpus scores 0. ValueError:
    ``hyps`` and ``refs`` differ in length.
    """
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must pair up.")
    # sacreBLEU knows the number of references only after scoring (the signature has it),
    # so an empty corpus is scored as one empty pair and reported as 0.
    empty = not hyps
    if empty:
        hyps, refs = [""], [""]
    metrics = {"bleu": BLEU(), "bleu_lowercase": BLEU(lowercase=True), "chrf": CHRF(), "ter": TER()}
    scores, results = {}, {}
    for name, metric in metrics.items():
        result = results[name] = metric.corpus_score(hyps, [refs])
        scores[name] = 0.0 if empty else float(result.score)
        scores[f"{name}_signature"] = str(metric.get_signature())
    bleu = results["bleu"]
    return {**scores,
            "bleu_precisions": [0.0 if empty else float(p) for p in bleu.precisions],
            "bleu_bp": 0.0 if empty else float(bleu.bp),
            "hyp_len": 0 if empty else int(bleu.sys_len),
            "ref_len": 0 if empty else int(bleu.ref_len)}


def sentence_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """Per-sentence BLEU and chrF (lists in 0..100, input order) with their signatures.

    Sentence BLEU uses the effective n-gram order (orders with no match in a short sentence
    are left out instead of zeroing the score, as sacreBLEU recommends) and exponential
    smoothing; chrF is the corpus metric applied to one sentence. ValueError: ``hyps`` and
    ``refs`` differ in length.
    """
    bleu_metric, chrf_metric = BLEU(effective_order=True), CHRF()
    pairs = list(zip(hyps, refs, strict=True))
    bleu = [float(bleu_metric.sentence_score(h, [r]).score) for h, r in pairs]
    chrf = [float(chrf_metric.sentence_score(h, [r]).score) for h, r in pairs]
    if not pairs:  # the signatures need one scored pair (number of references)
        bleu_metric.sentence_score("", [""])
        chrf_metric.sentence_score("", [""])
    return {"bleu": bleu, "bleu_signature": str(bleu_metric.get_signature()),
            "chrf": chrf, "chrf_signature": str(chrf_metric.get_signature())}
