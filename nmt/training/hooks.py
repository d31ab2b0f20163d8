"""The training hooks: what the options outside the core (:mod:`nmt.extras.training`) plug
into the loop, given to the trainer as one :class:`TrainingHooks` that
:func:`nmt.extras.training.hooks` builds from the config (``nmt-train`` and ``nmt.train()``
both call it)::

    from nmt.extras.training import hooks
    summary = train(cfg, record, hooks(cfg))          # nmt.training.trainer.train

- ``regulariser`` (``train.consistency``: R-Drop, SimCut, CrossConST): replaces the objective's
  plain forward and cross-entropy (:class:`~nmt.training.loss.Regulariser`);
- ``resampler`` (``data.tokenizer.sampling_alpha``: subword regularisation, BPE-dropout): each
  epoch's training split, resegmented (:class:`Resampler`);
- ``teacher`` (guided alignment without ``data.alignments``): the word links of the training
  corpora (:data:`Teacher`; eflomal), prepared once like the tokenizer.

Each is given exactly when the config asks for it; :meth:`TrainingHooks.check` is the one
place that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from omegaconf import DictConfig

from nmt.config import ConfigError, has_consistency, is_guided
from nmt.training.loss import Regulariser

if TYPE_CHECKING:   # annotations only
    from nmt.data.pipeline import TokenizedSplit
    from nmt.data.tokenizer import Tokenizer
    from nmt.training.distributed import DistInfo

# Guided alignment's teacher: the data section -> the word links of its training corpora (a
# Pharaoh file, one line per pair; nmt.extras.training.teacher.prepare_links).
Teacher = Callable[[DictConfig], "str | Path"]


class Resampler(Protocol):
    """Subword sampling's hook (:mod:`nmt.extras.training.subword_sampling`): the training
    ``split`` of ``epoch`` with new segmentations, the same on every rank."""

    def __call__(self, split: TokenizedSplit, tokenizer: Tokenizer, epoch: int,
                 info: DistInfo) -> TokenizedSplit: ...


def needs_teacher(cfg: Any) -> bool:
    """Guided alignment (:func:`~nmt.config.is_guided`) without ``data.alignments``: the run
    trains on its teacher's links."""
    return is_guided(cfg.train) and cfg.data.alignments is None


@dataclass(frozen=True)
class TrainingHooks:
    """The trainer's hooks (module docstring); ``TrainingHooks()``: none, a plain run."""

    regulariser: Regulariser | None = None
    resampler: Resampler | None = None
    teacher: Teacher | None = None

    def check(self, cfg: Any) -> None:
        """ConfigError, naming the setting, unless each hook is given exactly when ``cfg``
        (the whole config) asks for it; before any data is read or file written."""
        train, data = cfg.train, cfg.data
        wanted = {"regulariser": (has_consistency(train),
                                  f"train.consistency={train.consistency}"),
                  "resampler": (bool(data.tokenizer.sampling_alpha),
                                f"data.tokenizer.sampling_alpha={data.tokenizer.sampling_alpha}"),
                  "teacher": (needs_teacher(cfg), f"train.alignment_loss_weight="
                              f"{train.alignment_loss_weight} with "
                              f"data.alignments={data.alignments}")}
        for name, (on, setting) in wanted.items():
            if on != (getattr(self, name) is not None):
                what = (f"needs a {name} hook, which the TrainingHooks given lack" if on else
                        f"takes no {name} hook, but the TrainingHooks given have one")
                links = "give data.alignments=FILE, or " if name == "teacher" and on else ""
                raise ConfigError(f"{setting} {what}: {links}build them with "
                                  "nmt.extras.training.hooks(cfg), as nmt-train and nmt.train() "
                                  "do.")


NO_HOOKS = TrainingHooks()   # a plain run's (frozen: one shared default)
