"""Serving throughput and latency: nmt-serve with and without dynamic batching, and offline.

Usage::

    python scripts/bench_serve.py --checkpoint runs/transformer_de_en/checkpoints/best.pt \\
        --clients 32 --seconds 60 --beam-size 5
    python scripts/bench_serve.py --checkpoint ... --clients 8 --sentences-per-request 1 \\
        --beam-size 1
    python scripts/bench_serve.py engine=ctranslate2 model_dir=runs/tf/ct2 --clients 32
    python scripts/bench_serve.py --checkpoint ... --overload --clients 128 \\
        --sentences-per-request 8 --beam-size 5 --seconds 60

The other arguments, before, between or after the options, are Hydra overrides of
configs/serve.yaml (``serve.max_batch_work=...``, ``device=...``, ``engine=...``); those
without the ``serve.`` prefix also apply to the offline run. Options: ``--checkpoint``,
``--clients N`` (concurrent clients, default 32), ``--seconds S`` (timed seconds per server
phase, default 60), ``--beam-size K`` (default 5), ``--sentences-per-request M`` (default 1),
``--split`` (default test_2016_flickr), ``--overload``, ``--server-pythonpath DIR`` (the
server's code from DIR, e.g. an older commit's ``git archive``, for a before/after figure),
``--server-log FILE`` (keep the ``--overload`` server's log there).

The sentences are the Multi30k split's source side (``$NMT_DATA_ROOT`` or
``../shared/data/multi30k``, ``{split}.{src_lang}``). Three phases, one at a time:

1. offline: the nmt-translate code path (``translate_stream``, chunks of ``batch_sentences``)
   over the whole split in this process, model loading not timed -> ``offline_sents_per_s``;
   again in chunks of N x M sentences, the most that N clients of M sentences can have in
   flight at once, so the largest batch the server can form -> ``offline_clients_sents_per_s``
   (the ceiling of the server phases);
2. dynamic batching: an ``nmt-serve`` process on a loopback port the OS picks with the config's
   ``serve.max_wait_ms``; N httpx async clients each send requests of M consecutive
   sentences, one after the other, for S seconds (after one untimed round);
3. the same with batching off (``serve.max_wait_ms=0``: one request per decode batch).

Each server is stopped (SIGTERM, then waited for) before the next starts; everything started
here is stopped on exit. Per server phase: ``sents_per_s`` (sentences answered with 200 /
wall time until the last answer), request latency percentiles ``p50_ms``, ``p95_ms``,
``p99_ms``, ``errors`` (non-200 answers and failed connections), ``requests``,
``mean_batch`` (sentences per decode batch, from the server's log) and ``peak_rss_mb`` (the
server's VmHWM at the end). The last line is
``key=value`` pairs: the batching phase unprefixed, the other with ``nobatch_``, then
``offline_sents_per_s``, ``offline_clients_sents_per_s``, ``batching_speedup`` (sents_per_s /
nobatch_sents_per_s), ``vs_offline`` (sents_per_s / offline_sents_per_s) and
``vs_offline_clients`` (sents_per_s / offline_clients_sents_per_s).

``--overload``: one server phase instead (no offline run): N clients of M sentences each send
request after request for S seconds (a client answered 503 waits ``Retry-After`` seconds, as
a polite client does), and one probe client sends one-word requests (the first words of the
sentences) one after the other with the same settings. The last line: ``requests``, ``ok``,
``rate_503`` (503 answers / requests), ``errors_other`` (answers other than 200 and 503, and
failed connections), ``sents_per_s``, ``p50_ms`` / ``p99_ms`` (answered requests),
``probe_requests``, ``probe_503``, ``probe_p50_ms`` / ``probe_p99_ms`` (its answered
requests), ``mean_batch`` and ``peak_rss_mb``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from nmt.cli.common import decode_settings, exit_on_user_error, load_translator
from nmt.cli.serve import _check as check_serve
from nmt.config import ConfigError, compose_config


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
                reply = await http.post("/v1/translate",
                                        json={"text": text, "beam_size": beam_size})
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
    ms = (np.percentile(np.array(latencies) * 1000, [50, 95, 99]) if latencies
          else [float("nan")] * 3)
    return {"sents_per_s": answered / wall, "p50_ms": ms[0], "p95_ms": ms[1], "p99_ms": ms[2],
            "errors": errors, "requests": len(latencies)}


def serve_phase(overrides: list[str], args, log_path: Path, run) -> dict:
    """Start nmt-serve with ``overrides`` on a port the OS picks, ``await run(url)``, stop the
    server; run's figures, ``mean_batch`` and ``peak_rss_mb``."""
    import httpx

    env = {**os.environ, **({"PYTHONPATH": args.server_pythonpath} if args.server_pythonpath
                            else {})}
    with open(log_path, "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "nmt.cli.serve", *overrides,
                                 "serve.port=0", f"beam_size={args.beam_size}"],
                                stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                cwd=args.server_pythonpath)   # python -m puts the cwd first
        try:
            deadline = time.monotonic() + 300
            while True:   # ours, or uvicorn's line (code that predates ours)
                found = re.search(r"(?:nmt-serve: listening on|Uvicorn running on) (http://[^/\s]+)",
                                  log_path.read_text(encoding="utf-8"))
                try:
                    httpx.get(found.group(1) + "/health", timeout=2).raise_for_status()
                    break
                except (AttributeError, httpx.HTTPError):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise ConfigError(f"nmt-serve did not start; its log: {log_path}: "
                                          + log_path.read_text(encoding="utf-8")[-1500:]) from None
                    time.sleep(0.2)
            figures = asyncio.run(run(found.group(1)))
            status = Path(f"/proc/{proc.pid}/status")
            peak = re.search(r"VmHWM:\s+(\d+) kB", status.read_text()) if status.exists() else None
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    batches = [int(n) for n in re.findall(r"batch: \d+ requests, (\d+) sentences",
                                          log_path.read_text(encoding="utf-8"))]
    return {**figures, "mean_batch": float(np.mean(batches)) if batches else float("nan"),
            "peak_rss_mb": int(peak.group(1)) / 1024 if peak else float("nan")}


