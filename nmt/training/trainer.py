"""The training loop: batches -> label-smoothed loss -> Adam + schedule -> validation, checkpoints.

    summary = train(compose_config(["model=rnn", "run_dir=runs/rnn"]))

A run writes ``config.yaml``, ``tokenizer/``, ``checkpoints/``, ``tensorboard/``, ``train.log``
and ``summary.json`` under ``run_dir`` (whether it starts, resumes, is refused or left alone:
:mod:`nmt.training.run`). One optimizer step (``s`` = steps done so far)::

    group  = epoch_batches[b : b + world * accum]        # b = batch_in_epoch
    mine   = group[rank::world]                          # this rank's micro-batches
    for each micro-batch: loss.objective * world / tokens(group) -> backward (DDP sync on the last)
    clip grad norm; lr = schedule(s + 1); optimizer.step(); ema.update(s + 1) (if on)
    s += 1; b += len(group)
    epoch end -> epoch += 1, b = 0 (the next epoch's batches: resampled segmentation, if on)
    every eval_every_steps (null: at each epoch end): validate (loss, ppl, greedy BLEU per
        direction and their mean: nmt.training.validation), checkpoint

With ``train.ema_decay`` validation and the checkpoints' ``model`` use the weights' moving
average (:mod:`nmt.training.ema`). Checkpoints hold the RNG states, so a run killed at any
point and resumed takes exactly the steps (batches, dropout masks) of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, open_dict, read_write
from torch.nn.parallel import DistributedDataParallel

from nmt.config import to_plain
from nmt.data.batching import collate, target_tokens
from nmt.data.pipeline import TokenizedSplit
from nmt.models import validate_model
from nmt.runtime import resolve_device, tune_cuda
from nmt.training import distributed as dist
from nmt.training import run
from nmt.training.harness import Harness
from nmt.training.hooks import NO_HOOKS, TrainingHooks

log = logging.getLogger("nmt")


class Trainer(Harness):
    """The step and the loop of a run (module docstring), on :class:`Harness`'s setup."""

    def _next_group(self, epoch: int, start: int, group_size: int) -> tuple[tuple, Any, list]:
        """``((epoch, start), split, group)`` of the step after the one at ``(epoch, start)``."""
        batches = self.epoch_data(epoch)[1]
        start += len(batches[start: start + group_size])
        if start >= len(batches):
            epoch, start = epoch + 1, 0
        split, batches = self.epoch_data(epoch)
        return (epoch, start), split, batches[start: start + group_size]

    def _collate_share(self, split, group: list[np.ndarray]) -> list:
        """This rank's micro-batches of ``group`` (rows of ``split``: every world_size-th from
        its rank on), padded (pinned for CUDA). Pure: no random numbers, so prefetching it
        changes no result."""
        batches = [collate(split, idx, self.sampler.shapes)
                   for idx in group[self.info.rank::self.info.world_size]]
        return [b.pin_memory() for b in batches] if self.device.type == "cuda" else batches

    # ------------------------------------------------------------------ one step
    def train_step(self, group: list[np.ndarray], split: TokenizedSplit,
                   collated: list | None = None
                   ) -> tuple[dict[str, torch.Tensor], torch.Tensor, int]:
        """One optimizer step over the global ``group`` of batches (rows of ``split``;
        ``collated``: this rank's share, from the prefetcher). Returns ``(sums, grad_norm,
        target tokens of the whole group)``: ``sums`` the objective's named parts summed over
        this rank's micro-batches (:func:`nmt.training.loss.objective`)."""
        tokens = sum(target_tokens(split, idx) for idx in group)
        scale = self.info.world_size / max(tokens, 1)
        mine = collated if collated is not None else self._collate_share(split, group)
        sums: dict[str, torch.Tensor] = {}
        for i, batch in enumerate(mine):
            batch = batch.to(self.device, non_blocking=self.device.type == "cuda")
            ddp = isinstance(self.train_model, DistributedDataParallel)
            # DDP averages the gradients at the backward of the last micro-batch only
            sync = self.train_model.no_sync() if ddp and i < len(mine) - 1 else \
                contextlib.nullcontext()
            with sync:
                total, parts = self.objective(self.train_model, batch)
                loss = total * scale
                (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            sums = {name: sums.get(name, 0) + value for name, value in parts.items()}
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)      # clip the true gradients
        if self.t.clip_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.t.clip_grad_norm,
                                                       foreach=True)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in self.params
                                                       if p.grad is not None], foreach=True)
        self.schedule.set_step(self.state.step + 1, self.progress.time_used)
        if self.scaler is None:
            self.optimizer.step()
        else:   # skips the step on inf/nan gradients (fp16 only: a CPU-GPU sync point)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.state.step + 1)
        return sums, grad_norm, tokens

    def _validate_and_save(self, epoch_end: bool, stop_reason: str = "",
                           validate: bool = True) -> str:
        """Validate (not for a resume point), record the stop reason (given, or early
        stopping), checkpoint; return it."""
        with self.progress.paused():
            if validate:
                scores = self.validate()
                is_best = self._after_validation(scores, epoch_end)
                self.state.stop_reason = stop_reason or self._stop_reason()
            self.checkpoint(validate and is_best)
        return self.state.stop_reason

    # ------------------------------------------------------------------ loop
    def _stop_reason(self, check_time: bool = False) -> str:
        """The stop condition met (steps, epochs, early stopping, with ``check_time`` the time
        budget), or "". The time check is collective under DDP and sets the budget's progress
        (``train.cooldown``) by the slowest rank's clock, so every rank sets the same lr."""
        st, t = self.state, self.t
        if t.max_steps is not None and st.step >= t.max_steps:
            return f"max_steps={t.max_steps} reached"
        if t.max_epochs is not None and st.epoch >= t.max_epochs:
            return f"max_epochs={t.max_epochs} reached"
        patience = t.early_stopping_patience
        if patience is not None and st.bad_validations >= patience:
            return f"early stopping: no BLEU gain in {patience} validations"
        if check_time and t.max_minutes is not None and self.progress.over_budget():   # syncs
            return f"max_minutes={t.max_minutes} reached"
        return ""

    def fit(self) -> dict[str, Any]:
        """Train until a stop condition (the last checkpoint records it); returns the summary."""
        t, st, info = self.t, self.state, self.info
        group_size = info.world_size * t.accum_steps
        self.model.train()
        self.progress.mark = self.progress.last_line = time.perf_counter()
        grad_norm = torch.zeros(())
        # The next step's batches are collated in a background thread while this step runs.
        prefetch = ThreadPoolExecutor(max_workers=1) if t.prefetch else None
        ahead: tuple[tuple[int, int], Any] | None = None
        # A resumed run (train.resume=force with new stop settings) may be done already; a
        # fresh run takes at least one step, however long its setup took.
        self.stop_reason = self._stop_reason(check_time=st.step > 0)
        if self.stop_reason and self.stop_reason != st.stop_reason:
            if st.last_validated_step != st.step:
                self._validate_and_save(epoch_end=False, stop_reason=self.stop_reason)
            else:
                st.stop_reason = self.stop_reason
                self.checkpoint(is_best=False)
        while not self.stop_reason:
            split, batches = self.epoch_data(st.epoch)
            group = batches[st.batch_in_epoch: st.batch_in_epoch + group_size]
            collated = None
            if prefetch is not None:
                if ahead is not None and ahead[0] == (st.epoch, st.batch_in_epoch):
                    collated = ahead[1].result()
                key, *split_group = self._next_group(st.epoch, st.batch_in_epoch, group_size)
                ahead = (key, prefetch.submit(self._collate_share, *split_group))
            sums, grad_norm, tokens = self.train_step(group, split, collated)
            self.progress.add(sums, tokens, split, group)
            st.step += 1
            st.batch_in_epoch += len(group)
            epoch_end = st.batch_in_epoch >= len(batches)
            if epoch_end:
                st.epoch += 1
                st.batch_in_epoch = 0
            log_step = st.step % t.log_every_steps == 0
            if log_step:
                self.progress.train_line(self.schedule.last_lr, grad_norm)
            # Stop conditions known before validating (steps, epochs, time) make this step's
            # checkpoint the last one; early stopping is decided by the validation itself.
            reason = self._stop_reason(check_time=not info.enabled or log_step)
            every = t.eval_every_steps            # None: at epoch ends
            if (epoch_end if every is None else st.step % every == 0) or reason:   # syncs
                reason = self._validate_and_save(epoch_end, stop_reason=reason)
            elif t.save_every_steps is not None and st.step % t.save_every_steps == 0:
                self._validate_and_save(epoch_end, validate=False)   # a resume point
            self.stop_reason = reason
        if prefetch is not None:
            prefetch.shutdown(wait=True, cancel_futures=True)
        return run.write_summary(self.run_dir, st, self.stop_reason, self.n_params,
                                 self.device, info, t.compile, self.progress.close())


