"""Model FLOP/s and MFU of training, for every ``train.log`` line and ``summary.json``.

MFU (model FLOPs utilisation; Chowdhery et al. 2022, appendix B) = model FLOPs of the steps
(:func:`nmt.runtime.train_flops`: 6N per real token, N from
:func:`~nmt.models.flops.flop_params`, plus the attention scores of
:func:`~nmt.models.flops.attention_flops`, padding and recomputation not counted) / their
seconds / the peak FLOP/s of all devices (:func:`nmt.runtime.peak_flops`). On a CPU without
``train.peak_tflops`` the divisor is a matmul rate measured at start-up, not a peak: the
figure is then called ``matmul_util``.
``scripts/bench_model.py`` counts with the same function. The steady state (``summary.json``'s
``steady``) is the span between this process's first and last log lines: the first interval,
which holds ``torch.compile`` and CUDA graph capture, is left out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nmt.models.flops import attention_flops, flop_params
from nmt.runtime import peak_flops, train_flops

log = logging.getLogger("nmt")


class Throughput:
    """FLOPs of the steps since the last :meth:`take`, the peak of ``world_size`` devices.

    ``model``: the one :mod:`nmt.models.flops` counts; ``copies``: 2
    when every pair runs twice (``train.consistency``); ``peak_tflops``:
    ``train.peak_tflops`` (None: the device's). ``name``: ``mfu``, or ``matmul_util`` for a
    measured CPU matmul rate.
    """

    def __init__(self, model, device: torch.device, amp_dtype: torch.dtype | None,
                 peak_tflops: float | None, world_size: int, copies: int = 1) -> None:
        self.model, self.flop_params = model, flop_params(model)
        self.copies, self.flops = copies, 0.0
        self.marks: list[tuple[int, int, float, float]] = []   # the first and the last mark
        measured = device.type != "cuda" and peak_tflops is None
        self.name = "matmul_util" if measured else "mfu"
        peak = peak_flops(device, amp_dtype, peak_tflops)
        self.peak = None if peak is None else peak * world_size     # FLOP/s, all devices
        if self.peak is None:
            log.warning("MFU: no peak FLOP/s known for %s; set train.peak_tflops (dense, one "
                        "device) to log it", torch.cuda.get_device_name(device))
        else:
            log.info("MFU: peak %.4g TFLOP/s (%s, %d device%s)", self.peak / 1e12,
                     "train.peak_tflops" if peak_tflops is not None else
                     "datasheet" if device.type == "cuda" else "measured matmul",
                     world_size, "s" * (world_size > 1))

    def add(self, src_lens: np.ndarray, tgt_lens: np.ndarray,
            group: Sequence[np.ndarray]) -> float:
        """Count a step over the batches ``group`` (row indices into the split's lengths);
        returns its FLOPs. Host arithmetic only (no device sync)."""
        rows = np.concatenate(group)
        src, tgt = src_lens[rows], tgt_lens[rows]
        flops = train_flops(self.flop_params, int(src.sum()), int(tgt.sum()), self.copies,
                            attention_flops(self.model, src, tgt))
        self.flops += flops
        return flops

    def figures(self, flops: float, seconds: float) -> dict[str, float]:
        """``{"model_tflops_per_s", name}`` of ``flops`` in ``seconds`` (no ``name``: no peak)."""
        rate = flops / max(seconds, 1e-9)
        return {"model_tflops_per_s": rate / 1e12,
                **({} if self.peak is None else {self.name: rate / self.peak})}

    def take(self, seconds: float) -> dict[str, float]:
        """:meth:`figures` of the steps since the last call (``seconds`` long), then reset."""
        figures, self.flops = self.figures(self.flops, seconds), 0.0
        return figures

    def mark(self, step: int, tokens: int, flops: float, seconds: float) -> None:
        """Note the run's counters at a log line, after its device sync: ``step``, the target
        tokens and model FLOPs trained on and the training seconds (no validation) so far."""
        self.marks[1:] = [(step, tokens, flops, seconds)]

    def steady(self) -> dict[str, float | int | None] | None:
        """``{"from_step", "to_step", "tokens_per_s", "model_tflops_per_s", name}`` of the steps
        between the first and the last :meth:`mark`; None with fewer than two marks."""
        if len(self.marks) < 2:
            return None
        (step0, tokens0, flops0, s0), (step1, tokens1, flops1, s1) = self.marks
        seconds = max(s1 - s0, 1e-9)
        figures = {self.name: None, **self.figures(flops1 - flops0, seconds)}
        return {"from_step": step0, "to_step": step1,
                "tokens_per_s": round((tokens1 - tokens0) / seconds, 1),
                **{k: v if v is None else float(f"{v:.4g}") for k, v in figures.items()}}

    def summary(self, flops: float, seconds: float) -> dict[str, Any]:
        """:meth:`figures` of a whole run, with ``peak_tflops`` (all devices; None: unknown)
        and the :meth:`steady` state."""
        figures = {self.name: None, **self.figures(flops, seconds),
                   "peak_tflops": None if self.peak is None else self.peak / 1e12}
        rounded = {k: v if v is None else float(f"{v:.4g}") for k, v in figures.items()}
        return {**rounded, "steady": self.steady()}

    def describe(self, figures: dict[str, float]) -> str:
        """`` | TFLOP/s 0.0123 | mfu 0.0456`` for a log line (``mfu n/a``: no peak; on a CPU
        ``matmul_util``)."""
        util = f"{figures[self.name]:.3g}" if self.name in figures else "n/a"
        return f" | TFLOP/s {figures['model_tflops_per_s']:.3g} | {self.name} {util}"
