"""``nmt-average``: average the weights of several checkpoints of one run.

    nmt-average run_dir=runs/transformer_de_en last=5
    nmt-average run_dir=runs/transformer_de_en best=3
    nmt-average checkpoints='[runs/tf/checkpoints/step_2261.pt,runs/tf/checkpoints/step_2394.pt]' out=avg.pt

Averaging the last few checkpoints (Vaswani et al. 2017, section 6.1) smooths the noise of the
final updates; the result is an inference checkpoint for ``nmt-evaluate`` / ``nmt-translate``
(:func:`nmt.checkpoint.average_checkpoints`). ``best=N`` averages the N step
checkpoints of the highest validation BLEU instead (the ``valid_bleu`` each records; ties: the
earlier step). A run writes a step checkpoint at every validation (each epoch end and every
``train.eval_every_steps``) and keeps the ``train.keep_last`` newest and the
``train.keep_best`` best of them. Options: configs/average.yaml (``nmt-average --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError


def select_checkpoints(cfg: DictConfig) -> tuple[list[Path], Path]:
    """The input files and the output path the settings name.

    Raises:
        ConfigError: neither or both of ``run_dir`` and ``checkpoints`` given, ``last`` or
            ``best`` < 2, a run directory with fewer than ``last`` step checkpoints (names
            those it has) or fewer than ``best`` with a validation BLEU, no ``out`` for an
            explicit list, or ``out`` equal to an input.
    """
    from nmt.checkpoint import CheckpointManager, checkpoint_bleu, load_checkpoint

    if (cfg.run_dir is None) == (cfg.checkpoints is None):
        raise ConfigError("give either run_dir=DIR (its newest `last` or `best` step "
                          "checkpoints) or checkpoints='[A.pt,B.pt]', not both or neither.")
    if cfg.checkpoints is not None:
        paths = [Path(str(p)) for p in cfg.checkpoints]
        if cfg.out is None:
            raise ConfigError("checkpoints=[...] needs out=FILE.pt for the averaged checkpoint.")
        out = Path(cfg.out)
    else:
        key, n = ("last", cfg.last) if cfg.best is None else ("best", cfg.best)
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ConfigError(f"{key}={n!r} must be an integer >= 2 (checkpoints to average).")
        manager = CheckpointManager(Path(cfg.run_dir) / "checkpoints", keep_last=0)
        if not manager.directory.is_dir():
            raise ConfigError(f"run_dir={cfg.run_dir}: no checkpoints/ directory there; give the "
                              "run_dir of a training run (nmt-train run_dir=...).")
        have = manager.step_files()
        if key == "best":
            scores = {p: checkpoint_bleu(load_checkpoint(p)) for p in have}
            have = [p for p in have if scores[p] is not None]
        if len(have) < n:
            names = ", ".join(p.name for p in have) or "none"
            what = "" if key == "last" else " with a validation BLEU"
            raise ConfigError(f"{key}={n}: {manager.directory} holds {len(have)} step "
                              f"checkpoints{what} ({names}); lower {key}=, or train with a "
                              f"larger train.keep_{key}.")
        if key == "best":   # the n highest BLEU (ties: the earlier step), in step order
            ranked = sorted(have, key=lambda p: (-scores[p], int(p.stem[5:])))[:n]
            paths = sorted(ranked, key=lambda p: int(p.stem[5:]))
        else:
            paths = have[-n:]
        out = Path(cfg.out) if cfg.out is not None else manager.directory / f"avg_{key}{n}.pt"
    if any(out.resolve() == p.resolve() for p in paths):
        raise ConfigError(f"out={out} is one of the inputs: choose another file.")
    return paths, out


def _run(cfg: DictConfig) -> int:
    from nmt.checkpoint import average_checkpoints, save_atomic

    paths, out = select_checkpoints(cfg)
    averaged = average_checkpoints(paths)
    try:
        save_atomic(averaged, out)
    except OSError as err:
        raise ConfigError(f"out={out}: cannot write the averaged checkpoint "
                          f"({err.strerror or err}); choose a writable path with out=...") from None
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="average")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-average``."""
    run_task(cfg, _run, prog="nmt-average", validate_fn=None)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-average``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="average", prog="nmt-average", validate_fn=None)


if __name__ == "__main__":
    raise SystemExit(main())
