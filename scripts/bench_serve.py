"""Serving throughput and latency: nmt-serve with and without dynamic batching, and offline.

Usage::

    python scripts/bench_serve.py --checkpoint runs/transformer_de_en/checkpoints/best.pt \\
        --clients 32 --seconds 60 --beam-size 5
    python scripts/bench_serve.py --checkpoint ... --clients 8 --sentences-per-request 1 --beam-size 1
    python scripts/bench_serve.py engine=ctranslate2 model_dir=runs/tf/ct2 --clients 32

The other arguments, before, between or after the options, are Hydra overrides of
configs/serve.yaml (``serve.max_batch_tokens=...``, ``device=...``, ``engine=...``); those
without the ``serve.`` prefix also apply to the offline run. Options: ``--checkpoint``,
``--clients N`` (concurrent clients, default 32), ``--seconds S`` (timed seconds per server
phase, default 60), ``--beam-size K`` (default 5), ``--sentences-per-request M`` (default 1),
``--split`` (default test_2016_flickr).

The sentences are the Multi30k split's source side (``$NMT_DATA_ROOT`` or
``../shared/data/multi30k``, ``{split}.{src_lang}``). Three phases, one at a time:

1. offline: the nmt-translate code path (``translate_stream``, chunks of ``batch_sentences``)
   over the whole split in this process, model loading not timed -> ``offline_sents_per_s``;
   again in chunks of N x M sentences, the most that N clients of M sentences can have in
   flight at once, so the largest batch the server can form -> ``offline_clients_sents_per_s``
   (the ceiling of the server phases);
2. dynamic batching: an ``nmt-serve`` process on a free loopback port with the config's
   ``serve.max_wait_ms``; N httpx async clients each send requests of M consecutive
   sentences, one after the other, for S seconds (after one untimed round);
3. the same with batching off (``serve.max_wait_ms=0``: one request per decode batch).

Each server is stopped (SIGTERM, then waited for) before the next starts; everything started
here is stopped on exit. Per server phase: ``sents_per_s`` (sentences answered with 200 /
wall time until the last answer), request latency percentiles ``p50_ms``, ``p95_ms``,
``p99_ms``, ``errors`` (non-200 answers and failed connections), ``requests``, and
``mean_batch`` (sentences per decode batch, from the server's log). The last line is
``key=value`` pairs: the batching phase unprefixed, the other with ``nobatch_``, then
``offline_sents_per_s``, ``offline_clients_sents_per_s``, ``batching_speedup`` (sents_per_s /
nobatch_sents_per_s), ``vs_offline`` (sents_per_s / offline_sents_per_s) and
``vs_offline_clients`` (sents_per_s / offline_clients_sents_per_s).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nmt.cli.common import decode_settings, exit_on_user_error, load_translator
from nmt.cli.serve import _check as check_serve
from nmt.config import ConfigError, compose_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_sentences(split: str, src_lang: str) -> list[str]:
    root = Path(os.environ.get("NMT_DATA_ROOT", "../shared/data/multi30k"))
    path = root / f"{split}.{src_lang}"
    if not path.is_file():
        raise ConfigError(f"{path} not found: set NMT_DATA_ROOT to the Multi30k directory (or "
                          "fetch it with scripts/download_multi30k.sh).")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def offline(overrides: list[str], beam_size: int, split: str, in_flight: int
            ) -> tuple[float, float, list[str]]:
    """(sentences/s of the nmt-translate path over the split in chunks of the config's
    ``batch_sentences``, the same in chunks of ``in_flight``, the split's sentences)."""
    from nmt.cli.translate import translate_stream

    cfg = compose_config([*overrides, f"beam_size={beam_size}"], config_name="translate",
                         validate_fn=None)
    translator = load_translator(cfg)
    sentences = read_sentences(split, translator.config.data.src_lang)
    rates = []
    for chunk in (cfg.batch_sentences, in_flight):
        start = time.perf_counter()
        translate_stream(translator, sentences, io.StringIO(),
                         {**decode_settings(cfg), "batch_sentences": chunk})
        rates.append(len(sentences) / (time.perf_counter() - start))
    return rates[0], rates[1], sentences


async def load(url: str, sentences: list[str], clients: int, seconds: float, per_request: int,
               beam_size: int) -> dict:
    """Phase figures of ``clients`` concurrent clients for ``seconds`` (module docstring)."""
    import httpx

    latencies, errors, answered = [], 0, 0

    async def client(http, k: int, stop: float | None) -> None:
        nonlocal errors, answered
        i = k * per_request
        while True:
            text = [sentences[(i + j) % len(sentences)] for j in range(per_request)]
            i += clients * per_request
            start = time.perf_counter()
            try:
                reply = await http.post("/v1/translate", json={"text": text, "beam_size": beam_size})
                ok = reply.status_code == 200
            except httpx.HTTPError:
                ok = False
            if stop is None:    # the untimed round
                return
            latencies.append(time.perf_counter() - start)
            errors += not ok
            answered += len(text) if ok else 0
            if time.perf_counter() >= stop:
                return

    # One AsyncClient (one keep-alive connection) per client, as independent callers have:
    # 32 clients sharing one httpx pool measured 159 requests/s against a no-op endpoint here,
    # 32 separate clients 470-808, so a shared pool would measure httpx, not the server.
    https = [httpx.AsyncClient(base_url=url, timeout=120) for _ in range(clients)]
    try:
        await asyncio.gather(*(client(http, k, None) for k, http in enumerate(https)))
        start = time.perf_counter()
        await asyncio.gather(*(client(http, k, start + seconds) for k, http in enumerate(https)))
        wall = time.perf_counter() - start
    finally:
        await asyncio.gather(*(http.aclose() for http in https))
    ms = np.percentile(np.array(latencies) * 1000, [50, 95, 99]) if latencies else [float("nan")] * 3
    return {"sents_per_s": answered / wall, "p50_ms": ms[0], "p95_ms": ms[1], "p99_ms": ms[2],
            "errors": errors, "requests": len(latencies)}


def serve_phase(overrides: list[str], sentences: list[str], args, log_path: Path) -> dict:
    """Start nmt-serve with ``overrides``, run the clients, stop it; the phase figures."""
    import httpx

    port = free_port()
    with open(log_path, "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "nmt.cli.serve", *overrides,
                                 f"serve.port={port}", f"beam_size={args.beam_size}"],
                                stdout=log_file, stderr=subprocess.STDOUT)
        try:
            url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 300
            while True:
                try:
                    httpx.get(url + "/health", timeout=2).raise_for_status()
                    break
                except httpx.HTTPError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise ConfigError(f"nmt-serve did not start; its log: {log_path}: "
                                          + log_path.read_text(encoding="utf-8")[-1500:]) from None
                    time.sleep(0.2)
            figures = asyncio.run(load(url, sentences, args.clients, args.seconds,
                                       args.sentences_per_request, args.beam_size))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    batches = [int(n) for n in re.findall(r"batch: \d+ requests, (\d+) sentences",
                                          log_path.read_text(encoding="utf-8"))]
    return {**figures, "mean_batch": float(np.mean(batches)) if batches else float("nan")}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--sentences-per-request", type=int, default=1)
    parser.add_argument("--split", default="test_2016_flickr")
    args = parser.parse_intermixed_args(argv)
    if min(args.clients, args.sentences_per_request, args.beam_size) < 1 or args.seconds <= 0:
        raise ConfigError("--clients, --sentences-per-request, --beam-size and --seconds must be > 0.")
    overrides = [*([f"checkpoint={args.checkpoint}"] if args.checkpoint else []), *args.overrides]
    compose_config(overrides, config_name="serve", validate_fn=check_serve)   # bad input: now
    in_flight = args.clients * args.sentences_per_request
    offline_rate, clients_rate, sentences = offline(
        [o for o in overrides if not o.startswith("serve.")], args.beam_size, args.split, in_flight)
    print(f"offline: {len(sentences)} sentences, {offline_rate:.1f} sentences/s; in chunks of "
          f"{in_flight}: {clients_rate:.1f}", flush=True)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for prefix, extra in (("", []), ("nobatch_", ["serve.max_wait_ms=0"])):
            figures = serve_phase([*overrides, *extra], sentences, args, Path(tmp) / "serve.log")
            print(f"{'no batching' if prefix else 'batching'}: " + " ".join(f"{k}={v:.1f}" for k, v in figures.items()),
                  flush=True)
            result.update({prefix + k: v for k, v in figures.items()})
    result.update(offline_sents_per_s=offline_rate, offline_clients_sents_per_s=clients_rate,
                  batching_speedup=result["sents_per_s"] / max(result["nobatch_sents_per_s"], 1e-9),
                  vs_offline=result["sents_per_s"] / offline_rate,
                  vs_offline_clients=result["sents_per_s"] / clients_rate)
    print(" ".join(f"{k}={v}" if isinstance(v, int) else f"{k}={v:.2f}" for k, v in result.items()),
          flush=True)
    return result


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error("bench_serve.py", lambda: main() and 0))
