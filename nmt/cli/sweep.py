"""Sweeps of ``nmt-train -m``: each job's directory is named from its overrides
(``${nmt.dirname:...}``, registered by nmt.cli.train), and a sweep ends with a table of all
jobs (:class:`SweepTableCallback`, configs/config.yaml; ``scripts/sweep_table.py``)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError

# Never part of a sweep job's directory name (paths, and where it runs).
DIRNAME_EXCLUDED_KEYS = ("run_dir", "device", "data.root", "data.cache_dir",
                         "data.tokenizer.model", "train.init_from")


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def job_dirname(task_overrides: Any, limit: int = 120) -> str:
    """A sweep job's directory (``hydra.sweep.subdir``): its overrides but the command line's
    single-valued ones and :data:`DIRNAME_EXCLUDED_KEYS`, sorted and joined like Hydra's
    ``override_dirname``, ``/`` as ``_``; past ``limit`` characters cut and given an
    8-character hash of the whole (under the 255-byte limit); ``default`` when empty."""
    parser, swept, fixed = OverridesParser.create(), set(), set()
    for arg in sys.argv[1:]:   # the keys the command line gives one value only: fixed
        if arg.startswith("-"):
            continue
        try:
            sweep = parser.parse_override(arg).is_sweep_override()
        except Exception:  # not an override: Hydra reports it elsewhere
            continue
        (swept if sweep else fixed).add(_override_key(arg))
    fixed -= swept
    last = {_override_key(o): o for o in map(str, task_overrides)}   # the last of each key
    own = [o for key, o in last.items() if key not in DIRNAME_EXCLUDED_KEYS and key not in fixed]
    name = ",".join(sorted(own)).replace("/", "_") or "default"
    if len(name) > limit:
        name = f"{name[:limit]}..{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


SWEEP_COLUMNS = ("job", "overrides", "steps", "best val BLEU", "at step", "train tok/s",
                 "train min", "stop")


def _job_number(job: Path) -> int:
    path = job / ".hydra" / "hydra.yaml"
    num = OmegaConf.select(OmegaConf.load(path), "hydra.job.num") if path.is_file() else None
    return num if isinstance(num, int) else 1 << 30


def sweep_table(sweep_dir: str | Path) -> str:
    """A markdown table of the jobs (directories with ``.hydra/overrides.yaml``) below
    ``sweep_dir``, in job order, the overrides every job shares above it; "not finished"
    for a job without ``summary.json``."""
    sweep_dir = Path(sweep_dir)
    jobs = sorted({p.parent.parent for p in sweep_dir.glob("**/.hydra/overrides.yaml")},
                  key=lambda j: (_job_number(j), str(j)))
    if not jobs:
        raise ConfigError(f"{sweep_dir} holds no job of nmt-train -m (no */.hydra/overrides.yaml"
                          "): give the hydra.sweep.dir that nmt-train -m printed.")
    effective = []   # per job: {key: its last override}
    for job in jobs:
        overrides = map(str, OmegaConf.load(job / ".hydra" / "overrides.yaml"))
        effective.append({_override_key(o): o for o in overrides})
    common = set.intersection(*(set(e.values()) for e in effective)) if len(jobs) > 1 else set()
    lines = [f"every job: {' '.join(sorted(common))}"] if common else []
    lines += ["| " + " | ".join(SWEEP_COLUMNS) + " |", "|" + "---|" * len(SWEEP_COLUMNS)]
    for job, eff in zip(jobs, effective, strict=True):
        summary = job / "summary.json"
        done = json.loads(summary.read_text()) if summary.is_file() else {}
        minutes = done["train_time_s"] / 60 if "train_time_s" in done else None
        own = " ".join(v for _, v in sorted(eff.items()) if v not in common) or "(none)"
        cells = ["n/a" if value is None else format(value, fmt) for value, fmt in (
            (done.get("steps"), "d"), (done.get("best_bleu"), ".2f"), (done.get("best_step"), "d"),
            (done.get("train_tokens_per_s"), ".0f"), (minutes, ".1f"))]
        stop = done.get("stop_reason") or "not finished"
        lines.append("| " + " | ".join([str(job.relative_to(sweep_dir)), own, *cells, stop]) + " |")
    return "\n".join(lines)


class SweepTableCallback(Callback):
    """Hydra callback (``configs/config.yaml``): the table of all jobs when a sweep ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            table = sweep_table(sweep_dir)
        except ConfigError as err:
            print(f"nmt-train: no sweep table: {err}")
            return
        print(f"\nSweep {sweep_dir} (python scripts/sweep_table.py {sweep_dir} prints this "
              f"again):\n{table}", flush=True)
