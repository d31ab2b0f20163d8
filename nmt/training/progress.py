"""The loop's bookkeeping beside the step: log lines, the progress bar, time and its budget.

Every ``train.log_every_steps`` steps one train line (console, ``train.log`` on rank 0,
TensorBoard) gives the means since the last line, over all ranks: loss (label-smoothed),
perplexity (of the NLL), lr, gradient norm, target tokens/s, model FLOP/s and MFU
(:mod:`nmt.training.throughput`) and the objective's add-ons; each validation gives one
valid line. Training time (``train_s``: tokens/s, MFU) leaves out validation and checkpoints
(:meth:`Progress.paused`); the time budget (``train.max_minutes``) counts the wall time of
every segment of the run, setup included, by the slowest rank's clock.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from nmt.runtime import progress_enabled
from nmt.training import distributed as dist
from nmt.training.loss import perplexity
from nmt.training.throughput import Throughput

log = logging.getLogger("nmt")


class Progress:
    """One segment's bookkeeping (module docstring) for :meth:`Trainer.fit
    <nmt.training.trainer.Trainer.fit>`: ``state`` its ``TrainState`` (the counters it
    updates), ``started`` the segment's start (``time.perf_counter()``), ``total`` the steps
    the bar counts to; ``writer`` None off rank 0."""

    def __init__(self, t, state, info: dist.DistInfo, device: torch.device, speed: Throughput,
                 writer: SummaryWriter | None, started: float, total: int) -> None:
        self.t, self.state, self.info, self.device = t, state, info, device
        self.speed, self.writer, self.start = speed, writer, started
        self.bar = tqdm(total=total, initial=state.step, unit="step", dynamic_ncols=True,
                        disable=not (info.is_main and progress_enabled()))
        self.mark = self.last_line = time.perf_counter()   # training time since mark: train_s
        self.paused_s = 0.0             # validation/checkpoint seconds since the last line
        self.time_used = 0.0            # fraction of max_minutes used, as of the last check
        self.sums: dict[str, torch.Tensor] = {}   # the objective's parts since the last line
        self.tokens = 0                            # ... and the target tokens

    def elapsed(self) -> float:
        """Wall seconds of every segment of the run so far."""
        return self.state.elapsed_s + time.perf_counter() - self.start

    def bank_elapsed(self) -> None:
        """Move this segment's wall seconds into the state (for a checkpoint)."""
        now = time.perf_counter()
        self.state.elapsed_s += now - self.start
        self.start = now

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Seconds spent inside (validation, checkpoints) are not training time."""
        t0 = time.perf_counter()
        self.state.train_s += t0 - self.mark
        yield
        self.paused_s += time.perf_counter() - t0
        self.mark = time.perf_counter()

    def add(self, sums: dict[str, torch.Tensor], tokens: int, split, group: list) -> None:
        """Count one step: its objective ``sums``, target ``tokens`` and FLOPs (of ``group``,
        batches of rows of ``split``)."""
        self.sums = {name: self.sums.get(name, 0) + value for name, value in sums.items()}
        self.tokens += tokens
        self.state.train_tokens += tokens
        self.state.train_flops += self.speed.add(split.src_lens, split.tgt_lens, group)
        self.bar.update(1)

    def over_budget(self) -> bool:
        """Whether ``train.max_minutes`` is used up, by the slowest rank's clock (under DDP a
        collective: every rank must call it); sets :attr:`time_used` (``train.cooldown``)."""
        used = dist.max_over_ranks(self.elapsed(), self.info, self.device)
        self.time_used = used / (60.0 * float(self.t.max_minutes))
        return self.time_used >= 1.0

    def train_line(self, lr: float, grad_norm: torch.Tensor) -> None:
        """Log the means since the last line, over all ranks (a collective), and reset them."""
        st, now = self.state, time.perf_counter()
        sums = torch.stack(tuple(self.sums.values()))
        dist.all_reduce_sum(sums, self.info)
        # note: .tolist() and float(grad_norm) wait for the device (a CPU-GPU sync point)
        means = dict(zip(self.sums, (sums / max(self.tokens, 1)).tolist(), strict=True))
        loss, nll = means.pop("loss"), means.pop("nll")   # the rest: the add-ons' parts
        self.speed.mark(st.step, st.train_tokens, st.train_flops,   # after the sync
                        st.train_s + time.perf_counter() - self.mark)
        seconds = max(now - self.last_line - self.paused_s, 1e-9)
        tps, speed, gn = self.tokens / seconds, self.speed.take(seconds), float(grad_norm)
        if self.writer is not None:
            for key, value in (("loss", loss), ("nll", nll), ("ppl", perplexity(nll)),
                               ("lr", lr), ("grad_norm", gn), ("tokens_per_s", tps),
                               *means.items(), *speed.items()):
                self.writer.add_scalar(f"train/{key}", value, st.step)
        self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
        log.info("train | step %d | epoch %d | loss %.4f | ppl %.2f | lr %.3g | "
                 "grad_norm %.3f | tokens/s %.0f%s%s", st.step, st.epoch, loss,
                 perplexity(nll), lr, gn, tps, self.speed.describe(speed),
                 "".join(f" | {k} {v:.4f}" for k, v in means.items()))
        self.sums, self.tokens, self.last_line, self.paused_s = {}, 0, now, 0.0

    def valid_line(self, scores: dict[str, Any], epoch_end: bool, improved: bool) -> None:
        """Record a validation's ``scores`` in the state's history and log them."""
        st, elapsed = self.state, self.elapsed()
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

    def close(self) -> dict[str, Any]:
        """Close the bar; the run's FLOP/s and MFU figures (``summary.json``)."""
        self.bar.close()
        return self.speed.summary(self.state.train_flops, self.state.train_s)
