"""``nmt-train``: train (or resume) a model; everything goes under ``run_dir``.

    nmt-train model=transformer data=multi30k_de_en data.root=../shared/data/multi30k \\
        run_dir=runs/tf
    nmt-train -m model=rnn,transformer train.lr=1e-3,2e-3        # a sweep: one run_dir per job
    torchrun --nproc_per_node=2 -m nmt.cli.train model=rnn run_dir=runs/rnn_ddp

The same command again resumes, a changed setting is refused (``train.resume=force`` goes on),
a finished run does nothing (:mod:`nmt.training.run`). In a sweep each job's ``run_dir`` is
``hydra.sweep.dir/<overrides>``, and the sweep ends with a table of all jobs. Guided alignment
(``train.alignment_loss_weight`` > 0) without ``data.alignments`` first aligns the training
corpora with eflomal, once (the teacher, :mod:`nmt.extras.training.teacher`; rank 0).
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from nmt.cli.common import hydra_record, run_app, run_task
from nmt.cli.sweep import job_dirname
from nmt.config import CONFIG_PATH, validate
from nmt.runtime import ensure_writable_dir

OmegaConf.register_new_resolver("nmt.dirname", job_dirname, replace=True)   # names sweep jobs


def _job_config(cfg: DictConfig) -> DictConfig:
    """In a sweep job, ``run_dir`` is the job's own directory unless the command set it."""
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        given = any(o.split("=", 1)[0].lstrip("+~") == "run_dir" for o in hydra_cfg.overrides.task)
        if hydra_cfg.mode == RunMode.MULTIRUN and not given:
            with open_dict(cfg):
                cfg.run_dir = hydra_cfg.runtime.output_dir
    return validate(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def app(cfg: DictConfig) -> float | None:
    """One training run (one job of a sweep); returns its best validation BLEU, the objective
    of optimising sweepers (Optuna, ``hydra.sweeper.direction=maximize``)."""
    record = hydra_record()
    record.config_yaml = OmegaConf.to_yaml(cfg)
    summary: dict = {}

    def body(cfg: DictConfig) -> None:
        from nmt.extras.training import hooks
        from nmt.training.trainer import train

        summary.update(train(cfg, record, hooks(cfg)))

    run_task(cfg, body, prog="nmt-train", validate_fn=_job_config)
    return summary.get("best_bleu")


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-train``; returns the exit status. ``run_dir`` is checked
    before Hydra creates it (``hydra.run.dir``)."""
    return run_app(app, argv, config_name="config", prog="nmt-train", validate_fn=validate,
                   precheck=lambda cfg: ensure_writable_dir(cfg.run_dir, "run_dir"))


if __name__ == "__main__":
    raise SystemExit(main())
