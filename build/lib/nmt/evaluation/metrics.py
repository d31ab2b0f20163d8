"""Corpus-level BLEU and chrF with sacreBLEU (Post 2018), on detokenized text."""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """BLEU (13a tokenization, cased), lowercased BLEU and chrF of detokenized hypotheses.

    Args:
        hyps: one detokenized hypothesis per sentence.
        refs: the reference of each sentence (same length as ``hyps``).

    Returns:
        dict with ``bleu``, ``bleu_signature``, ``bleu_lowercase``,
        ``bleu_lowercase_signature``, ``chrf``, ``chrf_signature`` (scores in 0..100) and
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
    bleu = bleu_metric.corpus_score(hyps, [refs])
    bleu_lc = bleu_lc_metric.corpus_score(hyps, [refs])
    chrf = chrf_metric.corpus_score(hyps, [refs])
    return {
        "bleu": 0.0 if empty else float(bleu.score),
        "bleu_signature": str(bleu_metric.get_signature()),
        "bleu_lowercase": 0.0 if empty else float(bleu_lc.score),
        "bleu_lowercase_signature": str(bleu_lc_metric.get_signature()),
        "chrf": 0.0 if empty else float(chrf.score),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_precisions": [0.0 if empty else float(p) for p in bleu.precisions],
        "bleu_bp": 0.0 if empty else float(bleu.bp),
        "hyp_len": 0 if empty else int(bleu.sys_len),
        "ref_len": 0 if empty else int(bleu.ref_len),
    }
