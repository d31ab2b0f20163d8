"""``nmt-import``: write an nmt checkpoint of a model in another format (Hugging Face Marian).

    nmt-import format=marian source=opus-mt-de-en/ out=opus_de_en.pt
    nmt-translate checkpoint=opus_de_en.pt src_file=test.de      # every nmt tool reads it

``source`` is a directory as ``save_pretrained`` writes it, or a Hub name where the Hub is
reachable (:mod:`nmt.extras.tools.marian.importer`; ``pip install "nmt[hf]"``). Options:
configs/import.yaml (``nmt-import --help``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH


def _check(cfg: DictConfig) -> DictConfig:
    require(cfg, "source", "out")
    return cfg


def _run(cfg: DictConfig) -> None:
    from nmt.extras.tools.marian.importer import import_marian

    out, overrides = import_marian(
        cfg.source, cfg.out, src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang
    )
    print(f"imported {cfg.source} ({cfg.format}) -> {out}; fine-tune with nmt-train "
          f"train.init_from={out} {' '.join(overrides)} data=...")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="import")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-import", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-import``; returns the exit status."""
    return run_app(app, argv, config_name="import", prog="nmt-import", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
