"""Benchmark the data pipeline: tokenizer training, tokenization + Arrow caching, one epoch.

Usage::

    python scripts/bench_data.py [--fresh-cache] [--replicate N] [--batch-tokens 4096] \\
        [overrides...]

    python scripts/bench_data.py --fresh-cache                      # first-run figures
    python scripts/bench_data.py                                     # cached run
    python scripts/bench_data.py --fresh-cache --replicate 10        # + 290k-pair corpus
    python scripts/bench_data.py data=multi30k_en_de data.root=/path/to/multi30k
    python scripts/bench_data.py data.tokenizer.sampling_alpha=0.2   # + one subword-sampling draw

Each measurement runs in its own process, so ``peak_rss_mb`` is that process's peak resident
memory (``anon_rss_mb`` / ``file_rss_mb``: heap vs memory-mapped pages at the end of the epoch;
mapped pages count as resident once read but the OS can drop them at any time): phase
``prepare`` trains the tokenizer if needed and tokenizes + caches the training and validation
splits (with ``--fresh-cache`` the whole first preparation: ``prepare_s`` and
``prepare_peak_rss_mb`` cover corpus hashing, sampling and tokenizer training
(``tokenizer_train_s``: SentencePiece alone), tokenizing and writing the cache;
``tokenize_s``: reading, tokenizing and writing the training split); phase ``iterate`` opens
the cache (memory-mapped Arrow) and collates every batch of one epoch into tensors; with
``data.tokenizer.sampling_alpha`` set it also times one draw of the training split's
sampled segmentation (``resample_s``, uncached: what each epoch of such a run adds;
``sampled_tokens_per_pair`` against ``tokens_per_pair``, source + target). With
``--replicate N`` both phases run again on the training split repeated N times (written in
a temporary directory, one copy at a time) with their own cache, and their figures get the
suffix ``_xN``; ``prepare_rss_ratio``, ``tokenize_time_ratio`` and ``prepare_time_ratio``
divide the ``_xN`` figure by the 1x one (the issue's targets: at most 1.5 for memory, at
most N for time). The last line printed holds all ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_parts_mb() -> dict[str, str]:
    """Current anonymous (heap) vs file-backed (memory-mapped, evictable) resident memory."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in status:
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            out[f"{key[3:].lower()}_rss_mb"] = f"{int(value.split()[0]) / 1024:.0f}"
    return out


