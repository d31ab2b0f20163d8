"""``nmt-backtranslate``: a synthetic parallel corpus from monolingual text (back-translation,
:mod:`nmt.extras.decoding.backtranslate`), for training through ``data.corpora``.

    nmt-backtranslate checkpoint=runs/en_de/checkpoints/best.pt input=mono.en out_dir=data/bt \\
        tag=true
    nmt-backtranslate checkpoint=... input=mono.en out_dir=data/bt sampling=true top_k=10 seed=1
    nmt-backtranslate checkpoint=runs/multi/checkpoints/best.pt src_lang=en tgt_lang=de \\
        input=mono.en out_dir=data/bt
    nmt-backtranslate checkpoint=runs/multi/checkpoints/best.pt pivot=en out_dir=data/zs \\
        split=train tag=true
    nmt-train data=multi30k_de_en 'data.corpora=[{split: bt, root: data/bt, weight: 1}]' \\
        data.tokenizer.bt_tag=true

The model translates L -> L' (its ``data.src_lang`` -> ``data.tgt_lang``, or ``src_lang`` /
``tgt_lang``); ``out_dir`` gets ``{split}.{L'}`` (the translations, ``<BT> `` first with
``tag=true``) and ``{split}.{L}`` (the lines), or ``{split}.tsv`` (``format=tsv``): a corpus
of L' -> L. ``pivot=en`` (a multilingual model, no ``input``) writes the zero-shot pairs
``{split}.{X}-{Y}.tsv`` from the model's own corpus (``input_split``, ``data.root``). Blank
lines, blank translations and lines over ``max_len`` subwords are skipped and counted; a
progress line goes to stderr per ``chunk_lines`` lines, the counts are printed at the end and
kept in ``{split}.backtranslation.json`` beside the corpus. A stopped run (interrupted,
killed) resumes where its last chunk ended when the same command is run again
(``{split}.backtranslation.progress.json`` and the ``.partial`` files: see
:class:`nmt.extras.decoding.backtranslate._Output`). A missing or empty input or a bad
setting is a one-line error before the model loads, an existing output file (or
report) or a direction the model cannot translate one before any line is read. Options:
configs/backtranslate.yaml (``nmt-backtranslate --help``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import (
    check_engine,
    checkpoint_paths,
    decode_settings,
    load_translator,
    log_to_stderr,
    require_direction,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError, check_positive, validate_decoding
from nmt.data.corpus import iter_lines, with_root


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    if cfg.pivot:
        if cfg.input or cfg.src_lang or cfg.tgt_lang:
            raise ConfigError(f"pivot={cfg.pivot} reads the model's own corpus (input_split=, "
                              "data.root=) in every direction: drop input=, src_lang=, tgt_lang=.")
        if cfg.format == "text":
            raise ConfigError("pivot= writes one {split}.{X}-{Y}.tsv per zero-shot direction: "
                              "drop format=text (the text layout has one file per language).")
    elif not cfg.input:
        raise ConfigError("input is required: add input=FILE (monolingual text, one sentence a "
                          "line), or pivot=LANG for a multilingual model's zero-shot pairs.")
    elif not Path(cfg.input).is_file():
        raise ConfigError(f"input={cfg.input}: file not found.")
    elif Path(cfg.input).stat().st_size == 0:
        raise ConfigError(f"input={cfg.input}: the file is empty; give monolingual text, one "
                          "sentence a line.")
    elif cfg.input_split or cfg.data.root:
        raise ConfigError("input_split= and data.root= go with pivot=: drop them.")
    if cfg.n_best != 1:
        raise ConfigError(f"n_best={cfg.n_best}: back-translation writes one translation per line.")
    check_positive(cfg, "chunk_lines", "max_len")
    validate_decoding(decode_settings(cfg))
    return cfg


def _run(cfg: DictConfig) -> None:
    from nmt.extras.decoding.backtranslate import (
        backtranslate,
        backtranslate_pivot,
        refuse_existing,
    )
    from nmt.runtime import ensure_writable_dir, write_json_atomic

    ensure_writable_dir(cfg.out_dir, "out_dir")
    report_path = Path(cfg.out_dir) / f"{cfg.split}.backtranslation.json"
    refuse_existing([report_path])   # before the model loads
    translator = load_translator(cfg)
    if not cfg.pivot:
        require_direction(cfg, translator)
    settings = translator.search_settings(**decode_settings(cfg))
    data = translator.config.data
    model = checkpoint_paths(cfg) if cfg.engine == "pytorch" else str(cfg.model_dir)
    common = {"tag": bool(cfg.tag), "max_len": cfg.max_len, "chunk_lines": int(cfg.chunk_lines),
              "run": {"checkpoint": model, "input": cfg.input}}   # a stopped run resumes
    with log_to_stderr("nmt.extras"):   # a line per chunk: a long input shows its progress
        if cfg.pivot:
            reports = backtranslate_pivot(translator, with_root(data, cfg.data.root),
                                          str(cfg.input_split or data.train_split), cfg.out_dir,
                                          str(cfg.split), settings, str(cfg.pivot), **common)
        else:
            src, tgt = str(cfg.src_lang or data.src_lang), str(cfg.tgt_lang or data.tgt_lang)
            reports = {f"{tgt}-{src}": backtranslate(
                translator, iter_lines(cfg.input), cfg.out_dir, str(cfg.split), settings,
                src_lang=src, tgt_lang=tgt, fmt=str(cfg.format or "text"), **common)}
    max_len = int(cfg.max_len or data.max_len)
    for name, report in reports.items():
        print(f"nmt-backtranslate: {name}: {report.summary(max_len)}", file=sys.stderr)
    write_json_atomic(report_path, {
        "checkpoint": model,
        "pivot": cfg.pivot, "input": cfg.input, "tag": bool(cfg.tag), "max_len": max_len,
        "settings": dict(settings),
        "directions": {name: dataclasses.asdict(r) for name, r in reports.items()}})


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="backtranslate")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-backtranslate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-backtranslate``; returns the exit status."""
    return run_app(app, argv, config_name="backtranslate", prog="nmt-backtranslate",
                   validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
