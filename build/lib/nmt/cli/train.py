"""``nmt-train``: train (or resume) a model; everything goes under ``run_dir``.

    nmt-train model=transformer data=multi30k_de_en data.root=../shared/data/multi30k run_dir=runs/tf
    nmt-train -m model=rnn,transformer train.lr=1e-3,2e-3        # a sweep: one run_dir per job
    torchrun --nproc_per_node=2 -m nmt.cli.train model=rnn run_dir=runs/rnn_ddp

A Hydra application over ``configs/config.yaml``. Re-running the same command on an
existing ``run_dir`` resumes from ``run_dir/checkpoints/last.pt``; a changed setting is
refused before anything is written (``train.resume=force`` continues with it); a finished
run re-run does nothing (:mod:`nmt.training.rundir`). In a sweep (``-m``) each job's
``run_dir`` is its directory ``hydra.sweep.dir/<overrides>``, and the sweep ends with a table
of all jobs (:mod:`nmt.training.sweeps`). Bad settings, missing data files, an unwritable
``run_dir`` or an incompatible checkpoint stop before the first batch with a one-paragraph
message and exit status 2.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from nmt.cli.common import hydra_record, run_app, run_task
from nmt.config import CONFIG_PATH, validate


def _job_config(cfg: DictConfig) -> DictConfig:
    """In a sweep job, ``run_dir`` is the job's own directory unless the command set it."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        given = any(o.split("=", 1)[0].lstrip("+~") == "run_dir" for o in hydra_cfg.overrides.task)
        if hydra_cfg.mode == RunMode.MULTIRUN and not given:
            with open_dict(cfg):
                cfg.run_dir = hydra_cfg.runtime.output_dir
    return validate(cfg)


def _writable_run_dir(cfg: DictConfig) -> None:
    from pathlib import Path

    from nmt.training.rundir import check_run_dir

    check_run_dir(Path(cfg.run_dir))    # before Hydra creates hydra.run.dir (= run_dir)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def app(cfg: DictConfig) -> float | None:
    """The Hydra task function: one training run (one job of a sweep).

    Returns:
        The run's best validation BLEU: the objective that optimising sweepers (Optuna,
        ``hydra.sweeper.direction=maximize``) read from each job.
    """
    record = hydra_record()
    record.config_yaml = OmegaConf.to_yaml(cfg)
    summary: dict = {}

    def body(cfg: DictConfig) -> int:
        from nmt.training.trainer import train

        summary.update(train(cfg, record))
        return 0

    run_task(cfg, body, prog="nmt-train", validate_fn=_job_config)
    return summary.get("best_bleu")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``nmt-train``; returns the exit status (0 ok, 2 user error)."""
    return run_app(app, argv, config_name="config", prog="nmt-train", validate_fn=validate,
                   precheck=_writable_run_dir)


if __name__ == "__main__":
    raise SystemExit(main())
