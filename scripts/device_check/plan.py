"""The device check's time: its steps and their limits, the runner's limits, the plan of the
first call and of a follow-up call, and the slack rule.

Times are whole seconds. A plan takes the chosen steps in :data:`STEPS` order while their
limits fit in the call's budget less :data:`RESERVE`; a step that does not fit goes to a
follow-up call when the device time left after this call can start one and hold it (``next``),
else it is skipped for time (``skip``). ``torchrun`` is planned outside the budget (``2gpus``):
it runs only where the preflight sees two GPUs, in the slack the steps before it leave. At run
time a compile step (:data:`COMPILE_STEPS`) takes its share of that slack (:func:`step_limit`).
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field

# The steps in the order they run; an evaluation runs with its training.
STEPS = ("install", "preflight", "nccl", "syncs", "data", "ddp", "torchrun", "base", "base_eval",
         "bench", "static", "static_eval")
ALWAYS = ("install", "preflight")                  # every call runs them
CHOOSABLE = ("nccl", "syncs", "data", "ddp", "torchrun", "base", "bench", "static")
COMPILE_STEPS = ("bench", "static")                # they take the slack of the steps before
TWO_GPUS = ("torchrun",)                           # only with two GPUs, from the slack
# What a cheap step is expected to take on the GPU host (seconds; the first CUDA import from a
# cold disk in the preflight, NCCL's fallback tries in nccl); its limit is about 1.5 times that.
EXPECTED = {"install": 6, "preflight": 20, "nccl": 30, "syncs": 13, "data": 13, "ddp": 30,
            "torchrun": 25, "base_eval": 13, "static_eval": 13}
# Planned limits on the GPU: the cheap steps' 1.5 x EXPECTED, rounded up to 5 s; base trains
# for its limit less its start-up and validation; bench: a cold torch.compile of
# transformer_base (about 90 s assumed on the GPU host, docs/speed.md) and its eager and
# compiled timing, its CUDA-graph variant in what is left; static: its eager twin (200 steps),
# the compile of model=transformer, a graph recording per batch shape, then steady steps until
# its limit less the validation.
LIMITS = {**{s: 5 * math.ceil(1.5 * t / 5) for s, t in EXPECTED.items()},
          "base": 70, "bench": 150, "static": 150}
LIMITS = {s: LIMITS[s] for s in STEPS}
RESERVE = 5          # the report, and the last step's grace between SIGTERM and SIGKILL
CALL_MARGIN = 15     # a call's budget is at most the runner's command limit less this


class UsageError(ValueError):
    """A bad argument or setting: one line, exit status 2."""


def _seconds(env: dict, name: str, default: int) -> int:
    value = env.get(name, "")
    if value == "":
        return default
    if not value.isdigit():
        raise UsageError(f"{name}={value}: give whole seconds (or a whole number)")
    return int(value)


@dataclass(frozen=True)
class Runner:
    """The remote runner's limits (``DEVICE_RUNNER_*``, defaults: today's lent H200 machine):
    device time of a session, a machine's start, one command's limit, a call's transfers,
    the files that come back (count, MiB each) and what may travel (MiB)."""

    time_s: int = 900
    start_s: int = 120
    call_s: int = 600
    overhead_s: int = 20
    files: int = 8
    file_mib: int = 16
    carry_mib: int = 64

    ENV = {"time_s": "DEVICE_RUNNER_TIME_S", "start_s": "DEVICE_RUNNER_START_S",
           "call_s": "DEVICE_RUNNER_CALL_S", "overhead_s": "DEVICE_RUNNER_OVERHEAD_S",
           "files": "DEVICE_RUNNER_FILES", "file_mib": "DEVICE_RUNNER_FILE_MIB",
           "carry_mib": "DEVICE_RUNNER_CARRY_MIB"}

    @classmethod
    def from_env(cls, env: dict) -> Runner:
        """The settings given in ``env``, today's values for the others; UsageError if one is
        not a whole number, or fewer than 2 files come back (the log and results.json)."""
        runner = cls(**{key: _seconds(env, name, getattr(cls, key))
                        for key, name in cls.ENV.items()})
        if runner.files < 2:
            raise UsageError(f"DEVICE_RUNNER_FILES={runner.files}: the check brings back at "
                             "least device_check.log and results.json")
        return runner


@dataclass
class Plan:
    """One call's plan: ``states[step]`` is ``run``, ``2gpus`` (:data:`TWO_GPUS`: in the slack,
    where the preflight sees two GPUs), ``next`` (the follow-up call), ``skip`` (for time) or
    ``-`` (not chosen); ``limits`` what each step is planned to take."""

    budget: int
    limits: dict[str, int]
    states: dict[str, str] = field(default_factory=dict)

    @property
    def planned(self) -> int:
        return sum(self.limits[s] for s in STEPS if self.states.get(s) == "run")

    def steps(self, *states: str) -> list[str]:
        """The steps in one of ``states`` (default: ``run``), in order."""
        return [s for s in STEPS if self.states.get(s) in (states or ("run",))]

    def line(self) -> str:
        """``budget=585 reserve=5 planned=580 install=10 ... torchrun=2gpus ... static=150 ...``."""
        cells = [f"{s}={self.limits[s] if self.states[s] == 'run' else self.states[s]}"
                 for s in STEPS]
        return f"budget={self.budget} reserve={RESERVE} planned={self.planned} " + " ".join(cells)


def plan(chosen: set[str], limits: dict[str, int], budget: int) -> Plan:
    """The steps of ``chosen`` (and :data:`ALWAYS`) in order while their limits fit in
    ``budget - RESERVE``; an evaluation only with its training; :data:`TWO_GPUS` outside the
    budget. UsageError if the install and preflight alone do not fit."""
    p = Plan(budget, dict(limits))
    for s in STEPS:
        training = s.removesuffix("_eval")
        if s not in ALWAYS and training not in chosen:
            p.states[s] = "-"
        elif s in TWO_GPUS:
            p.states[s] = "2gpus"
        elif s != training and p.states[training] != "run":
            p.states[s] = "skip"
        elif p.planned + limits[s] <= budget - RESERVE:
            p.states[s] = "run"
        elif s in ALWAYS:
            need = sum(limits[a] for a in ALWAYS) + RESERVE
            raise UsageError(f"DEVICE_CHECK_BUDGET={budget}: the install and preflight alone "
                             f"need {need} s")
        else:
            p.states[s] = "skip"
    return p


def follow_up_budget(runner: Runner, used: int, scale: int = 1) -> int:
    """Seconds a follow-up call has when the first call took ``used`` seconds: the device time
    less ``used``, two machine starts (the machine goes back after a short idle time) and two
    calls' transfers, at most a call's budget (:data:`CALL_MARGIN` under the command limit);
    ``scale``: 2 in a dry run."""
    left = scale * (runner.time_s - 2 * runner.start_s - 2 * runner.overhead_s) - used
    return max(0, min(left, scale * (runner.call_s - CALL_MARGIN)))


def plan_calls(chosen: set[str], limits: dict[str, int], budget: int, runner: Runner,
               scale: int = 1) -> tuple[Plan, Plan | None]:
    """The first call's plan and the follow-up's (None when no step is left over, or the time
    left cannot start a follow-up that holds one): the steps the first call cannot hold go to
    the follow-up when its budget (:func:`follow_up_budget`, the first call using all of
    ``budget``) holds them."""
    first = plan(chosen, limits, budget)
    left_over = {s for s in first.steps("skip") if s in CHOOSABLE}
    if not left_over:
        return first, None
    try:
        second = plan(left_over, limits, follow_up_budget(runner, budget, scale))
    except UsageError:
        return first, None
    if not [s for s in second.steps() if s not in ALWAYS]:
        return first, None
    for s in second.steps("run"):
        if s not in ALWAYS:
            first.states[s] = "next"
    return first, second


def step_limit(step: str, p: Plan, left: int) -> int:
    """The seconds ``step`` gets now, with ``left`` seconds of the call's budget left (the
    reserve excluded), never more than ``left``: its planned limit; for a ``2gpus`` step at most
    what the later planned steps leave; a compile step adds its share of the slack (``left``
    less the planned limits of itself and the later steps), in proportion to its planned limit
    among the compile steps still to run (bench half, static, the last, all that is left)."""
    later = [s for s in STEPS[STEPS.index(step) + 1:] if p.states[s] == "run"]
    rest = sum(p.limits[s] for s in later)
    limit = p.limits[step]
    if p.states[step] == "2gpus":
        limit = min(limit, left - rest)
    elif step in COMPILE_STEPS:
        slack = left - rest - limit
        compile_ = limit + sum(p.limits[s] for s in later if s in COMPILE_STEPS)
        limit += max(0, slack) * limit // compile_
    return max(0, min(limit, left))


def expected_limits(p: Plan, scale: int = 1) -> dict[str, int]:
    """Each planned compile step's limit (:func:`step_limit`) when every earlier cheap step
    takes ``scale`` times its :data:`EXPECTED` time and the others their limits (``2gpus``
    steps do not run)."""
    used, out = 0, {}
    for s in p.steps():
        limit = step_limit(s, p, p.budget - RESERVE - used)
        if s in COMPILE_STEPS:
            out[s] = limit
        used += min(scale * EXPECTED.get(s, limit), limit)
    return out


# The settings a follow-up call repeats when the first call had them.
CARRIED_ENV = ("DEVICE_CHECK_OVERRIDES", "DEVICE_CHECK_WHEELS", "DEVICE_CHECK_DRY_COMPILE",
               "NMT_DATA_ROOT", "NMT_CACHE_DIR", *Runner.ENV.values())


def follow_up_command(steps: list[str], budget: int, limits: dict[str, int], defaults: dict,
                      env: dict, work: str | None, dry: bool) -> str:
    """The exact command of a follow-up call of ``steps`` (trainings; their evaluations
    follow) within ``budget``: the limits that differ from ``defaults``, the work folder (a
    machine still warm keeps its caches there) and the settings of :data:`CARRIED_ENV`."""
    words = [f"DEVICE_CHECK_STEPS={','.join(steps)}", f"DEVICE_CHECK_BUDGET={budget}"]
    changed = [f"{s}={limits[s]}" for s in STEPS if limits[s] != defaults[s]]
    if changed:
        words.append(f"DEVICE_CHECK_LIMITS={','.join(changed)}")
    if work:
        words.append(f"DEVICE_CHECK_WORK={shlex.quote(work)}")
    words += [f"{name}={shlex.quote(env[name])}" for name in CARRIED_ENV if env.get(name)]
    return " ".join(words + ["bash", "scripts/device_check.sh"] + ["--dry-run"] * dry)


def parse_limits(text: str, limits: dict[str, int]) -> dict[str, int]:
    """``limits`` with ``DEVICE_CHECK_LIMITS``'s ``STEP=SECONDS,...`` applied."""
    out = dict(limits)
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        if not value.isdigit():
            raise UsageError(f"DEVICE_CHECK_LIMITS: '{item}' is not STEP=SECONDS")
        if name not in out:
            raise UsageError(f"DEVICE_CHECK_LIMITS: no step '{name}' ({', '.join(STEPS)})")
        out[name] = int(value)
    return out