def phase_prepare(overrides: list[str]) -> dict[str, str]:
    """Tokenizer (train or cache hit) + tokenization and caching; times each part."""
    from nmt.config import compose_config
    from nmt.data import pipeline, tokenizer

    cfg = compose_config(overrides)
    timings: dict[str, float] = {"tokenizer_train_s": 0.0, "tokenize_s": 0.0,
                                 "tokenize_valid_s": 0.0}
    train_sp, write = tokenizer.train_sentencepiece, pipeline.write_pairs

    def timed_train(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return train_sp(*args, **kwargs)
        finally:
            timings["tokenizer_train_s"] += time.perf_counter() - t0

    calls = []

    def timed_write(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return write(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - t0)

    tokenizer.train_sentencepiece, pipeline.write_pairs = timed_train, timed_write
    t0 = time.perf_counter()
    data = pipeline.prepare_data(cfg.data)
    prepare_s = time.perf_counter() - t0
    if calls:  # train split first, then validation
        timings["tokenize_s"] = calls[0]
        timings["tokenize_valid_s"] = sum(calls[1:])
    return {"prepare_s": f"{prepare_s:.2f}", **{k: f"{v:.2f}" for k, v in timings.items()},
            "cache_hit": str(int(not calls)), "n_pairs": str(len(data.train)),
            "vocab": str(data.tokenizer.tgt_vocab_size),
            "prepare_peak_rss_mb": f"{_peak_rss_mb():.0f}"}


def phase_iterate(overrides: list[str], batch_tokens: int) -> dict[str, str]:
    """Open the cached splits and collate every batch of one epoch into tensors."""
    from nmt.config import compose_config
    from nmt.data.batching import collate
    from nmt.data.pipeline import prepare_data
    from nmt.data.sampler import TokenBatchSampler

    cfg = compose_config(overrides)
    rss_before = _peak_rss_mb()
    t0 = time.perf_counter()
    data = prepare_data(cfg.data)
    open_s = time.perf_counter() - t0
    split = data.train
    t0 = time.perf_counter()
    sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, batch_tokens, seed=cfg.train.seed)
    batches = sampler.batches(epoch=0)
    real = padded = 0
    for rows in batches:
        batch = collate(split, rows)
        real += batch.n_src_tokens + batch.n_tgt_tokens
        padded += batch.src.numel() + batch.tgt_out.numel()
    epoch_s = time.perf_counter() - t0
    sampling = {}
    tok = cfg.data.tokenizer
    if tok.sampling_alpha:
        from nmt.extras.training.subword_sampling import sample_split

        t0 = time.perf_counter()
        sampled = sample_split(split, data.tokenizer, float(tok.sampling_alpha),
                               int(tok.nbest_size), seed=(int(cfg.train.seed), 1), cache=False)
        sampling = {"resample_s": f"{time.perf_counter() - t0:.2f}",
                    "tokens_per_pair": f"{(split.src_lens + split.tgt_lens).mean() - 2:.2f}",
                    "sampled_tokens_per_pair":
                        f"{(sampled.src_lens + sampled.tgt_lens).mean() - 2:.2f}"}
    return {**sampling, "open_cache_s": f"{open_s:.2f}", "epoch_iter_s": f"{epoch_s:.2f}",
            "pad_efficiency": f"{real / padded:.4f}", "n_batches": str(len(batches)),
            "n_pairs": str(len(split)), "rss_before_data_mb": f"{rss_before:.0f}",
            "peak_rss_mb": f"{_peak_rss_mb():.0f}", **_rss_parts_mb()}


def _child(phase: str, overrides: list[str], batch_tokens: int) -> dict[str, str]:
    cmd = [sys.executable, __file__, "--phase", phase, "--batch-tokens", str(batch_tokens),
           *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 2:          # a user error: the child printed its one paragraph
        sys.stderr.write(proc.stderr[proc.stderr.rfind("bench_data.py: error:"):])
        raise SystemExit(2)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"bench_data: phase {phase} failed (exit {proc.returncode}).")
    last = proc.stdout.strip().splitlines()[-1]
    return dict(item.split("=", 1) for item in last.split())


def _replicate(root: Path, cfg_data, n: int, out: Path) -> None:
    """Write the training split ``n`` times over into ``out`` (streamed file copies: the
    corpus is never in this process's memory), plus the other splits once."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in (cfg_data.src_lang, cfg_data.tgt_lang):
        src = root / f"{cfg_data.train_split}.{lang}"
        with open(src, "rb") as f:
            f.seek(max(src.stat().st_size - 1, 0))
            last = f.read(1)
        with open(out / f"{cfg_data.train_split}.{lang}", "wb") as dst:
            for _ in range(n):
                with open(src, "rb") as f:
                    shutil.copyfileobj(f, dst, 1 << 20)
                if last not in (b"", b"\n"):
                    dst.write(b"\n")
        for split in (cfg_data.valid_split, cfg_data.test_split):
            if (root / f"{split}.{lang}").is_file():
                shutil.copyfile(root / f"{split}.{lang}", out / f"{split}.{lang}")


def _ratio(result: dict[str, str], key: str, suffix: str) -> str:
    a, b = float(result[key]), float(result[key + suffix])
    return f"{b / a:.2f}" if a > 0 else "nan"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh-cache", action="store_true",
                        help="use an empty temporary cache dir (first-run figures)")
    parser.add_argument("--replicate", type=int, default=0,
                        help="also measure the training split repeated N times")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--phase", choices=("prepare", "iterate"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of configs/config.yaml")
    args = parser.parse_intermixed_args(argv)
    overrides = args.overrides

    if args.phase == "prepare":
        result = phase_prepare(overrides)
    elif args.phase == "iterate":
        result = phase_iterate(overrides, args.batch_tokens)
    else:
        from nmt.config import ConfigError, compose_config

        tmp = Path(tempfile.mkdtemp(prefix="bench_data_"))
        try:
            if args.fresh_cache:
                overrides = [*overrides, f"data.cache_dir={tmp / 'cache'}"]
            cfg = compose_config(overrides)
            result = {**_child("prepare", overrides, args.batch_tokens),
                      **_child("iterate", overrides, args.batch_tokens)}
            result["batch_tokens"] = str(args.batch_tokens)
            if args.replicate > 1:
                if cfg.data.format != "text":
                    raise ConfigError("--replicate needs data.format=text.")
                rep_root = tmp / f"x{args.replicate}"
                _replicate(Path(cfg.data.root), cfg.data, args.replicate, rep_root)
                rep = [*overrides, f"data.root={rep_root}"]
                if args.fresh_cache:           # a first preparation of the big corpus too
                    rep.append(f"data.cache_dir={tmp / 'cache_rep'}")
                suffix = f"_x{args.replicate}"
                for phase in ("prepare", "iterate"):
                    for key, value in _child(phase, rep, args.batch_tokens).items():
                        result[key + suffix] = value
                result["prepare_rss_ratio"] = _ratio(result, "prepare_peak_rss_mb", suffix)
                result["tokenize_time_ratio"] = _ratio(result, "tokenize_s", suffix)
                result["prepare_time_ratio"] = _ratio(result, "prepare_s", suffix)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(" ".join(f"{k}={v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    from nmt.cli.common import exit_on_user_error

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(exit_on_user_error("bench_data.py", main))
