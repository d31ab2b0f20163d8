"""Learning-rate schedules: inverse square root with linear warmup, constant, reduce-on-plateau.

Vaswani et al. (2017), eq. 3::

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

peaks at ``step = warmup`` with value ``d_model^-0.5 * warmup^-0.5``. We rescale it so the
peak equals ``train.lr`` (the usual fairseq ``inverse_sqrt`` parametrisation)::

    lr(s) = train.lr * min(s / w, sqrt(w / s)),       s = 1, 2, ... (optimizer step), w >= 1

``constant`` and ``plateau`` warm up linearly over ``w`` steps too and then hold
``train.lr``; ``plateau`` multiplies it by ``plateau_factor`` after ``plateau_patience``
validations without a BLEU gain (Bahdanau-style RNN training), never below ``min_lr``.

``train.cooldown`` (a fraction c of the budget, 0 = off) multiplies any of them by a linear
decay to zero over the last part of the run, the "cooldown" of warmup-stable-decay
schedules (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
Training Durations", section 3)::

    lr(s) = schedule(s) * min(1, (1 - p) / c),     p = the fraction of the budget used

where the budget is ``train.max_steps`` (p = s / max_steps) or ``train.max_minutes``
(p = wall minutes so far / max_minutes), whichever is nearer its end.

The trainer counts the validations without a BLEU gain (also for early stopping) and
passes the count to :meth:`LRSchedule.on_validation`; the only state is the plateau ``scale``.
"""

from __future__ import annotations

import math

import torch


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """``min(s/w, sqrt(w/s))`` at optimizer step ``s`` (1-based): 1 at the peak ``s = w``;
    ``warmup_steps=0`` acts as 1."""
    w = max(warmup_steps, 1)
    s = max(step, 1)
    return min(s / w, math.sqrt(w / s))


def cooldown_factor(progress: float, cooldown: float) -> float:
    """``min(1, (1 - p) / c)`` (1 when ``cooldown=0``); ``p`` is clamped to [0, 1], so the
    factor is 0 at and after the end of the budget."""
    if cooldown <= 0.0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - progress) / cooldown)


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warmup ``min(1, s/w)`` (1 when ``warmup_steps=0``)."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, max(step, 1) / warmup_steps)


class LRSchedule:
    """Sets the lr of every param group of ``optimizer``: call :meth:`set_step` with the
    1-based number of the step about to be taken (before ``optimizer.step()``) and
    :meth:`on_validation` after each validation. ``kind``, ``lr``, ``warmup_steps``, the
    plateau settings and ``cooldown`` are the ``train`` keys of the same names."""

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str, lr: float,
                 warmup_steps: int = 0, plateau_factor: float = 0.5, plateau_patience: int = 2,
                 min_lr: float = 0.0, cooldown: float = 0.0) -> None:
        self.optimizer = optimizer
        self.kind, self.lr, self.warmup_steps, self.cooldown = kind, lr, warmup_steps, cooldown
        self.plateau_factor, self.plateau_patience = plateau_factor, plateau_patience
        self.min_lr = min_lr
        self.scale = 1.0              # plateau reductions so far (product of factors)
        self.last_lr = self.lr_at(1)

    def lr_at(self, step: int, progress: float = 0.0) -> float:
        """The lr of optimizer step ``step`` (1-based) at ``progress`` (the fraction of the
        budget used, in [0, 1], for the cooldown)."""
        if self.kind == "inverse_sqrt":
            lr = self.lr * inverse_sqrt_factor(step, self.warmup_steps)
        else:
            lr = self.lr * warmup_factor(step, self.warmup_steps)
            if self.kind == "plateau":
                lr = lr * self.scale
                if self.scale < 1.0:
                    lr = max(lr, self.min_lr)
        return lr * cooldown_factor(progress, self.cooldown)

    def set_step(self, step: int, progress: float = 0.0) -> float:
        """Write the lr of step ``step`` (at budget ``progress``) into the optimizer; returns it."""
        lr = self.lr_at(step, progress)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        self.last_lr = lr
        return lr

    def on_validation(self, bad_validations: int) -> bool:
        """Plateau step after a validation, given the validations since the last BLEU gain
        (this one included); True when the lr was reduced: whenever the count reaches a
        multiple of ``plateau_patience``, unless the lr is at ``min_lr`` already."""
        if self.kind != "plateau" or bad_validations <= 0:
            return False
        if bad_validations % self.plateau_patience == 0 and self.lr * self.scale > self.min_lr:
            self.scale *= self.plateau_factor
            return True
        return False

    def state_dict(self) -> dict:
        return {"kind": self.kind, "scale": self.scale}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])    # the settings come from the current config


def build_schedule(optimizer: torch.optim.Optimizer, train_cfg) -> LRSchedule:
    """:class:`LRSchedule` from the ``train`` config section."""
    return LRSchedule(optimizer, train_cfg.schedule, train_cfg.lr, train_cfg.warmup_steps,
                      train_cfg.plateau_factor, train_cfg.plateau_patience, train_cfg.min_lr,
                      train_cfg.cooldown)
