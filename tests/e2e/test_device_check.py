"""The GPU check (scripts/device_check.sh, the package scripts/device_check/, device_prep.sh;
docs/speed.md): its plan of two calls, the slack rule, the choices it makes on CUDA, its report,
and its dry run on the CPU, step for step what a lent GPU runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, write_corpus

sys.path.insert(0, str(REPO_ROOT / "scripts"))
try:
    from device_check import check, plan, preflight, report
finally:
    sys.path.pop(0)

STEPS = ("install", "preflight", "nccl", "syncs", "data", "ddp", "torchrun", "base", "base_eval",
         "bench", "static", "static_eval")


# ---------------------------------------------------------------------- the plan, in Python
def test_one_call_holds_every_figure_step_and_torchrun_waits_for_two_gpus():
    """Today's runner: 900 s of device time, a 120 s start, 20 s of transfers a call, 600 s a
    command. One call of 585 s holds every step that yields figures, bench and static 150 s each;
    torchrun runs only where the preflight sees two GPUs, in the slack. After it, 175 s are left:
    less than a fresh start and a follow-up's install and preflight need, so none is planned."""
    s = plan.Settings.from_env(False, {})
    first, second = plan.plan_calls(s.chosen, s.limits, s.budget, s.runner)
    assert plan.STEPS == STEPS and second is None
    assert plan.LIMITS == {"install": 10, "preflight": 30, "nccl": 45, "syncs": 20, "data": 20,
                           "ddp": 45, "torchrun": 40, "base": 70, "base_eval": 20, "bench": 150,
                           "static": 150, "static_eval": 20}
    for step, seconds in plan.EXPECTED.items():          # a cheap step: about 1.5 x expected
        assert 1.5 * seconds <= plan.LIMITS[step] < 1.5 * seconds + 5, step
    assert (first.budget, first.planned) == (585, 580)
    assert first.steps() == [x for x in STEPS if x != "torchrun"]
    assert first.steps("2gpus") == ["torchrun"] and first.steps("skip", "next") == []
    # Each cheap step at its expected time: the slack goes to bench (half) and static.
    assert plan.expected_limits(first) == {"bench": 182, "static": 183}
    assert plan.follow_up_budget(s.runner, first.budget) == 35
    # A budget that leaves the rest: the follow-up takes what its own start leaves room for.
    first, second = plan.plan_calls(s.chosen, s.limits, 300, s.runner)
    assert first.steps("next") == ["bench"] and first.steps("skip") == ["static", "static_eval"]
    assert second.budget == 900 - 2 * 120 - 2 * 20 - 300
    assert second.steps() == ["install", "preflight", "bench"]
    # A session with less device time: no follow-up call; what does not fit is skipped.
    first, second = plan.plan_calls(s.chosen, s.limits, 300, plan.Runner(time_s=700))
    assert second is None and first.steps("skip") == ["bench", "static", "static_eval"]


def test_the_compile_steps_share_the_slack_and_torchrun_takes_only_slack():
    """The slack rule: a compile step gets its planned limit plus its share of the slack (bench
    half, static all that is left), at most what is left; other steps their planned limit; a
    2gpus step at most what the later planned steps leave."""
    chosen = {"torchrun", "base", "bench", "static"}
    total = sum(plan.LIMITS[s] for s in ("install", "preflight", "base", "base_eval", "bench",
                                         "static", "static_eval"))
    p = plan.plan(chosen, plan.LIMITS, total + plan.RESERVE)
    assert p.planned == total and p.steps("skip") == [] and p.steps("2gpus") == ["torchrun"]
    later = plan.LIMITS["static"] + plan.LIMITS["static_eval"]
    on_time = later + plan.LIMITS["bench"]                # every earlier step took its limit
    assert plan.step_limit("bench", p, on_time) == 150
    assert plan.step_limit("bench", p, on_time + 50) == 150 + 25        # base: 50 s early
    assert plan.step_limit("static", p, later + 70) == 150 + 70         # bench: 70 s early
    assert plan.step_limit("base_eval", p, on_time + 500) == 20
    assert plan.step_limit("bench", p, 100) == 100        # late: what is left, no more
    before_base = total - 30 - 10                          # install and preflight took 40 s
    assert plan.step_limit("torchrun", p, before_base) == 0             # no slack: no torchrun
    assert plan.step_limit("torchrun", p, before_base + 25) == 25
    assert plan.step_limit("torchrun", p, before_base + 90) == 40
    p.states["static"] = p.states["static_eval"] = "skip"     # nothing planned after bench
    assert plan.step_limit("bench", p, 300) == 300


