"""The trainer's choices made once before the first step: the autocast dtype of
``train.precision``, the optimizer, ``torch.compile``'s mode (nmt.training.trainer: the loop)."""

from __future__ import annotations

import torch

from nmt.config import ConfigError
from nmt.runtime import cpu_has_bf16


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``train.precision`` on ``device`` (None: fp32). ``auto``: bf16
    on a CUDA card that has it, else fp16 (loss-scaled); on CPU bf16 where it is native
    (:func:`nmt.runtime.cpu_has_bf16`: 1.4x the Transformer's tokens/s), else fp32."""
    if precision == "fp32":
        return None
    if precision == "auto" and device.type != "cuda":
        return torch.bfloat16 if device.type == "cpu" and cpu_has_bf16() else None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        if device.type != "cuda":
            raise ConfigError(f"train.precision=fp16 needs a CUDA device, not {device}: use bf16 "
                              "or fp32.")
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def compile_mode(t, device: torch.device, world_size: int) -> str | None:
    """``torch.compile``'s mode for ``train`` section ``t``: ``"reduce-overhead"`` (CUDA graphs)
    only with static shapes (``train.shape_buckets``) on CUDA, one process, no accumulation:
    graph trees overwrite a replay's outputs at the next replay, which accumulation and DDP's
    all-reduce read (an error or wrong gradients: pytorch#169545, #96693). Else None."""
    static = bool(t.shape_buckets) and device.type == "cuda"
    return "reduce-overhead" if static and t.accum_steps == 1 and world_size == 1 else None


def build_optimizer(params: list[torch.nn.Parameter], t) -> torch.optim.Optimizer:
    """Adam / AdamW of the ``train`` section ``t``, fused where the device has the kernel."""
    cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    kwargs = dict(lr=t.lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay)
    try:
        return cls(params, fused=True, **kwargs)
    except RuntimeError as err:
        if "fused=True" not in str(err):     # "`fused=True` requires ... supported devices"
            raise
        return cls(params, foreach=True, **kwargs)
