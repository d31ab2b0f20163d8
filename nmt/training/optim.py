"""The optimizer and its learning rate (Vaswani et al. 2017, section 5.3): Adam (Kingma & Ba
2015; AdamW, Loshchilov & Hutter 2019, with ``train.optimizer=adamw``) and the schedules:
inverse square root with linear warmup, constant, reduce-on-plateau.

Vaswani et al. (2017), eq. 3::

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

peaks at ``step = warmup`` with value ``d_model^-0.5 * warmup^-0.5``. We rescale it so the
peak equals ``train.lr`` (the usual fairseq ``inverse_sqrt`` parametrisation)::

    lr(s) = train.lr * min(s / w, sqrt(w / s)),       s = 1, 2, ... (optimizer step), w >= 1

``constant`` and ``plateau`` warm up linearly over ``w`` steps too and then hold
``train.lr``; ``plateau`` multiplies it by ``plateau_factor`` after ``plateau_patience``
validations without a BLEU gain (Bahdanau-style RNN training), never below ``min_lr``.

``train.cooldown`` (a fraction c of the budget, 0 = off) multiplies any of them by a linear
decay to zero at the end, the "cooldown" of warmup-stable-decay schedules (Hägele et al.
2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations", sec. 3)::

    lr(s) = schedule(s) * min(1, (1 - p) / c),     p = the fraction of the budget used

where p is s / ``train.max_steps`` or wall minutes / ``train.max_minutes``, the larger.
The only state is the plateau ``scale``.
"""

from __future__ import annotations

import math

import torch


def build_optimizer(params: list[torch.nn.Parameter], t) -> torch.optim.Optimizer:
    """Adam / AdamW of the ``train`` section ``t`` (``betas``, ``eps``, ``weight_decay``; the lr
    is the schedule's), fused where the device has the kernel."""
    cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    kwargs = dict(lr=t.lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay)
    try:
        return cls(params, fused=True, **kwargs)
    except RuntimeError as err:
        if "fused=True" not in str(err):     # "`fused=True` requires ... supported devices"
            raise
        return cls(params, foreach=True, **kwargs)


def inverse_sqrt_factor(step: int, warmup_steps: int) -> float:
    """``min(s/w, sqrt(w/s))`` at optimizer step ``s`` (1-based); ``warmup_steps=0`` acts as 1."""
    w = max(warmup_steps, 1)
    s = max(step, 1)
    return min(s / w, math.sqrt(w / s))


def cooldown_factor(progress: float, cooldown: float) -> float:
    """``min(1, (1 - p) / c)``, 0 past the end of the budget (1 when ``cooldown=0``)."""
    if cooldown <= 0.0:
        return 1.0
    return min(1.0, max(0.0, 1.0 - progress) / cooldown)


class LRSchedule:
    """Sets the lr of ``optimizer``: :meth:`set_step` with the 1-based number of the step about
    to be taken, :meth:`on_validation` after each validation. The arguments are the ``train``
    keys of the same names (``kind``: ``train.schedule``; ``max_steps`` the step budget of
    ``train.cooldown``, None: none)."""

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str, lr: float,
                 warmup_steps: int = 0, plateau_factor: float = 0.5, plateau_patience: int = 2,
                 min_lr: float = 0.0, cooldown: float = 0.0,
                 max_steps: int | None = None) -> None:
        self.optimizer = optimizer
        self.kind, self.lr, self.warmup_steps, self.cooldown = kind, lr, warmup_steps, cooldown
        self.max_steps = max_steps
        self.plateau_factor, self.plateau_patience = plateau_factor, plateau_patience
        self.min_lr = min_lr
        self.scale = 1.0              # plateau reductions so far (product of factors)
        self.last_lr = self.lr_at(1)

    def lr_at(self, step: int, time_used: float = 0.0) -> float:
        """The lr of optimizer step ``step`` (1-based) with ``time_used`` of ``max_minutes``
        (the fraction at the last time check; 0 without a time budget)."""
        if self.kind == "inverse_sqrt":
            lr = self.lr * inverse_sqrt_factor(step, self.warmup_steps)
        else:
            w = self.warmup_steps
            lr = self.lr * (min(1.0, max(step, 1) / w) if w > 0 else 1.0)   # linear warmup
            if self.kind == "plateau":
                lr = lr * self.scale
                if self.scale < 1.0:
                    lr = max(lr, self.min_lr)
        progress = max(time_used, step / self.max_steps) if self.max_steps else time_used
        return lr * cooldown_factor(progress, self.cooldown)

    def set_step(self, step: int, time_used: float = 0.0) -> float:
        """Write the lr of step ``step`` (:meth:`lr_at`) into the optimizer; returns it."""
        lr = self.lr_at(step, time_used)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.last_lr = lr
        return lr

    def on_validation(self, bad_validations: int) -> bool:
        """True when the lr was reduced: ``bad_validations`` (since the last BLEU gain) reached
        a multiple of ``plateau_patience`` and the lr is above ``min_lr``."""
        reduce = self.kind == "plateau" and bad_validations > 0 and \
            bad_validations % self.plateau_patience == 0 and self.lr * self.scale > self.min_lr
        if reduce:
            self.scale *= self.plateau_factor
        return reduce

    def state_dict(self) -> dict:
        return {"kind": self.kind, "scale": self.scale}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])    # the settings come from the current config


def build_schedule(optimizer: torch.optim.Optimizer, train_cfg) -> LRSchedule:
    return LRSchedule(optimizer, train_cfg.schedule, train_cfg.lr, train_cfg.warmup_steps,
                      train_cfg.plateau_factor, train_cfg.plateau_patience, train_cfg.min_lr,
                      train_cfg.cooldown, train_cfg.max_steps)