def test_follow_up_budget_and_its_exact_command():
    r = plan.Runner()
    assert plan.follow_up_budget(r, 585) == 35            # 900 - 2 x 120 - 2 x 20 - 585
    assert plan.follow_up_budget(r, 300) == 320
    assert plan.follow_up_budget(r, 0) == 585             # at most a call's budget (600 - 15)
    assert plan.follow_up_budget(r, 800) == 0
    assert plan.follow_up_budget(r, 1000, scale=2) == 240  # a dry run: every time doubled
    limits = {**plan.LIMITS, "bench": 270}
    env = {"DEVICE_CHECK_OVERRIDES": "train.lr=1e-3 data.x=1", "HOME": "/root",
           "DEVICE_RUNNER_TIME_S": "1200"}
    assert plan.follow_up_command(["bench", "static"], 200, limits, plan.LIMITS, env, "/tmp/w x",
                                  dry=False) == (
        "DEVICE_CHECK_STEPS=bench,static DEVICE_CHECK_BUDGET=200 DEVICE_CHECK_LIMITS=bench=270 "
        "DEVICE_CHECK_WORK='/tmp/w x' DEVICE_CHECK_OVERRIDES='train.lr=1e-3 data.x=1' "
        "DEVICE_RUNNER_TIME_S=1200 bash scripts/device_check.sh")


def test_settings_come_from_the_environment_with_todays_runner_as_default():
    assert plan.Runner.from_env({}) == plan.Runner(900, 120, 600, 20, 8, 16, 64)
    s = plan.Settings.from_env(False, {"DEVICE_RUNNER_CALL_S": "300",
                                       "DEVICE_CHECK_LIMITS": "bench=200,data=9"})
    assert s.budget == 285 and s.limits["bench"] == 200 and s.limits["data"] == 9
    dry = plan.Settings.from_env(True, {"DEVICE_CHECK_STEPS": "base"})
    assert dry.limits["bench"] == 2 * plan.LIMITS["bench"] and dry.chosen == {"base"}
    assert dry.budget == sum(dry.limits.values()) + plan.RESERVE     # a dry run holds every step
    for env, words in [({"DEVICE_RUNNER_TIME_S": "15m"}, "DEVICE_RUNNER_TIME_S=15m"),
                       ({"DEVICE_RUNNER_FILES": "1"}, "results.json"),
                       ({"DEVICE_CHECK_BUDGET": "700"}, "DEVICE_RUNNER_CALL_S=600"),
                       ({"DEVICE_CHECK_BUDGET": "40"}, "alone need 45 s"),
                       ({"DEVICE_CHECK_LIMITS": "bench=2m"}, "'bench=2m' is not STEP=SECONDS"),
                       ({"DEVICE_CHECK_LIMITS": "foo=2"}, "no step 'foo'"),
                       ({"DEVICE_CHECK_STEPS": "base,foo"}, "no step 'foo'")]:
        with pytest.raises(plan.UsageError, match=re.escape(words)):
            s = plan.Settings.from_env(False, env)
            plan.plan_calls(s.chosen, s.limits, s.budget, s.runner)


# ---------------------------------------------------------------------- CUDA's choices, timeouts
def test_ddp_falls_back_to_gloo_on_cuda_and_each_try_has_its_share_of_the_time():
    assert check.ddp_backend("cuda", "nccl") == "nccl"    # NCCL ran two ranks on one device
    assert check.ddp_backend("cuda", "gloo") == "gloo"    # NCCL refused: gloo on CUDA tensors
    assert check.ddp_backend("cuda", None) == "gloo"      # the nccl step did not run: never NCCL
    assert check.ddp_backend("cpu", None) == "gloo"
    assert check.nccl_tries("cuda") == [("nccl", 2), ("nccl", 1), ("gloo", 2)]
    assert check.nccl_tries("cpu") == [("gloo", 2)]
    # (time left) / (tries left): 45 s, then the 10 s that NCCL's refusal took
    assert [check.try_seconds(45, 3), check.try_seconds(35, 2), check.try_seconds(17.5, 1)] == \
        [15, 17, 17]
    assert check.pg_timeout(60) == 30 and check.pg_timeout(11) == 10


