"""The trainer's harness: what a run sets up and keeps around the loop of its steps.

Data (tokenizer, splits, the length-bucketed sampler), the seeded model, optimizer, schedule,
weight average, ``torch.compile`` and DDP; resume from ``last.pt`` (weights, optimizer,
counters, every rank's RNG state); validation and checkpoints. :mod:`nmt.training.trainer`
subclasses it with the step and the loop: a student reads that module, and this one when
they want to know where a batch list or a checkpoint comes from.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

from nmt.checkpoint import CONFIG_VERSION, CheckpointManager, rng_state, set_rng_state
from nmt.config import ConfigError, is_guided, to_plain
from nmt.data.pipeline import TokenizedSplit, tag_ids
from nmt.data.sampler import BatchShapes, TokenBatchSampler
from nmt.evaluation.plot import tensorboard_figures
from nmt.models import build_model
from nmt.runtime import (
    autocast_dtype,
    bound_onednn_cache,
    cpu_has_bf16,
    machine_info,
    peak_rss_mb,
)
from nmt.training import distributed as dist
from nmt.training import run
from nmt.training.ema import WeightAverage
from nmt.training.hooks import NO_HOOKS, TrainingHooks
from nmt.training.loss import compiled_label_smoothed_nll, label_smoothed_nll, objective
from nmt.training.optim import build_optimizer, build_schedule
from nmt.training.progress import Progress
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
    links: dict | None = None        # the word links guided alignment trains on (path, sha256)
    segments: list = field(default_factory=list)  # one dict per run of the command


class Harness:
    """Everything a run does around its steps: data, model, optimizer, schedule, resume,
    validation, checkpoints (:class:`~nmt.training.trainer.Trainer` adds the step and the
    loop). ``plan``:
    :func:`nmt.training.run.plan_run`'s decision; ``record``: how the command was launched;
    ``hooks`` (:mod:`nmt.training.hooks`, checked here: ConfigError if one disagrees with
    ``cfg``): the objective's ``regulariser``, :meth:`epoch_data`'s ``resampler``,
    :func:`~nmt.training.run.prepare_run_data`'s ``teacher``."""

    def __init__(self, cfg: DictConfig, info: dist.DistInfo, device: torch.device,
                 plan: run.RunPlan | None = None, record: run.RunRecord | None = None,
                 hooks: TrainingHooks = NO_HOOKS):
        hooks.check(cfg)   # once per run: train() builds the Trainer first
        self.cfg, self.info, self.device, self.record = cfg, info, device, record
        self.hooks = hooks
        self.plan = plan or run.RunPlan("fresh")
        # The train section as plain Python values (DictConfig access is slow in a loop).
        self.t = SimpleNamespace(**to_plain(cfg.train))
        self.run_dir = Path(cfg.run_dir)
        self.manager = CheckpointManager(self.run_dir / "checkpoints", self.t.keep_last,
                                         self.t.keep_best)
        self.state = TrainState()
        self.amp_dtype = autocast_dtype(self.t.precision, device)
        self.autocast = contextlib.nullcontext if self.amp_dtype is None else \
            functools.partial(torch.autocast, device.type, dtype=self.amp_dtype)
        if self.amp_dtype is not None and device.type == "cpu":
            bound_onednn_cache()  # nmt.train() from Python: the CLIs have set it already
        # fp16 needs loss scaling (Micikevicius et al. 2018); bf16 has fp32's exponent range.
        self.scaler = torch.amp.GradScaler(device.type) if self.amp_dtype == torch.float16 else None
        self.writer: SummaryWriter | None = None
        self.ema: WeightAverage | None = None
        self.stop_reason = ""
        self._epoch_cache: dict[int, tuple[Any, list[np.ndarray]]] = {}  # epoch: (split, batches)
        self._started = time.perf_counter()   # this segment's start, setup included

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
            self.state.links = data.links   # a teacher's file is named nowhere else
            self._finish_setup()

    def _build(self, data) -> None:
        """Sampler, seeded model (the same on every rank), optimizer and schedule."""
        t, info = self.t, self.info
        self.tokenizer = data.tokenizer
        self.train_split, self.valid_splits = data.train, data.valids
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
        # One batch's loss, its settings bound once; with train.compile the loss is compiled
        # too (fused kernels read the [N, V] logits once each way).
        self.objective = functools.partial(
            objective, t=t, guided=is_guided(t), autocast=self.autocast,
            cross_entropy=compiled_label_smoothed_nll() if t.compile else label_smoothed_nll,
            regulariser=self.hooks.regulariser)
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
        speed = Throughput(self.model, self.device, self.amp_dtype, t.peak_tflops,
                           info.world_size, 1 + (self.hooks.regulariser is not None))
        total = t.max_steps if t.max_steps is not None else steps_per_epoch * (t.max_epochs or 1)
        self.progress = Progress(t, self.state, info, self.device, speed, self.writer,
                                 self._started, total)
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
                                    self.device, self.autocast)
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
                     self.schedule.lr_at(st.step + 1, self.progress.time_used))
        st.last_validated_step = st.step
        self.progress.valid_line(scores, epoch_end, improved)
        return improved

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, is_best: bool) -> None:
        """``step_<k>.pt``, ``last.pt`` (, ``best.pt``) on rank 0, ``last.pt`` alone between
        validations; every rank must call it."""
        rngs = dist.gather_objects(rng_state(), self.info)
        st = self.state
        self.progress.bank_elapsed()
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

    def close(self) -> None:
        """Close the TensorBoard writer and drop the DDP wrapper (its reducer holds the
        process group, which :func:`~nmt.training.distributed.cleanup_distributed` frees)."""
        self.train_model = None
        if self.writer is not None:
            self.writer.close()     # a second call does nothing


