"""Back-translation (Sennrich et al. 2016, "Improving Neural Machine Translation Models with
Monolingual Data", ACL): a model of L -> L' translates monolingual text of L, and each pair
(translation, line) joins a synthetic corpus for training L' -> L, whose targets are real text.
By beam search or by sampling (Edunov et al. 2018, "Understanding Back-Translation at Scale",
EMNLP: unrestricted or top-10 sampling gives the richer training signal when the synthetic data
is large, beam when it is small), each synthetic source optionally starting with the tag
:data:`~nmt.data.languages.BT_TAG` (Caswell et al. 2019, "Tagged Back-Translation", WMT), which a
training run reserves as one piece with ``data.tokenizer.bt_tag=true``. ``nmt-backtranslate``
(:mod:`nmt.cli.backtranslate`) calls it::

    report = backtranslate(translator, iter_lines("mono.en"), "data/bt", "bt", settings, tag=True)
    # data/bt/bt.de: "<BT> " + each German translation; data/bt/bt.en: the English lines
    nmt-train data=multi30k_de_en 'data.corpora=[{split: bt, root: data/bt, weight: 1}]' \\
        data.tokenizer.bt_tag=true

A multilingual model of pivot-centric pairs gives synthetic pairs for its zero-shot directions
(:func:`backtranslate_pivot`): the pivot side of each trained pair (en, Y), translated into
each other language X, gives (X', Y), a pair of X -> Y with a real target (the pivot-based data
of Gu et al. 2019, "Improved Zero-shot Neural Machine Translation via Ignoring Spurious
Correlations", ACL, and Lakew et al. 2018), one ``{split}.{X}-{Y}.tsv`` per direction, the
layout of a multilingual ``data.format=tsv`` split.

Both stream: ``chunk_lines`` lines are read, translated and written at a time, so memory does
not grow with the input; each output file is written beside its name and renamed into place
when the whole input is done (an error leaves no corpus). A line is skipped, and counted in
the :class:`Report`, when it is blank, when its translation is blank, or when it is longer
than ``max_len`` subwords (training drops such pairs too: ``data.max_len``).
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError, iter_parallel
from nmt.data.languages import BT_TAG, directions, target_languages
from nmt.extras.decoding.pivot import check_direction
from nmt.runtime import atomic_path

log = logging.getLogger("nmt.extras")


@dataclass
class Report:
    """What became of the input lines: ``lines`` read, ``pairs`` written, skipped ``blank``
    (a blank line or translation) and ``too_long`` (over ``max_len`` subwords; the first of
    them is line ``first_too_long``, 1-based)."""

    lines: int = 0
    pairs: int = 0
    blank: int = 0
    too_long: int = 0
    first_too_long: int | None = None

    def summary(self, max_len: int) -> str:
        """One line: ``"12 lines -> 10 pairs; skipped 1 blank, 1 over 100 subwords (line 7)"``."""
        first = f" (line {self.first_too_long})" if self.too_long else ""
        return (f"{self.lines} lines -> {self.pairs} pairs; skipped {self.blank} blank, "
                f"{self.too_long} over {max_len} subwords{first}")


def corpus_files(out_dir: str | Path, split: str, src: str, tgt: str, fmt: str) -> list[Path]:
    """The files of a synthetic corpus of ``src`` -> ``tgt`` as ``data.corpora`` reads them:
    ``{split}.{src}`` and ``{split}.{tgt}`` (``text``), ``{split}.tsv`` (``tsv``) or
    ``{split}.{src}-{tgt}.tsv`` (``tsv-pairs``: one direction of a multilingual split)."""
    out = Path(out_dir)
    return {"text": [out / f"{split}.{src}", out / f"{split}.{tgt}"],
            "tsv": [out / f"{split}.tsv"],
            "tsv-pairs": [out / f"{split}.{src}-{tgt}.tsv"]}[fmt]


def refuse_existing(paths: Iterable[Path]) -> None:
    """ConfigError naming the first of ``paths`` that exists (a corpus or its report)."""
    for path in paths:
        if path.exists():
            raise ConfigError(f"{path} exists: nmt-backtranslate does not overwrite a corpus or "
                              "its report; give another split= or out_dir=, or delete it.")


@contextmanager
def _writer(paths: Sequence[Path]) -> Iterator[Callable[[list[tuple[str, str]]], None]]:
    """``write(pairs)`` appending (source, target) pairs to ``paths`` (two line-aligned files,
    or one TSV), each renamed into place when the block ends without error. In a TSV a tab
    inside a sentence becomes a space: the tokenizer's normalization (``nmt_nfkc``) reads both
    as one space, so the model sees the same pieces."""
    with ExitStack() as stack:
        files = [stack.enter_context(open(stack.enter_context(atomic_path(p)), "w",
                                          encoding="utf-8", newline="\n")) for p in paths]

        def write(pairs: list[tuple[str, str]]) -> None:
            if not pairs:
                return
            if len(files) == 2:
                for f, side in zip(files, zip(*pairs, strict=True), strict=True):
                    f.write("".join(text + "\n" for text in side))
                return
            files[0].write("".join("\t".join(text.replace("\t", " ") for text in pair) + "\n"
                                   for pair in pairs))

        yield write


def _kept(tokenizer, texts: Sequence[str], first_line: int, max_len: int,
          report: Report) -> list[int]:
    """The indices of ``texts`` worth translating: not blank, at most ``max_len`` subwords."""
    keep = []
    for k, (text, ids) in enumerate(zip(texts, tokenizer.encode_src_batch(texts), strict=True)):
        if not text.strip():
            report.blank += 1
        elif len(ids) > max_len:
            report.too_long += 1
            report.first_too_long = report.first_too_long or first_line + k
        else:
            keep.append(k)
    return keep


def _seeds(settings: Mapping) -> Iterator[Mapping]:
    """``settings`` for each translate call of a run: with sampling, each call's own seed drawn
    from the run's one generator (seeded with ``settings["seed"]``), so a line repeated in
    another chunk gets another sample (one seed for every call would repeat it) and the run is
    a function of seed, input and ``chunk_lines``."""
    if not settings["sampling"]:
        return itertools.repeat(settings)
    rng = random.Random(settings["seed"])
    return ({**settings, "seed": rng.randrange(2**31)} for _ in itertools.count())


def _synthetic(translator, texts: list[str], settings: Mapping, src: str | None, tgt: str | None,
               tag: bool) -> list[str | None]:
    """Each text's translation (``src`` -> ``tgt``), ``<BT> `` first with ``tag``; None: blank."""
    out = translator.translate_with(texts, settings, src_lang=src, tgt_lang=tgt, alignment=False)
    return [None if not r.text.strip() else f"{BT_TAG} {r.text}" if tag else r.text for r in out]