def parse_steps(text: str) -> set[str]:
    """``DEVICE_CHECK_STEPS``'s chosen steps."""
    chosen = set(filter(None, text.split(",")))
    for name in sorted(chosen - set(CHOOSABLE)):
        raise UsageError(f"DEVICE_CHECK_STEPS: no step '{name}' ({', '.join(CHOOSABLE)})")
    return chosen


@dataclass
class Settings:
    """What one call runs: ``dry`` (the CPU, a tiny model), the limits (doubled in a dry run),
    the budget, the chosen steps, the runner's limits."""

    dry: bool
    limits: dict[str, int]
    defaults: dict[str, int]
    budget: int
    chosen: set[str]
    runner: Runner
    scale: int

    @classmethod
    def from_env(cls, dry: bool, env: dict | None = None) -> Settings:
        """``DEVICE_CHECK_LIMITS``, ``_BUDGET`` (default: a call's budget; in a dry run every
        step's limit), ``_STEPS`` and ``DEVICE_RUNNER_*`` from ``env`` (os.environ)."""
        env = os.environ if env is None else env
        scale = 2 if dry else 1
        defaults = {s: scale * v for s, v in LIMITS.items()}
        limits = parse_limits(env.get("DEVICE_CHECK_LIMITS", ""), defaults)
        runner = Runner.from_env(env)
        chosen = parse_steps(env.get("DEVICE_CHECK_STEPS", ",".join(CHOOSABLE)))
        default = sum(limits.values()) + RESERVE if dry else runner.call_s - CALL_MARGIN
        budget = _seconds(env, "DEVICE_CHECK_BUDGET", default)
        if not dry and budget > runner.call_s:
            raise UsageError(f"DEVICE_CHECK_BUDGET={budget} is longer than one command may run "
                             f"(DEVICE_RUNNER_CALL_S={runner.call_s})")
        return cls(dry, limits, defaults, budget, chosen, runner, scale)
