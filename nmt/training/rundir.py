"""The rules of a run directory: start, resume, refuse, or do nothing.

One ``run_dir`` holds one training run, however many times its command is run::

    no checkpoints/last.pt                      -> a fresh run
    last.pt, the same settings, not finished    -> resume from last.pt
    last.pt, the same settings, finished        -> nothing to do: no file is written
    last.pt, other settings                     -> refused before anything is written,
                                                   naming every key that differs ...
    ... with train.resume=force                 -> resume with the new settings (warned)

"The same settings" compares the whole resolved config with the one saved in ``last.pt``
except :data:`nmt.checkpoint.UNCHECKED_KEYS` (``device``, ``data.cache_dir``, ...).
A run is finished when its last checkpoint records the stop condition that ended it
(``max_steps``, ``max_epochs``, ``max_minutes`` or early stopping).

The command that launched each training segment is recorded: ``run_dir/.hydra/`` holds
Hydra's composed config, its own config and the overrides of the latest segment (written
by the trainer after these checks, as Hydra would have written them), and ``summary.json``
lists every segment with its command line, dates and machine.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nmt.config import ConfigError
from nmt.checkpoint import config_changes, load_checkpoint

log = logging.getLogger("nmt")


@dataclass
class RunRecord:
    """How a training segment was launched (filled by ``nmt-train``; empty from Python).

    Attributes:
        command: the command line (``sys.argv`` joined, shell-quoted).
        overrides: Hydra's task overrides (``hydra.overrides.task``).
        config_yaml: Hydra's composed, unresolved config (``.hydra/config.yaml``).
        hydra_yaml: Hydra's own config (``.hydra/hydra.yaml``).
    """

    command: str = ""
    overrides: list[str] = field(default_factory=list)
    config_yaml: str | None = None
    hydra_yaml: str | None = None


@dataclass
class RunPlan:
    """What :func:`plan_run` decided for a run directory.

    Attributes:
        kind: ``"fresh"``, ``"resume"`` or ``"finished"``.
        checkpoint: the ``last.pt`` dict to resume from (``resume``; ``None`` otherwise).
        changes: settings that differ from the checkpoint's (only with ``train.resume=force``).
        summary: the finished run's ``summary.json`` contents (``finished``).
    """

    kind: str
    checkpoint: dict | None = None
    changes: list[str] = field(default_factory=list)
    summary: dict | None = None


def plan_run(run_dir: Path, cfg: DictConfig) -> RunPlan:
    """Decide how the run in ``run_dir`` goes on with ``cfg`` (see the module docstring).

    Reads only; writes nothing.

    Raises:
        ConfigError: the directory holds a run with other settings and ``train.resume`` is
            not ``force`` (the message names every differing key and the three ways out).
        CheckpointError: ``last.pt`` is unreadable.
    """
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return RunPlan("fresh")
    ckpt = load_checkpoint(last)
    changes = config_changes(ckpt, cfg)
    if changes and cfg.train.resume != "force":
        shown = "; ".join(changes[:8]) + ("; ..." if len(changes) > 8 else "")
        raise ConfigError(
            f"run_dir={run_dir} holds a run with other settings ({shown}). Re-run with the "
            "original settings to resume it, add train.resume=force to continue it with the "
            "new ones, or choose another run_dir=... for a new run. Nothing was written.")
    reason = (ckpt.get("trainer") or {}).get("stop_reason") or ""
    if reason and not changes:
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        return RunPlan("finished", summary=summary or {"stop_reason": reason,
                                                       "steps": ckpt.get("step")})
    return RunPlan("resume", checkpoint=ckpt, changes=changes)


def check_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` and make sure files can be written there.

    Raises:
        ConfigError: the directory cannot be created or written.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".write_test."):
            pass
    except OSError as err:
        raise ConfigError(
            f"run_dir={run_dir} cannot be written ({err.strerror or err}): choose a writable "
            "directory with run_dir=PATH."
        ) from None


def write_record(run_dir: Path, record: RunRecord | None) -> None:
    """Write Hydra's ``.hydra/{config,hydra,overrides}.yaml`` of this segment (rank 0).

    Hydra's own writing is switched off (``hydra.output_subdir: null``) so that a refused
    or finished run changes no file; the trainer calls this once its checks passed.
    """
    if record is None or record.config_yaml is None:
        return
    from omegaconf import OmegaConf

    out = run_dir / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(record.config_yaml, encoding="utf-8")
    if record.hydra_yaml is not None:
        (out / "hydra.yaml").write_text(record.hydra_yaml, encoding="utf-8")
    OmegaConf.save(OmegaConf.create(list(record.overrides)), out / "overrides.yaml")


def write_json_atomic(path: Path, data: Any) -> None:
    """``json.dump`` to a temporary file beside ``path``, then rename (never a torn file)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

