r"""``nmt-export``: write a Transformer checkpoint as a CTranslate2 or a Hugging Face Marian
model directory.

    nmt-export checkpoint=runs/tf/checkpoints/best.pt format=ctranslate2 out_dir=runs/tf/ct2 \
        quantization=int8
    nmt-evaluate engine=ctranslate2 model_dir=runs/tf/ct2 split=test_2016_flickr beam_size=5

    nmt-export checkpoint=runs/tf/checkpoints/best.pt format=marian out_dir=runs/tf/hf

The ctranslate2 directory holds all that ``engine=ctranslate2 model_dir=DIR`` reads
(:mod:`nmt.extras.tools.ctranslate2`; ``pip install "nmt[ctranslate2]"``); the marian one what
``transformers``' ``AutoTokenizer`` and ``AutoModelForSeq2SeqLM`` (``MarianTokenizer``,
``MarianMTModel``) read, to translate with ``generate`` (transformers 5 has no
``pipeline("translation")``; :mod:`nmt.extras.tools.marian.exporter`; ``pip install "nmt[hf]"``).
Options: configs/export.yaml (``nmt-export --help``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError


def _check(cfg: DictConfig) -> DictConfig:
    require(cfg, "checkpoint", "out_dir")
    if cfg.max_positions < 2:
        raise ConfigError(f"max_positions={cfg.max_positions} must be >= 2.")
    return cfg


def _run(cfg: DictConfig) -> None:
    if cfg.format == "marian":
        from nmt.extras.tools.marian.exporter import export_marian

        out = export_marian(cfg.checkpoint, cfg.out_dir, max_positions=cfg.max_positions)
        print(f"exported {cfg.checkpoint} -> {out} (Marian); translate with transformers: "
              f"tok = AutoTokenizer.from_pretrained({str(out)!r}); model = "
              f"AutoModelForSeq2SeqLM.from_pretrained({str(out)!r}); tok.batch_decode(model."
              "generate(**tok(texts, return_tensors='pt', padding=True)), "
              "skip_special_tokens=True)")
        return
    from nmt.extras.tools.ctranslate2 import export

    out = export(cfg.checkpoint, cfg.out_dir, quantization=str(cfg.quantization),
                 max_positions=cfg.max_positions)
    print(f"exported {cfg.checkpoint} ({cfg.quantization}) -> {out}; translate with "
          f"nmt-translate engine=ctranslate2 model_dir={out}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="export")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-export", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-export``; returns the exit status."""
    return run_app(app, argv, config_name="export", prog="nmt-export", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
