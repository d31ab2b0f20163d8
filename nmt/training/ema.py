"""Exponential moving average of the weights (``train.ema_decay``).

Polyak & Juditsky (1992) showed that averaging the iterates of stochastic approximation
converges faster than the last iterate; the exponential moving average of the weights is
the form neural-network training uses (TensorFlow's ``tf.train.ExponentialMovingAverage``,
whose ``num_updates`` warm-up is the one below). After optimizer step ``t`` (1-based)::

    d_t       = min(decay, (1 + t) / (10 + t))          # TensorFlow's num_updates warm-up
    theta_ema = d_t * theta_ema + (1 - d_t) * theta      # every floating-point parameter
    buffer_ema = buffer                                  # buffers are copied

The warm-up keeps the initial weights from dominating a short run's average (without it they
would still weigh 37% after 1,000 steps at 0.999). One fused ``torch._foreach_lerp_`` a step.
"""

from __future__ import annotations

import copy

import torch


class WeightAverage:
    """``self.model``: an eval-mode, gradient-free copy of ``model`` (the one being trained)
    whose weights follow the moving average with ``decay`` (``train.ema_decay``)."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = float(decay)
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        mine = dict(self.model.named_parameters())
        theirs = dict(model.named_parameters())
        floating = [n for n, p in theirs.items() if p.is_floating_point()]
        self._avg = [mine[n] for n in floating]
        self._src = [theirs[n] for n in floating]
        # Non-floating parameters (none today) and buffers are copied, not averaged.
        copied_src = [p for n, p in theirs.items() if n not in floating] + \
            [b for _, b in model.named_buffers()]
        copied_dst = [p for n, p in mine.items() if n not in floating] + \
            [b for _, b in self.model.named_buffers()]
        self._copy = (copied_dst, copied_src)

    def decay_at(self, step: int) -> float:   # d_t of optimizer step t (1-based)
        return min(self.decay, (1.0 + step) / (10.0 + step))

    @torch.no_grad()
    def update(self, step: int) -> None:   # after optimizer step ``step``
        torch._foreach_lerp_(self._avg, self._src, 1.0 - self.decay_at(step))
        if self._copy[0]:
            torch._foreach_copy_(*self._copy)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()       # loads into the model class as it is

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)
