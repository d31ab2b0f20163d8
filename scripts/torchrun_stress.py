"""Launch a tiny ``nmt-train`` under ``torchrun`` N times; count clean exits, aborts and hangs.

Usage::

    python scripts/torchrun_stress.py [--runs 100] [--nproc 2] [--timeout 120] [overrides...]

    python scripts/torchrun_stress.py --runs 100                  # Multi30k de-en, 400 pairs
    python scripts/torchrun_stress.py --runs 20 data.root=DIR     # another corpus

Each launch is ``python -m torch.distributed.run --standalone --nproc_per_node=NPROC -m
nmt.cli.train`` of a dim-16 Transformer for ``train.max_steps=4`` (gloo on the CPU; a fresh
run directory, one shared tokenizer cache) under a wall-clock ``--timeout``. A launch is

- ``clean``: exit status 0 and every rank's ``done`` line logged;
- ``abort``: a rank ended by a signal (torchrun reports ``exitcode: -N``, e.g. -6 SIGABRT
  at interpreter exit) after training finished;
- ``hang``: still running at the timeout (killed, process group and all);
- ``fail``: any other non-zero exit (the log names it).

The output of every launch that was not clean is kept under ``--keep`` (default: a new
temporary folder). The last line printed holds ``runs clean abort hang fail`` as
``key=value`` pairs; the exit status is 0 only if every launch was clean. Not run by CI: it
measures how often a rare exit race happens (the target is 0 of 100).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = ["data.max_train_pairs=400", "data.tokenizer.vocab_size=200", "model.d_model=16",
        "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1", "model.decoder_layers=1",
        "train.batch_tokens=512", "train.max_steps=4", "train.eval_every_steps=2",
        "train.log_every_steps=1", "search.max_len_b=3", "search.max_len_a=0.5",
        "train.log_figures=false", "device=cpu", "train.precision=fp32"]


def launch(args: list[str], nproc: int, timeout: float, out: Path) -> str:
    """One launch, its output in ``out``; returns its outcome (module docstring)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "nmt.cli.train", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1"}
    with open(out, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "hang"
    text = out.read_text(errors="replace")
    if status == 0:
        return "clean"
    if re.search(r"exitcode\s*:\s*-\d+", text) and "done (max_steps=" in text:
        return "abort"
    return "fail"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per launch")
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for the output of launches that were not clean")
    parser.add_argument("overrides", nargs="*", help="nmt-train overrides")
    opts = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="torchrun_stress_"))
    keep = opts.keep or work / "kept"
    keep.mkdir(parents=True, exist_ok=True)
    counts = {"clean": 0, "abort": 0, "hang": 0, "fail": 0}
    for i in range(opts.runs):
        args = [*TINY, f"data.cache_dir={work / 'cache'}", f"run_dir={work / f'run{i}'}",
                *opts.overrides]
        t0 = time.monotonic()
        out = work / f"launch{i}.txt"
        outcome = launch(args, opts.nproc, opts.timeout, out)
        counts[outcome] += 1
        if outcome != "clean":
            out.replace(keep / out.name)
        else:
            shutil.rmtree(work / f"run{i}", ignore_errors=True)
        print(f"launch {i + 1}/{opts.runs}: {outcome} in {time.monotonic() - t0:.1f} s",
              flush=True)
    print(f"output of the launches that were not clean: {keep}")
    print(f"runs={opts.runs} " + " ".join(f"{k}={v}" for k, v in counts.items()))
    return 0 if counts["clean"] == opts.runs else 1


if __name__ == "__main__":
    sys.exit(main())
