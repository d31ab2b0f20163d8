"""Checkpoint files: the format, atomic writes, safe reads, the step-file manager (averaging:
:mod:`nmt.cli.average`).

A checkpoint is a ``torch.save`` dict of plain values (tensors, numbers, strings, bytes, lists,
dicts), read with ``torch.load(weights_only=True)``: opening one never runs code from it.

==================  ==========================================================
``version``         file format version (:data:`CHECKPOINT_VERSION`)
``config_version``  layout version of ``config`` (:data:`CONFIG_VERSION`)
``config``          the resolved config, plain (:func:`nmt.config.to_plain`)
``tokenizer``       ``Tokenizer.state_dict()`` (SentencePiece model bytes + settings)
``model``           the weights to translate with (with ``train.ema_decay``: the average)
``train_model``     with ``train.ema_decay`` only: the trained weights a resumed run goes on from
``valid_bleu``      greedy validation BLEU of ``model`` at ``step`` (None: not validated)
``step``, ``epoch``, ``batch_in_epoch``   position of the run
``optimizer``, ``scheduler``, ``scaler``, ``rng``, ``trainer``   training state (the trainer's)
==================  ==========================================================

A checkpoint alone is enough to translate (``nmt.inference.translator.load_for_inference``),
and a checkpoint written today loads tomorrow: :func:`upgrade_config` brings its config up to
this version of nmt.
"""

from __future__ import annotations

import copy
import functools
import os
import pickle
import random
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt.config import ConfigError, compose_config, to_plain
from nmt.runtime import atomic_path

CHECKPOINT_VERSION = 1

# The layout of the stored config (``config_version``). When a key is renamed, moved, removed or
# given a new meaning, bump it and add a migration from version k to k + 1 to MIGRATIONS; a key
# that is only added needs none (upgrade_config fills in today's default).
CONFIG_VERSION = 3


def _drop_data_name(tree: dict) -> dict:
    """1 -> 2: ``data.name`` is gone (nothing read it)."""
    data = {k: v for k, v in (tree.get("data") or {}).items() if k != "name"}
    return {**tree, "data": data}


def _alpha_of_the_method(tree: dict) -> dict:
    """2 -> 3: ``train.consistency_alpha`` defaults to null, each method's own value; a run
    without a regulariser stored 5.0, which meant nothing: null. A method's stored value stays."""
    train = dict(tree.get("train") or {})
    if train.get("consistency", "none") == "none" and "consistency_alpha" in train:
        train["consistency_alpha"] = None
    return {**tree, "train": train}


MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _drop_data_name, 2: _alpha_of_the_method}

# Keys added after a checkpoint may have been written, whose absence means "off" and whose
# current default is on for some model (the Transformer recipe's train.ema_decay=0.999): an
# older config that lacks them gets this value, not today's default, since the run had none.
ABSENT_MEANS_OFF: dict[str, Any] = {"train.ema_decay": None, "data.tokenizer.sampling_alpha": None,
                                     "train.cooldown": 0.0, "train.consistency": "none",
                                     "data.pairs": None}


@functools.lru_cache(maxsize=8)
def _defaults_for(model_name: str) -> DictConfig:
    return compose_config([f"model={model_name}"], validate_fn=None)