async def overload(url: str, sentences: list[str], args) -> dict:
    """The ``--overload`` figures (module docstring)."""
    import httpx

    status: Counter = Counter()
    latencies, probe, answered = [], {"latencies": [], "requests": 0, "503": 0}, 0
    words = [s.split()[0] for s in sentences]
    stop = time.perf_counter() + args.seconds

    async def send(http, text: list[str]) -> tuple[int | str, float, float]:
        start = time.perf_counter()
        try:
            reply = await http.post("/v1/translate", json={"text": text,
                                                           "beam_size": args.beam_size})
            code, retry = reply.status_code, float(reply.headers.get("retry-after", 1))
        except httpx.HTTPError as err:
            code, retry = type(err).__name__, 1.0
        return code, time.perf_counter() - start, retry

    async def client(http, k: int) -> None:
        nonlocal answered
        i = k * args.sentences_per_request
        while time.perf_counter() < stop:
            text = [sentences[(i + j) % len(sentences)] for j in range(args.sentences_per_request)]
            i += args.clients * args.sentences_per_request
            code, seconds, retry = await send(http, text)
            status[code] += 1
            if code == 200:
                latencies.append(seconds)
                answered += len(text)
            elif code == 503:
                await asyncio.sleep(min(retry, max(0.0, stop - time.perf_counter())))

    async def prober(http) -> None:
        i = 0
        while time.perf_counter() < stop:
            code, seconds, retry = await send(http, [words[i % len(words)]])
            i, probe["requests"] = i + 1, probe["requests"] + 1
            if code == 200:
                probe["latencies"].append(seconds)
            else:
                status[f"probe_{code}"] += 1
                probe["503"] += code == 503
                if code == 503:
                    await asyncio.sleep(min(retry, max(0.0, stop - time.perf_counter())))

    https = [httpx.AsyncClient(base_url=url, timeout=600) for _ in range(args.clients + 1)]
    start = time.perf_counter()
    try:
        await asyncio.gather(prober(https[0]), *(client(h, k) for k, h in enumerate(https[1:])))
    finally:
        await asyncio.gather(*(http.aclose() for http in https))
    wall = time.perf_counter() - start

    def pct(values: list[float]) -> list[float]:
        return list(np.percentile(np.array(values) * 1000, [50, 99])) if values else [np.nan] * 2

    requests = sum(v for k, v in status.items() if not str(k).startswith("probe_"))
    other = sum(v for k, v in status.items() if k not in (200, 503, "probe_503"))
    if other:
        print(f"answers other than 200 and 503: {dict(status)}", flush=True)
    (p50, p99), (probe50, probe99) = pct(latencies), pct(probe["latencies"])
    return {"requests": requests, "ok": status[200], "rate_503": status[503] / max(requests, 1),
            "errors_other": other, "sents_per_s": answered / wall, "p50_ms": p50, "p99_ms": p99,
            "probe_requests": probe["requests"], "probe_503": probe["503"],
            "probe_p50_ms": probe50, "probe_p99_ms": probe99}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--sentences-per-request", type=int, default=1)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--overload", action="store_true")
    parser.add_argument("--server-pythonpath", default=None)
    parser.add_argument("--server-log", default=None)
    args = parser.parse_intermixed_args(argv)
    if min(args.clients, args.sentences_per_request, args.beam_size) < 1 or args.seconds <= 0:
        raise ConfigError("--clients, --sentences-per-request, --beam-size and --seconds must "
                          "be > 0.")
    overrides = [*([f"checkpoint={args.checkpoint}"] if args.checkpoint else []), *args.overrides]
    cfg = compose_config(overrides, config_name="serve", validate_fn=check_serve)   # bad input: now
    if args.overload:
        sentences = read_sentences(args.split, load_translator(cfg).config.data.src_lang)
        with tempfile.TemporaryDirectory() as tmp:
            result = serve_phase(overrides, args, Path(args.server_log or Path(tmp) / "serve.log"),
                                 lambda url: overload(url, sentences, args))
        print("overload: " + " ".join(f"{k}={v}" if isinstance(v, int) else f"{k}={v:.3f}"
                                      for k, v in result.items()), flush=True)
        return result
    in_flight = args.clients * args.sentences_per_request
    offline_rate, clients_rate, sentences = offline(
        [o for o in overrides if not o.startswith("serve.")], args.beam_size, args.split, in_flight)
    print(f"offline: {len(sentences)} sentences, {offline_rate:.1f} sentences/s; in chunks of "
          f"{in_flight}: {clients_rate:.1f}", flush=True)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for prefix, extra in (("", []), ("nobatch_", ["serve.max_wait_ms=0"])):
            figures = serve_phase([*overrides, *extra], args, Path(tmp) / "serve.log",
                                  lambda url: load(url, sentences, args.clients, args.seconds,
                                                   args.sentences_per_request, args.beam_size))
            shown = " ".join(f"{k}={v:.1f}" for k, v in figures.items())
            print(f"{'no batching' if prefix else 'batching'}: {shown}", flush=True)
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
