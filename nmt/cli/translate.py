"""``nmt-translate``: translate raw sentences, one per line, streaming.

    nmt-translate checkpoint=runs/tf/checkpoints/best.pt < input.de > output.en
    nmt-translate checkpoint=... input=input.de output=output.en beam_size=5

Lines are read in chunks of ``batch_sentences``; each chunk is translated as one sorted
batch and its translations are written (and flushed) in input order before the next chunk
is read, so output of a large input starts early. An empty line gives an empty line.

Output: one detokenized translation per input line; with ``n_best=N`` (N > 1) instead N
lines per input line in the Moses n-best format ``i ||| translation ||| score`` (``i`` the
0-based input line number, best first; score = length-penalised log-probability).
Options: configs/translate.yaml (``nmt-translate --help``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import islice
from typing import TextIO

from omegaconf import DictConfig

from nmt.cli.common import check_search, require, resolve_device, run_cli, search_settings
from nmt.config import ConfigError

USAGE = ("nmt-translate checkpoint=PATH [input=FILE] [output=FILE] [beam_size=5] [n_best=1] "
         "[batch_sentences=100] < input > output")


def _check(cfg: DictConfig) -> DictConfig:
    require(cfg, "checkpoint")
    return check_search(cfg)


def chunks(lines: TextIO, size: int) -> Iterator[list[str]]:
    """Consecutive lists of at most ``size`` lines (newline removed) from ``lines``."""
    it = iter(lines)
    while chunk := list(islice(it, size)):
        yield [line.rstrip("\r\n") for line in chunk]


def translate_stream(model, tokenizer, inp: TextIO, out: TextIO, search_cfg: dict, device) -> int:
    """Translate ``inp`` line by line into ``out`` (format in the module docstring).

    Returns:
        Number of input lines translated.
    """
    from nmt.inference.search import translate

    n_best = int(search_cfg["n_best"])
    done = 0
    for lines in chunks(inp, int(search_cfg["batch_sentences"])):
        src_ids = tokenizer.encode_src_batch(lines)
        results = translate(model, src_ids, search_cfg, device)
        parts = []
        for i, hyps in enumerate(results, start=done):
            if n_best == 1:
                parts.append(tokenizer.decode_tgt(hyps[0].tokens) + "\n")
            else:
                parts.extend(f"{i} ||| {tokenizer.decode_tgt(h.tokens)} ||| {h.score:.4f}\n"
                             for h in hyps[:n_best])
        out.write("".join(parts))
        out.flush()
        done += len(lines)
    return done


def _run(cfg: DictConfig) -> int:
    from nmt.training.checkpoint import load_for_inference

    device = resolve_device(cfg.device)
    model, tokenizer, _ = load_for_inference(cfg.checkpoint, device)
    with ExitStack() as stack:
        if cfg.input:
            try:
                inp = stack.enter_context(open(cfg.input, encoding="utf-8"))
            except OSError as err:
                raise ConfigError(f"input={cfg.input}: cannot read it ({err.strerror}).") from None
        else:
            inp = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        if cfg.output:
            out = stack.enter_context(open(cfg.output, "w", encoding="utf-8"))
        else:
            out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", line_buffering=False)
            stack.callback(out.detach)
        try:
            translate_stream(model, tokenizer, inp, out, search_settings(cfg), device)
        except BrokenPipeError:  # e.g. `nmt-translate ... | head`
            sys.stderr.close()
            return 0
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-translate``; returns the exit status (2 on user errors)."""
    return run_cli(_run, argv, config_name="translate", usage=USAGE, validate_fn=_check,
                   prog="nmt-translate")


if __name__ == "__main__":
    raise SystemExit(main())
