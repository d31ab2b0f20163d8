"""Translate a test set, detokenize and score it; write hyps, scores and alignments."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from nmt.config import ConfigError
from nmt.data.tokenizer import EOS_ID
from nmt.evaluation.alignments import save_alignments
from nmt.evaluation.metrics import corpus_scores
from nmt.inference.search import Hypothesis, translate


def evaluate_split(model, tokenizer, src_texts: Sequence[str], ref_texts: Sequence[str], search_cfg,
                   device: str | torch.device = "cpu"
                   ) -> tuple[list[str], dict, list[list[Hypothesis]], list[list[int]]]:
    """Translate every source sentence (nothing filtered or truncated) and score it.

    Args:
        model: a :class:`nmt.models.base.Seq2Seq` on ``device``.
        tokenizer: :class:`nmt.data.tokenizer.Tokenizer` of the model.
        src_texts: raw source sentences.
        ref_texts: raw references, one per source sentence.
        search_cfg: keys of ``cfg.search`` (beam_size, length_penalty, max_len_a, max_len_b,
            batch_sentences, n_best).
        device: device of the model.

    Returns:
        ``(hyps, scores, hypotheses, src_ids)``: detokenized best translations; the dict of
        :func:`nmt.evaluation.metrics.corpus_scores` plus ``beam_size``, ``length_penalty``,
        ``n_sentences``, ``seconds`` (wall-clock time of tokenization + search +
        detokenization), ``n_tgt_tokens`` (subwords of the best outputs, EOS included),
        ``sents_per_s`` and ``tgt_tokens_per_s`` (``n_tgt_tokens / seconds``); the search
        output per sentence (best first); the source subword ids the search read (no EOS),
        for :func:`write_outputs`.

    Raises:
        ValueError: ``src_texts`` and ``ref_texts`` differ in length.
    """
    if len(src_texts) != len(ref_texts):
        raise ValueError(f"{len(src_texts)} source sentences but {len(ref_texts)} references.")
    start = time.perf_counter()
    src_ids = tokenizer.encode_src_batch(list(src_texts))
    hypotheses = translate(model, src_ids, search_cfg, device)
    hyps = [tokenizer.decode_tgt(h[0].tokens) for h in hypotheses]
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    scores = corpus_scores(hyps, ref_texts)
    n_tokens = sum(len(h[0].tokens) + 1 for h in hypotheses)
    scores.update(
        beam_size=int(search_cfg["beam_size"]),
        length_penalty=float(search_cfg["length_penalty"]),
        n_sentences=len(hyps),
        seconds=round(seconds, 3),
        n_tgt_tokens=n_tokens,
        sents_per_s=round(len(hyps) / max(seconds, 1e-9), 1),
        tgt_tokens_per_s=round(n_tokens / max(seconds, 1e-9), 1),
    )
    return hyps, scores, hypotheses, src_ids


def write_outputs(out_dir: str | Path, hyps: Sequence[str], scores: dict,
                  hypotheses: Sequence[Sequence[Hypothesis]] | None = None, tokenizer=None,
                  src_ids: Sequence[Sequence[int]] | None = None) -> None:
    """Write ``hyps.txt``, ``scores.json`` and (with hypotheses) ``alignments.npz``.

    ``alignments.npz`` (layout in :mod:`nmt.evaluation.alignments`) holds for sentence i
    the best hypothesis' alignment [T, S] (T = target subwords + ``</s>``, S = source
    subwords + ``</s>``) with the subword strings from ``tokenizer``; ``src_ids`` are the
    ids that :func:`evaluate_split` returns.

    Raises:
        ConfigError: ``out_dir`` or a file in it cannot be written (names the path; check
            early with :func:`nmt.cli.common.ensure_writable_dir`).
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "hyps.txt").write_text("".join(h.replace("\n", " ") + "\n" for h in hyps),
                                          encoding="utf-8")
        (out_dir / "scores.json").write_text(
            json.dumps(scores, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if hypotheses is not None and tokenizer is not None and src_ids is not None:
            best = [h[0] for h in hypotheses]
            save_alignments(
                out_dir / "alignments.npz",
                [h.alignment for h in best],
                [tokenizer.src_pieces(list(ids) + [EOS_ID]) for ids in src_ids],
                [tokenizer.tgt_pieces(h.tokens + [EOS_ID]) for h in best],
            )
    except OSError as err:
        where = err.filename or out_dir
        raise ConfigError(f"out_dir={out_dir}: cannot write {where} ({err.strerror or err}); "
                          "choose a writable directory with out_dir=DIR.") from None
