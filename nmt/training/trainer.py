"""The training loop: batches -> label-smoothed loss -> Adam + schedule -> validation -> checkpoints.

One call runs a whole (possibly resumed, possibly distributed) training run::

    summary = train(compose_config(["model=rnn", "run_dir=runs/rnn"]))

Everything goes under ``run_dir``: ``config.yaml`` (resolved config), ``tokenizer/``,
``checkpoints/{last,best,step_<k>}.pt``, ``tensorboard/`` (events), ``train.log``,
``summary.json`` (the whole run across resumes) and, from ``nmt-train``, ``.hydra/``. If
``checkpoints/last.pt`` exists the run resumes from it, is refused, or is left alone (a
finished run): :mod:`nmt.training.rundir` has the rules. ``train.init_from`` starts a new
run from another run's weights and tokenizer (fine-tuning).

Order of one optimizer step (``s`` = steps done so far)::

    group  = epoch_batches[b : b + world * accum]        # b = batch_in_epoch
    mine   = group[rank::world]                          # this rank's micro-batches
    for each micro-batch: loss_sum * world / tokens(group) -> backward (DDP sync on the last)
    clip grad norm; lr = schedule(s + 1); optimizer.step(); ema.update(s + 1) (if on)
    s += 1; b += len(group)
    epoch end -> epoch += 1, b = 0 (the next epoch's batches: resampled segmentation, if on)
    every eval_every_steps and at epoch end: validate (loss, ppl, greedy BLEU), checkpoint

With ``train.ema_decay`` an exponential moving average of the weights (:mod:`nmt.training.ema`)
is updated after every optimizer step; validation (hence ``best.pt``) scores it, and the
checkpoints' ``model`` entry holds it (the weights to translate with), next to the trained
weights in ``train_model`` (what a resumed run goes on from). With
``data.tokenizer.sampling_alpha`` each epoch trains on its own sampled segmentation of the
training split (:func:`nmt.data.batching.sample_split`, drawn once per (seed, epoch) and
cached, so a resumed run and every DDP rank train on the same draw).

Checkpoints are written only at step boundaries and hold the RNG states, so a run killed
at any point and resumed redoes the steps after its last checkpoint and takes exactly the
same steps (same batches, same dropout masks) as an uninterrupted one. Validation uses no
random numbers. Resuming with another ``train.batch_tokens`` / ``seed`` / ``accum_steps``
is allowed but logs a warning: the saved position in the epoch then indexes a different
batch order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import resource
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError
from nmt.runtime import bound_onednn_cache, cpu_has_bf16, machine_info, resolve_device
from nmt.checkpoint import (
    CONFIG_VERSION,
    CheckpointError,
    CheckpointManager,
    batch_order_changes,
    check_compatible,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from nmt.training.distributed import (
    DistInfo,
    all_reduce_sum,
    broadcast_object,
    cleanup_distributed,
    collective_errors,
    gather_objects,
    init_distributed,
    local_share,
    max_over_ranks,
    truncate_to_multiple,
)
from nmt.training.loss import label_smoothed_nll, perplexity
from nmt.training.rundir import (
    RunPlan,
    RunRecord,
    check_run_dir,
    plan_run,
    write_json_atomic,
    write_record,
)
from nmt.training.schedule import build_schedule

log = logging.getLogger("nmt")

# Tests: SIGKILL this process right after optimizer step <k> (after step k's checkpoint when
# k is a checkpoint step; otherwise the resumed run redoes the steps since the last one).
KILL_ENV = "NMT_TEST_KILL_AT_STEP"


@dataclass
class TrainState:
    """Counters and early-stopping bookkeeping saved in every checkpoint (``trainer`` key)."""

    step: int = 0                    # optimizer steps done
    epoch: int = 0                   # current epoch (0-based)
    batch_in_epoch: int = 0          # batches of the epoch list consumed (all ranks together)
    best_bleu: float | None = None
    best_step: int | None = None
    bad_validations: int = 0         # validations since the last BLEU gain (early stopping
    #                                  and the plateau lr schedule both read this one counter)
    last_validated_step: int = -1
    elapsed_s: float = 0.0           # wall time of all segments so far (for max_minutes)
    history: list = field(default_factory=list)   # one dict per validation
    stop_reason: str = ""            # set by the checkpoint that ends the run (finished)
    train_s: float = 0.0             # seconds in training steps, all segments (no validation)
    train_tokens: int = 0            # target tokens trained on, all segments, all ranks
    peak_rss_mb: float = 0.0         # largest peak RSS of rank 0 over all segments
    segments: list = field(default_factory=list)  # one dict per run of the command


USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, CheckpointError)


def _user_errors() -> tuple[type[BaseException], ...]:
    from nmt.data.corpus import CorpusError

    return (*USER_ERRORS, CorpusError)


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """What ``train.compile=true`` trains through: ``model.compiled()`` (see
    :meth:`nmt.models.base.Seq2Seq.compiled`).

    Dynamic shapes from the first call: batch size and both sequence lengths are symbolic,
    so token-bucketed batches of any shape reuse one graph (Dynamo recompiles only for the
    sizes it specialises, 0 and 1) and no batch is padded beyond its longest sentence. The
    result shares the parameters; ``model.state_dict()`` keeps plain keys (no
    ``_orig_mod.`` prefix), so checkpoints are the same with and without compile.
    """
    return model.compiled()


def compile_stats() -> dict[str, Any]:
    """Graphs Dynamo has built in this process and the wall time spent compiling them.

    Returns:
        ``{"graphs": int, "compile_s": float}`` (seconds: Dynamo tracing plus Inductor code
        generation and C++ compilation, forward and backward), from ``torch._dynamo.utils``.
    """
    from torch._dynamo import utils as dynamo_utils

    spent = dynamo_utils.calculate_time_spent()
    return {"graphs": int(dynamo_utils.counters["stats"]["unique_graphs"]),
            "compile_s": float(spent.get("total_wall_time", 0.0))}


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``train.precision`` on ``device`` (None = fp32, no autocast).

    ``auto``: bf16 on a CUDA card that supports it (``torch.cuda.is_bf16_supported``), fp16
    (with loss scaling) on older cards (V100, T4); on CPU, bf16 where the CPU computes it
    natively (AMX or AVX-512 BF16, :func:`nmt.runtime.cpu_has_bf16`: 1.4x the tokens/s of
    fp32 for the Transformer on the development machine, docs/speed.md), else fp32.
    ``bf16``: bf16 autocast on any device (CPU autocast included). ``fp16``: CUDA only.
    ``fp32``: none.

    Raises:
        ConfigError: ``fp16`` on a device other than CUDA.
    """
    if precision == "fp32":
        return None
    if precision == "auto" and device.type != "cuda":
        return torch.bfloat16 if device.type == "cpu" and cpu_has_bf16() else None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        if device.type != "cuda":
            raise ConfigError(f"train.precision=fp16 needs a CUDA device (this run uses "
                              f"{device}): use train.precision=bf16 or fp32 on CPU.")
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def build_optimizer(params: list[torch.nn.Parameter], train_cfg) -> torch.optim.Optimizer:
    """Adam / AdamW with the configured betas, eps and weight decay (fused kernel if possible)."""
    cls = torch.optim.AdamW if train_cfg.optimizer == "adamw" else torch.optim.Adam
    kwargs = dict(lr=train_cfg.lr, betas=tuple(train_cfg.betas), eps=train_cfg.eps,
                  weight_decay=train_cfg.weight_decay)
    try:
        return cls(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return cls(params, foreach=True, **kwargs)


def _tty_progress() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


def _setup_logging(run_dir: Path | None, info: DistInfo) -> list[logging.Handler]:
    """Console (+ ``run_dir/train.log`` on rank 0) handlers on the ``nmt`` logger."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    handlers[0].setLevel(logging.INFO if info.is_main else logging.WARNING)
    if run_dir is not None and info.is_main:
        handlers.append(logging.FileHandler(run_dir / "train.log", encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
        log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False   # these handlers print it; not once more through the root logger (Hydra's)
    return handlers


class Trainer:
    """Owns model, optimizer, schedule, data and the loop; see the module docstring.

    Args:
        cfg: validated ``nmt-train`` config (:func:`nmt.config.compose_config`).
        info: distributed position (:func:`init_distributed`); ``DistInfo()`` for one process.
        device: torch device of this rank.

    Raises (from :meth:`setup`, before the first batch):
        ConfigError: bad sizes, unwritable ``run_dir``, too few batches for the processes.
        CorpusError: missing or malformed data files.
        CheckpointError: an unreadable or incompatible ``last.pt``.
    """

    def __init__(self, cfg: DictConfig, info: DistInfo, device: torch.device,
                 plan: RunPlan | None = None, record: RunRecord | None = None) -> None:
        self.cfg = cfg
        self.plan = plan or RunPlan("fresh")
        self.record = record
        self.init_ckpt: dict | None = None   # train.init_from's checkpoint until its weights are loaded
        self.tcfg = cfg.train
        self.info = info
        self.device = device
        self.run_dir = Path(cfg.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.manager = CheckpointManager(self.ckpt_dir, cfg.train.keep_last, cfg.train.keep_best)
        self.state = TrainState()
        self.amp_dtype = autocast_dtype(cfg.train.precision, device)
        if self.amp_dtype is not None and device.type == "cpu":
            bound_onednn_cache()  # nmt.train() from Python: the CLIs have set it already
        # fp16 needs loss scaling (Micikevicius et al. 2018); bf16 has fp32's exponent range.
        self.scaler = (torch.amp.GradScaler(device.type) if self.amp_dtype == torch.float16
                       else None)
        self.writer = None
        self.stop_reason = ""
        self.ema = None               # WeightAverage when train.ema_decay is set (after setup)
        self._epoch_cache: dict[int, tuple[Any, list[np.ndarray]]] = {}  # epoch: (split, batches)
        self._start = time.perf_counter()
        self._mark = time.perf_counter()   # start of the training time not yet in state.train_s
        self._pause = 0.0             # validation/checkpoint seconds since the last log line
        self._time_progress = 0.0     # fraction of max_minutes used, as of the last time check
        # Plain Python copies of the per-step settings (DictConfig access is slow in a loop).
        self.t = SimpleNamespace(**OmegaConf.to_container(cfg.train, resolve=True))
        self.label_smoothing = float(cfg.train.label_smoothing)
        self.clip_grad_norm = float(cfg.train.clip_grad_norm)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Data, model, optimizer, schedule; resume from the plan's checkpoint, or start from
        ``train.init_from``'s weights.

        Every rank leaves each phase together (:func:`collective_errors`): a user error on
        one rank ends all of them with its message.
        """
        errors = _user_errors()
        with collective_errors(self.info, errors):
            self._setup_checks()
        # Rank 0 trains/caches the tokenizer first; the others then find it in the cache.
        # Nothing is written into run_dir before the checkpoint's tokenizer is compared.
        data = None
        with collective_errors(self.info, errors):
            if self.info.is_main:
                data = self._prepare_data()
        with collective_errors(self.info, errors):
            if not self.info.is_main:
                data = self._prepare_data()
        with collective_errors(self.info, errors):
            self._setup_model(data)

    def _setup_checks(self) -> None:
        ckpt = self.plan.checkpoint
        self.init_ckpt = None
        if ckpt is not None:
            check_compatible(self.manager.last, ckpt, self.cfg)
        elif self.tcfg.init_from:
            self.init_ckpt = self._load_init_from(str(self.tcfg.init_from))

    def _load_init_from(self, path: str) -> dict:
        """The checkpoint a fine-tuning run starts from; its model config must be ours.

        Raises:
            CheckpointError: unreadable, or another model config (dropout rates may differ).
        """
        ckpt = load_checkpoint(path)
        saved = (ckpt.get("config") or {}).get("model") or {}
        now = OmegaConf.to_container(self.cfg.model, resolve=True)
        diff = [f"model.{k}: checkpoint has {saved.get(k, '<absent>')!r}, now {now.get(k, '<absent>')!r}"
                for k in sorted(set(saved) | set(now))
                if saved.get(k, "<absent>") != now.get(k, "<absent>") and "dropout" not in k]
        if diff:
            raise CheckpointError(
                f"train.init_from={path}: its model config differs from this run's "
                f"({'; '.join(diff)}). Fine-tuning keeps the architecture: give the same model "
                "settings as the checkpoint (dropout rates may differ).")
        return ckpt

    def _given_tokenizer(self):
        """The tokenizer this run must use, or None to train (or find in the cache) one.

        Resumed runs that did not train their tokenizer take it from ``last.pt``; fine-tuning
        takes ``train.init_from``'s; ``data.tokenizer.model`` names a file or directory.
        """
        from nmt.data.tokenizer import Tokenizer, load_tokenizer_model

        given_model = self.cfg.data.tokenizer.model
        if self.plan.checkpoint is not None and (self.tcfg.init_from or given_model):
            source, state = self.manager.last, self.plan.checkpoint.get("tokenizer")
        elif self.init_ckpt is not None:
            source, state = self.tcfg.init_from, self.init_ckpt.get("tokenizer")
        elif given_model:
            return load_tokenizer_model(str(given_model), self.cfg.data.tokenizer,
                                        self.cfg.data.src_lang, self.cfg.data.tgt_lang)
        else:
            return None
        try:
            return Tokenizer.from_state_dict(state)
        except (ValueError, RuntimeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{source}: the saved tokenizer cannot be rebuilt ({err}).") from None

    def _prepare_data(self):
        from nmt.data.batching import prepare_data

        data = prepare_data(self.cfg.data, None, tokenizer=self._given_tokenizer())
        if self.plan.checkpoint is not None:
            self.tokenizer = data.tokenizer
            self._check_resume(self.plan.checkpoint)
        return data

    def _setup_model(self, data) -> None:
        from nmt.data.batching import TokenBatchSampler
        from nmt.models import build_model

        cfg, info = self.cfg, self.info
        ckpt = self.plan.checkpoint
        self.tokenizer, self.train_split, self.valid_split = data.tokenizer, data.train, data.valid
        if self.tokenizer.joint is False and cfg.model.tie_embeddings:
            raise ConfigError("model.tie_embeddings=true needs one vocabulary for both sides, but "
                              "the given tokenizer has two: set model.tie_embeddings=false.")
        if info.is_main:
            write_record(self.run_dir, self.record)
            self.tokenizer.save(self.run_dir / "tokenizer")
        try:
            self.sampler = TokenBatchSampler(self.train_split.src_lens, self.train_split.tgt_lens,
                                             self.tcfg.batch_tokens, shuffle=True,
                                             seed=self.tcfg.seed)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if len(self.epoch_batches(0)) == 0:
            raise ConfigError(
                f"The training split yields fewer batches ({len(self.sampler.batches(0))}) than "
                f"there are processes ({info.world_size}): use more data or fewer processes.")

        seed = int(self.tcfg.seed)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.model = build_model(cfg.model, self.tokenizer.src_vocab_size,
                                 self.tokenizer.tgt_vocab_size).to(self.device)
        # Dropout streams differ between ranks (the weights are the same: same seed above).
        torch.manual_seed(seed + 1000 * info.rank + 1)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, self.tcfg)
        self.schedule = build_schedule(self.optimizer, self.tcfg)
        if ckpt is not None:
            check_compatible(self.manager.last, ckpt, cfg, self.model)
            self._restore(ckpt)
        elif self.init_ckpt is not None:     # its "model": the weights it translates with
            try:
                self.model.load_state_dict(self.init_ckpt["model"])
            except RuntimeError as err:
                raise CheckpointError(f"train.init_from={self.tcfg.init_from}: its weights do "
                                      f"not fit this model ({err}).") from None
            self.init_ckpt = None
            log.info("fine-tuning: weights and tokenizer from %s (fresh optimizer, schedule and "
                     "step count)", self.tcfg.init_from)
        if self.tcfg.ema_decay is not None:
            from nmt.training.ema import WeightAverage

            self.ema = WeightAverage(self.model, float(self.tcfg.ema_decay))
            if ckpt is not None and "train_model" in ckpt:   # its "model" is the average
                self.ema.load_state_dict(ckpt["model"])
        # Step checkpoints closer than half a validation interval are not both kept as "last".
        group_size = info.world_size * int(self.tcfg.accum_steps)
        steps_per_epoch = -(-len(self.epoch_batches(0)) // group_size)
        self.manager.min_gap = max(1, min(int(self.tcfg.eval_every_steps), steps_per_epoch) // 2)
        if self.plan.changes:
            log.warning("train.resume=force: continuing %s with changed settings: %s",
                        self.run_dir, "; ".join(self.plan.changes))
        self.state.segments.append({"started": _now(), "ended": None, "start_step": self.state.step,
                                    "end_step": self.state.step,
                                    "command": self.record.command if self.record else "",
                                    "machine": machine_info(self.device),
                                    "world_size": info.world_size})
        self.train_model: torch.nn.Module = self.model
        if self.tcfg.compile:
            self.train_model = compile_model(self.model)
        if info.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            # No buffer broadcast: the only buffer is the constant positional table.
            self.train_model = DDP(self.train_model, device_ids=ids, broadcast_buffers=False)
        self.valid_src_ids = [self.valid_split.src_ids(i) for i in range(len(self.valid_split))]
        self.valid_refs = self.valid_split.tgt_texts()
        # Validation pairs are never filtered: give over-long ones a batch of their own.
        longest = int(max(self.valid_split.src_lens.max(initial=1),
                          self.valid_split.tgt_lens.max(initial=1)))
        valid_sampler = TokenBatchSampler(self.valid_split.src_lens, self.valid_split.tgt_lens,
                                          max(self.tcfg.batch_tokens, longest), shuffle=False)
        self.valid_batches = valid_sampler.batches(0)
        if info.is_main:
            OmegaConf.save(cfg, self.run_dir / "config.yaml", resolve=True)
            from torch.utils.tensorboard import SummaryWriter

            purge = self.state.step + 1 if self.state.step > 0 else None
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge)
        n_params = self.model.num_parameters()
        self.n_params = n_params
        log.info("model %s: %s parameters; vocab src %d tgt %d; train %d pairs, valid %d; "
                 "device %s, %s, world %d", cfg.model.name, f"{n_params:,}",
                 self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size,
                 len(self.train_split), len(self.valid_split), self.device,
                 f"{str(self.amp_dtype).removeprefix('torch.')} autocast" if self.amp_dtype
                 else "fp32", info.world_size)
        if self.amp_dtype == torch.bfloat16 and self.device.type == "cpu" and not cpu_has_bf16():
            log.warning("train.precision=bf16 on a CPU without native bf16 (AVX-512 BF16 or AMX): "
                        "autocast emulates it, which is usually slower than fp32; use "
                        "train.precision=fp32 on this machine.")

    def _check_resume(self, ckpt: dict) -> None:
        """Refuse a checkpoint of another tokenizer; warn when the batch order changed.

        Raises:
            CheckpointError: the saved tokenizer differs from the one built from the data.
        """
        from nmt.data.tokenizer import Tokenizer

        last = self.manager.last
        if ckpt.get("tokenizer") is not None:
            try:
                saved = Tokenizer.from_state_dict(ckpt["tokenizer"])
            except (ValueError, RuntimeError, KeyError, TypeError) as err:
                raise CheckpointError(f"{last}: the saved tokenizer cannot be rebuilt ({err}); "
                                      "use a new run_dir=...") from None
            if saved.fingerprint != self.tokenizer.fingerprint:
                raise CheckpointError(
                    f"{last} was trained with another tokenizer than the one built "
                    "from the current data (training data or data.max_train_pairs changed?): "
                    "resume with the original data, or use a new run_dir=...")
        changed = batch_order_changes(ckpt, self.cfg)
        if changed:
            log.warning("resuming %s with settings that change the batch order (%s): the run "
                        "continues at batch %d of epoch %d of the NEW order, so some pairs of "
                        "this epoch are seen twice or not at all; restore the old values for "
                        "an exact resume", last, "; ".join(changed),
                        ckpt.get("batch_in_epoch", 0), ckpt.get("epoch", 0))

    def _restore(self, ckpt: dict) -> None:
        # With an average, "model" holds it and "train_model" the weights training goes on from.
        self.model.load_state_dict(ckpt.get("train_model", ckpt["model"]))
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.schedule.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        known = {f.name for f in fields(TrainState)}   # older checkpoints may hold more keys
        self.state = TrainState(**{k: v for k, v in ckpt["trainer"].items() if k in known})
        rng = ckpt["rng"]
        if isinstance(rng, list) and len(rng) == self.info.world_size:
            set_rng_state(rng[self.info.rank])
        else:  # another world size: rank 0's state, other ranks reseeded deterministically
            set_rng_state(rng[0] if isinstance(rng, list) else rng)
            if self.info.rank > 0:
                torch.manual_seed(self.tcfg.seed + 1000 * self.info.rank + self.state.step)
        log.info("resumed from %s at step %d (epoch %d, batch %d of the epoch)",
                 self.manager.last, self.state.step, self.state.epoch, self.state.batch_in_epoch)

    # ------------------------------------------------------------------ batches
    def _epoch(self, epoch: int) -> tuple[Any, list[np.ndarray]]:
        """``(split, batches)`` of an epoch: the training split (resampled for this epoch with
        ``data.tokenizer.sampling_alpha``) and its batch list (same on every rank), truncated
        to a multiple of world size.

        The current and the next epoch are cached (the prefetcher looks one step ahead)."""
        if epoch not in self._epoch_cache:
            split, sampler = self.train_split, self.sampler
            tok = self.cfg.data.tokenizer
            if tok.sampling_alpha:
                from nmt.data.batching import TokenBatchSampler, TokenizedSplit, sample_split

                t0 = time.perf_counter()
                # Rank 0 draws (or finds in the cache) the epoch's segmentation and sends it to
                # the others: every rank must cut the same batches from its lengths.
                if self.info.is_main:
                    split = sample_split(self.train_split, self.tokenizer,
                                         float(tok.sampling_alpha), int(tok.nbest_size),
                                         seed=(int(self.tcfg.seed), epoch))
                if self.info.enabled:
                    data = broadcast_object(split.ipc_bytes() if self.info.is_main else None,
                                            self.info)
                    if not self.info.is_main:
                        split = TokenizedSplit.from_bytes(data)
                sampler = TokenBatchSampler(split.src_lens, split.tgt_lens,
                                            self.tcfg.batch_tokens, shuffle=True,
                                            seed=self.tcfg.seed)
                log.info("epoch %d: sampled segmentation of the %d training pairs (%.1f s): "
                         "%.1f source, %.1f target tokens per pair", epoch, len(split),
                         time.perf_counter() - t0, split.src_lens.mean() - 1,
                         split.tgt_lens.mean() - 1)
            batches = truncate_to_multiple(sampler.batches(epoch), self.info.world_size)
            self._epoch_cache = {k: v for k, v in self._epoch_cache.items() if k == epoch - 1}
            self._epoch_cache[epoch] = (split, batches)
        return self._epoch_cache[epoch]

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's batch list (row indices into :meth:`epoch_split`); see :meth:`_epoch`."""
        return self._epoch(epoch)[1]

    def epoch_split(self, epoch: int):
        """The :class:`~nmt.data.TokenizedSplit` the epoch's batches index; see :meth:`_epoch`."""
        return self._epoch(epoch)[0]

    def _next_group(self, epoch: int, start: int, group_size: int) -> tuple[int, int, list]:
        """``(epoch, start, group)`` of the step that follows a step taken at ``(epoch, start)``."""
        batches = self.epoch_batches(epoch)
        start += len(batches[start: start + group_size])
        if start >= len(batches):
            epoch, start = epoch + 1, 0
        return epoch, start, self.epoch_batches(epoch)[start: start + group_size]

    def _collate_share(self, split, group: list[np.ndarray]) -> list:
        """This rank's micro-batches of ``group`` (rows of ``split``) as padded :class:`Batch`
        objects (pinned for CUDA). Pure: no random numbers, so prefetching it changes no result."""
        batches = [split.collate(idx) for idx in local_share(group, self.info)]
        return [b.pin_memory() for b in batches] if self.device.type == "cuda" else batches

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    # ------------------------------------------------------------------ one step
    def train_step(self, group: list[np.ndarray], collated: list | None = None,
                   split=None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step over the global ``group`` of batches (rows of ``split``, the
        current epoch's :meth:`epoch_split`; default: the training split), then the update of
        the weight average (``train.ema_decay``).

        ``collated`` is this rank's share of ``group`` already collated
        (:meth:`_collate_share`, e.g. by the prefetcher); None collates it here.

        Returns:
            ``(sums [2] = (smoothed loss, nll) summed over this rank's tokens, grad_norm, tokens)``
            where ``tokens`` counts the target tokens of the whole group (all ranks).
        """
        from nmt.data.vocab import PAD_ID

        split = self.train_split if split is None else split
        tgt_lens = split.tgt_lens
        tokens = int(sum(int(tgt_lens[idx].sum()) for idx in group))
        scale = self.info.world_size / max(tokens, 1)
        mine = collated if collated is not None else self._collate_share(split, group)
        sums = torch.zeros(2, device=self.device)
        eps = self.label_smoothing
        non_blocking = self.device.type == "cuda"
        for i, batch in enumerate(mine):
            batch = batch.to(self.device, non_blocking=non_blocking)
            last = i == len(mine) - 1
            sync = contextlib.nullcontext() if (last or not self.info.enabled) else \
                self.train_model.no_sync()
            with sync:
                with self._autocast():
                    logits, _ = self.train_model(batch.src, batch.src_mask, batch.tgt_in,
                                                 need_alignment=False)
                loss_sum, nll_sum = label_smoothed_nll(logits, batch.tgt_out, eps, PAD_ID)
                loss = loss_sum * scale
                (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            sums += torch.stack((loss_sum.detach(), nll_sum))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)      # clip the true gradients
        clip = self.clip_grad_norm
        if clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, clip, foreach=True)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in self.params
                                                       if p.grad is not None], foreach=True)
        self.schedule.set_step(self.state.step + 1, self._budget_progress(self.state.step + 1))
        if self.scaler is None:
            self.optimizer.step()
        else:                                     # skips the step on inf/nan gradients
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.state.step + 1)
        return sums, grad_norm, tokens

    # ------------------------------------------------------------------ validation
    @property
    def eval_model(self) -> torch.nn.Module:
        """The weights that validation scores and checkpoints translate with: the average
        when ``train.ema_decay`` is set, else the trained model."""
        return self.model if self.ema is None else self.ema.model

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Loss, perplexity and greedy BLEU of :attr:`eval_model` on the whole validation
        split (rank 0 computes).

        Returns the same dict on every rank: ``loss``, ``nll``, ``ppl`` (per target token)
        and ``bleu`` (sacreBLEU, detokenized, cased).
        """
        from nmt.data.vocab import EOS_ID, PAD_ID

        result = None
        if self.info.is_main:
            from nmt.evaluation.metrics import corpus_scores
            from nmt.inference.search import translate

            model = self.eval_model
            was_training = model.training
            model.eval()
            sums = torch.zeros(2, device=self.device)
            tokens = 0
            eps = self.label_smoothing
            with self._autocast():
                for idx in self.valid_batches:
                    batch = self.valid_split.collate(idx).to(self.device)
                    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)
                    loss_sum, nll_sum = label_smoothed_nll(logits, batch.tgt_out, eps, PAD_ID)
                    sums += torch.stack((loss_sum, nll_sum))
                    tokens += batch.n_tgt_tokens
            # Searched in fp32, as nmt-evaluate does, so that the two BLEU figures agree.
            hyps = translate(model, self.valid_src_ids, self.cfg.search, self.device)
            model.train(was_training)
            texts = [self.tokenizer.decode_tgt(h[0].tokens) if h else "" for h in hyps]
            scores = corpus_scores(texts, self.valid_refs)
            loss, nll = (sums / max(tokens, 1)).tolist()
            result = {"loss": loss, "nll": nll, "ppl": perplexity(nll),
                      "bleu": float(scores["bleu"])}
            self._log_alignment(hyps, EOS_ID)
        return broadcast_object(result, self.info)

    def _log_alignment(self, hyps, eos_id: int) -> None:
        """TensorBoard images of the first non-empty validation sentence: its alignment
        (``valid/alignment``) and, from one teacher-forced pass over its hypothesis with
        every weight, the cross-attention grid (``valid/attention``: rows = layers, columns
        = heads and their mean; about a second to draw, once per validation)."""
        if self.writer is None:
            return
        for i, h in enumerate(hyps):
            if h and self.valid_src_ids[i]:
                break
        else:
            return
        from nmt.evaluation.plot import plot_alignment, plot_attention
        from nmt.inference.translator import capture_attention

        hyp = h[0]
        src_labels = self.tokenizer.src_pieces(list(self.valid_src_ids[i]) + [eos_id])
        tgt_labels = self.tokenizer.tgt_pieces(list(hyp.tokens) + [eos_id])
        fig = plot_alignment(np.asarray(hyp.alignment), src_labels, tgt_labels)
        self.writer.add_figure("valid/alignment", fig, self.state.step, close=False)
        model = self.eval_model
        was_training = model.training
        model.eval()
        try:
            attention = capture_attention(model, [self.valid_src_ids[i]], [hyp.tokens],
                                          self.device)[0]
        finally:
            model.train(was_training)
        fig = plot_attention(attention["cross"], src_labels, tgt_labels, "cross", dpi=80,
                             title=f"validation sentence {i}, step {self.state.step}")
        self.writer.add_figure("valid/attention", fig, self.state.step, close=False)

    def _after_validation(self, scores: dict[str, float], epoch_end: bool) -> bool:
        """Bookkeeping + logging; returns True if this is the best BLEU so far."""
        st = self.state
        improved = st.best_bleu is None or scores["bleu"] > st.best_bleu
        if improved:
            st.best_bleu, st.best_step, st.bad_validations = scores["bleu"], st.step, 0
        else:
            st.bad_validations += 1
        if self.schedule.on_validation(st.bad_validations):
            log.info("validation BLEU did not improve for %d validations: lr -> %.3g",
                     self.tcfg.plateau_patience,
                     self.schedule.lr_at(st.step + 1, self._budget_progress(st.step + 1)))
        st.last_validated_step = st.step
        elapsed = st.elapsed_s + time.perf_counter() - self._start
        tps = st.train_tokens / max(st.train_s, 1e-9)
        st.history.append({"step": st.step, "epoch": st.epoch, **scores, "elapsed_s": elapsed})
        log.info("valid | step %d | epoch %d%s | loss %.4f | nll %.4f | ppl %.2f | bleu %.2f%s | "
                 "tokens/s %.0f | elapsed %.1f min", st.step, st.epoch,
                 " (end)" if epoch_end else "", scores["loss"], scores["nll"], scores["ppl"],
                 scores["bleu"], " *best*" if improved else "", tps, elapsed / 60)
        if self.writer is not None:
            for key in ("loss", "ppl", "bleu"):
                self.writer.add_scalar(f"valid/{key}", scores[key], st.step)
            self.writer.flush()
        return improved

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, is_best: bool) -> None:
        """Write ``step_<k>.pt`` / ``last.pt`` (/ ``best.pt``) on rank 0 (all ranks must call)."""
        rngs = gather_objects(rng_state(), self.info)
        st = self.state
        st.elapsed_s += time.perf_counter() - self._start
        self._start = time.perf_counter()
        st.peak_rss_mb = max(st.peak_rss_mb, _peak_rss_mb())
        st.segments[-1].update(ended=_now(), end_step=st.step)
        if self.info.is_main:
            bleu = {h["step"]: h["bleu"] for h in st.history}
            ckpt = {
                "version": 1,
                "config_version": CONFIG_VERSION,
                "model": self.eval_model.state_dict(),
                **({} if self.ema is None else {"train_model": self.model.state_dict()}),
                "valid_bleu": bleu.get(st.step),
                "config": OmegaConf.to_container(self.cfg, resolve=True),
                "tokenizer": self.tokenizer.state_dict(),
                "step": st.step, "epoch": st.epoch, "batch_in_epoch": st.batch_in_epoch,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.schedule.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(),
                "rng": rngs,
                "trainer": asdict(st),
            }
            self.manager.save(ckpt, st.step, is_best=is_best, scores=bleu)

    def _validate_and_save(self, epoch_end: bool, stop_reason: str = "") -> str:
        """Validate, record the stop condition (``stop_reason``, or early stopping decided by
        this validation) and write the checkpoint; returns the stop reason ("" = go on)."""
        t0 = time.perf_counter()
        self.state.train_s += t0 - self._mark
        scores = self.validate()
        is_best = self._after_validation(scores, epoch_end)
        self.state.stop_reason = stop_reason or self._should_stop()
        self.checkpoint(is_best)
        self._pause += time.perf_counter() - t0
        self._mark = time.perf_counter()
        return self.state.stop_reason

    # ------------------------------------------------------------------ loop
    def _should_stop(self) -> str:
        """The stop condition met by the state (steps, epochs, early stopping), or ""."""
        st, t = self.state, self.t
        if t.max_steps is not None and st.step >= t.max_steps:
            return f"max_steps={t.max_steps} reached"
        if t.max_epochs is not None and st.epoch >= t.max_epochs:
            return f"max_epochs={t.max_epochs} reached"
        patience = t.early_stopping_patience
        if patience is not None and st.bad_validations >= patience:
            return f"early stopping: no BLEU gain in {patience} validations"
        return ""

    def _stop_before_step(self, check_time: bool) -> str:
        """The stop reason known before a step: steps, epochs, early stopping, time (the
        time check is collective under DDP, so every rank must pass the same ``check_time``).

        The time check also updates the time budget's progress for ``train.cooldown``, with
        the slowest rank's clock, so every rank sets the same lr."""
        reason = self._should_stop()
        if not reason and check_time and self.t.max_minutes is not None:
            used = max_over_ranks(self.state.elapsed_s + time.perf_counter() - self._start,
                                  self.info, self.device)
            self._time_progress = used / (60.0 * float(self.t.max_minutes))
            if self._time_progress >= 1.0:
                reason = f"max_minutes={self.t.max_minutes} reached"
        return reason

    def _budget_progress(self, step: int) -> float:
        """The fraction of the budget used at optimizer step ``step`` (for ``train.cooldown``):
        ``step / max_steps`` or the time used over ``max_minutes`` (as of the last time
        check), whichever is larger; 0 without a budget."""
        progress = self._time_progress if self.t.max_minutes is not None else 0.0
        if self.t.max_steps is not None:
            progress = max(progress, step / self.t.max_steps)
        return min(progress, 1.0)

    def fit(self) -> dict[str, Any]:
        """Train until a stop condition; returns the summary (also in ``summary.json``).

        The checkpoint written when the run stops records the stop reason, so re-running a
        finished run is a no-op (:mod:`nmt.training.rundir`).
        """
        from tqdm.auto import tqdm

        t, st, info = self.t, self.state, self.info
        accum = int(t.accum_steps)
        group_size = info.world_size * accum
        steps_per_epoch = -(-len(self.epoch_batches(st.epoch)) // group_size)
        total = t.max_steps if t.max_steps is not None else steps_per_epoch * (t.max_epochs or 1)
        bar = tqdm(total=total, initial=st.step, unit="step", dynamic_ncols=True,
                   disable=not (info.is_main and _tty_progress()))
        self.model.train()
        self._pause = 0.0
        acc = torch.zeros(2, device=self.device)
        acc_tokens, grad_norm = 0, torch.zeros(())
        t_log = self._mark = time.perf_counter()
        kill_at = int(os.environ.get(KILL_ENV) or -1)
        # The next step's batches are collated in a background thread while this step runs.
        prefetch = ThreadPoolExecutor(max_workers=1) if t.prefetch else None
        ahead: tuple[tuple[int, int], Any] | None = None
        # A resumed run (train.resume=force with new stop settings) may be done already; a
        # fresh run takes at least one step, however long its setup took.
        self.stop_reason = self._stop_before_step(check_time=st.step > 0)
        if self.stop_reason and self.stop_reason != st.stop_reason:
            if st.last_validated_step != st.step:
                self._validate_and_save(epoch_end=False, stop_reason=self.stop_reason)
            else:
                st.stop_reason = self.stop_reason
                self.checkpoint(is_best=False)
        while not self.stop_reason:
            split, batches = self._epoch(st.epoch)
            group = batches[st.batch_in_epoch: st.batch_in_epoch + group_size]
            collated = None
            if prefetch is not None:
                if ahead is not None and ahead[0] == (st.epoch, st.batch_in_epoch):
                    collated = ahead[1].result()
                nxt_epoch, nxt_start, nxt_group = self._next_group(st.epoch, st.batch_in_epoch,
                                                                   group_size)
                ahead = ((nxt_epoch, nxt_start), prefetch.submit(
                    self._collate_share, self.epoch_split(nxt_epoch), nxt_group))
            sums, grad_norm, tokens = self.train_step(group, collated, split)
            acc += sums
            acc_tokens += tokens
            st.train_tokens += tokens
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
                span = max(now - t_log - self._pause, 1e-9)
                all_reduce_sum(acc, info)
                loss, nll = (acc / max(acc_tokens, 1)).tolist()
                tps = acc_tokens / span
                lr = self.schedule.last_lr
                gn = float(grad_norm)
                if self.writer is not None:
                    self.writer.add_scalar("train/loss", loss, st.step)
                    self.writer.add_scalar("train/nll", nll, st.step)
                    self.writer.add_scalar("train/ppl", perplexity(nll), st.step)
                    self.writer.add_scalar("train/lr", lr, st.step)
                    self.writer.add_scalar("train/grad_norm", gn, st.step)
                    self.writer.add_scalar("train/tokens_per_s", tps, st.step)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
                log.info("train | step %d | epoch %d | loss %.4f | ppl %.2f | lr %.3g | "
                         "grad_norm %.3f | tokens/s %.0f", st.step, st.epoch, loss,
                         perplexity(nll), lr, gn, tps)
                acc.zero_()
                acc_tokens, t_log, self._pause = 0, now, 0.0
            # Stop conditions known before validating (steps, epochs, time) make this step's
            # checkpoint the last one; early stopping is decided by the validation itself.
            reason = self._stop_before_step(check_time=not info.enabled or log_step)
            if st.step % t.eval_every_steps == 0 or epoch_end or reason:
                reason = self._validate_and_save(epoch_end, stop_reason=reason)
            if st.step == kill_at:        # tests: a crash between (or right after) checkpoints
                os.kill(os.getpid(), signal.SIGKILL)
            self.stop_reason = reason
        bar.close()
        if prefetch is not None:
            prefetch.shutdown(wait=True, cancel_futures=True)
        return self._summary()

    def _summary(self) -> dict[str, Any]:
        """``summary.json``: the whole run, all segments (resumes) together."""
        st = self.state
        first, last = st.segments[0], st.segments[-1]
        started, ended = first["started"][:10], (last["ended"] or last["started"])[:10]
        summary = {
            "stop_reason": self.stop_reason,
            "steps": st.step, "epochs_done": st.epoch, "params": self.n_params,
            "wall_time_s": round(st.elapsed_s, 2),       # all segments, validation included
            "train_time_s": round(st.train_s, 2),        # all segments, training steps only
            "train_tokens": st.train_tokens,
            "train_tokens_per_s": round(st.train_tokens / max(st.train_s, 1e-9), 1),
            "best_bleu": st.best_bleu, "best_step": st.best_step,
            "last": st.history[-1] if st.history else None,
            "peak_rss_mb": round(st.peak_rss_mb, 1), "world_size": self.info.world_size,
            "device": str(self.device), "machine": last["machine"],
            "date": started if started == ended else f"{started}..{ended}",
            "segments": st.segments,
        }
        if self.device.type == "cuda":
            summary["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        if self.tcfg.compile:  # this segment's process: graphs built and seconds compiling
            summary["compile"] = compile_stats()
            log.info("torch.compile: %d graphs, %.1f s compiling", summary["compile"]["graphs"],
                     summary["compile"]["compile_s"])
        log.info("done (%s) | steps %d | params %s | wall %.1f min | train tokens/s %.0f | "
                 "best bleu %s at step %s | peak RSS %.0f MiB", summary["stop_reason"],
                 st.step, f"{self.n_params:,}", st.elapsed_s / 60,
                 summary["train_tokens_per_s"],
                 "n/a" if st.best_bleu is None else f"{st.best_bleu:.2f}", st.best_step,
                 st.peak_rss_mb)
        if self.info.is_main:
            write_json_atomic(self.run_dir / "summary.json", summary)
        return summary

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train(cfg: DictConfig, record: RunRecord | None = None) -> dict[str, Any]:
    """Run, resume or (finished) leave alone the training described by ``cfg``.

    Args:
        cfg: validated ``nmt-train`` config (:func:`nmt.config.compose_config`).
        record: how ``nmt-train`` was launched (written to ``run_dir/.hydra`` and the summary).

    Returns:
        The summary dict (``summary.json``); for a finished run, the one it wrote then.

    Raises:
        ConfigError, CorpusError, CheckpointError: user errors, before the first batch (on
            every rank under DDP, whichever rank found it).
    """
    device = resolve_device(cfg.device)
    info = init_distributed(device.type)
    if info.enabled and device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    run_dir = Path(cfg.run_dir)
    handlers: list[logging.Handler] = []
    trainer = None
    try:
        plan = None
        with collective_errors(info, _user_errors()):
            dirs = gather_objects(str(run_dir.resolve()), info)
            if len(set(dirs)) > 1:
                raise ConfigError(f"the processes were given different run directories ({', '.join(sorted(set(dirs)))}): "
                                  "all ranks must write to one run_dir (under torchrun, give a sweep "
                                  "an explicit hydra.sweep.dir=..., not one with ${now:...}).")
            if info.is_main:
                plan = plan_run(run_dir, cfg)
                if plan.kind != "finished":
                    check_run_dir(run_dir)
        plan = broadcast_object(plan, info)
        if plan.kind == "finished":
            if info.is_main:
                print(f"nmt-train: {run_dir} is finished ({plan.summary.get('stop_reason')}, "
                      f"{plan.summary.get('steps')} steps); nothing to do. Change a stop setting "
                      "with train.resume=force to train on, or choose another run_dir=...",
                      file=sys.stderr)
            return plan.summary
        handlers = _setup_logging(run_dir, info)
        trainer = Trainer(cfg, info, device, plan, record)
        trainer.setup()
        return trainer.fit()
    finally:
        if trainer is not None:
            trainer.close()
        for h in handlers:
            log.removeHandler(h)
            h.close()
        log.propagate = True
        cleanup_distributed()