def test_a_process_past_its_timeout_is_stopped_with_its_children(tmp_path):
    run = check.StepRun("nccl", 60, tmp_path, dict(os.environ))
    start = time.monotonic()
    rc = run.call(["bash", "-c", f"sleep 30 & echo $! > {tmp_path / 'child'}; wait"], timeout=1)
    assert rc == 124 and time.monotonic() - start < 15
    child = Path(f"/proc/{(tmp_path / 'child').read_text().strip()}/status")
    for _ in range(50):        # the whole process group got SIGTERM: the sleep ends too
        if not child.exists() or "State:\tZ" in child.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the child of a stopped step still runs")
    assert "(stopped after 1 s)" in (tmp_path / "nccl.log").read_text()
    assert run.call(["true"], log="other") == 0 and (tmp_path / "other.log").is_file()
    run.deadline = time.monotonic()                       # the step's time is spent
    assert run.call(["true"]) == 124


# ---------------------------------------------------------------------- the report
def test_the_report_reads_the_runs_the_bench_and_the_logs(tmp_path):
    work = tmp_path
    (work / "static").mkdir()
    (work / "logs").mkdir()
    (work / "static" / "summary.json").write_text(json.dumps({
        "steps": 4000, "train_tokens_per_s": 90000.04, "mfu": 0.21, "best_bleu": 35.1}))
    (work / "static" / "steady.json").write_text(json.dumps({
        "shapes": 12, "ready_step": 150, "last_step": 4000, "first_step_s": 61.5, "graphs": 3,
        "compile_s": 41.25, "cudagraph_skips": 0,
        "steady": {"from_step": 150, "to_step": 4000, "steps": 3850, "seconds": 30.2,
                   "tokens_per_s": 123456.0, "mfu": 0.3123, "graphs_after": 0, "skips_after": 0,
                   "shapes_after": 1}}))
    (work / "static_eager").mkdir()
    (work / "static_eager" / "steady.json").write_text(json.dumps({
        "steady": {"from_step": 100, "to_step": 200, "steps": 100, "tokens_per_s": 61728.0}}))
    (work / "logs" / "bench.log").write_text(
        "eager: eager_tgt_tokens_per_s=1000.5 eager_mfu=0.25 batches=20\n"
        "model=transformer compiled_tgt_tokens_per_s=1500 compiled_mfu=0.37 cuda_graphs=False\n")
    (work / "logs" / "bench_graphs.log").write_text(
        "model=transformer tgt_tokens_per_s=1800 mfu=0.44 compile_s=50.1 cuda_graphs=True\n"
        "inductor: cudagraph_skips=2\n")
    (work / "logs" / "nccl.log").write_text("rank 0: all_reduce ok: nccl world 1 on cuda:0\n"
                                            "rank 1: all_reduce ok: gloo world 2 on cuda:0\n")
    (work / "logs" / "ddp.log").write_text("rank 0 of 2: ddp on gloo, process group joined by "
                                           "check, on cuda\n")
    (work / "base").mkdir()                  # a first call's run, in a follow-up's work folder
    (work / "base" / "summary.json").write_text(json.dumps({"steps": 700}))
    status = {"secs": {"nccl": 30, "ddp": 41, "base": "next", "bench": 120, "static": 97},
              "failed": "none", "budget": 540}
    line = report.collect(work, False, status)["line"]
    assert (line["static_steps"], line["static_steady_from"], line["static_steady_mfu"]) == \
        (4000, 150, 0.3123)
    assert (line["static_steady_steps"], line["static_steady_s"], line["static_shapes"]) == \
        (3850, 30.2, 12)
    assert (line["static_graphs"], line["static_compile_s"], line["static_cudagraph_skips"]) == \
        (3, 41.25, 0)
    assert (line["static_steady_graphs_after"], line["static_steady_shapes_after"]) == (0, 1)
    assert line["static_eager_steady_tokens_per_s"] == 61728.0 and line["static_speedup"] == 2.0
    assert line["bench_graphs_cudagraph_skips"] == "2"
    assert line["bench_eager_tgt_tokens_per_s"] == "1000.5" and line["bench_compiled_mfu"] == "0.37"
    assert line["bench_cuda_graphs"] == "False" and line["bench_graphs_cuda_graphs"] == "True"
    assert line["bench_graphs_mfu"] == "0.44" and line["base_steps"] is None
    assert (line["nccl"], line["ddp_backend"], line["ddp_joined_by"], line["nmt_nccl"]) == \
        ("1rank", "gloo", "check", "no")
    assert line["static_s"] == 97 and line["base_s"] == "next" and line["budget"] == 540
    words = report.key_line(line).split()
    assert words[0] == "device_check" and "static_tokens_per_s=90000" in words
    assert "static_steady_tokens_per_s=123456" in words and "gpu=-" in words
    # A static run cut by its step's limit: no summary.json, its last log line's steady window.
    (work / "static" / "summary.json").unlink()
    line = report.collect(work, False, status)["line"]
    assert line["static_steps"] is None and line["static_last_step"] == 4000
    assert line["static_steady_tokens_per_s"] == 123456.0 and line["static_speedup"] == 2.0


