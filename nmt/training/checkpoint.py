"""Checkpoints: atomic writes, and loading a model for inference from a checkpoint alone.

A checkpoint is a ``torch.save`` dict:

=================  ==========================================================
``version``        format version (int, currently 1)
``model``          ``model.state_dict()``
``config``         resolved config as a plain dict (``OmegaConf.to_container``)
``tokenizer``      ``Tokenizer.state_dict()`` (SentencePiece model bytes + settings)
``step``           optimizer steps done (int)
``epoch``          current epoch (int, 0-based)
``batch_in_epoch`` batches of ``epoch`` already consumed (int)
``optimizer``, ``scheduler``, ``scaler``, ``rng``, ``trainer``  training state (trainer.py)
=================  ==========================================================

A checkpoint alone is enough to translate: :func:`load_for_inference` rebuilds the model
from its config and the tokenizer from its bytes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

CHECKPOINT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable or incompatible (message names the file)."""


def save_atomic(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file in the same directory, fsync, then rename.

    A crash at any point leaves either the previous file or the new one, never a torn
    file (POSIX ``rename`` is atomic within a file system).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint dict.

    Raises:
        CheckpointError: the file does not exist, is not a checkpoint, or has another version.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:  # torch raises many kinds for a torn or foreign file
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(err).__name__}: {err}).") from None
    if not isinstance(ckpt, dict) or ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: not an nmt checkpoint of version {CHECKPOINT_VERSION}.")
    return ckpt


def load_for_inference(path: str | Path, device: str | torch.device = "cpu"):
    """Rebuild ``(model, tokenizer, cfg)`` from a checkpoint file, model in eval mode.

    Returns:
        model (:class:`nmt.models.base.Seq2Seq` on ``device``), tokenizer
        (:class:`nmt.data.tokenizer.Tokenizer`), cfg (``DictConfig`` saved at training).

    Raises:
        CheckpointError: unreadable file or weights that do not fit the saved config.
    """
    from nmt.data.tokenizer import Tokenizer
    from nmt.models import build_model

    ckpt = load_checkpoint(path)
    cfg: DictConfig = OmegaConf.create(ckpt["config"])
    tokenizer = Tokenizer.from_state_dict(ckpt["tokenizer"])
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not fit the saved model config: {err}") from None
    model.to(device).eval()
    return model, tokenizer, cfg