def upgrade_config(saved: Mapping, version: int | None = None) -> DictConfig:
    """Bring a checkpoint's plain config of ``config_version`` ``version`` up to this nmt: the
    migrations, then a merge over the current defaults of its model (``ABSENT_MEANS_OFF`` keys:
    off, as the old run had them), so every key added since gets its default.

    Raises:
        ConfigError: a newer version, or a key or model this nmt does not know.
    """
    version = 1 if version is None else int(version)
    if version > CONFIG_VERSION:
        raise ConfigError(f"the checkpoint's config has version {version}, newer than this nmt "
                          f"understands ({CONFIG_VERSION}): upgrade nmt to read it.")
    tree = copy.deepcopy(dict(saved))
    for v in range(version, CONFIG_VERSION):
        tree = MIGRATIONS[v](tree)
    for dotted, off in ABSENT_MEANS_OFF.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf not in node:
            node[leaf] = off
    name = (tree.get("model") or {}).get("name")
    try:
        defaults = _defaults_for(str(name))
    except ConfigError:
        raise ConfigError(f"the checkpoint's config names model.name={name!r}, which this nmt "
                          "does not know.") from None
    try:
        merged = OmegaConf.merge(defaults, tree)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"the checkpoint's config has the key {key}, which this nmt does not "
                          "know: it was written by a newer or a modified nmt.") from None
    OmegaConf.set_struct(merged, False)
    return merged


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, unreadable or incompatible (message names the file)."""


def save_atomic(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, fsync, then rename: a crash leaves
    the previous file or the new one, never a torn one."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint safely (``weights_only=True``: never runs code from the file) and
    bring its ``config`` up to this version of nmt (:func:`upgrade_config`, as a plain dict).

    Raises:
        CheckpointError: the file is missing, is not a checkpoint (not a file torch can read),
            holds objects other than plain data, has another format version, or a config
            this nmt cannot read.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        unsafe = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if unsafe is None:
            raise CheckpointError(
                f"{path}: not a checkpoint (torch cannot read it as one).") from None
        raise CheckpointError(f"{path}: holds objects other than plain data ({unsafe.group(1)}), "
                              "which nmt never unpickles: it was not written by nmt.") from None
    except Exception as err:  # torch raises many kinds for a torn or foreign file
        msg = " ".join(str(err).split())[:200]
        raise CheckpointError(f"{path}: not a checkpoint ({type(err).__name__}: {msg}).") from None
    if not isinstance(ckpt, dict) or ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: not an nmt checkpoint of version {CHECKPOINT_VERSION}.")
    if isinstance(ckpt.get("config"), dict):
        try:
            upgraded = upgrade_config(ckpt["config"], ckpt.get("config_version"))
        except ConfigError as err:
            raise CheckpointError(f"{path}: {err}") from None
        ckpt["config"] = to_plain(upgraded)
    return ckpt


def link_atomic(src: str | Path, dst: str | Path) -> None:
    """Make ``dst`` another name of the finished file ``src``, atomically: a hard link (files are
    never modified in place), or a copy where the file system has none."""
    src, dst = Path(src), Path(dst)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class CheckpointManager:
    """``step_<k>.pt`` files plus ``last.pt`` and ``best.pt`` (links) in one directory.

    Kept step files: the ``keep_last`` newest at least ``min_gap`` steps apart (the trainer sets
    half its validation interval, so a validation just after another replaces it) and the
    ``keep_best`` of the highest validation BLEU; none at all when both are 0.
    """

    def __init__(self, directory: str | Path, keep_last: int, keep_best: int = 0,
                 min_gap: int = 1) -> None:
        self.directory = Path(directory)
        self.keep_last, self.keep_best, self.min_gap = keep_last, keep_best, min_gap
        self.last, self.best = self.directory / "last.pt", self.directory / "best.pt"

    def step_files(self) -> list[Path]:
        """Existing ``step_<k>.pt`` files, oldest first."""
        files = [p for p in self.directory.glob("step_*.pt") if p.stem[5:].isdigit()]
        return sorted(files, key=lambda p: int(p.stem[5:]))

    def kept_steps(self, steps: list[int], scores: Mapping[int, float] | None = None) -> set[int]:
        """Which ``steps`` to keep; ``scores``: validation BLEU by step (ties: the earlier)."""
        last: list[int] = []
        for step in sorted(steps, reverse=True):
            if len(last) == self.keep_last:
                break
            if not last or step <= last[-1] - self.min_gap:
                last.append(step)
        scored = [s for s in steps if scores is not None and scores.get(s) is not None]
        best = sorted(scored, key=lambda s: (-scores[s], s))[: self.keep_best]
        return set(last) | set(best)

    def save(self, ckpt: dict, step: int, is_best: bool = False,
             scores: Mapping[int, float] | None = None, resume_point: bool = False) -> Path:
        """Write ``ckpt`` of optimizer step ``step``, link ``last.pt`` (and ``best.pt``), rotate;
        returns ``last.pt``. A ``resume_point`` (no validation) replaces ``last.pt`` only: the
        step files stay those of validations."""
        step_files = self.keep_last + self.keep_best > 0 and not resume_point
        if step_files:
            step_path = self.directory / f"step_{step}.pt"
            save_atomic(ckpt, step_path)
            link_atomic(step_path, self.last)
        else:
            save_atomic(ckpt, self.last)
        if is_best:
            link_atomic(self.last, self.best)
        if step_files:
            files = {int(p.stem[5:]): p for p in self.step_files()}
            keep = self.kept_steps(list(files), scores)
            for old_step, old in files.items():
                if old_step not in keep:
                    old.unlink(missing_ok=True)
        return self.last


def rng_state() -> dict:
    """Python, NumPy and torch (and CUDA) generator states as plain values (weights_only)."""
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"] = {**numpy_state["state"], "key": numpy_state["state"]["key"].tolist()}
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore the generators saved by :func:`rng_state`."""
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": np.asarray(
        numpy_state["state"]["key"], dtype=np.uint32)}})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
