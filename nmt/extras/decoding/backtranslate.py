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
not grow with the input; each output file grows beside its name (``.partial``) and is renamed
into place when the whole input is done. A run stopped in the middle resumes after its last
chunk when started again with the same settings (:class:`_Output`); a user error (no pair
written) leaves no corpus. A line is skipped, and counted in
the :class:`Report`, when it is blank, when its translation is blank, or when it is longer
than ``max_len`` subwords (training drops such pairs too: ``data.max_len``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError, iter_parallel
from nmt.data.languages import BT_TAG, directions, target_languages
from nmt.extras.decoding.pivot import check_direction
from nmt.runtime import write_json_atomic

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


def _tsv(pair: tuple[str, str]) -> str:
    """A pair as one TSV line, a tab inside a sentence a space (the tokenizer's normalization,
    ``nmt_nfkc``, reads both as one space, so the model sees the same pieces)."""
    return "\t".join(text.replace("\t", " ") for text in pair)


class _Output:
    """The corpus files of one run, resumable (like ``nmt-train``'s ``resume: auto``): each
    file grows as ``{name}.partial``, and after every chunk
    ``{split}.backtranslation.progress.json`` records the run's settings (``run`` and
    ``settings``), the input lines done per job, the translate calls made (the seeds drawn),
    the reports and each file's size. The same command started again truncates the files to
    those sizes (a chunk half-written when the run stopped goes), skips the lines done and goes
    on: the corpus is the one an uninterrupted run writes. A block that ends well renames every
    file into place and deletes the progress file; a user error (ConfigError, CorpusError: no
    pair written) deletes them all; anything else (an interrupt, a crash) leaves them to resume
    from. ConfigError: a progress file of other settings, or an existing corpus file."""

    def __init__(self, out_dir: str | Path, split: str, paths: Mapping[str, Sequence[Path]],
                 run: Mapping, settings: Mapping):
        self.paths = {name: list(ps) for name, ps in paths.items()}
        self.parts = {p: p.with_name(p.name + ".partial") for ps in self.paths.values() for p in ps}
        # as it reads back from the progress file
        self.run = json.loads(json.dumps({**run, "settings": dict(settings)}))
        self.progress = Path(out_dir) / f"{split}.backtranslation.progress.json"
        self.reports = {name: Report() for name in paths}
        self.done: dict[str, int] = {}
        self.calls, sizes = 0, {}
        if self.progress.exists():
            state = json.loads(self.progress.read_text(encoding="utf-8"))
            if changed := [k for k in sorted({*state["run"], *self.run})
                           if state["run"].get(k) != self.run.get(k)]:
                raise ConfigError(f"{self.progress}: a back-translation with other settings "
                                  f"({', '.join(changed)}) stopped here; rerun it to resume, or "
                                  "delete this file and its .partial files to start over.")
            if missing := [str(p) for p in self.parts.values() if not p.is_file()]:
                raise ConfigError(f"{self.progress}: {missing[0]} is missing; delete the "
                                  "progress file to start over.")
            self.reports = {name: Report(**r) for name, r in state["reports"].items()}
            self.done, self.calls, sizes = state["done"], state["calls"], state["sizes"]
            log.info("back-translation: resuming after %s", ", ".join(
                f"{n} lines of {job}" for job, n in self.done.items()))
        else:
            refuse_existing(self.parts)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for part in self.parts.values():
            if part.name in sizes:
                os.truncate(part, sizes[part.name])
        self.files = {name: [open(self.parts[p], "a" if sizes else "w", encoding="utf-8",
                                  newline="\n") for p in ps]
                      for name, ps in self.paths.items()}
        self.seeds = itertools.islice(_seeds(settings), self.calls, None)

    def settings(self) -> Mapping:
        """The settings of the run's next translate call (its own seed with sampling)."""
        self.calls += 1
        return next(self.seeds)

    def write(self, name: str, pairs: list[tuple[str, str]]) -> None:
        """Append (source, target) pairs to ``name``'s files: two line-aligned text files, or
        one TSV."""
        files = self.files[name]
        for k, f in enumerate(files):
            f.write("".join((_tsv(pair) if len(files) == 1 else pair[k]) + "\n" for pair in pairs))

    def commit(self, job: str, lines: int) -> None:
        """A chunk is done: ``lines`` input lines of ``job`` read; save the resume point."""
        self.done[job] = lines
        sizes = {}
        for f in itertools.chain.from_iterable(self.files.values()):
            f.flush()
            sizes[Path(f.name).name] = os.fstat(f.fileno()).st_size
        write_json_atomic(self.progress, {
            "run": self.run, "done": self.done, "calls": self.calls, "sizes": sizes,
            "reports": {name: dataclasses.asdict(r) for name, r in self.reports.items()}})

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, kind, error, trace) -> None:
        for f in itertools.chain.from_iterable(self.files.values()):
            f.close()
        if kind is None:
            for path, part in self.parts.items():
                os.replace(part, path)
        elif issubclass(kind, (ConfigError, CorpusError)):
            for part in self.parts.values():
                part.unlink(missing_ok=True)
        else:
            log.info("back-translation stopped: the same command resumes it (%s)", self.progress)
            return
        self.progress.unlink(missing_ok=True)


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
                  chunk_lines: int = 10_000, run: Mapping | None = None) -> Report:
    """Back-translate monolingual ``lines`` of ``src_lang`` (L) with ``translator`` (an engine
    of :class:`~nmt.inference.translator.TranslatorBase`, or a decoder over one) into
    ``tgt_lang`` (L'; both default to the model's ``data.src_lang`` / ``data.tgt_lang``) by the
    checked search or sampling ``settings`` (``search_settings``), and write the corpus of
    L' -> L under ``out_dir`` (:func:`corpus_files` of ``fmt``, ``text`` or ``tsv``): each
    translation (``<BT> `` first with ``tag``) as the source, its line as the target.
    ``max_len``: subwords of a line (None: the model's ``data.max_len``). A stopped run
    resumes (:class:`_Output`) when started again with the same arguments and ``run`` (what
    else identifies it, e.g. the checkpoint and input file). Returns the :class:`Report`.
    ConfigError: a direction the model cannot translate, an existing output file, or a
    progress file of other settings; CorpusError: no pair was written."""
    data = translator.config.data
    src, tgt = str(src_lang or data.src_lang), str(tgt_lang or data.tgt_lang)
    check_direction(translator, src, tgt)
    name, max_len = f"{tgt}-{src}", int(max_len or data.max_len)
    stream = iter(lines)
    run = {**(run or {}), "direction": name, "format": fmt, "tag": tag, "max_len": max_len,
           "chunk_lines": chunk_lines}
    with _Output(out_dir, split, {name: corpus_files(out_dir, split, tgt, src, fmt)}, run,
                 settings) as out:
        report = out.reports[name]
        next(itertools.islice(stream, report.lines, report.lines), None)   # the lines done
        while chunk := list(itertools.islice(stream, chunk_lines)):
            first, report.lines = report.lines + 1, report.lines + len(chunk)
            keep = _kept(translator.tokenizer, chunk, first, max_len, report)
            texts = [chunk[k] for k in keep]
            synthetic = (_synthetic(translator, texts, out.settings(), src, tgt, tag)
                         if texts else [])
            pairs = [(s, t) for s, t in zip(synthetic, texts, strict=True) if s is not None]
            report.blank += len(texts) - len(pairs)
            report.pairs += len(pairs)
            out.write(name, pairs)
            out.commit(name, report.lines)
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
                        max_len: int | None = None, chunk_lines: int = 10_000,
                        run: Mapping | None = None) -> dict[str, Report]:
    """Synthetic pairs for a multilingual model's zero-shot directions: for each language Y
    paired with ``pivot`` (:func:`pivot_jobs`), the pairs of split ``input_split`` of
    ``data_cfg`` (the model's own ``data`` section, its ``root`` as given) in chunks of
    ``chunk_lines``; the pivot side of each translated into every other language X by
    ``settings``, written as (X' (``<BT> `` first with ``tag``), Y) to
    ``{split}.{X}-{Y}.tsv`` under ``out_dir``. A pair is skipped when a side is blank or its
    pivot side is over ``max_len`` subwords (None: ``data.max_len``). Returns a :class:`Report`
    per direction ``"X-Y"``; a stopped run resumes as :func:`backtranslate`'s does.
    ConfigError: no such direction, a step the model cannot translate, an existing output file
    or a progress file of other settings (all checked before any text is read)."""
    jobs = pivot_jobs(data_cfg, pivot)
    for _, xs in jobs.values():
        for x in xs:
            check_direction(translator, pivot, x)
    paths = {f"{x}-{y}": corpus_files(out_dir, split, x, y, "tsv-pairs")
             for y, (_, xs) in jobs.items() for x in xs}
    max_len = int(max_len or data_cfg.max_len)
    run = {**(run or {}), "pivot": pivot, "root": str(data_cfg.root), "input_split": input_split,
           "tag": tag, "max_len": max_len, "chunk_lines": chunk_lines}
    with _Output(out_dir, split, paths, run, settings) as out:
        reports = out.reports
        for y, (direction, xs) in jobs.items():
            side, read = direction.index(pivot), out.done.get(y, 0)
            stream = iter_parallel(data_cfg, input_split, direction)
            next(itertools.islice(stream, read, read), None)   # the lines done
            while chunk := list(itertools.islice(stream, chunk_lines)):
                first, read = read + 1, read + len(chunk)
                shared = Report()   # the checks of the pivot side (a blank Y: blank), for every X
                texts = [p[side] if p[1 - side].strip() else "" for p in chunk]
                keep = _kept(translator.tokenizer, texts, first, max_len, shared)
                for x in xs:
                    report = reports[f"{x}-{y}"]
                    synthetic = _synthetic(translator, [texts[k] for k in keep],
                                           out.settings(), pivot, x, tag) if keep else []
                    pairs = [(s, chunk[k][1 - side]) for s, k in zip(synthetic, keep, strict=True)
                             if s is not None]
                    report.lines, report.pairs = read, report.pairs + len(pairs)
                    report.blank += shared.blank + len(keep) - len(pairs)
                    report.too_long += shared.too_long
                    report.first_too_long = report.first_too_long or shared.first_too_long
                    out.write(f"{x}-{y}", pairs)
                out.commit(y, read)
                log.info("back-translation %s -> %s for %s: %d pairs read", pivot, ", ".join(xs),
                         y, read)
        if empty := [name for name, report in reports.items() if not report.pairs]:
            raise CorpusError(f"no pair of {', '.join(empty)} was written "
                              f"({reports[empty[0]].summary(max_len)}): nothing written.")
    return reports
