"""The table of a sweep: one row per job of ``nmt-train -m ...``.

A sweep directory (``hydra.sweep.dir``) holds one run directory per job, named from the
job's overrides (``hydra.sweep.subdir``); each holds ``.hydra/overrides.yaml`` (written by
the trainer) and, once the job trained, ``summary.json``. :func:`sweep_rows` reads them,
:func:`format_sweep_table` prints them, :class:`SweepTableCallback` prints the table when
Hydra's sweep ends (whatever the sweeper or launcher: basic, Optuna, joblib, submitit), and
``python scripts/sweep_table.py DIR`` prints it again later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError

COLUMNS = ("job", "overrides", "steps", "best val BLEU", "at step", "train tok/s", "train min",
           "stop")


def _job_dirs(sweep_dir: Path) -> list[Path]:
    """Run directories below ``sweep_dir`` (at any depth): those with ``.hydra/overrides.yaml``."""
    return sorted({p.parent.parent for p in sweep_dir.glob("**/.hydra/overrides.yaml")})


def _job_number(job: Path) -> int:
    hydra_yaml = job / ".hydra" / "hydra.yaml"
    if hydra_yaml.is_file():
        num = OmegaConf.select(OmegaConf.load(hydra_yaml), "hydra.job.num")
        if isinstance(num, int):
            return num
    return 1 << 30


def sweep_rows(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One dict per job of the sweep in ``sweep_dir``, in job order.

    Each dict: ``job`` (directory relative to ``sweep_dir``), ``overrides`` (list), ``steps``,
    ``best_bleu``, ``best_step``, ``tokens_per_s``, ``train_min`` (training minutes, all
    segments) and ``stop`` (the stop reason; ``"not finished"`` for a job with no
    ``summary.json``, e.g. one that failed or still runs).

    Raises:
        ConfigError: ``sweep_dir`` is not a directory or holds no job.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ConfigError(f"{sweep_dir} is not a directory: give the sweep directory that "
                          "nmt-train -m printed (hydra.sweep.dir).")
    jobs = sorted(_job_dirs(sweep_dir), key=lambda j: (_job_number(j), str(j)))
    if not jobs:
        raise ConfigError(f"{sweep_dir} holds no job of nmt-train -m (no */.hydra/overrides.yaml).")
    rows = []
    for job in jobs:
        overrides = [str(o) for o in OmegaConf.load(job / ".hydra" / "overrides.yaml")]
        summary_path = job / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        rows.append({"job": str(job.relative_to(sweep_dir)), "overrides": overrides,
                     "steps": summary.get("steps"), "best_bleu": summary.get("best_bleu"),
                     "best_step": summary.get("best_step"),
                     "tokens_per_s": summary.get("train_tokens_per_s"),
                     "train_min": (summary["train_time_s"] / 60 if "train_time_s" in summary
                                   else None),
                     "stop": summary.get("stop_reason") or "not finished"})
    return rows


def _effective(overrides: list[str]) -> dict[str, str]:
    """The override in force for each key (the last one on the command line wins)."""
    out: dict[str, str] = {}
    for override in overrides:
        out[override.split("=", 1)[0].lstrip("+~")] = override
    return out


def format_sweep_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`sweep_rows`; overrides shared by every job go above it,
    each row shows the job's other overrides sorted by key."""
    effective = [_effective(r["overrides"]) for r in rows]
    common = (set.intersection(*(set(e.values()) for e in effective)) if len(rows) > 1 else set())

    def cell(value: Any, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    lines = []
    if common:
        lines.append(f"every job: {' '.join(sorted(common))}")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for r, eff in zip(rows, effective, strict=True):
        own = " ".join(v for _, v in sorted(eff.items()) if v not in common) or "(none)"
        lines.append("| " + " | ".join([
            r["job"], own, cell(r["steps"], "d"), cell(r["best_bleu"], ".2f"),
            cell(r["best_step"], "d"), cell(r["tokens_per_s"], ".0f"), cell(r["train_min"], ".1f"),
            r["stop"]]) + " |")
    return "\n".join(lines)


class SweepTableCallback(Callback):
    """Hydra callback (``hydra.callbacks`` in ``configs/config.yaml``): print the table of all
    jobs when a sweep ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            rows = sweep_rows(sweep_dir)
        except ConfigError as err:
            print(f"nmt-train: no sweep table: {err}")
            return
        print(f"\nSweep {sweep_dir} ({len(rows)} jobs; python scripts/sweep_table.py {sweep_dir} "
              "prints this again):")
        print(format_sweep_table(rows), flush=True)