def test_the_preflight_names_each_missing_or_uneven_data_file(tmp_path):
    write_corpus(tmp_path, {"train": 3, "val": 2})
    (tmp_path / "val.en").write_text("one\n")
    lines, problems = preflight.check_data(tmp_path)
    assert lines == {"train.de": 3, "train.en": 3, "val.de": 2, "val.en": 1}
    assert problems == [f"{tmp_path}/val.de has 2 lines, val.en 1",
                        f"{tmp_path}/test_2016_flickr.de is missing or empty",
                        f"{tmp_path}/test_2016_flickr.en is missing or empty"]
    assert preflight.requirements('x\ndependencies = [\n  "torch>=2.3",\n  "numpy",\n]\n') == \
        {"torch": "2.3"}


# ---------------------------------------------------------------------- the script itself
def _device_check(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """scripts/device_check.sh ARGS in tmp_path, on tmp_path/corpus, work and cache in tmp_path."""
    return subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "device_check.sh"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "NMT_DATA_ROOT": str(tmp_path / "corpus"),
             "NMT_CACHE_DIR": str(tmp_path / "cache"), "DEVICE_CHECK_WORK": str(tmp_path / "w"),
             "DEVICE_CHECK_OVERRIDES": "data.tokenizer.vocab_size=120", **env})


def _line(proc: subprocess.CompletedProcess, prefix: str = "device_check ") -> dict[str, str]:
    """The key=value words of the last stdout line that starts with ``prefix``."""
    lines = [x for x in proc.stdout.splitlines() if x.startswith(prefix)]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(kv.split("=", 1) for kv in lines[-1].split() if "=" in kv)


def _next_call(proc: subprocess.CompletedProcess) -> str:
    return next(x for x in proc.stdout.splitlines() if "next call: " in x).split("next call: ")[1]


def _plan_of(command: str, tmp_path) -> subprocess.CompletedProcess:
    """``--plan`` of a documented or printed command: its VAR=VALUE words as the environment."""
    words = shlex.split(command)
    env = dict(w.split("=", 1) for w in words[:words.index("bash")])
    assert words[words.index("bash") + 1] == "scripts/device_check.sh", command
    return _device_check(tmp_path, *words[words.index("bash") + 2:], "--plan", **env)


def _device_files(out) -> list[str]:
    """The files a device run would bring back from OUT_DIR: at most 8, at most 2 folders down,
    named in letters, digits, '.', '_' and '-'."""
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8, files
    for name in files:
        parts = name.split("/")
        assert len(parts) <= 3, name
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in parts), name
    return files