def backtranslate(translator, lines: Iterable[str], out_dir: str | Path, split: str,
                  settings: Mapping, *, src_lang: str | None = None, tgt_lang: str | None = None,
                  tag: bool = False, max_len: int | None = None, fmt: str = "text",
                  chunk_lines: int = 10_000) -> Report:
    """Back-translate monolingual ``lines`` of ``src_lang`` (L) with ``translator`` (an engine
    of :class:`~nmt.inference.translator.TranslatorBase`, or a decoder over one) into
    ``tgt_lang`` (L'; both default to the model's ``data.src_lang`` / ``data.tgt_lang``) by the
    checked search or sampling ``settings`` (``search_settings``), and write the corpus of
    L' -> L under ``out_dir`` (:func:`corpus_files` of ``fmt``, ``text`` or ``tsv``): each
    translation (``<BT> `` first with ``tag``) as the source, its line as the target.
    ``max_len``: subwords of a line (None: the model's ``data.max_len``). Returns the
    :class:`Report`. ConfigError: a direction the model cannot translate, or an existing
    output file; CorpusError: no pair was written."""
    data = translator.config.data
    src, tgt = str(src_lang or data.src_lang), str(tgt_lang or data.tgt_lang)
    check_direction(translator, src, tgt)
    paths = corpus_files(out_dir, split, tgt, src, fmt)
    refuse_existing(paths)
    max_len = int(max_len or data.max_len)
    report, stream, seeds = Report(), iter(lines), _seeds(settings)
    with _writer(paths) as write:
        while chunk := list(itertools.islice(stream, chunk_lines)):
            first, report.lines = report.lines + 1, report.lines + len(chunk)
            keep = _kept(translator.tokenizer, chunk, first, max_len, report)
            texts = [chunk[k] for k in keep]
            synthetic = _synthetic(translator, texts, next(seeds), src, tgt, tag) if texts else []
            pairs = [(s, t) for s, t in zip(synthetic, texts, strict=True) if s is not None]
            report.blank += len(texts) - len(pairs)
            report.pairs += len(pairs)
            write(pairs)
            log.info("back-translation %s-%s: %d lines read, %d pairs", src, tgt, report.lines,
                     report.pairs)
        if not report.pairs:
            raise CorpusError(f"no line was back-translated ({report.summary(max_len)}): "
                              "nothing written.")
    return report


