"""``nmt-translate``: translate raw sentences, one per line, streaming.

    nmt-translate checkpoint=runs/tf/checkpoints/best.pt < input.de > output.en
    nmt-translate checkpoint=... input=input.de output=output.en beam_size=5
    nmt-translate engine=ctranslate2 model_dir=runs/tf/ct2 < input.de > output.en   # nmt-export
    nmt-translate checkpoint=runs/multi/checkpoints/best.pt src_lang=de tgt_lang=fr < input.de
    nmt-translate checkpoint=runs/multi/checkpoints/best.pt src_lang=de tgt_lang=fr pivot=en \\
        < input.de
    nmt-translate checkpoint=... decoding=mbr mbr.num=16 < input.de > output.en   # MBR

Lines are read in chunks of ``batch_sentences``; each chunk is translated as one sorted batch and
written (and flushed) in input order before the next is read, so output starts early. The input
(``input=FILE`` or stdin) must be UTF-8; only ``\\n`` ends a line (a ``\\r`` before it is dropped, a
lone ``\\r`` stays), so output line i belongs to input line i as ``wc -l`` counts them, and an empty
line gives an empty line. With ``n_best=N`` (N > 1) each input line gives N lines ``i |||
translation ||| score`` (Moses n-best format: ``i`` the 0-based input line, best first, score =
length-penalised log-probability). A multilingual model needs the direction, ``src_lang`` and
``tgt_lang`` (the source language is checked, the target's tag given), through ``pivot`` if given
(:class:`nmt.extras.decoding.pivot.Pivot`). ``decoding=mbr`` translates by minimum-Bayes-risk
decoding (:class:`nmt.extras.decoding.mbr.MbrTranslator`, the ``mbr.*`` settings). Options:
configs/translate.yaml (``nmt-translate --help``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import TextIO

import hydra
from omegaconf import DictConfig

from nmt.cli.common import (
    check_decoding,
    check_engine,
    decode_settings,
    load_translator,
    require_direction,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError, to_plain
from nmt.data.corpus import CorpusError, iter_lines


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    if cfg.input and not Path(cfg.input).is_file():
        raise ConfigError(f"input={cfg.input} is not a file.")
    return check_decoding(cfg)


def stdin_lines() -> Iterator[str]:
    """The lines of stdin as :func:`nmt.data.corpus.iter_lines` reads a file (without the
    ``\\n`` or ``\\r\\n``; CorpusError naming ``<stdin>`` and the line if one is not UTF-8)."""
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            yield raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise CorpusError(f"<stdin>, line {number}: invalid UTF-8; re-encode the input "
                              "as UTF-8.") from None


def translate_stream(translator, lines: Iterable[str], out: TextIO, settings: dict) -> int:
    """Translate ``lines`` (without line ends) into ``out`` in chunks of
    ``settings["batch_sentences"]`` (format in the module docstring); returns the line count."""
    done, it = 0, iter(lines)
    while chunk := list(islice(it, int(settings["batch_sentences"]))):
        parts = []
        results = translator.translate(chunk, **settings, alignment=False)   # text only
        for i, result in enumerate(results, start=done):
            if int(settings.get("n_best", 1)) == 1:
                parts.append(result.text + "\n")
            else:
                parts.extend(f"{i} ||| {h.text} ||| {h.score:.4f}\n" for h in result.hypotheses)
        out.write("".join(parts))
        out.flush()
        done += len(chunk)
    return done


def _run(cfg: DictConfig) -> None:
    translator = load_translator(cfg)
    data = translator.config.data
    if cfg.decoding == "mbr":   # the mbr.* settings were checked by check_decoding
        from nmt.extras.decoding.mbr import MbrTranslator

        translator = MbrTranslator(translator, to_plain(cfg.mbr))
    require_direction(cfg, translator)
    if cfg.src_lang or cfg.tgt_lang or cfg.pivot:   # checked before any input is read
        from nmt.extras.decoding.pivot import Pivot, check_direction

        check_direction(translator, cfg.src_lang or data.src_lang,
                        cfg.tgt_lang or data.tgt_lang, cfg.pivot)
        translator = Pivot(translator, cfg.pivot) if cfg.pivot else translator
    with ExitStack() as stack:
        lines = stdin_lines()
        if cfg.input:  # iter_lines refuses an empty file: here it gives an empty output
            lines = iter_lines(cfg.input) if Path(cfg.input).stat().st_size else iter(())
        if cfg.output:
            try:
                out = stack.enter_context(open(cfg.output, "w", encoding="utf-8", newline="\n"))
            except OSError as err:
                raise ConfigError(f"output={cfg.output}: cannot write it ({err.strerror or err}); "
                                  "choose a writable file with output=FILE.") from None
        else:
            out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
            stack.callback(out.detach)
        try:
            translate_stream(translator, lines, out, {**decode_settings(cfg),
                                                      "src_lang": cfg.src_lang,
                                                      "tgt_lang": cfg.tgt_lang})
        except BrokenPipeError:  # e.g. `nmt-translate ... | head`
            sys.stderr.close()


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="translate")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-translate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-translate``; returns the exit status."""
    return run_app(app, argv, config_name="translate", prog="nmt-translate", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
