"""Multilingual evaluation: any direction of a split, zero-shot and pivot translation
(:class:`~nmt.extras.decoding.pivot.Pivot`), and the off-target rate (``nmt-evaluate
src_lang=de tgt_lang=fr``, ``directions=all``, ``pivot=en``).

    translator = Translator.from_checkpoint("runs/multi/checkpoints/best.pt")
    rows = evaluate_directions(translator, train_cfg.data, "test_2016_flickr", "runs/multi/eval",
                               {"beam_size": 5})                 # every direction the split has
    off_target(["Un chien .", "A dog ."], "fr", ["de", "en", "fr"])   # [False, True]
    off_target_percent([False, True])                                   # 50.0

A direction is *supervised* when the model was trained on real pairs of it, *zero-resource*
when only on synthetic (back-translated, ``data.corpora[k].synthetic``) ones, *zero-shot*
when both languages are the model's, the target one of its target languages (it has a tag),
but the pair was not trained (Johnson et al. 2017, sec. 5). The *off-target rate* is the
share of outputs whose language, as py3langid (Lui and Baldwin 2012, langid.py) identifies
it among the model's languages only (``set_languages``), is not the target; an empty output
has no language and is not counted off target. Scores give it as ``off_target`` (outputs) and
``off_target_percent`` (0-100). ``directions=all``
writes each direction's files of :mod:`nmt.evaluation.evaluate` into ``out_dir/<src>-<tgt>/``
and one table of all of them, ``directions.md`` and ``directions.json``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError, check_split, iter_parallel, with_root
from nmt.data.languages import trained_directions
from nmt.evaluation.evaluate import Evaluation, evaluate_split, write_outputs
from nmt.extras.decoding.pivot import Pivot
from nmt.inference.translator import direction_tags
from nmt.runtime import write_json_atomic, write_text_atomic


@functools.lru_cache(maxsize=8)
def _identifier(languages: tuple[str, ...]):
    """py3langid's identifier restricted to ``languages`` (loaded once per set)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
    unknown = sorted(set(languages) - set(identifier.nb_classes))
    if unknown:
        raise ConfigError(f"py3langid does not know the language(s) {', '.join(unknown)} (it "
                          f"knows ISO 639-1 codes such as {', '.join(identifier.nb_classes[:8])}, "
                          "...): the off-target rate needs them.")
    identifier.set_languages(list(languages))
    return identifier


def identify(texts: Sequence[str], languages: Sequence[str]) -> list[str | None]:
    """The language of each text among ``languages`` (ISO 639-1 codes, at least two), by
    py3langid; None for an empty text. ConfigError: a code py3langid does not know."""
    identifier = _identifier(tuple(sorted(set(languages))))
    return [identifier.classify(t)[0] if t.strip() else None for t in texts]


def off_target(texts: Sequence[str], tgt_lang: str, languages: Sequence[str]) -> list[bool]:
    """Per text: True when its identified language (:func:`identify` among ``languages``) is
    not ``tgt_lang``; an empty text is False."""
    return [lang is not None and lang != tgt_lang for lang in identify(texts, languages)]


def off_target_percent(flags: Sequence[bool]) -> float:
    """The percentage (0-100, rounded to 2 decimals) of True among :func:`off_target`'s
    ``flags``; 0.0 for none."""
    return round(100.0 * sum(flags) / len(flags), 2) if flags else 0.0


KINDS = ("supervised", "zero-resource", "zero-shot")


def direction_kind(translator, src_lang: str, tgt_lang: str) -> str:
    """``supervised`` (trained on real pairs), ``zero-resource`` (trained on synthetic pairs
    only: ``data.corpora[k].synthetic``) or ``zero-shot`` (not trained)."""
    if (src_lang, tgt_lang) in trained_directions(translator.config.data, real=True):
        return "supervised"
    return "zero-resource" if (src_lang, tgt_lang) in translator.directions else "zero-shot"


def read_direction(data_cfg: Any, split: str, src_lang: str, tgt_lang: str,
                   root: str | None = None) -> tuple[list[str], list[str]]:
    """``(sources, references)`` of one direction of ``split``, read as the checkpoint's data
    config reads it (:func:`~nmt.data.corpus.iter_parallel`), from ``root`` if given;
    CorpusError when the split lacks it."""
    pairs = list(iter_parallel(with_root(data_cfg, root), split, (src_lang, tgt_lang)))
    return [s for s, _ in pairs], [t for _, t in pairs]


def split_directions(translator, data_cfg: Any, split: str, root: str | None = None
                     ) -> list[tuple[str, str]]:
    """Every ordered pair of the model's languages that it can translate (the target has a
    tag: :func:`~nmt.inference.translator.direction_tags`) and ``split`` has, found before any
    is read (:func:`~nmt.data.corpus.check_split`: both files, or both languages of the
    dataset): supervised directions first, then zero-resource and zero-shot ones
    (:func:`direction_kind`), each group in sorted order."""
    found, data = [], with_root(data_cfg, root)
    for src in translator.languages:
        for tgt in translator.languages:
            try:
                direction_tags(translator.config, translator.tokenizer, src, tgt)
                check_split(data, split, (src, tgt))
            except (ConfigError, CorpusError):
                continue
            found.append((src, tgt))
    return sorted(found, key=lambda d: (KINDS.index(direction_kind(translator, *d)), d))