def pivot_jobs(data_cfg: Any, pivot: str) -> dict[str, tuple[tuple[str, str], list[str]]]:
    """Per language Y paired with ``pivot`` in ``data_cfg``'s directions: the trained direction
    its pairs are read in ((Y, pivot) or (pivot, Y)) and the languages X (not Y, not the pivot)
    the model translates into, each giving the zero-shot direction X -> Y. ConfigError: none."""
    pairs = directions(data_cfg)
    langs = sorted({lang for pair in pairs if pivot in pair for lang in pair} - {pivot})
    targets = set(target_languages(data_cfg))
    jobs = {y: ((y, pivot) if (y, pivot) in pairs else (pivot, y),
                [x for x in langs if x != y and x in targets]) for y in langs}
    jobs = {y: job for y, job in jobs.items() if job[1]}
    if not jobs:
        paired = ", ".join("-".join(p) for p in pairs)
        raise ConfigError(f"pivot={pivot}: the model's pairs ({paired}) give no zero-shot "
                          "direction X-Y with X and Y both paired with it.")
    return jobs


def backtranslate_pivot(translator, data_cfg: Any, input_split: str, out_dir: str | Path,
                        split: str, settings: Mapping, pivot: str, *, tag: bool = False,
                        max_len: int | None = None, chunk_lines: int = 10_000
                        ) -> dict[str, Report]:
    """Synthetic pairs for a multilingual model's zero-shot directions: for each language Y
    paired with ``pivot`` (:func:`pivot_jobs`), the pairs of split ``input_split`` of
    ``data_cfg`` (the model's own ``data`` section, its ``root`` as given) in chunks of
    ``chunk_lines``; the pivot side of each translated into every other language X by
    ``settings``, written as (X' (``<BT> `` first with ``tag``), Y) to
    ``{split}.{X}-{Y}.tsv`` under ``out_dir``. A pair is skipped when a side is blank or its
    pivot side is over ``max_len`` subwords (None: ``data.max_len``). Returns a :class:`Report`
    per direction ``"X-Y"``. ConfigError: no such direction, a step the model cannot
    translate, or an existing output file (all checked before any text is read)."""
    jobs = pivot_jobs(data_cfg, pivot)
    for _, xs in jobs.values():
        for x in xs:
            check_direction(translator, pivot, x)
    paths = {f"{x}-{y}": corpus_files(out_dir, split, x, y, "tsv-pairs")
             for y, (_, xs) in jobs.items() for x in xs}
    refuse_existing(p for ps in paths.values() for p in ps)
    max_len = int(max_len or data_cfg.max_len)
    reports, seeds = {name: Report() for name in paths}, _seeds(settings)
    with ExitStack() as stack:   # every file renamed into place at the end, or none
        writers = {name: stack.enter_context(_writer(p)) for name, p in paths.items()}
        for y, (direction, xs) in jobs.items():
            side, read = direction.index(pivot), 0
            stream = iter_parallel(data_cfg, input_split, direction)
            while chunk := list(itertools.islice(stream, chunk_lines)):
                first, read = read + 1, read + len(chunk)
                shared = Report()   # the checks of the pivot side (a blank Y: blank), for every X
                texts = [p[side] if p[1 - side].strip() else "" for p in chunk]
                keep = _kept(translator.tokenizer, texts, first, max_len, shared)
                for x in xs:
                    report = reports[f"{x}-{y}"]
                    synthetic = _synthetic(translator, [texts[k] for k in keep], next(seeds),
                                           pivot, x, tag) if keep else []
                    pairs = [(s, chunk[k][1 - side]) for s, k in zip(synthetic, keep, strict=True)
                             if s is not None]
                    report.lines, report.pairs = read, report.pairs + len(pairs)
                    report.blank += shared.blank + len(keep) - len(pairs)
                    report.too_long += shared.too_long
                    report.first_too_long = report.first_too_long or shared.first_too_long
                    writers[f"{x}-{y}"](pairs)
                log.info("back-translation %s -> %s for %s: %d pairs read", pivot, ", ".join(xs),
                         y, read)
        if empty := [name for name, report in reports.items() if not report.pairs]:
            raise CorpusError(f"no pair of {', '.join(empty)} was written "
                              f"({reports[empty[0]].summary(max_len)}): nothing written.")
    return reports
