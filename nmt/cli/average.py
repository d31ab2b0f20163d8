"""``nmt-average``: average the weights of several checkpoints of one run.

    nmt-average run_dir=runs/transformer_de_en last=5
    nmt-average run_dir=runs/transformer_de_en best=3
    nmt-average checkpoints='[runs/tf/checkpoints/step_2261.pt,runs/tf/checkpoints/step_2394.pt]' out=avg.pt

Averaging the last few checkpoints (Vaswani et al. 2017, section 6.1) smooths the noise of the
final updates; the result is an inference checkpoint for ``nmt-evaluate`` / ``nmt-translate``.
Options: configs/average.yaml (``nmt-average --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError
from nmt.runtime import ensure_writable_dir


def _run(cfg: DictConfig) -> None:
    from nmt.checkpoint import CheckpointManager, average_checkpoints, load_checkpoint, save_atomic

    if (cfg.run_dir is None) == (cfg.checkpoints is None):
        raise ConfigError("give either run_dir=DIR or checkpoints='[A.pt,B.pt]', not both or neither.")
    if cfg.checkpoints is not None:
        require(cfg, "out")
        paths, out = [Path(str(p)) for p in cfg.checkpoints], Path(cfg.out)
    else:
        key, n = ("last", cfg.last) if cfg.best is None else ("best", cfg.best)
        if n < 2:
            raise ConfigError(f"{key}={n} must be an integer >= 2 (checkpoints to average).")
        manager = CheckpointManager(Path(cfg.run_dir) / "checkpoints", keep_last=0)
        if not manager.directory.is_dir():
            raise ConfigError(f"run_dir={cfg.run_dir}: no checkpoints/ directory there.")
        have = manager.step_files()
        if key == "best":
            scores = {p: load_checkpoint(p).get("valid_bleu") for p in have}
            have = [p for p in have if scores[p] is not None]
        if len(have) < n:
            raise ConfigError(f"{key}={n}: {manager.directory} holds {len(have)} step checkpoints"
                              f"{' with a validation BLEU' * (key == 'best')} "
                              f"({', '.join(p.name for p in have) or 'none'}); lower {key}=.")
        step = lambda p: int(p.stem[5:])  # noqa: E731
        paths = (sorted(sorted(have, key=lambda p: (-scores[p], step(p)))[:n], key=step)
                 if key == "best" else have[-n:])   # best: ties go to the earlier step
        out = Path(cfg.out or manager.directory / f"avg_{key}{n}.pt")
    if any(out.resolve() == p.resolve() for p in paths):
        raise ConfigError(f"out={out} is one of the inputs: choose another file.")
    ensure_writable_dir(out.parent, "out")
    save_atomic(average_checkpoints(paths), out)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="average")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-average", validate_fn=None)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-average``; returns the exit status."""
    return run_app(app, argv, config_name="average", prog="nmt-average", validate_fn=None)


if __name__ == "__main__":
    raise SystemExit(main())
