"""The device check's steps, run in order under their limits (scripts/device_check.sh says what
each does; docs/speed.md how to run it). Standard library only: the steps' own processes
import torch and nmt, so a broken install is the preflight's finding, not a traceback here."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from device_check import report
from device_check.plan import (
    CHOOSABLE,
    COMPILE_STEPS,
    RESERVE,
    STEPS,
    Plan,
    Settings,
    UsageError,
    expected_limits,
    follow_up_budget,
    follow_up_command,
    plan,
    plan_calls,
    step_limit,
)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# base's start-up, data, validation and saving: its limit less this is train.max_minutes.
OVERHEAD = 40
# static's eager twin: at most this long (it trains a fixed number of steps); static itself
# stops its steps this long before its limit (the validation, checkpoint and summary after).
TWIN_S, TAIL_S = 40, 15
# What comes back from OUT_DIR, the most important first (the runner brings back so many).
FILES = ("device_check.log", "results.json", "base/summary.json", "static/summary.json",
         "ddp/summary.json", "base/train.log", "static/train.log", "ddp/train.log")


def ddp_backend(device: str, found: str | None) -> str:
    """The ddp step's backend: on CUDA NCCL when the nccl step had two ranks all_reduce over it
    (``found``), else gloo (NCCL refuses two ranks on one device; gloo runs on CUDA tensors);
    on the CPU gloo."""
    return "nccl" if device == "cuda" and found == "nccl" else "gloo"


def pg_timeout(limit: int) -> int:
    """Seconds a process group that the check joins waits in a collective before it gives up:
    half the time its step has, at least 10, so a hung rank fails the step with an error."""
    return max(10, limit // 2)


def nccl_tries(device: str) -> list[tuple[str, int]]:
    """The nccl step's all_reduce runs, ``(backend, ranks)`` each: on CUDA NCCL with 2 ranks on
    the one device, then where NCCL refuses, NCCL with 1 rank and gloo with 2; on the CPU gloo
    with 2. Each try gets :func:`try_seconds` of what is left."""
    return [("nccl", 2), ("nccl", 1), ("gloo", 2)] if device == "cuda" else [("gloo", 2)]


def try_seconds(left: float, tries_left: int) -> int:
    """The seconds of the next try: what is left of the step over the tries left (the time an
    earlier try did not use goes to the later ones)."""
    return int(left // tries_left)


def minutes(limit: int, overhead: int) -> str:
    """train.max_minutes of a training step with ``limit`` seconds: the limit less ``overhead``,
    at least 0.1."""
    return f"{max((limit - overhead) / 60, 0.1):.2f}"


def overrides(dry: bool, compile_: bool) -> dict[str, list[str]]:
    """Hydra overrides of each training step (and ``eval``, ``data``, ``bench`` and the bench
    device's options): on the GPU today's recipe, in a dry run a tiny model and a few steps."""
    if dry:
        data = ["data.max_train_pairs=1000", "data.tokenizer.vocab_size=500"]
        tiny = ["model.d_model=32", "model.heads=2", "model.ff_dim=64", "model.encoder_layers=1",
                "model.decoder_layers=1", *data]
        common = [*tiny, "train.log_every_steps=2", "train.precision=fp32",
                  "train.log_figures=false", "search.max_len_a=1.0", "search.max_len_b=5"]
        static = ["train.batch_tokens=1024", "train.shape_buckets=4",
                  "train.eval_every_steps=1000000", "train.log_every_steps=4"]
        return {
            "data": data, "common": common,
            "ddp": ["train.max_steps=3", "train.eval_every_steps=3"],
            "torchrun": ["train.max_steps=2", "train.eval_every_steps=2"],
            "base": ["train.max_steps=4", "train.eval_every_steps=4"],
            "static": [*static, "train.max_steps=40", f"train.compile={str(compile_).lower()}"],
            "static_eager": [*static, "train.max_steps=16", "train.compile=false"],
            "bench": ["model=transformer_base", *tiny, "train.batch_tokens=512",
                      "train.shape_buckets=4"],
            "bench_device": ["--device", "cpu", "--precision", "fp32", "--warmup", "1",
                             "--steps", "2"],
            # Beam search of an untrained model runs to max_len: 50 sentences of each split.
            "eval": ["max_len_a=1.0", "max_len_b=5"],
        }
    # static: one validation, when its time is up (static_run.py) or at the step cap
    static = ["train.batch_tokens=8192", "train.shape_buckets=8", "train.eval_every_steps=1000000",
              "train.log_every_steps=50"]
    return {
        "data": [], "common": ["train.log_figures=false"],
        "ddp": ["train.max_steps=40", "train.eval_every_steps=40"],
        "torchrun": ["train.max_steps=20", "train.eval_every_steps=20"],
        "base": ["train.eval_every_steps=1000000"],       # one validation: when the time is up
        "static": [*static, "train.max_steps=100000", "train.compile=true"],
        "static_eager": [*static, "train.max_steps=200", "train.compile=false"],
        "bench": ["model=transformer_base", "train.batch_tokens=24576", "train.shape_buckets=8"],
        "bench_device": ["--device", "cuda", "--precision", "bf16", "--warmup", "3",
                         "--steps", "20"],
        "eval": [],
    }


class StepRun:
    """One step's processes, each under what is left of the step's ``limit`` (or less), their
    output in ``<logs>/<log>.log``; a process that outlives its time gets SIGTERM, 5 s later
    SIGKILL, with all its children (its own session). ``env``: the processes' environment."""

    def __init__(self, name: str, limit: int, logs: Path, env: dict):
        self.name, self.limit, self.dir, self.env = name, limit, logs, env
        self.deadline = time.monotonic() + limit
        self.logs: list[Path] = []

    def left(self) -> float:
        """Seconds left of the step's limit."""
        return self.deadline - time.monotonic()

    def call(self, cmd: list[str], timeout: float | None = None, env: dict | None = None,
             log: str | None = None) -> int:
        """``cmd``'s exit status; 124 when it ran out of time."""
        path = self.dir / f"{log or self.name}.log"
        if path not in self.logs:
            path.write_text("")
            self.logs.append(path)
        seconds = self.left() if timeout is None else min(timeout, self.left())
        with path.open("a") as out:
            out.write(f"$ {shlex.join(cmd)}\n")
            out.flush()
            if seconds < 1:
                out.write("(no time left)\n")
                return 124
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                    env={**self.env, **(env or {})}, start_new_session=True)
            try:
                return proc.wait(seconds)
            except subprocess.TimeoutExpired:
                for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
                    try:
                        os.killpg(proc.pid, sig)
                        proc.wait(grace)
                        break
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        continue
                out.write(f"(stopped after {seconds:.0f} s)\n")
                return 124


