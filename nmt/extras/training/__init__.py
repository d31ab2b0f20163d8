"""Trainer hooks (the seam: the training loop, :mod:`nmt.training.hooks`): the R-Drop/SimCut/
CrossConST regularisers (:mod:`~nmt.extras.training.consistency`), subword sampling
(:mod:`~nmt.extras.training.subword_sampling`) and the eflomal teacher, guided alignment's
links (:mod:`~nmt.extras.training.teacher`). :func:`hooks` builds them for a config; ``nmt-train``
and ``nmt.train()`` both call it::

    summary = nmt.training.trainer.train(cfg, record, hooks(cfg))
"""

from __future__ import annotations

from typing import Any

from nmt.extras.training.consistency import regulariser
from nmt.extras.training.subword_sampling import resampler
from nmt.extras.training.teacher import prepare_links
from nmt.training.hooks import TrainingHooks, needs_teacher


def hooks(cfg: Any) -> TrainingHooks:
    """The trainer's hooks for the whole config ``cfg``: the regulariser of
    ``train.consistency``, the resampler of ``data.tokenizer.sampling_alpha`` and, for guided
    alignment without ``data.alignments``, the eflomal teacher; None where the config asks for
    none (what :meth:`~nmt.training.hooks.TrainingHooks.check` expects)."""
    return TrainingHooks(regulariser(cfg.train, cfg.data), resampler(cfg),
                         prepare_links if needs_teacher(cfg) else None)
