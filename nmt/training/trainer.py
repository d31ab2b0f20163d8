"""The training loop: batches -> label-smoothed loss -> Adam + schedule -> validation -> checkpoints.

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
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from nmt.checkpoint import CONFIG_VERSION, CheckpointManager, rng_state, set_rng_state
from nmt.config import ConfigError, is_guided, to_plain
from nmt.data.batching import collate, target_tokens
from nmt.data.pipeline import TokenizedSplit, tag_ids
from nmt.data.sampler import BatchShapes, TokenBatchSampler
from nmt.evaluation.plot import tensorboard_figures
from nmt.models import build_model, validate_model
from nmt.runtime import (
    autocast_dtype,
    bound_onednn_cache,
    cpu_has_bf16,
    machine_info,
    peak_rss_mb,
    progress_enabled,
    resolve_device,
    tune_cuda,
)
from nmt.training import distributed as dist
from nmt.training import run
from nmt.training.ema import WeightAverage
from nmt.training.hooks import NO_HOOKS, TrainingHooks
from nmt.training.loss import (
    compiled_label_smoothed_nll,
    label_smoothed_nll,
    objective,
    perplexity,
)
from nmt.training.optim import build_optimizer, build_schedule
from nmt.training.throughput import Throughput
from nmt.training.validation import valid_sets, validate

log = logging.getLogger("nmt")


def compile_mode(t, device: torch.device, world_size: int) -> str | None:
    """``torch.compile``'s mode for ``train`` section ``t``: ``"reduce-overhead"`` (CUDA graphs)
    only with static shapes (``train.shape_buckets``) on CUDA, one process, no accumulation:
    graph trees overwrite a replay's outputs at the next replay, which accumulation and DDP's
    all-reduce read (an error or wrong gradients: pytorch#169545, #96693). Else None."""
    static = bool(t.shape_buckets) and device.type == "cuda"
    return "reduce-overhead" if static and t.accum_steps == 1 and world_size == 1 else None


@dataclass
class TrainState:
    """Counters and early-stopping bookkeeping saved in every checkpoint (``trainer`` key)."""

    step: int = 0                    # optimizer steps done
    epoch: int = 0                   # current epoch (0-based)
    batch_in_epoch: int = 0          # batches of the epoch list consumed (all ranks together)
    best_bleu: float | None = None
    best_step: int | None = None
    bad_validations: int = 0         # since the last BLEU gain (early stopping, plateau lr)
    last_validated_step: int = -1
    elapsed_s: float = 0.0           # wall time of all segments so far (for max_minutes)
    history: list = field(default_factory=list)   # one dict per validation
    stop_reason: str = ""            # set by the checkpoint that ends the run (finished)
    train_s: float = 0.0             # seconds in training steps, all segments (no validation)
    train_flops: float = 0.0         # model FLOPs of those steps (nmt.training.throughput)
    train_tokens: int = 0            # target tokens trained on, all segments, all ranks
    peak_rss_mb: float = 0.0         # largest peak RSS of rank 0 over all segments
    segments: list = field(default_factory=list)  # one dict per run of the command


class Trainer:
    """Model, optimizer, schedule, data and the loop (module docstring). ``plan``:
    :func:`nmt.training.run.plan_run`'s decision; ``record``: how the command was launched;
    ``hooks`` (:mod:`nmt.training.hooks`, checked here: ConfigError if one disagrees with
    ``cfg``): the objective's ``regulariser``, :meth:`epoch_data`'s ``resampler``,
    :func:`~nmt.training.run.prepare_run_data`'s ``teacher``."""

    def __init__(self, cfg: DictConfig, info: dist.DistInfo, device: torch.device,
                 plan: run.RunPlan | None = None, record: run.RunRecord | None = None,
                 hooks: TrainingHooks = NO_HOOKS):
        hooks.check(cfg)
        self.cfg, self.info, self.device, self.record = cfg, info, device, record
        self.hooks = hooks
        self.plan = plan or run.RunPlan("fresh")
        # The train section as plain Python values (DictConfig access is slow in a loop).
        self.t = SimpleNamespace(**to_plain(cfg.train))
        self.guided = is_guided(self.t)   # guided alignment's loss in every step
        self.run_dir = Path(cfg.run_dir)
        self.manager = CheckpointManager(self.run_dir / "checkpoints", self.t.keep_last,
                                         self.t.keep_best)
        self.state = TrainState()
        self.amp_dtype = autocast_dtype(self.t.precision, device)
        if self.amp_dtype is not None and device.type == "cpu":
            bound_onednn_cache()  # nmt.train() from Python: the CLIs have set it already
        # fp16 needs loss scaling (Micikevicius et al. 2018); bf16 has fp32's exponent range.
        self.scaler = torch.amp.GradScaler(device.type) if self.amp_dtype == torch.float16 else None
        self.writer: SummaryWriter | None = None
        self.ema: WeightAverage | None = None
        self.stop_reason = ""
        self._epoch_cache: dict[int, tuple[Any, list[np.ndarray]]] = {}  # epoch: (split, batches)
        self._start = self._mark = time.perf_counter()   # _mark: training time not in train_s
        self._pause = 0.0             # validation/checkpoint seconds since the last log line
        self._time_progress = 0.0     # fraction of max_minutes used, as of the last time check

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Data, model, optimizer, schedule; resume, or start from ``train.init_from``'s weights.
        Raises the user errors (``run.USER_ERRORS``) before the first batch, on every rank."""
        init_ckpt = data = None
        last, ckpt, errors = self.manager.last, self.plan.checkpoint, run.USER_ERRORS
        with dist.collective_errors(self.info, errors):
            if ckpt is not None:
                run.check_compatible(last, ckpt, self.cfg)
            elif self.t.init_from:
                init_ckpt = run.load_init_from(self.cfg)
        # Rank 0 trains/caches the tokenizer first, the others then find it in the cache;
        # nothing is written into run_dir before the checkpoint's tokenizer is compared.
        for main_first in (True, False):
            with dist.collective_errors(self.info, errors):
                if self.info.is_main == main_first:
                    data = run.prepare_run_data(self.cfg, self.plan, init_ckpt, last,
                                                  self.hooks.teacher)
        with dist.collective_errors(self.info, errors):
            self._build(data)
            if ckpt is not None:
                run.check_compatible(last, ckpt, self.cfg, self.model)
                self._restore(ckpt)
            elif init_ckpt is not None:
                run.load_init_weights(self.model, init_ckpt, self.t.init_from)
            self._finish_setup()

    def _build(self, data) -> None:
        """Sampler, seeded model (the same on every rank), optimizer and schedule."""
        t, info = self.t, self.info
        self.tokenizer, self.train_split, self.valid_splits = data.tokenizer, data.train, data.valids
        if info.is_main:
            run.write_record(self.run_dir, self.record)
            self.tokenizer.save(self.run_dir / "tokenizer")
        shapes = BatchShapes.fit(self.train_split.src_lens, self.train_split.tgt_lens,
                                 t.shape_buckets, t.batch_tokens, t.shape_multiple) \
            if t.shape_buckets else None
        self.sampler = TokenBatchSampler(self.train_split.src_lens, self.train_split.tgt_lens,
                                         t.batch_tokens, shuffle=True, seed=t.seed, shapes=shapes,
                                         groups=self.train_split.groups,
                                         temperature=self.cfg.data.sampling_temperature,
                                         weights=data.weights, directions=data.directions)
        if len(self.epoch_data(0)[1]) == 0:
            raise ConfigError(f"the training split yields fewer batches than processes "
                              f"({info.world_size}): use more data or fewer processes.")
        random.seed(t.seed)
        np.random.seed(t.seed)
        torch.manual_seed(t.seed)
        self.model = build_model(self.cfg.model, self.tokenizer.src_vocab_size,
                                 self.tokenizer.tgt_vocab_size).to(self.device)
        # Dropout streams differ between ranks (the weights are the same: same seed above).
        torch.manual_seed(t.seed + 1000 * info.rank + 1)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, t)
        self.schedule = build_schedule(self.optimizer, t)

    def _restore(self, ckpt: dict) -> None:
        """Weights, optimizer, schedule, scaler, counters and RNG states of ``last.pt``."""
        # With an average, "model" holds it and "train_model" the weights training goes on from.
        self.model.load_state_dict(ckpt.get("train_model", ckpt["model"]))
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.schedule.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.state = TrainState(**ckpt["trainer"])
        rng = ckpt["rng"]                  # one state per rank
        if len(rng) == self.info.world_size:
            set_rng_state(rng[self.info.rank])
        else:  # another world size: rank 0's state, other ranks reseeded deterministically
            set_rng_state(rng[0])
            if self.info.rank > 0:
                torch.manual_seed(self.t.seed + 1000 * self.info.rank + self.state.step)
        log.info("resumed from %s at step %d (epoch %d, batch %d of the epoch)", self.manager.last,
                 self.state.step, self.state.epoch, self.state.batch_in_epoch)

    def _finish_setup(self) -> None:
        """Weight average, checkpoint spacing, the segment, compile/DDP, validation batches."""
        t, info, ckpt = self.t, self.info, self.plan.checkpoint
        if t.ema_decay is not None:
            self.ema = WeightAverage(self.model, float(t.ema_decay))
            if ckpt is not None and "train_model" in ckpt:   # its "model" is the average
                self.ema.load_state_dict(ckpt["model"])
        if self.hooks.regulariser is not None:   # after the average's copy, before compile
            self.hooks.regulariser.prepare(self.model)
        # Step checkpoints closer than half a validation interval are not both kept as "last".
        steps_per_epoch = -(-len(self.epoch_data(0)[1]) // (info.world_size * t.accum_steps))
        self.manager.min_gap = max(1, (t.eval_every_steps or steps_per_epoch) // 2)
        self.state.segments.append(run.segment(self.record, self.state.step,
                                               machine_info(self.device), info.world_size))
        mode = compile_mode(t, self.device, info.world_size)
        self.train_model: torch.nn.Module = self.model.compiled(mode) if t.compile else self.model
        # The loss compiled too: fused kernels read the [N, V] logits once each way.
        self.cross_entropy = compiled_label_smoothed_nll() if t.compile else label_smoothed_nll
        if info.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(   # buffers are constants: no broadcast
                self.train_model, device_ids=ids, broadcast_buffers=False)
        self.valid_sets = valid_sets(self.valid_splits, tag_ids(self.cfg.data, self.tokenizer),
                                     t.batch_tokens)
        if info.is_main:
            OmegaConf.save(self.cfg, self.run_dir / "config.yaml", resolve=True)
            purge = self.state.step + 1 if self.state.step > 0 else None
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge)
        self.n_params = self.model.num_parameters()
        self.speed = Throughput(self.model, self.device, self.amp_dtype,
                                t.peak_tflops, info.world_size, 1 + (t.consistency != "none"))
        amp = f"{str(self.amp_dtype).removeprefix('torch.')} autocast" if self.amp_dtype else "fp32"
        log.info("model %s: %s parameters; vocab src %d tgt %d; train %d pairs, valid %d; device "
                 "%s, %s, world %d", self.cfg.model.name, f"{self.n_params:,}",
                 self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size,
                 len(self.train_split), sum(map(len, self.valid_splits.values())), self.device, amp,
                 info.world_size)
        if self.amp_dtype == torch.bfloat16 and self.device.type == "cpu" and not cpu_has_bf16():
            log.warning("train.precision=bf16 on a CPU without native bf16 (AVX-512 BF16 or AMX) "
                        "is emulated, usually slower than fp32: use train.precision=fp32 here.")

    # ------------------------------------------------------------------ batches
    def epoch_data(self, epoch: int) -> tuple[TokenizedSplit, list[np.ndarray]]:
        """``(split, batches)`` of an epoch: the training split (the resampler's, with one) and
        its batches of row indices, the same on every rank, cut to a multiple of world size.
        Cached for this and the next epoch."""
        if epoch not in self._epoch_cache:
            split, sampler = self.train_split, self.sampler
            if self.hooks.resampler is not None:
                split = self.hooks.resampler(self.train_split, self.tokenizer, epoch, self.info)
                sampler = self.sampler.with_lengths(split.src_lens, split.tgt_lens)
            batches = dist.truncate_to_multiple(sampler.batches(epoch), self.info.world_size)
            self._epoch_cache = {k: v for k, v in self._epoch_cache.items() if k == epoch - 1}
            self._epoch_cache[epoch] = (split, batches)
        return self._epoch_cache[epoch]

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

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    # ------------------------------------------------------------------ one step
    def train_step(self, group: list[np.ndarray], split: TokenizedSplit,
                   collated: list | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor, int]:
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
                total, parts = objective(self.train_model, batch, self.t, self._autocast(),
                                         self.hooks.regulariser, self.cross_entropy,
                                         guided=self.guided)
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
        self.schedule.set_step(self.state.step + 1, self._progress(self.state.step + 1))
        if self.scaler is None:
            self.optimizer.step()
        else:   # skips the step on inf/nan gradients (fp16 only: a CPU-GPU sync point)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.state.step + 1)
        return sums, grad_norm, tokens

    # ------------------------------------------------------------------ validation
    @property
    def eval_model(self) -> torch.nn.Module:   # validated and saved as "model"
        return self.model if self.ema is None else self.ema.model

    def validate(self) -> dict[str, Any]:
        """:func:`nmt.training.validation.validate` of :attr:`eval_model` on the validation
        split(s): rank 0 computes, every rank gets the scores."""
        result = None
        if self.info.is_main:
            result, hyps = validate(self.eval_model, self.valid_sets, self.tokenizer,
                                    to_plain(self.cfg.search), self.t.label_smoothing,
                                    self.device, self._autocast)
            if self.writer is not None and self.t.log_figures:
                for tag, fig in tensorboard_figures(self.eval_model, self.valid_sets[0].src_ids,
                                                    hyps, self.tokenizer, self.device,
                                                    self.state.step).items():
                    self.writer.add_figure(tag, fig, self.state.step, close=False)
        return dist.broadcast_object(result, self.info)

    def _after_validation(self, scores: dict[str, float], epoch_end: bool) -> bool:
        """Bookkeeping and logging; True if this is the best BLEU so far."""
        st = self.state
        improved = st.best_bleu is None or scores["bleu"] > st.best_bleu
        if improved:
            st.best_bleu, st.best_step, st.bad_validations = scores["bleu"], st.step, 0
        else:
            st.bad_validations += 1
        if self.schedule.on_validation(st.bad_validations):
            log.info("validation BLEU did not improve for %d validations: lr -> %.3g",
                     self.t.plateau_patience,
                     self.schedule.lr_at(st.step + 1, self._progress(st.step + 1)))
        st.last_validated_step = st.step
        elapsed = st.elapsed_s + time.perf_counter() - self._start
        tps = st.train_tokens / max(st.train_s, 1e-9)
        st.history.append({"step": st.step, "epoch": st.epoch, **scores, "elapsed_s": elapsed})
        per_direction = scores.get("bleu_directions", {})
        log.info("valid | step %d | epoch %d%s | loss %.4f | nll %.4f | ppl %.2f | bleu %.2f%s%s | "
                 "tokens/s %.0f | elapsed %.1f min", st.step, st.epoch,
                 " (end)" if epoch_end else "", scores["loss"], scores["nll"], scores["ppl"],
                 scores["bleu"], "".join(f" | {k} {v:.2f}" for k, v in per_direction.items()),
                 " *best*" if improved else "", tps, elapsed / 60)
        if self.writer is not None:
            for key in ("loss", "ppl", "bleu"):
                self.writer.add_scalar(f"valid/{key}", scores[key], st.step)
            for name, bleu in per_direction.items():
                self.writer.add_scalar(f"valid/bleu/{name}", bleu, st.step)
            self.writer.flush()
        return improved

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, is_best: bool) -> None:
        """``step_<k>.pt``, ``last.pt`` (, ``best.pt``) on rank 0, ``last.pt`` alone between
        validations; every rank must call it."""
        rngs = dist.gather_objects(rng_state(), self.info)
        st = self.state
        st.elapsed_s += time.perf_counter() - self._start
        self._start = time.perf_counter()
        st.peak_rss_mb = max(st.peak_rss_mb, peak_rss_mb())
        st.segments[-1].update(ended=run.timestamp(), end_step=st.step)
        if self.info.is_main:
            bleu = {h["step"]: h["bleu"] for h in st.history}
            ckpt = {
                "version": 1, "config_version": CONFIG_VERSION,
                "model": self.eval_model.state_dict(),
                **({} if self.ema is None else {"train_model": self.model.state_dict()}),
                "valid_bleu": bleu.get(st.step), "config": to_plain(self.cfg),
                "tokenizer": self.tokenizer.state_dict(),
                "step": st.step, "epoch": st.epoch, "batch_in_epoch": st.batch_in_epoch,
                "optimizer": self.optimizer.state_dict(), "scheduler": self.schedule.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(),
                "rng": rngs, "trainer": asdict(st)}
            self.manager.save(ckpt, st.step, is_best=is_best, scores=bleu,
                              resume_point=st.last_validated_step != st.step)

    def _validate_and_save(self, epoch_end: bool, stop_reason: str = "",
                           validate: bool = True) -> str:
        """Validate (not for a resume point), record the stop reason (given, or early
        stopping), checkpoint; return it."""
        t0 = time.perf_counter()
        self.state.train_s += t0 - self._mark
        if validate:
            scores = self.validate()
            is_best = self._after_validation(scores, epoch_end)
            self.state.stop_reason = stop_reason or self._stop_reason()
        self.checkpoint(validate and is_best)
        self._pause += time.perf_counter() - t0
        self._mark = time.perf_counter()
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
        if check_time and t.max_minutes is not None:   # under DDP a collective: a sync point
            used = dist.max_over_ranks(st.elapsed_s + time.perf_counter() - self._start,
                                       self.info, self.device)
            self._time_progress = used / (60.0 * float(t.max_minutes))
            if self._time_progress >= 1.0:
                return f"max_minutes={t.max_minutes} reached"
        return ""

    def _progress(self, step: int) -> float:
        """The fraction of the budget used at ``step`` (``train.cooldown``): the larger of
        ``step / max_steps`` and the time used (last check) over ``max_minutes``."""
        progress = self._time_progress if self.t.max_minutes is not None else 0.0
        if self.t.max_steps is not None:
            progress = max(progress, step / self.t.max_steps)
        return min(progress, 1.0)

    def fit(self) -> dict[str, Any]:
        """Train until a stop condition (the last checkpoint records it); returns the summary."""
        t, st, info = self.t, self.state, self.info
        group_size = info.world_size * t.accum_steps
        steps_per_epoch = -(-len(self.epoch_data(st.epoch)[1]) // group_size)
        total = t.max_steps if t.max_steps is not None else steps_per_epoch * (t.max_epochs or 1)
        tty = info.is_main and progress_enabled()
        bar = tqdm(total=total, initial=st.step, unit="step", dynamic_ncols=True, disable=not tty)
        self.model.train()
        self._pause = 0.0
        acc: dict[str, torch.Tensor] = {}    # the objective's parts since the last log line
        acc_tokens, grad_norm = 0, torch.zeros(())
        t_log = self._mark = time.perf_counter()
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
            acc = {name: acc.get(name, 0) + value for name, value in sums.items()}
            acc_tokens += tokens
            st.train_tokens += tokens
            st.train_flops += self.speed.add(split.src_lens, split.tgt_lens, group)
            st.step += 1
            st.batch_in_epoch += len(group)
            epoch_end = st.batch_in_epoch >= len(batches)
            if epoch_end:
                st.epoch += 1
                st.batch_in_epoch = 0
            bar.update(1)
            log_step = st.step % t.log_every_steps == 0
            if log_step:
                now = time.perf_counter()
                sums = torch.stack(tuple(acc.values()))
                dist.all_reduce_sum(sums, info)
                # note: .tolist() and float(grad_norm) wait for the device (a CPU-GPU sync point)
                means = dict(zip(acc, (sums / max(acc_tokens, 1)).tolist(), strict=True))
                loss, nll = means.pop("loss"), means.pop("nll")   # the rest: the add-ons' parts
                self.speed.mark(st.step, st.train_tokens, st.train_flops,   # after the sync
                                st.train_s + time.perf_counter() - self._mark)
                seconds = max(now - t_log - self._pause, 1e-9)
                tps, speed = acc_tokens / seconds, self.speed.take(seconds)
                lr, gn = self.schedule.last_lr, float(grad_norm)
                if self.writer is not None:
                    for key, value in (("loss", loss), ("nll", nll), ("ppl", perplexity(nll)),
                                       ("lr", lr), ("grad_norm", gn), ("tokens_per_s", tps),
                                       *means.items(), *speed.items()):
                        self.writer.add_scalar(f"train/{key}", value, st.step)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
                log.info("train | step %d | epoch %d | loss %.4f | ppl %.2f | lr %.3g | "
                         "grad_norm %.3f | tokens/s %.0f%s%s", st.step, st.epoch, loss,
                         perplexity(nll), lr, gn, tps, self.speed.describe(speed),
                         "".join(f" | {k} {v:.4f}" for k, v in means.items()))
                acc = {}
                acc_tokens, t_log, self._pause = 0, now, 0.0
            # Stop conditions known before validating (steps, epochs, time) make this step's
            # checkpoint the last one; early stopping is decided by the validation itself.
            reason = self._stop_reason(check_time=not info.enabled or log_step)
            every = t.eval_every_steps            # None: at epoch ends
            if (epoch_end if every is None else st.step % every == 0) or reason:   # syncs
                reason = self._validate_and_save(epoch_end, stop_reason=reason)
            elif t.save_every_steps is not None and st.step % t.save_every_steps == 0:
                self._validate_and_save(epoch_end, validate=False)   # a resume point
            self.stop_reason = reason
        bar.close()
        if prefetch is not None:
            prefetch.shutdown(wait=True, cancel_futures=True)
        return run.write_summary(self.run_dir, st, self.stop_reason, self.n_params,
                                 self.device, info, t.compile,
                                 self.speed.summary(st.train_flops, st.train_s))

    def close(self) -> None:
        """Close the TensorBoard writer and drop the DDP wrapper (its reducer holds the
        process group, which :func:`~nmt.training.distributed.cleanup_distributed` frees)."""
        self.train_model = None
        if self.writer is not None:
            self.writer.close()     # a second call does nothing


def train(cfg: DictConfig, record: run.RunRecord | None = None,
          hooks: TrainingHooks = NO_HOOKS) -> dict[str, Any]:
    """Run, resume or (finished) leave alone the training described by ``cfg``; returns its
    summary (``summary.json``). ``record``: how ``nmt-train`` was launched; ``hooks``: what
    :func:`nmt.extras.training.hooks` builds for ``cfg`` (``nmt-train`` and ``nmt.train()``
    pass it), ConfigError if one disagrees (:meth:`~nmt.training.hooks.TrainingHooks.check`)."""
    hooks.check(cfg)   # first, before any data is read or file written (the Trainer's own)
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
        plan = run.open_run(cfg, info)
        if plan.kind == "finished":
            return plan.summary
        with run.logging_to(Path(cfg.run_dir), info):
            trainer = Trainer(cfg, info, device, plan, record, hooks)
            try:
                trainer.setup()
                summary = trainer.fit()
                dist.gather_objects(None, info)   # a barrier: no rank leaves the group first
                return summary
            finally:
                trainer.close()
    finally:
        dist.cleanup_distributed()
