"""``nmt-train``: train (or resume) a model; everything goes under ``run_dir``.

    nmt-train model=transformer data=multi30k_de_en data.root=../shared/data/multi30k run_dir=runs/tf
    torchrun --nproc_per_node=2 -m nmt.cli.train model=rnn run_dir=runs/rnn_ddp

Re-running the same command on an existing ``run_dir`` resumes from
``run_dir/checkpoints/last.pt``. Bad settings, missing data files, an unwritable ``run_dir``
or an incompatible checkpoint stop before the first batch with a one-paragraph message and
exit status 2.
"""

from __future__ import annotations

from omegaconf import DictConfig

from nmt.cli.common import run_cli

USAGE = ("nmt-train [model=transformer|rnn] [data=multi30k_de_en] [data.root=DIR] [run_dir=DIR] "
         "[train.max_steps=N] [train.max_epochs=N] [train.max_minutes=M] [train.batch_tokens=N] "
         "[train.eval_every_steps=N] [train.seed=N] ...")


def _run(cfg: DictConfig) -> int:
    from nmt.training.trainer import train

    train(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``nmt-train``; returns the exit status (0 ok, 2 user error)."""
    return run_cli(_run, argv, config_name="config", usage=USAGE, prog="nmt-train")


if __name__ == "__main__":
    raise SystemExit(main())