@pytest.mark.slow
def test_device_check_dry_run_runs_every_step_on_cpu_and_prints_one_line(tmp_path):
    """--dry-run: the GPU check's steps with a tiny model on CPU (what a lent GPU runs, step for
    step: a 2-rank gloo all_reduce, the host-sync test, the data caches, a DDP training with
    WORLD_SIZE 2 whose process group nmt joins itself, nmt-train under torchrun with 2 processes
    (the CPU stands in for two GPUs), base, bench, static's eager twin and static with its
    steady window, the evaluations), each step's seconds and limit (bench's and static's raised
    by the slack the steps before them left), its files and the last line."""
    write_corpus(tmp_path / "corpus", {"train": 200, "val": 20, "test_2016_flickr": 20})
    out = tmp_path / "out"
    proc = _device_check(tmp_path, "--dry-run", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = _line(proc)
    assert line["failed"] == line["skipped"] == line["next"] == "none" and line["dry_run"] == "1"
    assert line["nccl"] == line["syncs"] == "ok"      # gloo all_reduce; the host-sync test
    assert (line["ddp_world"], line["ddp_backend"], line["ddp_joined_by"]) == ("2", "gloo", "nmt")
    assert line["torchrun_world"] == "2" and line["torchrun_steps"] == "2"
    assert line["nmt_nccl"] == "no"                    # no NCCL on a CPU
    assert (line["base_steps"], line["static_steps"], line["ddp_steps"]) == ("4", "40", "3")
    # static's steady window: from the first log line (every 4 steps) with every batch shape
    # ready (eager: after one step each) to its last step; nothing compiled or recorded after
    ready = int(line["static_ready_step"])
    assert ready % 4 == 0 and 4 <= ready < 40 and int(line["static_shapes"]) >= 1
    assert (line["static_steady_from"], line["static_steady_to"]) == (str(ready), "40")
    assert line["static_steady_steps"] == str(40 - ready) and line["static_last_step"] == "40"
    assert line["static_steady_graphs_after"] == line["static_steady_shapes_after"] == "0"
    assert line["static_cudagraph_skips"] == "0" and line["static_graphs"] == "0"
    assert float(line["static_first_step_s"]) > 0
    assert int(line["static_eager_steady_steps"]) == 16 - ready     # the twin: 16 steps
    for key in ("base_val_bleu", "base_test_bleu", "static_test_bleu", "decode_test_beam5_s",
                "base_mfu", "static_mfu", "static_steady_mfu", "static_steady_tokens_per_s",
                "static_eager_steady_tokens_per_s", "static_speedup", "static_pad_pct",
                "bench_tgt_tokens_per_s", "bench_mfu", "bench_pad_share"):
        assert float(line.get(key, line.get(key.replace("mfu", "matmul_util")))) >= 0, key
    limits = {}
    for step in STEPS:                                 # every step ran, and took this long
        assert line[f"{step}_s"].isdigit(), (step, line[f"{step}_s"])
        if step != "install":                          # no wheels here: nothing to install
            found = re.search(rf"\] {step}: rc=0 in \d+s \(limit (\d+)s\)", proc.stdout)
            assert found, step
            limits[step] = int(found.group(1))
    assert limits["bench"] > 2 * plan.LIMITS["bench"] and limits["base"] == 2 * plan.LIMITS["base"]
    assert limits["static"] > 2 * plan.LIMITS["static"]
    assert "next call: none" in proc.stdout
    assert _device_files(out) == [
        "base/summary.json", "base/train.log", "ddp/summary.json", "ddp/train.log",
        "device_check.log", "results.json", "static/summary.json", "static/train.log"]
    results = json.loads((out / "results.json").read_text())
    assert results["line"]["failed"] == "none" and results["next_call"] is None
    assert results["static"]["watch"]["steady"]["to_step"] == 40
    assert "static batch lengths: source" in (out / "static" / "train.log").read_text()
    assert "device_check: first optimizer step done" in (out / "device_check.log").read_text()


@pytest.mark.slow
def test_device_check_plan_is_one_call_and_a_small_budget_leaves_the_rest_to_a_follow_up(tmp_path):
    """--plan: one call holds every step that yields figures, bench and static 150 s each, no
    follow-up; a dry run with a budget that holds only the first steps leaves the others to the
    follow-up call (exit 3), prints its exact command, and that command plans those steps."""
    proc = _device_check(tmp_path, "--plan", DEVICE_CHECK_WORK="")
    first = _line(proc, "device_check_plan call=1")
    assert "device_check_plan call=2 none" in proc.stdout
    assert (first["budget"], first["planned"], first["DEVICE_CHECK_WORK"]) == ("585", "580", "temp")
    assert all(first[s].isdigit() for s in STEPS if s != "torchrun")
    assert first["torchrun"] == "2gpus" and int(first["bench"]) == int(first["static"]) == 150
    assert sum(int(first[s]) for s in STEPS if s != "torchrun") == 580
    assert _line(proc, "device_check_expected") == {"bench": "182", "static": "183"}
    assert _line(proc, "device_time") == {"time": "900", "start": "120", "overhead": "20",
                                          "call1": "585", "call2": "0", "left": "175"}

    dry = _line(_device_check(tmp_path, "--dry-run", "--plan"), "device_check_plan call=1")
    budget = sum(int(dry[step]) for step in ("install", "preflight", "nccl")) + int(dry["reserve"])
    write_corpus(tmp_path / "corpus", {"train": 50, "val": 5, "test_2016_flickr": 5})
    out = tmp_path / "out"
    proc = _device_check(tmp_path, "--dry-run", str(out), DEVICE_CHECK_BUDGET=str(budget),
                         DEVICE_CHECK_STEPS="nccl,syncs,data")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = _line(proc)
    assert line["failed"] == "none" and line["nccl"] == "ok" and line["preflight_s"].isdigit()
    assert line["next"] == "syncs,data" and line["skipped"] == "none"
    assert (line["syncs_s"], line["data_s"], line["bench_s"]) == ("next", "next", "-")
    assert proc.stdout.count("left for the follow-up call") == 2
    assert _device_files(out) == ["device_check.log", "results.json"]
    follow = _next_call(proc)
    assert follow.startswith("DEVICE_CHECK_STEPS=syncs,data DEVICE_CHECK_BUDGET=")
    assert f"DEVICE_CHECK_WORK={tmp_path / 'w'}" in follow and follow.endswith(" --dry-run")
    planned = _line(_plan_of(follow, tmp_path), "device_check_plan call=1")
    assert [s for s in STEPS if planned[s].isdigit()] == ["install", "preflight", "syncs", "data"]


@pytest.mark.slow
def test_a_preflight_timeout_is_logged_and_the_steps_go_on(tmp_path):
    """A preflight past its limit (a cold disk's first CUDA import; here a sitecustomize that
    sleeps in the preflight's process) fails, and the next steps run."""
    write_corpus(tmp_path / "corpus", {"train": 50, "val": 5, "test_2016_flickr": 5})
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import sys, time\nif sys.argv[0].endswith('preflight.py'):\n    time.sleep(60)\n")
    proc = _device_check(tmp_path, "--dry-run", str(tmp_path / "out"), DEVICE_CHECK_STEPS="nccl",
                         DEVICE_CHECK_LIMITS="preflight=5",
                         PYTHONPATH=f"{slow}:{os.environ.get('PYTHONPATH', '')}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = _line(proc)
    assert line["failed"] == "preflight:timeout" and line["nccl"] == "ok"
    assert "preflight: timed out; the steps go on" in proc.stdout


@pytest.mark.slow
def test_static_runs_on_its_own_clock_from_its_first_step(tmp_path):
    """static_run.py with its time already spent: the first optimizer step runs (setup and
    compile never cut the steps), then the clock stops the run with its validation and
    summary; steady.json has its counters (no steady window after one step)."""
    corpus = write_corpus(tmp_path / "corpus", {"train": 50, "val": 5, "test_2016_flickr": 5})
    args = [f"run_dir={tmp_path / 'run'}", "device=cpu", f"data.root={corpus}",
            "data.tokenizer.vocab_size=120", "model.d_model=16", "model.heads=2",
            "model.ff_dim=32", "model.encoder_layers=1", "model.decoder_layers=1",
            "train.max_steps=1000", "train.log_every_steps=1", "train.shape_buckets=2",
            "train.batch_tokens=512", "train.log_figures=false", "search.max_len_b=3"]
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "device_check" /
                                               "static_run.py"), "0", "0", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NMT_CACHE_DIR": str(tmp_path / "cache"),
                               "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["stop_reason"] == "device check: time up at 0 s"
    watch = json.loads((tmp_path / "run" / "steady.json").read_text())
    assert (watch["last_step"], watch["ready_calls"], watch.get("steady")) == (1, 1, None)


def test_device_check_usage_errors_are_one_line(tmp_path):
    for env in ({"DEVICE_CHECK_STEPS": "foo"}, {"DEVICE_RUNNER_CALL_S": "ten"}):
        proc = _device_check(tmp_path, "--plan", **env)
        assert proc.returncode == 2 and proc.stderr.startswith("device_check.sh: error:")
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = _device_check(tmp_path, "--fast")
    assert proc.returncode == 2 and "unknown option --fast" in proc.stderr


def test_the_commands_in_docs_speed_md_fit_their_budgets(tmp_path):
    """Every `bash scripts/device_check.sh` command in docs/speed.md plans every step it chooses
    (none skipped for time or left over)."""
    docs = (REPO_ROOT / "docs" / "speed.md").read_text()
    commands = re.findall(r"`((?:[A-Z_]+=\S+ )*bash scripts/device_check\.sh[^`]*)`", docs)
    assert len(commands) >= 4, commands
    for command in commands:
        proc = _plan_of(command, tmp_path)
        assert proc.returncode == 0, (command, proc.stderr)
        first = _line(proc, "device_check_plan call=1")
        if "DEVICE_CHECK_STEPS=" in command:
            assert not {"skip", "next"} & set(first.values()), (command, first)


@pytest.mark.slow
def test_device_prep_copies_the_data_and_prints_the_device_call(tmp_path):
    """scripts/device_prep.sh --no-download (no network) in a scratch repository: the Multi30k
    files into the git-ignored data/multi30k, the carry list, the size that would travel and
    the command; without the data, one error naming the missing file."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    prep = (REPO_ROOT / "scripts" / "device_prep.sh").read_text()
    (repo / "scripts" / "device_prep.sh").write_text(prep)
    (repo / ".gitignore").write_text((REPO_ROOT / ".gitignore").read_text())
    (repo / "README.md").write_text("tracked\n")
    (repo / "device_wheels").mkdir()
    (repo / "device_wheels" / "omegaconf-2.3.1-py3-none-any.whl").write_bytes(b"PK")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    corpus = write_corpus(tmp_path / "corpus", {"train": 30, "val": 5, "test_2016_flickr": 5})

    def prep(root, **env):
        return subprocess.run(["bash", "scripts/device_prep.sh", "--no-download"], cwd=repo,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "NMT_DATA_ROOT": str(root), **env})

    proc = prep(corpus)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            name = f"{split}.{lang}"
            assert (repo / "data" / "multi30k" / name).read_bytes() == (corpus / name).read_bytes()
    lines = proc.stdout.splitlines()
    carry = next(x for x in lines if x.strip().startswith("carry:"))
    assert json.loads(carry.split(":", 1)[1]) == ["device_wheels", "data/multi30k"]
    assert "  command: bash scripts/device_check.sh" in lines and "  timeout_s: 600" in lines
    travels = next(x for x in lines if x.startswith("device_prep: travels "))
    assert 0 <= float(travels.split()[2]) < 1         # MiB: a README, a wheel, 40 pairs
    assert "(the device's limit: 64 MiB)" in travels and "not git-ignored" not in proc.stdout
    # The runner's limits are settings: a smaller carry limit refuses what travels.
    proc = prep(corpus, DEVICE_RUNNER_CARRY_MIB="0", DEVICE_RUNNER_CALL_S="300")
    assert proc.returncode == 1 and "more than the 0 MiB kept" in proc.stderr

    proc = prep(tmp_path / "nowhere")
    assert proc.returncode == 2 and f"{tmp_path / 'nowhere'}/train.de" in proc.stderr
