"""Model FLOP/s and MFU of training, for every ``train.log`` line and ``summary.json``.

MFU (model FLOPs utilisation; Chowdhery et al. 2022, appendix B) = model FLOPs of the steps
(:func:`nmt.runtime.train_flops`: 6N per real token, padding and recomputation not counted)
/ their seconds / the peak FLOP/s of all devices (:func:`nmt.runtime.peak_flops`).
``scripts/bench_model.py`` counts with the same function.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from nmt.runtime import peak_flops, train_flops

log = logging.getLogger("nmt")


class Throughput:
    """FLOPs of the steps since the last :meth:`take`, the peak of ``world_size`` devices.

    ``flop_params``: ``model.flop_params()``; ``copies``: 2 when every pair runs twice
    (``train.consistency``); ``peak_tflops``: ``train.peak_tflops`` (None: the device's).
    """

    def __init__(self, flop_params: tuple[int, int], device: torch.device,
                 amp_dtype: torch.dtype | None, peak_tflops: float | None, world_size: int,
                 copies: int = 1) -> None:
        self.flop_params, self.copies, self.flops = flop_params, copies, 0.0
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
        src = sum(int(src_lens[idx].sum()) for idx in group)
        tgt = sum(int(tgt_lens[idx].sum()) for idx in group)
        flops = train_flops(self.flop_params, src, tgt, self.copies)
        self.flops += flops
        return flops

    def figures(self, flops: float, seconds: float) -> dict[str, float]:
        """``{"model_tflops_per_s", "mfu"}`` of ``flops`` in ``seconds`` (no mfu: no peak)."""
        rate = flops / max(seconds, 1e-9)
        return {"model_tflops_per_s": rate / 1e12,
                **({} if self.peak is None else {"mfu": rate / self.peak})}

    def take(self, seconds: float) -> dict[str, float]:
        """:meth:`figures` of the steps since the last call (``seconds`` long), then reset."""
        figures, self.flops = self.figures(self.flops, seconds), 0.0
        return figures

    def summary(self, flops: float, seconds: float) -> dict[str, float | None]:
        """:meth:`figures` of a whole run, with ``peak_tflops`` (all devices; None: unknown)."""
        figures = {"mfu": None, **self.figures(flops, seconds),
                   "peak_tflops": None if self.peak is None else self.peak / 1e12}
        return {k: v if v is None else float(f"{v:.4g}") for k, v in figures.items()}

    @staticmethod
    def describe(figures: dict[str, float]) -> str:
        """`` | TFLOP/s 0.0123 | mfu 0.0456`` for a log line (``mfu n/a``: no peak)."""
        mfu = f"{figures['mfu']:.3g}" if "mfu" in figures else "n/a"
        return f" | TFLOP/s {figures['model_tflops_per_s']:.3g} | mfu {mfu}"
