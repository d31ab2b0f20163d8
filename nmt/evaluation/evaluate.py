"""Translate a test set, detokenize and score it; write hyps, scores, sentences and alignments.

    translator = Translator.from_checkpoint("runs/tf/checkpoints/best.pt")
    evaluation = evaluate_split(translator, sources, references, {"beam_size": 5})
    write_outputs("runs/tf/eval", evaluation)

Files written by :func:`write_outputs` (``nmt-evaluate`` writes them all), each atomically:

===================  =========================================================================
``hyps.txt``         one detokenized best translation per source line
``scores.json``      BLEU, chrF, TER (sacreBLEU, with signatures), lowercased BLEU, ``loss`` and
                     ``ppl`` of the references (forced decoding), search settings, timing
``sentences.tsv``    per sentence, in input order: BLEU, chrF, model score, lengths and the texts
                     (the source as given)
``nbest.txt``        with ``n_best`` > 1: sentence index, rank, score, text (tab-separated)
``alignments.npz``   the best hypotheses' alignments with their subwords, and with
                     ``return_attention`` (``nmt-evaluate attention=all``) every layer and
                     head of their attention (:mod:`nmt.evaluation.alignments`)
===================  =========================================================================
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nmt.config import ConfigError
from nmt.evaluation.alignments import save_alignments
from nmt.evaluation.metrics import corpus_scores, sentence_scores
from nmt.runtime import atomic_path, write_text_atomic


@dataclass
class Evaluation:
    """What :func:`evaluate_split` computed: one ``Translation`` per source sentence (with its
    n-best ``hypotheses``), the sources and references as given, corpus ``scores``,
    per-sentence ``sentences`` and the checked search ``settings`` it translated with."""

    results: list
    sources: list[str]
    references: list[str]
    scores: dict
    sentences: dict
    settings: dict = field(default_factory=dict)


def evaluate_split(translator, src_texts: Sequence[str], ref_texts: Sequence[str],
                   search: dict | None = None, score_references: bool = True) -> Evaluation:
    """Translate every source sentence (nothing filtered or truncated) and score it.

    ``translator``: anything with the ``search_settings``, ``translate_with``, ``score`` and
    ``device`` of :class:`~nmt.inference.translator.TranslatorBase` (a ``Translator``, the
    CTranslate2 engine, a pivot or MBR wrapped around one: the seam by which decoders outside
    the core come in); ``search``: keyword arguments of its ``translate``, its settings
    checked once here (``search_settings``; ``src_lang``/``tgt_lang`` also of the reference
    score). ``scores``: :func:`corpus_scores`, the search settings, ``n_sentences``,
    ``seconds`` (wall clock of tokenization + search + detokenization), ``ms_per_sentence``,
    ``n_tgt_tokens`` (output subwords with EOS), ``sents_per_s``, ``tgt_tokens_per_s`` and,
    with ``score_references``, ``loss`` (mean negative log-probability per reference subword
    with EOS, nats) and ``ppl`` (its exponential). ValueError when ``src_texts`` and
    ``ref_texts`` differ in length.
    """
    if len(src_texts) != len(ref_texts):
        raise ValueError(f"{len(src_texts)} source sentences but {len(ref_texts)} references.")
    search, refs = dict(search or {}), list(ref_texts)
    how = {k: search.pop(k) for k in ("return_attention", "src_lang", "tgt_lang") if k in search}
    settings = translator.search_settings(**search)
    results, seconds = _timed_translate(translator, src_texts, settings, how)
    hyps = [r.text for r in results]
    scores = corpus_scores(hyps, refs)
    n_tokens = sum(len(r.ids) + 1 for r in results)
    scores.update(
        beam_size=int(settings["beam_size"]), length_penalty=float(settings["length_penalty"]),
        n_best=int(settings["n_best"]), sampling=bool(settings["sampling"]),
        n_sentences=len(hyps), **_speed(seconds, len(hyps)), n_tgt_tokens=n_tokens,
        sents_per_s=round(len(hyps) / max(seconds, 1e-9), 1),
        tgt_tokens_per_s=round(n_tokens / max(seconds, 1e-9), 1),
    )
    if score_references and refs:
        forced = translator.score(list(src_texts), refs, src_lang=how.get("src_lang"),
                                  tgt_lang=how.get("tgt_lang"))
        loss = -sum(f.logprob for f in forced) / max(sum(f.tokens for f in forced), 1)
        scores.update(loss=round(loss, 4), ppl=round(math.exp(loss), 3))
    return Evaluation(results=results, sources=list(src_texts), references=refs, scores=scores,
                      sentences=sentence_scores(hyps, refs), settings=settings)


def _timed_translate(translator, src_texts: Sequence[str], settings: dict, how: dict
                     ) -> tuple[list, float]:
    """``translator.translate_with(src_texts, settings, **how)`` and its wall-clock seconds
    (CUDA synced)."""
    start = time.perf_counter()
    results = translator.translate_with(list(src_texts), settings, **how)
    if translator.device.type == "cuda":
        torch.cuda.synchronize(translator.device)
    return results, time.perf_counter() - start


def _speed(seconds: float, sentences: int) -> dict:
    """``seconds`` and ``ms_per_sentence`` (rounded) of a translation of ``sentences``."""
    return {"seconds": round(seconds, 3),
            "ms_per_sentence": round(1000.0 * seconds / max(sentences, 1), 2)}


def write_outputs(out_dir: str | Path, evaluation: Evaluation, save_alignments_npz: bool = True
                  ) -> list[str]:
    """Write the files of the module docstring into ``out_dir``; returns their names.
    ConfigError naming a file that cannot be written (the CLI checks ``out_dir`` first)."""
    out_dir, results = Path(out_dir), evaluation.results
    written = ["hyps.txt", "scores.json", "sentences.tsv"]
    try:
        write_text_atomic(out_dir / "hyps.txt", "".join(_one_line(r.text) + "\n" for r in results))
        write_text_atomic(out_dir / "scores.json",
                          json.dumps(evaluation.scores, indent=2, ensure_ascii=False) + "\n")
        with atomic_path(out_dir / "sentences.tsv") as tmp, open(tmp, "w", encoding="utf-8",
                                                                  newline="") as f:
            rows = csv.writer(f, delimiter="\t", lineterminator="\n")
            rows.writerow(["index", "bleu", "chrf", "model_score", "hyp_subwords", "hyp_words",
                           "ref_words", "source", "hypothesis", "reference"])
            for i, (r, src, ref) in enumerate(zip(results, evaluation.sources,
                                                  evaluation.references, strict=True)):
                rows.writerow([i, f"{evaluation.sentences['bleu'][i]:.2f}",
                               f"{evaluation.sentences['chrf'][i]:.2f}", f"{r.score:.4f}",
                               len(r.ids), len(r.text.split()), len(ref.split()),
                               _one_line(src), _one_line(r.text), _one_line(ref)])
        if any(len(r.hypotheses) > 1 for r in results):
            write_text_atomic(out_dir / "nbest.txt", "index\trank\tscore\ttext\n" + "".join(
                f"{i}\t{rank}\t{h.score:.4f}\t{_one_line(h.text)}\n"
                for i, r in enumerate(results) for rank, h in enumerate(r.hypotheses)))
            written.append("nbest.txt")
        if save_alignments_npz:
            attention = [r.attention for r in results]
            save_alignments(out_dir / "alignments.npz", [r.alignment for r in results],
                            [r.src_tokens for r in results], [r.tokens for r in results],
                            attention if any(a is not None for a in attention) else None)
            written.append("alignments.npz")
    except OSError as err:
        raise ConfigError(f"out_dir={out_dir}: cannot write {err.filename or out_dir} "
                          f"({err.strerror or err}); choose a writable directory.") from None
    return written


def _one_line(text: str) -> str:
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")
