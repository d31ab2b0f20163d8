"""The device check's static run and its eager twin: nmt-train in this process, its trainer on
the check's own clock and watching its batch shapes.

    python scripts/device_check/static_run.py SECONDS TAIL OVERRIDES...

Its own clock: from its first optimizer step on (setup and compile never cut its steps), the
run trains until SECONDS after this process started less TAIL (its validation, checkpoint and
summary; the step's limit kills the process at SECONDS), or to ``train.max_steps``.

Its steady window: the static batch shapes of epoch 0 (``train.shape_buckets``; every epoch has
the same) are ready after two steps each where torch.compile records CUDA graphs (the first
call warms up, the second records), else after one. At every log line (after its device sync)
the run writes RUN_DIR/steady.json: the window from the first log line at which every shape was
ready to this one (steps, seconds, tokens/s, MFU) and torch.compile's counters (graphs, compile
seconds, CUDA-graph captures Inductor skipped; the graphs built and shapes made ready after the
window's start). A run cut off by its step's limit keeps the figures of its last log line.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()          # before the imports: the step's limit counts them too

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path[0] = str(Path(__file__).resolve().parent.parent)   # scripts/: the package device_check

from device_check.tasks import compile_counters  # noqa: E402


def ready_calls(t, device, world_size: int) -> int:
    """Steps a batch shape takes before its steps run as all later ones will: 2 where
    torch.compile records CUDA graphs (``reduce-overhead``), else 1."""
    from nmt.training.harness import compile_mode

    return 2 if t.compile and compile_mode(t, device, world_size) == "reduce-overhead" else 1


class Watch:
    """The clock, the batch shapes and the steady window of one trainer (module docstring)."""

    def __init__(self, trainer, stop_at: float):
        self.trainer, self.stop_at = trainer, stop_at
        self.need = ready_calls(trainer.t, trainer.device, trainer.info.world_size)
        self.calls: dict[tuple, int] = {}
        split, batches = trainer.epoch_data(0)
        self.shapes = {self.shape(split, idx) for idx in self.mine(batches)}
        self.made_ready = 0              # shapes that became ready, all steps
        self.first_step_s: float | None = None
        self.start: dict | None = None   # the mark that starts the steady window
        self.ready_step: int | None = None

    def mine(self, group: list) -> list:
        """This rank's batches (row indices) of a step's ``group``."""
        info = self.trainer.info
        return group[info.rank::info.world_size]

    def shape(self, split, idx) -> tuple[int, ...]:
        """``(rows, S, T)`` of the batch of rows ``idx`` of ``split``, as collate pads it."""
        shapes = self.trainer.sampler.shapes
        width_s, width_t = int(split.src_lens[idx].max()), int(split.tgt_lens[idx].max())
        return shapes.shape(width_s, width_t) if shapes is not None else \
            (len(idx), width_s, width_t)

    def saw(self, group: list, split) -> None:
        """Count the step over ``group``'s batches (rows of ``split``), shape by shape."""
        for idx in self.mine(group):
            key = self.shape(split, idx)
            self.calls[key] = self.calls.get(key, 0) + 1
            self.made_ready += self.calls[key] == self.need

    def stepped(self) -> None:
        """After an optimizer step: the first one starts the clock of the steps."""
        if self.first_step_s is None:
            self.first_step_s = time.monotonic() - STARTED
            print(f"device_check: first optimizer step done {self.first_step_s:.1f} s after "
                  f"the start; steps until {self.stop_at - STARTED:.0f} s", flush=True)

    def time_up(self, step: int) -> str:
        """The stop reason once the clock ran out (never before the first step), else ""."""
        if step >= 1 and time.monotonic() >= self.stop_at:
            return f"device check: time up at {self.stop_at - STARTED:.0f} s"
        return ""

    def ready(self) -> bool:
        return all(self.calls.get(key, 0) >= self.need for key in self.shapes)

    def mark(self, step: int, tokens: int, flops: float, seconds: float) -> None:
        """A log line's counters (after its sync): start the window once every shape is ready,
        write steady.json."""
        now = {"step": step, "tokens": tokens, "flops": flops, "seconds": seconds,
               "made_ready": self.made_ready, **compile_counters()}
        if self.start is None and self.ready():
            self.start, self.ready_step = now, step
        out = {"ready_calls": self.need, "shapes": len(self.shapes), "ready_step": self.ready_step,
               "first_step_s": self.first_step_s, "last_step": step,
               **{k: now[k] for k in ("graphs", "compile_s", "cudagraph_skips")}}
        if self.start is not None and step > self.start["step"]:
            s0 = self.start
            secs = max(seconds - s0["seconds"], 1e-9)
            speed = self.trainer.progress.speed
            figures = {speed.name: None, **speed.figures(flops - s0["flops"], secs)}
            out["steady"] = {
                "from_step": s0["step"], "to_step": step, "steps": step - s0["step"],
                "seconds": round(secs, 3), "tokens_per_s": round((tokens - s0["tokens"]) / secs, 1),
                **{k: v if v is None else float(f"{v:.4g}") for k, v in figures.items()},
                "graphs_after": now["graphs"] - s0["graphs"],
                "skips_after": now["cudagraph_skips"] - s0["cudagraph_skips"],
                "shapes_after": now["made_ready"] - s0["made_ready"]}
        if self.trainer.info.is_main:
            path = self.trainer.run_dir / "steady.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=2) + "\n")
            os.replace(tmp, path)


def watched(base: type, stop_at: float) -> type:
    """``base`` (nmt's Trainer) with a :class:`Watch`: it counts each step's shapes, stops on
    the watch's clock, and marks every log line."""

    class DeviceCheckTrainer(base):
        def _finish_setup(self) -> None:
            super()._finish_setup()
            self.watch = Watch(self, stop_at)
            log_mark = self.progress.speed.mark

            def mark(*counters) -> None:
                log_mark(*counters)
                self.watch.mark(*counters)

            self.progress.speed.mark = mark

        def train_step(self, group, split, collated=None):
            self.watch.saw(group, split)
            out = super().train_step(group, split, collated)
            self.watch.stepped()
            return out

        def _stop_reason(self, check_time: bool = False) -> str:
            return super()._stop_reason(check_time) or self.watch.time_up(self.state.step)

    return DeviceCheckTrainer


def main(argv: list[str]) -> int:
    seconds, tail, overrides = float(argv[0]), float(argv[1]), argv[2:]
    from nmt.training import trainer

    # nmt-train's train() builds the trainer it finds in its module: this one
    trainer.Trainer = watched(trainer.Trainer, STARTED + seconds - tail)
    from nmt.cli.train import main as train

    return train(overrides)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
