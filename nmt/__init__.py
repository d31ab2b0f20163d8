"""nmt: neural machine translation with a Bahdanau RNN and a Transformer.

The Python API (README.md, docs/tutorial.md)::

    summary = nmt.train(["model=transformer", "train.max_minutes=30", "run_dir=runs/tf"])
    translator = nmt.Translator.from_checkpoint("runs/tf/checkpoints/best.pt")
    result = translator.translate("Ein Hund läuft im Park .", beam_size=5)
    nmt.plot_alignment(result)

Everything but ``train`` loads on first use, so ``import nmt`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

__all__ = ["ForcedScore", "Translation", "Translator", "__version__", "plot_alignment", "train"]

_LAZY = {"Translator": "nmt.inference.translator", "Translation": "nmt.inference.translator",
         "ForcedScore": "nmt.inference.translator", "plot_alignment": "nmt.evaluation.plot"}


def train(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Train (or resume) as ``nmt-train`` would with these Hydra overrides, e.g.
    ``["model=rnn", "train.max_minutes=10", "run_dir=runs/rnn"]``; returns ``summary.json``'s
    contents. User errors (ConfigError, CorpusError, CheckpointError) come before the first
    batch."""
    from nmt.config import compose_config
    from nmt.extras.training import hooks
    from nmt.training.trainer import train as run

    cfg = compose_config(list(overrides))
    return run(cfg, hooks=hooks(cfg))


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
