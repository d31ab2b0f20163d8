"""Load a model for inference from a checkpoint alone (model, tokenizer and config).

    model, tokenizer, cfg = load_for_inference("runs/tf/checkpoints/best.pt")

The checkpoint is read safely (``weights_only=True``) and its config is upgraded to this
version of nmt (:func:`nmt.checkpoint.load_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError
from nmt.checkpoint import CheckpointError, load_checkpoint

WEIGHTS = ("inference", "trained")


def check_weights(weights: str) -> str:
    """Return ``weights`` if it names a set of a checkpoint's weights (:data:`WEIGHTS`).

    Raises:
        ConfigError: any other value.
    """
    if weights not in WEIGHTS:
        raise ConfigError(f"weights={weights!r} is not one of {', '.join(WEIGHTS)}: inference "
                          "(the moving average of a train.ema_decay run) or trained.")
    return weights


def load_for_inference(path: str | Path, device: str | torch.device = "cpu",
                       weights: str = "inference"):
    """Rebuild ``(model, tokenizer, cfg)`` from a checkpoint file, model in eval mode.

    Args:
        path: a checkpoint written by ``nmt-train`` or ``nmt-average``.
        device: where the model goes.
        weights: ``"inference"`` loads ``model``: the weights the run validated and translates
            with, i.e. the exponential moving average when it trained with ``train.ema_decay``.
            ``"trained"`` loads ``train_model``, the trained weights behind that average (to
            measure what the average buys); a checkpoint without EMA has only one set, so both
            choices load it.

    Returns:
        model (:class:`nmt.models.base.Seq2Seq` on ``device``), tokenizer
        (:class:`nmt.data.tokenizer.Tokenizer`), cfg (``DictConfig`` saved at training).

    Raises:
        CheckpointError: unreadable file, a tokenizer state that cannot be rebuilt, or weights
            that do not fit the saved config (the message names the file).
        ConfigError: ``weights`` is not one of :data:`WEIGHTS`.
    """
    from nmt.data.tokenizer import Tokenizer
    from nmt.models import build_model

    check_weights(weights)
    ckpt = load_checkpoint(path)
    cfg: DictConfig = OmegaConf.create(ckpt["config"])
    try:
        tokenizer = Tokenizer.from_state_dict(ckpt.get("tokenizer"))
    except (ValueError, RuntimeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: the saved tokenizer cannot be rebuilt ({err}); the file "
                              "is damaged or was written by another program.") from None
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(ckpt["train_model"] if weights == "trained" and "train_model" in ckpt
                              else ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not fit the saved model config: {err}") from None
    model.to(device).eval()
    return model, tokenizer, cfg
