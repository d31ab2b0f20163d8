"""``nmt-export``: write a Transformer checkpoint as a CTranslate2 model directory.

    nmt-export checkpoint=runs/tf/checkpoints/best.pt format=ctranslate2 out_dir=runs/tf/ct2
    nmt-export checkpoint=runs/tf/checkpoints/best.pt format=ctranslate2 out_dir=runs/tf/ct2_int8 quantization=int8
    nmt-evaluate engine=ctranslate2 model_dir=runs/tf/ct2 split=test_2016_flickr beam_size=5

The directory holds CTranslate2's model, our SentencePiece model(s) and the training config,
so ``nmt-translate`` / ``nmt-evaluate`` ``engine=ctranslate2 model_dir=DIR`` need nothing
else (:mod:`nmt.extras.ctranslate2`: what is exported, and what CTranslate2 decodes
exactly as we do). Needs the optional extra: ``pip install "nmt[ctranslate2]"``. RNN
checkpoints are refused: CTranslate2 has no such model.
Options: configs/export.yaml (``nmt-export --help``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError

FORMATS = ("ctranslate2",)


def _check(cfg: DictConfig) -> DictConfig:
    require(cfg, "checkpoint", "out_dir")
    if cfg.format not in FORMATS:
        raise ConfigError(f"format={cfg.format!r} is not one of {', '.join(FORMATS)}: "
                          "set format=ctranslate2.")
    from nmt.extras.ctranslate2 import check_export_settings

    check_export_settings(cfg.quantization, cfg.max_positions)
    return cfg


def _run(cfg: DictConfig) -> int:
    from nmt.extras.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(cfg.checkpoint, cfg.out_dir, quantization=cfg.quantization,
                             max_positions=cfg.max_positions)
    print(f"exported {cfg.checkpoint} ({cfg.quantization}) -> {out}; translate with "
          f"nmt-translate engine=ctranslate2 model_dir={out}")
    return 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="export")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-export``."""
    run_task(cfg, _run, prog="nmt-export", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-export``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="export", prog="nmt-export", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
