"""``nmt-average``: average the weights of several checkpoints of one run.

    nmt-average run_dir=runs/transformer_de_en last=5
    nmt-average run_dir=runs/transformer_de_en best=3
    nmt-average checkpoints='[runs/tf/checkpoints/step_2261.pt,runs/tf/checkpoints/step_2394.pt]' \\
        out=avg.pt

Averaging the last few checkpoints (Vaswani et al. 2017, section 6.1) smooths the noise of the
final updates; the result is an inference checkpoint for ``nmt-evaluate`` / ``nmt-translate``.
Options: configs/average.yaml (``nmt-average --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError, config_at, config_diff
from nmt.runtime import ensure_writable_dir


def average_checkpoints(paths: list[str | Path]) -> dict:
    """The mean of two or more checkpoints' ``model`` weights (Vaswani et al. 2017, section 6.1:
    "averaging the last 5 checkpoints"), accumulated in float64, stored in the input dtype;
    integer tensors must be equal. Returns an inference checkpoint (no optimizer or RNG state)
    with the newest input's metadata and ``averaged_from``.

    Raises:
        CheckpointError: fewer than two paths, or inputs of another model config, tokenizer or
            weight shapes (naming both files).
    """
    import torch

    from nmt.checkpoint import CHECKPOINT_VERSION, CONFIG_VERSION, CheckpointError, load_checkpoint

    if len(paths) < 2:
        raise CheckpointError(f"averaging needs at least two checkpoints, got {len(paths)}: "
                              f"{', '.join(map(str, paths)) or 'none'}.")
    first_path = Path(paths[0])
    first = load_checkpoint(first_path)
    sums = {name: t.to(torch.float64).clone() if t.is_floating_point() else t
            for name, t in first["model"].items()}
    newest = first
    for path in paths[1:]:
        ckpt = load_checkpoint(path)
        problems = config_diff(config_at(first.get("config") or {}, "model"),
                               config_at(ckpt.get("config") or {}, "model"), "model")
        if ckpt.get("tokenizer") != first.get("tokenizer"):
            problems.append("the tokenizer (vocabulary) differs")
        weights = ckpt["model"]
        if set(weights) != set(sums):
            problems.append(f"weight names differ ({sorted(set(weights) ^ set(sums))[:3]} ...)")
        else:
            problems += [f"weight {n}: shape {tuple(weights[n].shape)} vs {tuple(sums[n].shape)}"
                         for n in sums if weights[n].shape != sums[n].shape][:3]
        if problems:
            raise CheckpointError(f"{path} cannot be averaged with {first_path}: "
                                  f"{'; '.join(problems)}. Average checkpoints of one run only.")
        for name, t in weights.items():
            if t.is_floating_point():
                sums[name] += t.to(torch.float64)
            elif not torch.equal(t, sums[name]):
                raise CheckpointError(f"{path} cannot be averaged with {first_path}: the integer "
                                      f"tensor {name} differs (only float weights are averaged).")
        if ckpt.get("step", 0) >= newest.get("step", 0):
            newest = ckpt
    dtypes = {name: t.dtype for name, t in first["model"].items()}
    model = {name: (t / len(paths)).to(dtypes[name]) if t.is_floating_point() else t
             for name, t in sums.items()}
    return {"version": CHECKPOINT_VERSION, "config_version": CONFIG_VERSION,
            "model": model, "config": newest["config"],
            "tokenizer": newest["tokenizer"], "step": newest.get("step", 0),
            "epoch": newest.get("epoch", 0), "batch_in_epoch": newest.get("batch_in_epoch", 0),
            "averaged_from": [str(p) for p in paths]}



def _run(cfg: DictConfig) -> None:
    from nmt.checkpoint import CheckpointManager, load_checkpoint, save_atomic

    if (cfg.run_dir is None) == (cfg.checkpoints is None):
        raise ConfigError("give either run_dir=DIR or checkpoints='[A.pt,B.pt]', not both or "
                          "neither.")
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
