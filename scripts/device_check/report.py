"""results.json and the key line of the device check, from what its steps left in the work
folder: each run's summary.json and scores, the bench's last lines, the nccl and syncs logs.
Standard library only: it runs whatever the preflight finds."""

from __future__ import annotations

import json
import re
from pathlib import Path

RUNS = ("base", "static", "ddp", "torchrun")


def load(path: Path) -> dict:
    """A JSON file's object, or {} when it is missing or not JSON."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def text(path: Path) -> str | None:
    """A text file's content, or None when it is missing."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def kv(line: str) -> dict[str, str]:
    """``a=1 b=x`` -> ``{"a": "1", "b": "x"}`` (words without ``=`` are left out)."""
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def util(figures: dict, key: str) -> tuple[str, object]:
    """``(key, value)`` of an MFU figure, or on a CPU (a measured matmul rate, no peak) of its
    ``matmul_util`` twin."""
    alt = key.replace("mfu", "matmul_util")
    return (alt, figures[alt]) if key not in figures and alt in figures else (key, figures.get(key))


def bench_figures(log: str | None) -> dict[str, str]:
    """bench_model.py's last line (``model=...``), over its ``eager:`` line, which it prints
    before it compiles (a run cut off while compiling keeps the eager figures), and the
    ``inductor:`` line of tasks.py's bench (``cudagraph_skips``)."""
    lines = (log or "").splitlines()
    found: dict[str, str] = {}
    for prefix in ("inductor: ", "eager: ", "model="):
        last = [x for x in lines if x.startswith(prefix)]
        if last:
            found.update(kv(last[-1].removeprefix(prefix if prefix != "model=" else "")))
    return found


def nccl_result(log: str | None, dry: bool) -> str | None:
    """``ok`` (2 ranks on the first backend: NCCL, gloo in a dry run), ``1rank`` (NCCL with one
    rank only: two ranks on one device refused), ``fail``; None: the step did not run."""
    if log is None:
        return None
    oks = set(re.findall(r"all_reduce ok: (\w+) world (\d+)", log))
    return "ok" if ("gloo" if dry else "nccl", "2") in oks else \
        "1rank" if ("nccl", "1") in oks else "fail"


def ddp_join(log: str | None) -> tuple[str | None, str | None]:
    """``(backend, joined_by)`` of the ddp step's ranks (``ddp_rank.py``'s first line)."""
    found = re.search(r"ddp on (\w+), process group joined by (\w+)", log or "")
    return (found.group(1), found.group(2)) if found else (None, None)


def static_figures(watch: dict, twin: dict) -> dict:
    """The key line's figures of static_run.py's steady.json (``watch``) and its eager twin's:
    the steady window (every batch shape ready: its CUDA graphs recorded) and what ran in it,
    torch.compile's counters, and the speedup over the twin's steady window."""
    steady, eager = watch.get("steady") or {}, twin.get("steady") or {}
    line = {"static_last_step": watch.get("last_step"), "static_shapes": watch.get("shapes"),
            "static_ready_step": watch.get("ready_step"),
            "static_first_step_s": watch.get("first_step_s"),
            "static_steady_from": steady.get("from_step"),
            "static_steady_to": steady.get("to_step"),
            "static_steady_steps": steady.get("steps"), "static_steady_s": steady.get("seconds"),
            "static_steady_tokens_per_s": steady.get("tokens_per_s")}
    key, value = util(steady, "mfu")
    line[f"static_steady_{key}"] = value
    line.update({f"static_{k}": watch.get(k) for k in ("graphs", "compile_s", "cudagraph_skips")})
    line.update({f"static_steady_{k}": steady.get(k)
                 for k in ("graphs_after", "skips_after", "shapes_after")})
    line["static_eager_steady_tokens_per_s"] = eager.get("tokens_per_s")
    line["static_eager_steady_steps"] = eager.get("steps")
    fast, slow = steady.get("tokens_per_s"), eager.get("tokens_per_s")
    line["static_speedup"] = round(fast / slow, 3) if fast and slow else None
    return line


