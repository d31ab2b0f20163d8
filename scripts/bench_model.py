"""Training-step throughput and MFU of a model on real Multi30k batches (CPU by default).

Usage::

    python scripts/bench_model.py model=transformer
    python scripts/bench_model.py model=rnn
    python scripts/bench_model.py model=transformer --steps 20 --profile   # + torch.profiler table
    python scripts/bench_model.py model=transformer_base train.batch_tokens=24576 \
        train.shape_buckets=8 --device cuda --precision bf16 --compile     # a GPU, 25k-token steps

With ``--compile`` the compiled variant also computes the loss compiled
(:func:`nmt.training.loss.compiled_label_smoothed_nll`), as ``nmt-train`` does.

The other arguments, before, between or after the options, are Hydra overrides of
``configs/config.yaml`` (``compose_config``). Options: ``--warmup N`` (untimed steps, default 3),
``--steps N`` (timed steps, default 10), ``--threads N`` (torch threads, default 2),
``--precision fp32|bf16`` (autocast dtype of the forward, as ``train.precision``; default fp32),
``--device cpu|cuda|cuda:N`` (default cpu), ``--profile`` (print the top ops of a torch.profiler
run after timing), ``--no-malloc-tune`` (keep glibc's default malloc, see
:func:`nmt.cli.common.tune_malloc`), and three A/B comparisons, each in one process, alternating A
and B step by step over the same batches (the host's speed drifts: only ratios measured side by
side are compared; the speedup is the median of the per-pair ratios):

``--compile``            eager (A) vs ``torch.compile`` (B) as ``train.compile=true`` builds it
                         (``model.compiled()``: dynamic shapes; with ``train.shape_buckets``
                         on CUDA also CUDA graphs); the compiled model is
                         warmed up on every timed batch first (twice with CUDA graphs,
                         ``cuda_graphs=True``: a shape records on its second call), so no
                         timed step compiles or records;
                         ``compile_s`` is the wall time of that warm-up minus the eager
                         time of the same steps, ``graphs`` the graphs Dynamo built.
                         Before anything compiles, the eager steps alone are timed and
                         printed at once (``eager: eager_tgt_tokens_per_s=... eager_mfu=...``),
                         so a run stopped while compiling keeps the eager figures.
``--compare-precision``  fp32 (A) vs bf16 autocast (B).
``--compare-consistency`` ``train.consistency=none`` (A) vs ``rdrop`` or, when the overrides
                         say so, ``simcut`` (B), the same model and optimizer;
                         ``<B>_speedup`` < 1 is B's cost per step.

One step = forward (teacher forcing, ``need_alignment=False``) and loss as
:func:`nmt.training.loss.objective` computes them (label-smoothed cross-entropy with
``train.label_smoothing``; with ``train.consistency=rdrop|simcut`` one forward over the batch
twice and the KL term, with simcut the token cutoff's hooks on the model), summed over real
target tokens / their number, backward, gradient clipping (``train.clip_grad_norm``) and a
step of the optimizer that :func:`nmt.training.optim.build_optimizer` builds from the train
config (Adam/AdamW, fused kernel where available): the same calls as ``nmt-train``'s step
(fp32, one batch per step, no DDP).
The batches are the first ``warmup + steps`` batches of epoch 0 of
``TokenBatchSampler(train.batch_tokens)`` over the prepared training split (with
``train.shape_buckets`` its static shapes, padded as training pads them; with several
``data.pairs``, e.g. ``data=multi30k_multi``, drawn by direction and tagged as in nmt-train).

Reported (last line, ``key=value``; with an A/B option also ``eager_``/``compiled_`` or
``fp32_``/``bf16_`` ``tgt_tokens_per_s`` and ``compile_speedup``/``bf16_speedup``):
  * ``tgt_tokens_per_s``: real target tokens (EOS included, padding excluded) of the timed
    steps / their wall time.
  * ``mfu``: model FLOP/s / ``peak_gflops``, where the peak is ``train.peak_tflops`` if set,
    else on CPU the matmul rate this script measures at start-up (best of 5 2048^3
    ``torch.mm`` at the same thread count, in the run's precision), on CUDA the card's dense
    datasheet peak (:func:`nmt.runtime.peak_flops`); the model FLOPs per step are counted
    analytically (Kaplan et al. 2020 rule, :func:`nmt.runtime.train_flops`, which the
    trainer's log and ``summary.json`` use too)::

        FLOPs = 6 * (N_src * src_tokens + N_tgt * tgt_tokens) + attention

    N_src: encoder parameters and the projections of its memory (cross-attention K, V; the
    RNN's U_a), N_tgt: the other decoder parameters and the output projection (V x d, also
    when tied), src/tgt_tokens: real (non-padding) tokens of the batch (twice with
    ``train.consistency`` rdrop or simcut; ``tgt_tokens_per_s`` counts them once), attention:
    ``nmt.models.flops.attention_flops`` (PaLM's 12 d per query-key pair and layer,
    forward and backward). Embedding lookups are not counted. On a CPU without
    ``train.peak_tflops`` the divisor is a measured matmul rate, not a peak: the figure is a
    matmul utilisation.
  * ``params`` (distinct trainable parameters), ``step_ms`` (median), ``peak_gflops``,
    ``model_gflops`` (achieved), ``pad_share`` (padding among the timed batches' positions,
    both sides), ``batch_shapes`` (distinct shapes among them), ``batches``, ``device``,
    ``threads``; with ``--compile`` or ``--compare-precision`` also each variant's ``_mfu``.
  * ``ema_update_ms``: median of 20 updates of the weight average that ``train.ema_decay``
    adds after every step (:class:`nmt.training.ema.WeightAverage`, timed after the steps),
    and ``ema_step_share`` = ``ema_update_ms / step_ms``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.cli.common import tune_malloc  # noqa: E402
from nmt.config import ConfigError, compose_config, is_guided  # noqa: E402
from nmt.data.batching import collate  # noqa: E402
from nmt.data.pipeline import prepare_data  # noqa: E402
from nmt.data.sampler import BatchShapes, TokenBatchSampler  # noqa: E402
from nmt.data.vocab import PAD_ID  # noqa: E402
from nmt.extras.training.consistency import add_token_cutoff, regulariser  # noqa: E402
from nmt.models import build_model  # noqa: E402
from nmt.models.flops import attention_flops, flop_params  # noqa: E402
from nmt.runtime import (  # noqa: E402
    bound_onednn_cache,
    compile_stats,
    cpu_matmul_flops,
    peak_flops,
    resolve_device,
    train_flops,
    tune_cuda,
)
from nmt.training.ema import WeightAverage  # noqa: E402
from nmt.training.harness import compile_mode  # noqa: E402
from nmt.training.loss import (  # noqa: E402
    compiled_label_smoothed_nll,
    label_smoothed_nll,
    objective,
)
from nmt.training.optim import build_optimizer  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="A/B: eager vs torch.compile")
    parser.add_argument("--compare-precision", action="store_true", help="A/B: fp32 vs bf16")
    parser.add_argument("--compare-consistency", action="store_true",
                        help="A/B: train.consistency=none vs rdrop (or simcut if given)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-malloc-tune", action="store_true",
                        help="leave glibc malloc at its defaults (see tune_malloc)")
    args = parser.parse_intermixed_args(argv)
    if args.compile + args.compare_precision + args.compare_consistency > 1:
        raise ConfigError("--compile, --compare-precision and --compare-consistency are separate "
                          "A/B runs; give one of them.")
    cfg = compose_config(args.overrides)
    device = resolve_device(args.device)
    malloc_tuned = False if args.no_malloc_tune else tune_malloc()
    bound_onednn_cache()
    if device.type == "cuda":
        tune_cuda()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def peak_for(bf16: bool) -> float | None:   # FLOP/s; the CPU's measured as it always was
        dtype = torch.bfloat16 if bf16 else None
        if device.type == "cpu" and cfg.train.peak_tflops is None:
            return cpu_matmul_flops(dtype, 2048, 5)
        return peak_flops(device, dtype, cfg.train.peak_tflops)

    peak = peak_for(args.precision == "bf16" and not args.compare_precision)
    print(f"peak: {(peak or float('nan')) / 1e9:.1f} GFLOP/s ({device}, {args.threads} threads)",
          flush=True)
    data = prepare_data(cfg.data)
    tok, t = data.tokenizer, cfg.train
    shapes = BatchShapes.fit(data.train.src_lens, data.train.tgt_lens, t.shape_buckets,
                             t.batch_tokens, t.shape_multiple) if t.shape_buckets else None
    sampler = TokenBatchSampler(data.train.src_lens, data.train.tgt_lens, t.batch_tokens,
                                shuffle=True, seed=t.seed, shapes=shapes,
                                groups=data.train.groups, weights=data.weights,  # as nmt-train
                                temperature=cfg.data.sampling_temperature)
    chosen = sampler.batches(0)[: args.warmup + args.steps]
    batches = [collate(data.train, ix, shapes).to(device) for ix in chosen]

    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size).to(device).train()
    params = model.num_parameters()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(trainable, t)
    clip = float(t.clip_grad_norm)
    graphs = compile_mode(t, device, 1)   # CUDA graphs: static shapes, no accumulation
    compiled = model.compiled(graphs) if (args.compile or t.compile) else None

    def step(b, fwd, bf16: bool, t) -> float:
        # SimCut's hooks cut the second half of a lookup's rows: on for its steps only.
        reg = regulariser(t)
        cutoff = add_token_cutoff(model, t.cutoff_p) if t.consistency == "simcut" else []
        loss_fn = label_smoothed_nll if fwd is model else compiled_label_smoothed_nll()
        amp = functools.partial(torch.autocast, device.type, dtype=torch.bfloat16, enabled=bf16)
        total, _ = objective(fwd, b, t, guided=is_guided(t), autocast=amp, cross_entropy=loss_fn,
                             regulariser=reg)
        for hook in cutoff:
            hook.remove()
        loss = total / b.n_tgt_tokens
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(trainable, clip, foreach=True)
        opt.step()
        return loss.item()

    bf16 = args.precision == "bf16"
    if args.compile:
        variants = {"eager": (model, bf16, t), "compiled": (compiled, bf16, t)}
    elif args.compare_precision:
        variants = {"fp32": (model, False, t), "bf16": (model, True, t)}
    elif args.compare_consistency:
        b_name = "simcut" if t.consistency == "simcut" else "rdrop"
        fwd = model if compiled is None else compiled   # (a compiled module has no truth value)
        variants = {c: (fwd, bf16, OmegaConf.merge(t, {"consistency": c}))
                    for c in ("none", b_name)}
    else:
        variants = {"run": (model if compiled is None else compiled, bf16, t)}
    timed = batches[args.warmup:]
    extra: dict = {}
    # --compile: the eager variant warms up and is timed before anything compiles, and its
    # figures are printed at once (the `eager:` line), so a run killed while compiling keeps them.
    eager_first = args.compile
    t0 = time.perf_counter()
    for b in batches[: args.warmup]:
        for name, variant in variants.items():
            if not (eager_first and name == "compiled"):
                step(b, *variant)
    print(f"warm-up: {args.warmup} steps per variant in {time.perf_counter() - t0:.1f} s",
          flush=True)
    if eager_first:
        eager_times = []
        for b in timed:
            t0 = time.perf_counter()
            step(b, model, bf16, t)
            eager_times.append(time.perf_counter() - t0)
        def step_flops(b) -> float:   # as the timed pairs below count them (a sync: untimed)
            lens = b.src_mask.sum(1).cpu().numpy(), (b.tgt_in != PAD_ID).sum(1).cpu().numpy()
            return train_flops(flop_params(model), b.n_src_tokens, b.n_tgt_tokens,
                               1 if t.consistency == "none" else 2, attention_flops(model, *lens))

        eager_flops = sum(step_flops(b) for b in timed)
        eager_peak = peak_for(bf16)
        eager_s = sum(eager_times)
        eager_mfu = None if eager_peak is None else round(eager_flops / eager_s / eager_peak, 4)
        print(f"eager: eager_tgt_tokens_per_s={sum(b.n_tgt_tokens for b in timed) / eager_s:.1f} "
              f"eager_mfu={eager_mfu} "
              f"eager_step_ms={1e3 * statistics.median(eager_times):.1f} batches={len(timed)}",
              flush=True)
        t0 = time.perf_counter()
        for b in batches[: args.warmup]:
            step(b, compiled, bf16, t)
        print(f"warm-up, compiled: {args.warmup} steps in {time.perf_counter() - t0:.1f} s",
              flush=True)
    if compiled is not None:
        # Compile every shape now (Dynamo marks dims dynamic after the first recompile), so
        # that the timed pairs measure steady-state steps; charge the excess to compiling.
        # CUDA graph trees warm a shape up on its first call and record it on its second.
        passes = 2 if graphs == "reduce-overhead" else 1
        t_c = time.perf_counter()
        for b in [b for _ in range(passes) for b in timed]:
            step(b, compiled, bf16, t)
        t_c = time.perf_counter() - t_c
        t_e = time.perf_counter()
        for b in timed:
            step(b, model, bf16, t)
        t_e = time.perf_counter() - t_e
        stats = compile_stats()
        extra = {"compile_s": round(stats["compile_s"], 1), "graphs": stats["graphs"],
                 "cuda_graphs": passes == 2, "timed_warmup_excess_s": round(t_c - passes * t_e, 1)}
        print(f"compile: {stats['graphs']} graphs, {stats['compile_s']:.1f} s in Dynamo/Inductor",
              flush=True)
    times = {name: [] for name in variants}
    names = list(variants)
    main_name = names[-1]
    copies = 1 if variants[main_name][2].consistency == "none" else 2   # consistency: pairs twice
    tgt_tokens, flops = 0, 0.0
    for i, b in enumerate(timed):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))
        line = []
        for name in order:
            t0 = time.perf_counter()
            loss = step(b, *variants[name])
            times[name].append(time.perf_counter() - t0)
            line.append(f"{name} {1e3 * times[name][-1]:.0f} ms")
        tgt_tokens += b.n_tgt_tokens
        lens = b.src_mask.sum(1).cpu().numpy(), (b.tgt_in != PAD_ID).sum(1).cpu().numpy()
        flops += train_flops(flop_params(model), b.n_src_tokens, b.n_tgt_tokens, copies,
                             attention_flops(model, *lens))
        print(f"  step {i + 1}: {', '.join(line)}  B={len(b)} S={b.src.shape[1]} "
              f"T={b.tgt_in.shape[1]} tgt_tokens={b.n_tgt_tokens} loss={loss:.3f}", flush=True)
    wall = sum(times[main_name])
    ema = WeightAverage(model, cfg.train.ema_decay or 0.999)
    ema_times = []
    for k in range(20):
        t0 = time.perf_counter()
        ema.update(k + 1)
        ema_times.append(time.perf_counter() - t0)
    ema_ms = 1e3 * statistics.median(ema_times)
    def mfu(seconds: float, bf16: bool) -> float | None:
        return None if peak_for(bf16) is None else round(flops / seconds / peak_for(bf16), 4)

    main_peak = peak_for(variants[main_name][1])
    result = {
        "model": cfg.model.name, "params": params, "tgt_tokens_per_s": round(tgt_tokens / wall, 1),
        "mfu": mfu(wall, variants[main_name][1]),
        "step_ms": round(1e3 * statistics.median(times[main_name]), 1),
        "peak_gflops": None if main_peak is None else round(main_peak / 1e9, 1),
        "model_gflops": round(flops / wall / 1e9, 1),
        "pad_share": round(sampler.padding(chosen[args.warmup:]), 4),
        "batch_shapes": len({tuple(b.src.shape) for b in timed}),
        "batches": len(timed), "device": str(device).replace(" ", "_"), "threads": args.threads,
        "optimizer": f"{cfg.train.optimizer}{'-fused' if opt.defaults.get('fused') else ''}",
        "compile": compiled is not None, "precision": "bf16" if variants[main_name][1] else "fp32",
        "malloc_tuned": malloc_tuned,
        "ema_update_ms": round(ema_ms, 2),
        "ema_step_share": round(ema_ms / statistics.median(times[main_name]) / 1e3, 4),
    }
    if len(names) == 2:
        a, b_ = names
        for name in names:
            result[f"{name}_tgt_tokens_per_s"] = round(tgt_tokens / sum(times[name]), 1)
            if not args.compare_consistency:      # the same FLOPs for both
                result[f"{name}_mfu"] = mfu(sum(times[name]), variants[name][1])
        ratios = [ta / tb for ta, tb in zip(times[a], times[b_], strict=True)]
        key = "compile" if args.compile else b_ if args.compare_consistency else "bf16"
        result[f"{key}_speedup"] = round(statistics.median(ratios), 3)
        result["pairs"] = len(ratios)
    result.update(extra)
    if compiled is not None:  # a graph built during the timed steps would show here
        result["graphs_after_timing"] = compile_stats()["graphs"]
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for b in batches[args.warmup: args.warmup + 3]:
                step(b, *variants[main_name])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    return result


if __name__ == "__main__":
    from nmt.cli.common import exit_on_user_error

    raise SystemExit(exit_on_user_error("bench_model.py", lambda: main() and 0))