def evaluate_direction(translator, sources: Sequence[str], references: Sequence[str],
                       src_lang: str, tgt_lang: str, search: dict | None = None,
                       pivot: str | None = None) -> Evaluation:
    """:func:`~nmt.evaluation.evaluate.evaluate_split` of one direction (through ``pivot``:
    :class:`Pivot`, no reference loss) with, in its scores, ``src_lang``, ``tgt_lang``,
    ``direction`` (supervised or zero-shot), ``pivot``, ``off_target`` (outputs) and
    ``off_target_percent`` among the model's languages (both None where py3langid does not
    know one of them)."""
    engine = translator if pivot is None else Pivot(translator, pivot)
    evaluation = evaluate_split(engine, sources, references,
                                {**(search or {}), "src_lang": src_lang, "tgt_lang": tgt_lang},
                                score_references=pivot is None)
    try:
        flags = off_target([r.text for r in evaluation.results], tgt_lang, translator.languages)
    except ConfigError:   # a language py3langid does not know: no rate, the scores stand
        flags = None
    evaluation.scores.update(
        src_lang=src_lang, tgt_lang=tgt_lang, pivot=pivot,
        direction=direction_kind(translator, src_lang, tgt_lang),
        off_target=None if flags is None else sum(flags),
        off_target_percent=None if flags is None else off_target_percent(flags))
    return evaluation


TABLE_KEYS = ("direction", "bleu", "chrf", "off_target_percent", "n_sentences", "pivot")


def evaluate_directions(translator, data_cfg: Any, split: str, out_dir: str | Path,
                        search: dict | None = None, pivot: str | None = None,
                        root: str | None = None, save_alignments: bool = True,
                        extra: dict | None = None,
                        evaluate: Callable[..., Evaluation] | None = None) -> list[dict]:
    """Score every direction of ``split`` (:func:`split_directions`) by
    :func:`evaluate_direction` (through ``pivot`` where it is neither side; directly where
    it is; ``evaluate``: another function called as it is, with keywords after the texts,
    e.g. :func:`nmt.extras.decoding.mbr.evaluate_mbr` around it), write each one's files into
    ``out_dir/<src>-<tgt>/`` (``extra`` added to each scores.json) and the table
    ``directions.md`` / ``directions.json`` into ``out_dir``; returns the table's rows (``src``,
    ``tgt`` and :data:`TABLE_KEYS`). ConfigError: the split has no direction of the model's
    languages."""
    found = split_directions(translator, data_cfg, split, root)
    if not found:
        raise ConfigError(f"split {split!r} under data.root={root or data_cfg.root} "
                          f"(data.format={data_cfg.format}) has no direction between two of the "
                          f"model's languages ({', '.join(translator.languages)}).")
    rows = []
    for src, tgt in found:
        sources, references = read_direction(data_cfg, split, src, tgt, root)
        via = pivot if pivot not in (None, src, tgt) else None
        evaluation = (evaluate or evaluate_direction)(translator, sources, references,
                                                      src_lang=src, tgt_lang=tgt, search=search,
                                                      pivot=via)
        evaluation.scores.update(extra or {}, split=split)
        write_outputs(Path(out_dir) / f"{src}-{tgt}", evaluation, save_alignments)
        rows.append({"src": src, "tgt": tgt, **{k: evaluation.scores[k] for k in TABLE_KEYS}})
    write_json_atomic(Path(out_dir) / "directions.json", {"split": split, "directions": rows})
    write_text_atomic(Path(out_dir) / "directions.md", directions_table(rows))
    return rows


def directions_table(rows: Sequence[dict]) -> str:
    """The markdown table of :func:`evaluate_directions`' rows, with the mean BLEU, chrF and
    off-target rate of the supervised and of the zero-shot directions."""
    lines = ["| direction | kind | BLEU | chrF | off-target % | pivot |",
             "|---|---|---:|---:|---:|---|"]
    def rate(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines += [f"| {r['src']}-{r['tgt']} | {r['direction']} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
              f"{rate(r['off_target_percent'])} | {r['pivot'] or ''} |" for r in rows]
    for kind in KINDS:
        group = [r for r in rows if r["direction"] == kind]
        if group:
            mean = {k: None if any(r[k] is None for r in group) else
                    sum(r[k] for r in group) / len(group)
                    for k in ("bleu", "chrf", "off_target_percent")}
            lines.append(f"| mean of {len(group)} | {kind} | {mean['bleu']:.2f} | "
                         f"{mean['chrf']:.2f} | {rate(mean['off_target_percent'])} | |")
    return "\n".join(lines) + "\n"