def run_figures(work: Path, run: str, ran: set[str]) -> tuple[dict, dict]:
    """``(results, key-line figures)`` of one training run and its beam-5 evaluations, those
    of the steps in ``ran`` (a follow-up call's work folder keeps the first call's runs)."""
    summary = load(work / run / "summary.json") if run in ran else {}
    results = {"summary": {k: v for k, v in summary.items() if k != "segments"}}
    line = {f"{run}_steps": summary.get("steps"),
            f"{run}_tokens_per_s": summary.get("train_tokens_per_s")}
    key, value = util(summary, "mfu")
    line[f"{run}_{key}"] = value
    if run == "static":
        results["watch"] = load(work / run / "steady.json") if run in ran else {}
        results["eager_twin"] = load(work / "static_eager" / "steady.json") if run in ran else {}
        line.update(static_figures(results["watch"], results["eager_twin"]))
        pads = [x for x in (text(work / run / "train.log") or "").splitlines()
                if "positions padding" in x]
        line["static_pad_pct"] = pads[-1].split(", ")[-1].split("%")[0] if pads else None
    line[f"{run}_val_bleu_greedy"] = summary.get("best_bleu")
    if run in ("ddp", "torchrun"):
        line[f"{run}_world"] = summary.get("world_size")
        return results, line
    for split, name in (("val", "val"), ("test_2016_flickr", "test")):
        scores = load(work / run / f"eval_{split}" / "scores.json") if f"{run}_eval" in ran else {}
        results[f"{name}_beam5"] = scores
        line[f"{run}_{name}_bleu"] = scores.get("bleu")
        if run == "base" and name == "test":
            line["decode_test_beam5_s"] = scores.get("seconds")
            line["decode_test_sents_per_s"] = scores.get("sents_per_s")
    return results, line


def collect(work: Path, dry: bool, status: dict) -> dict:
    """results.json: the preflight's findings, every run's summary and scores, the bench's
    figures, and ``line``, the key line's figures followed by ``status`` (each step's seconds,
    failed, skipped, next, budget, seconds): what the steps that ran (seconds a number) left."""
    ran = {step for step, secs in status["secs"].items() if isinstance(secs, int)}

    def log(step: str, name: str | None = None) -> str | None:
        return text(work / "logs" / f"{name or step}.log") if step in ran else None

    pre = load(work / "preflight.json")
    results: dict = {"preflight": pre}
    line: dict = {"dry_run": int(dry), "gpu": pre.get("gpu", "-"), "torch": pre.get("torch"),
                  "python": pre.get("python")}
    for run in RUNS:
        results[run], figures = run_figures(work, run, ran)
        line.update(figures)
    backend, joined = ddp_join(log("ddp"))
    line.update(ddp_backend=backend, ddp_joined_by=joined)
    # nmt's own init_distributed joined NCCL: in the ddp step, or under torchrun with 2 GPUs
    torchrun_world = line.get("torchrun_world")
    line["nmt_nccl"] = "ddp" if (backend, joined) == ("nccl", "nmt") else \
        "torchrun" if not dry and isinstance(torchrun_world, int) and torchrun_world > 1 else "no"
    bench, graphs = bench_figures(log("bench")), bench_figures(log("bench", "bench_graphs"))
    results["bench"], results["bench_graphs"] = bench, graphs
    for key in ("eager_tgt_tokens_per_s", "eager_mfu", "compiled_tgt_tokens_per_s",
                "compiled_mfu", "compile_speedup", "tgt_tokens_per_s", "mfu", "compile_s",
                "cuda_graphs", "pad_share", "params", "peak_gflops"):
        key, value = util(bench, key)
        line[f"bench_{key}"] = value
    for key in ("tgt_tokens_per_s", "mfu", "step_ms", "compile_s", "cuda_graphs",
                "cudagraph_skips"):
        key, value = util(graphs, key)
        line[f"bench_graphs_{key}"] = value
    line["nccl"] = nccl_result(log("nccl"), dry)
    syncs = log("syncs")
    line["syncs"] = None if syncs is None else "ok" if re.search(r"\b1 passed", syncs) else "fail"
    for step, value in status["secs"].items():
        line[f"{step}_s"] = value
    line.update({k: v for k, v in status.items() if k != "secs"})
    results["line"] = line
    return results


def show(value) -> str:
    """41.53, 0.3142, 76874: short enough to read on one line; no spaces."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", value):
        value = float(value)
    if isinstance(value, float):
        value = round(value) if abs(value) >= 1000 else float(f"{value:.4g}")
    return str(value).replace(" ", "_")


def key_line(line: dict) -> str:
    """``device_check key=value ...``, the check's last line."""
    return "device_check " + " ".join(f"{k}={show(v)}" for k, v in line.items())