class Check:
    """One call of the check: the steps of ``first`` (its plan), the report after each."""

    def __init__(self, settings: Settings, first: Plan, out_dir: Path, env: dict):
        self.s, self.plan, self.dry = settings, first, settings.dry
        self.t0 = time.monotonic()
        self.deadline = settings.budget - RESERVE
        self.secs: dict[str, object] = {}
        self.failed: list[str] = []
        self.skipped: list[str] = []
        self.deferred: list[str] = []
        self.next_call: str | None = None
        self.py = env.get("PYTHON", sys.executable)
        given = env.get("DEVICE_CHECK_WORK")
        self.work = (Path(given).resolve() if given
                     else Path(tempfile.mkdtemp(prefix="device_check.")))
        self.data_root = Path(env.get("NMT_DATA_ROOT") or REPO / "data" / "multi30k").resolve()
        self.wheels = Path(env.get("DEVICE_CHECK_WHEELS") or REPO / "device_wheels").resolve()
        self.out = out_dir.resolve()
        for folder in (self.out, self.work / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        self.log = self.out / "device_check.log"
        self.log.write_text("")
        self.files = FILES[:settings.runner.files]
        self.base_path = env.get("PYTHONPATH", "")
        self.env = {**env, "NMT_DATA_ROOT": str(self.data_root),
                    "NMT_CACHE_DIR": env.get("NMT_CACHE_DIR") or str(self.work / "cache"),
                    "PYTHONUNBUFFERED": "1", "CI": "1", "PYTHONPATH": self._path(),
                    # every rank runs on this one machine: the loopback interface
                    "GLOO_SOCKET_IFNAME": env.get("GLOO_SOCKET_IFNAME", "lo")}
        if not self.dry:
            self.env.setdefault("NCCL_DEBUG", "WARN")
            self.env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        self.device = "cpu" if self.dry else "cuda"
        self.compile = not self.dry or env.get("DEVICE_CHECK_DRY_COMPILE", "0") == "1"
        self.o = overrides(self.dry, self.compile)
        self.extra = shlex.split(env.get("DEVICE_CHECK_OVERRIDES", ""))
        self.env_given = env

    def _path(self, site: Path | None = None) -> str:
        """The steps' PYTHONPATH: the checkout, the installed wheels, the caller's path."""
        return ":".join(str(p) for p in (REPO, site, self.base_path) if p)

    def elapsed(self) -> int:
        """Whole seconds since this call started."""
        return int(time.monotonic() - self.t0)

    def say(self, message: str) -> None:
        """``[device_check 12:00:00 +42s] message`` on stdout and in device_check.log."""
        line = f"[device_check {time.strftime('%H:%M:%S')} +{self.elapsed()}s] {message}"
        print(line, flush=True)
        with self.log.open("a") as f:
            f.write(line + "\n")

    # ------------------------------------------------------------------ the bookkeeping
    def status(self) -> dict:
        """Each step's seconds (``skipped``, ``next``, ``-``), failed, skipped, next, budget."""
        return {"secs": {s: self.secs.get(s, "-") for s in STEPS},
                "failed": ",".join(self.failed) or "none",
                "skipped": ",".join(self.skipped) or "none",
                "next": ",".join(self.deferred) or "none",
                "budget": self.s.budget, "seconds": self.elapsed()}

    def report(self, final: bool = False) -> None:
        """results.json (after every step: a run killed from outside keeps it); ``final``:
        also the follow-up call and the key line."""
        results = report.collect(self.work, self.dry, self.status())
        results["next_call"] = self.next_call
        (self.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        if final:
            self.say("next call: " + (self.next_call or "none"))
            line = report.key_line(results["line"])
            print(line, flush=True)
            with self.log.open("a") as f:
                f.write(line + "\n")

    def skip(self, step: str, why: str) -> None:
        """Record ``step`` as skipped for time (``why``): not failed, and not planned any more."""
        self.plan.states[step] = "skip"
        self.secs[step] = "skipped"
        self.skipped.append(step)
        self.say(f"{step}: skipped for time ({why}; its limit {self.plan.limits[step]}s, the "
                 f"budget {self.s.budget}s)")

    def begin(self, step: str) -> int | None:
        """The seconds ``step`` gets now (:func:`step_limit`), or None when it does not run: not
        chosen, a ``2gpus`` step where the preflight sees fewer (its seconds ``1gpu``; no NCCL
        path at world 1), left for the follow-up call, or skipped for time (less than half its
        limit left)."""
        state = self.plan.states[step]
        if state == "-":
            return None
        if state == "2gpus" and self.torchrun_ranks() < 2:
            self.secs[step] = "1gpu"
            self.say(f"{step}: not run: the preflight sees fewer than 2 GPUs (at world 1 nmt "
                     "joins no process group: no NCCL path to test)")
            return None
        if state == "next":
            self.secs[step] = "next"
            self.deferred.append(step)
            self.say(f"{step}: left for the follow-up call")
            return None
        if state == "skip":
            self.skip(step, "the earlier steps' limits leave too little")
            return None
        left = self.deadline - self.elapsed()
        limit = step_limit(step, self.plan, left)
        if 2 * limit < self.plan.limits[step] or limit < 5:
            self.skip(step, f"{left}s left")
            return None
        return limit

    def step(self, name: str, body, *args) -> int | None:
        """Run ``body(StepRun, *args)`` as step ``name`` if :meth:`begin` says so; records its
        seconds, a failure (``name:timeout``, ``name:rcN``) and the report."""
        limit = self.begin(name)
        if limit is None:
            return None
        start, run = time.monotonic(), StepRun(name, limit, self.work / "logs", self.env)
        rc = body(run, *args)
        self.secs[name] = int(time.monotonic() - start)
        with self.log.open("a") as f:
            for path in run.logs:
                f.write(f"----- {name}: {path.name}\n{path.read_text(errors='replace')}")
        self.say(f"{name}: rc={rc} in {self.secs[name]}s (limit {limit}s)")
        if rc != 0:
            self.failed.append(f"{name}:timeout" if rc == 124 else f"{name}:rc{rc}")
            tail = run.logs[-1].read_text(errors="replace").splitlines()[-15:] if run.logs else []
            print("\n".join(f"  {name}| {x}" for x in tail), flush=True)
        self.report()
        return rc

    def keep(self, run: str) -> None:
        """RUN's train.log and summary.json under OUT_DIR/RUN, those the runner brings back."""
        for name in ("summary.json", "train.log"):
            src = self.work / run / name
            if f"{run}/{name}" in self.files and src.is_file():
                (self.out / run).mkdir(exist_ok=True)
                shutil.copy(src, self.out / run / name)

    # ------------------------------------------------------------------ the steps
    def train(self, run: StepRun, name: str, extra: list[str], launcher: list[str],
              timeout: float | None = None) -> int:
        """nmt-train (``launcher``: ``-m nmt.cli.train``, torchrun's or static_run.py) as run
        ``name`` in WORK/name, its overrides, ``extra`` and the caller's, in ``timeout`` seconds
        at most; its files kept."""
        shutil.rmtree(self.work / name, ignore_errors=True)   # a rerun starts afresh
        args = [f"run_dir={self.work / name}", f"device={self.device}", *self.o["common"],
                *self.o[name], *extra, *self.extra]
        rc = run.call([self.py, *launcher, *args], timeout, log=name)
        self.keep(name)
        return rc

    def evaluate(self, run: str) -> None:
        """Step ``<run>_eval``: beam 5 on val and test of ``run``'s best.pt (in a dry run 50
        sentences of each); ``<run>_eval:no_checkpoint`` when ``run`` left none."""
        name = f"{run}_eval"
        if self.secs.get(run) in (None, "skipped", "next"):
            if self.plan.states[name] == "run":
                self.skip(name, f"{run} did not run")
            elif self.plan.states[name] in ("skip", "next"):
                self.begin(name)
            return
        if not (self.work / run / "checkpoints" / "best.pt").is_file():
            if self.begin(name) is not None:
                self.secs[name] = 0
                self.failed.append(f"{name}:no_checkpoint")
                self.say(f"{name}: {run} left no best.pt")
            return
        data = [f"data.root={self.work / 'evaldata'}"] if self.dry else []
        self.step(name, lambda r: r.call([
            self.py, str(HERE / "tasks.py"), "evaluate",
            str(self.work / run / "checkpoints" / "best.pt"), str(self.work / run),
            f"device={self.device}", *self.o["eval"], *data]))

    def nccl(self, run: StepRun) -> int:
        """all_reduce over the first backend with 2 ranks; on CUDA where NCCL refuses, NCCL with
        1 rank, then gloo with 2 (:func:`nccl_tries`), each in (time left) / (tries left). The
        backend that worked with 2 ranks goes to WORK/ddp_backend."""
        (self.work / "ddp_backend").unlink(missing_ok=True)
        outcome, tries = {}, nccl_tries(self.device)
        for i, (backend, ranks) in enumerate(tries):
            seconds = try_seconds(run.left(), len(tries) - i)
            cmd = [self.py, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={ranks}", str(HERE / "nccl_check.py")]
            env = {"DC_BACKEND": backend, "DC_DEVICE": self.device,
                   "DC_PG_TIMEOUT": str(pg_timeout(seconds))}
            outcome[backend, ranks] = run.call(cmd, seconds, env) == 0
            if outcome[backend, ranks] and ranks == 2:
                (self.work / "ddp_backend").write_text(backend + "\n")
                break
            if backend == "nccl" and ranks == 2:
                with run.logs[-1].open("a") as f:
                    f.write("device_check: no NCCL with 2 ranks on one device; NCCL with 1 "
                            "rank, then gloo with 2\n")
        two = any(ok for (_, ranks), ok in outcome.items() if ranks == 2)
        return 0 if two and outcome.get(("nccl", 1), True) else 1

    def ddp(self, run: StepRun) -> int:
        """nmt-train with 2 ranks on the one device over :func:`ddp_backend` (ddp_rank.py)."""
        found = (self.work / "ddp_backend").read_text().strip() \
            if (self.work / "ddp_backend").is_file() else None
        backend = ddp_backend(self.device, found)
        env = {"DC_BACKEND": backend, "DC_DEVICE": self.device,
               "DC_PG_TIMEOUT": str(pg_timeout(run.limit))}
        shutil.rmtree(self.work / "ddp", ignore_errors=True)
        args = [f"run_dir={self.work / 'ddp'}", f"device={self.device}", *self.o["common"],
                *self.o["ddp"], *self.extra]
        rc = run.call([self.py, "-m", "torch.distributed.run", "--standalone",
                       "--nproc_per_node=2", str(HERE / "ddp_rank.py"), *args], env=env)
        self.keep("ddp")
        return rc

    def torchrun_ranks(self) -> int:
        """nmt-train's processes under torchrun: 2 with two GPUs as the preflight found them
        (nmt's init_distributed joins NCCL, a device each) and in a dry run (gloo on the CPU),
        else 1 (world 1: nmt joins no process group)."""
        gpus = report.load(self.work / "preflight.json").get("gpus") or 0
        return 2 if self.dry or gpus >= 2 else 1

    def bench(self, run: StepRun) -> int:
        """bench_model.py on transformer_base: eager, then compiled as the preset trains it
        (accumulation: no CUDA graphs); then, in what is left, one micro-batch per step
        (train.accum_steps=1: CUDA graphs on CUDA). The second is not a failure when time cuts
        it (``bench_graphs_tgt_tokens_per_s=None``)."""
        (self.work / "logs" / "bench_graphs.log").unlink(missing_ok=True)   # an earlier call's
        base = [self.py, str(HERE / "tasks.py"), "bench", *self.o["bench"], *self.o["bench_device"]]
        rc = run.call([*base, *(["--compile"] if self.compile else []), *self.extra])
        if rc != 0 or not self.compile:
            return rc
        rc = run.call([*base, "train.accum_steps=1", "train.compile=true", *self.extra],
                      log="bench_graphs")
        if rc == 124:
            self.say("bench: the CUDA-graph variant ran out of the step's time (not a failure)")
            return 0
        return rc

    def static(self, run: StepRun) -> int:
        """static's eager twin (the same batches, ``train.compile=false``, a fixed number of
        steps; cut by its own timeout it is not a failure: its steady.json keeps its figures),
        then static, compiled, on its own clock until the step's limit less :data:`TAIL_S`
        (static_run.py)."""
        twin = min(self.s.scale * TWIN_S, run.left() / 3)
        tail = str(self.s.scale * TAIL_S)
        rc = self.train(run, "static_eager", [], [str(HERE / "static_run.py"), str(int(twin)),
                                                  tail], timeout=twin)
        if rc == 124:
            self.say("static: its eager twin ran out of its time (not a failure)")
        elif rc != 0:
            return rc
        return self.train(run, "static", [], [str(HERE / "static_run.py"), str(int(run.left())),
                                              tail])

    def run(self) -> int:
        """Every step of the plan in order, then :meth:`finish`; returns the exit status."""
        s = self.s
        self.say(f"repo {REPO}, out {self.out}, work {self.work}, data {self.data_root}, "
                 f"dry_run={int(self.dry)}")
        self.say(f"plan: {self.plan.line()}")
        wheels = sorted(self.wheels.glob("*.whl"))
        if self.plan.states["install"] == "run" and not wheels:
            self.secs["install"] = 0
            self.say(f"install: no wheels in {self.wheels} (bash scripts/device_prep.sh makes "
                     "them): the installed packages only")
        elif self.plan.states["install"] == "run":
            if self.step("install", lambda r: r.call([
                    self.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--target",
                    str(self.work / "site"), *map(str, wheels)])):
                return self.finish(4)
            self.env["PYTHONPATH"] = self._path(self.work / "site")
        rc = self.step("preflight", lambda r: r.call([
            self.py, str(HERE / "preflight.py"), str(int(self.dry)), str(self.data_root),
            str(self.work / "preflight.json")]))
        if rc == 124:       # a cold disk's first CUDA import: a broken one fails later steps
            self.say("preflight: timed out; the steps go on (each fails on its own if the "
                     "imports are broken)")
        elif rc:
            if rc in (6, 7):
                self.failed[-1] = f"preflight:{'no_cuda' if rc == 6 else 'data'}"
                return self.finish(rc)
            self.failed[-1] = "preflight:imports"
            return self.finish(5)
        if self.dry:        # 50 sentences of each split: beam search of an untrained model
            (self.work / "evaldata").mkdir(exist_ok=True)
            for split in ("val", "test_2016_flickr"):
                for lang in ("de", "en"):
                    with (self.data_root / f"{split}.{lang}").open() as f:
                        head = [next(f, "") for _ in range(50)]
                    (self.work / "evaldata" / f"{split}.{lang}").write_text("".join(head))
        self.step("nccl", self.nccl)
        self.step("syncs", lambda r: r.call([
            self.py, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
            f"--basetemp={self.work / 'pytest'}", "tests/test_throughput.py", "-k", "host_sync"]))
        self.step("data", lambda r: r.call([self.py, str(HERE / "tasks.py"), "data",
                                            *self.o["data"], *self.extra]))
        self.step("ddp", self.ddp)
        self.step("torchrun", lambda r: self.train(r, "torchrun", [], [
            "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={self.torchrun_ranks()}", "-m", "nmt.cli.train"]))
        self.step("base", lambda r: self.train(r, "base", [
            f"train.max_minutes={minutes(r.limit, s.scale * OVERHEAD)}"], ["-m", "nmt.cli.train"]))
        self.evaluate("base")
        self.step("bench", self.bench)
        self.step("static", self.static)
        self.evaluate("static")
        return self.finish()

    def follow_up(self) -> str | None:
        """The follow-up call: the steps left for it, skipped for time, or cut off while
        compiling (their limit doubled), within the device time this call leaves."""
        limits = dict(self.s.limits)
        steps = {s for s in self.deferred + self.skipped if s in CHOOSABLE}
        for failure in self.failed:
            name, _, why = failure.partition(":")
            if name in COMPILE_STEPS and why == "timeout":
                steps.add(name)
                limits[name] = 2 * limits[name]
        if not steps:
            return None
        budget = follow_up_budget(self.s.runner, self.elapsed(), self.s.scale)
        try:
            second = plan(steps, limits, budget)
        except UsageError:
            return None
        runs = [s for s in second.steps("run", "2gpus") if s in CHOOSABLE]
        if not runs:
            return None
        return follow_up_command(runs, budget, limits, self.s.defaults, self.env_given,
                                 str(self.work), self.dry)

    def finish(self, code: int | None = None) -> int:
        """The follow-up call, the report; exit ``code``, else 1 when a step failed, 3 when some
        were skipped or left for the follow-up call, 0."""
        self.next_call = self.follow_up()
        self.report(final=True)
        limit = self.s.runner.file_mib << 20
        if self.log.stat().st_size > limit:       # keep its end: the key line and the last steps
            tail = self.log.read_bytes()[-limit + 100:]
            self.log.write_bytes(b"(device_check.log: its beginning cut to fit the runner)\n"
                                 + tail)
        if code is not None:
            return code
        return 1 if self.failed else 3 if self.skipped or self.deferred else 0


def print_plan(s: Settings, first: Plan, second: Plan | None, env: dict) -> None:
    """``--plan``: each call's plan and work folder, the compile steps' limits when the cheap
    steps take their expected times, the follow-up's command, the device time they take."""
    work = env.get("DEVICE_CHECK_WORK") or "temp"
    print(f"device_check_plan call=1 dry_run={int(s.dry)} DEVICE_CHECK_WORK={work} {first.line()}")
    expected = " ".join(f"{k}={v}" for k, v in expected_limits(first, s.scale).items())
    print(f"device_check_expected {expected or 'none'} (the compile steps' limits when each "
          "cheap step takes its expected time, about 2/3 of its limit)")
    r = s.runner
    if second is None:
        print("device_check_plan call=2 none")
    else:
        runs = [x for x in second.steps() if x in CHOOSABLE]
        print(f"device_check_plan call=2 dry_run={int(s.dry)} DEVICE_CHECK_WORK={work} "
              f"{second.line()}")
        print("next call: " + follow_up_command(runs, second.budget, s.limits, s.defaults,
                                                env, env.get("DEVICE_CHECK_WORK"), s.dry))
    start, overhead = s.scale * r.start_s, s.scale * r.overhead_s
    used = start + overhead + s.budget + (start + overhead + second.budget if second else 0)
    print(f"device_time time={s.scale * r.time_s} start={start} overhead={overhead} "
          f"call1={s.budget} call2={second.budget if second else 0} "
          f"left={s.scale * r.time_s - used}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_check.sh", add_help=False)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--plan", action="store_true")
    parser.add_argument("out_dir", nargs="?")
    args, unknown = parser.parse_known_args(argv)
    try:
        if unknown:
            raise UsageError(f"unknown option {unknown[0]} (see --help)")
        settings = Settings.from_env(args.dry_run)
        first, second = plan_calls(settings.chosen, settings.limits, settings.budget,
                                   settings.runner, settings.scale)
    except UsageError as err:
        print(f"device_check.sh: error: {err}", file=sys.stderr)
        return 2
    if args.plan:
        print_plan(settings, first, second, dict(os.environ))
        return 0
    out = Path(args.out_dir or os.environ.get("OUT") or "device_check")
    return Check(settings, first, out, dict(os.environ)).run()