def train(cfg: DictConfig, record: run.RunRecord | None = None,
          hooks: TrainingHooks = NO_HOOKS) -> dict[str, Any]:
    """Run, resume or (finished) leave alone the training described by ``cfg``; returns its
    summary (``summary.json``). ``record``: how ``nmt-train`` was launched; ``hooks``: what
    :func:`nmt.extras.training.hooks` builds for ``cfg`` (``nmt-train`` and ``nmt.train()``
    pass it), ConfigError if one disagrees (:meth:`~nmt.training.hooks.TrainingHooks.check`)."""
    model_cfg = validate_model(to_plain(cfg.model))
    cfg = cfg.copy()
    with read_write(cfg), open_dict(cfg):
        cfg.model = model_cfg
    device = resolve_device(cfg.device)
    info = dist.init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    if device.type == "cuda":
        tune_cuda()
    try:
        # The Trainer checks the hooks: before the run directory is opened or data read.
        trainer = Trainer(cfg, info, device, None, record, hooks)
        trainer.plan = run.open_run(cfg, info)
        if trainer.plan.kind == "finished":
            return trainer.plan.summary
        with run.logging_to(Path(cfg.run_dir), info):
            try:
                trainer.setup()
                summary = trainer.fit()
                dist.gather_objects(None, info)   # a barrier: no rank leaves the group first
                return summary
            finally:
                trainer.close()
    finally:
        dist.cleanup_distributed()
