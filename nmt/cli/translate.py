"""``nmt-translate``: translate raw sentences, one per line, streaming.

    nmt-translate checkpoint=runs/tf/checkpoints/best.pt < input.de > output.en
    nmt-translate checkpoint=... input=input.de output=output.en beam_size=5
    nmt-translate engine=ctranslate2 model_dir=runs/tf/ct2 < input.de > output.en   # nmt-export

Lines are read in chunks of ``batch_sentences``; each chunk is translated as one sorted
batch and its translations are written (and flushed) in input order before the next chunk
is read, so output of a large input starts early. An empty line gives an empty line.

Input (``input=FILE`` or stdin, treated alike) must be UTF-8: an invalid byte stops the run
with a one-paragraph error naming the file (``<stdin>``) and line. Only ``\n`` ends a line
(a trailing ``\r`` of ``\r\n`` is dropped; a lone ``\r`` is kept inside the line), so
output line i always belongs to input line i, as ``wc -l`` counts them.

Output: one detokenized translation per input line; with ``n_best=N`` (N > 1) instead N
lines per input line in the Moses n-best format ``i ||| translation ||| score`` (``i`` the
0-based input line number, best first; score = length-penalised log-probability).
Options: configs/translate.yaml (``nmt-translate --help``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from itertools import islice
from typing import BinaryIO, TextIO

import hydra
from omegaconf import DictConfig

from nmt.cli.common import (
    check_engine,
    check_search,
    decode_settings,
    load_translator,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    return check_search(cfg)


def _strip_newline(line: str) -> str:
    """``line`` without its ``\n`` or ``\r\n`` ending (other ``\r`` characters stay)."""
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    """Consecutive lists of at most ``size`` lines (line ending removed) from ``lines``."""
    it = iter(lines)
    while chunk := list(islice(it, size)):
        yield [_strip_newline(line) for line in chunk]


def utf8_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Decode a byte stream line by line (only ``\n`` ends a line), strictly as UTF-8.

    Args:
        stream: binary file or ``sys.stdin.buffer``.
        name: how messages name the stream (the file path or ``<stdin>``).

    Yields:
        Each line as text, its ``\n`` kept (the last line may lack one).

    Raises:
        CorpusError: a line is not valid UTF-8 (the message names ``name``, the 1-based line
            and the byte offset), raised when that line is reached.
    """
    from nmt.data.corpus import CorpusError

    offset = 0
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorpusError(
                f"{name}, line {number}: invalid UTF-8 (byte 0x{raw[err.start]:02x} at offset "
                f"{offset + err.start}); re-encode the input as UTF-8.") from None
        offset += len(raw)


def translate_stream(translator, inp: Iterable[str], out: TextIO, settings: dict) -> int:
    """Translate ``inp`` line by line into ``out`` (format in the module docstring).

    Args:
        translator: a :class:`nmt.inference.translator.Translator` (or the CTranslate2
            engine's :class:`nmt.extras.ctranslate2.CTranslate2Translator`).
        inp: text lines (with or without their ``\n``), e.g. from :func:`utf8_lines`.
        out: text stream; each chunk's translations are written and flushed together.
        settings: keyword arguments of :meth:`Translator.translate` (``batch_sentences``
            is also the chunk size).

    Returns:
        Number of input lines translated.
    """
    n_best = int(settings.get("n_best", 1))
    done = 0
    for lines in chunks(inp, int(settings["batch_sentences"])):
        results = translator.translate(lines, **settings)
        parts = []
        for i, result in enumerate(results, start=done):
            if n_best == 1:
                parts.append(result.text + "\n")
            else:
                parts.extend(f"{i} ||| {h.text} ||| {h.score:.4f}\n" for h in result.hypotheses)
        out.write("".join(parts))
        out.flush()
        done += len(lines)
    return done


def _run(cfg: DictConfig) -> int:
    translator = load_translator(cfg)
    with ExitStack() as stack:
        if cfg.input:
            try:
                inp = utf8_lines(stack.enter_context(open(cfg.input, "rb")), str(cfg.input))
            except OSError as err:
                raise ConfigError(f"input={cfg.input}: cannot read it ({err.strerror}).") from None
        else:
            inp = utf8_lines(sys.stdin.buffer, "<stdin>")
        if cfg.output:
            try:
                out = stack.enter_context(open(cfg.output, "w", encoding="utf-8", newline="\n"))
            except OSError as err:
                raise ConfigError(f"output={cfg.output}: cannot write it ({err.strerror or err}); "
                                  "choose a writable file with output=FILE.") from None
        else:
            out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n",
                                   line_buffering=False)
            stack.callback(out.detach)
        try:
            translate_stream(translator, inp, out, decode_settings(cfg))
        except BrokenPipeError:  # e.g. `nmt-translate ... | head`
            sys.stderr.close()
            return 0
    return 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="translate")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-translate``."""
    run_task(cfg, _run, prog="nmt-translate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-translate``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="translate", prog="nmt-translate", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
