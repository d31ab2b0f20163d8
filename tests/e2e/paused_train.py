"""Kill-and-resume tests' ``nmt-train``: the real command, paused at a chosen step so that the
test SIGKILLs it from outside at a known point, with nothing test-only in the training loop.

    python tests/e2e/paused_train.py ARGS                 # or as torchrun's training script

With ``PAUSE_ENV=k`` each process, about to take optimizer step k + 1 (step k's checkpoint, if
any, written), writes its pid to ``<PAUSE_DIR_ENV>/rank<r>.pid`` and waits. :func:`kill_when_paused`
waits for every rank's file and SIGKILLs them. With ``PAUSE_RANK_ENV=r`` only rank r pauses (the
others wait for it in the next all-reduce), and only in torchrun's first attempt: the worker
group that torchrun restarts runs to the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PAUSE_ENV, PAUSE_DIR_ENV, PAUSE_RANK_ENV = ("NMT_TEST_PAUSE_AT_STEP", "NMT_TEST_PAUSE_DIR",
                                           "NMT_TEST_PAUSE_RANK")


def popen(cmd: list[str], pause_at: int, pause_dir: Path, env: dict,
          rank: int | None = None) -> subprocess.Popen:
    """Start ``cmd`` (which runs this script) paused at step ``pause_at`` (every rank, or
    ``rank`` alone); its stdout and stderr go to ``pause_dir/out.txt`` (a pipe could fill up
    and block it)."""
    pause_dir.mkdir(parents=True, exist_ok=True)
    env = {**env, PAUSE_ENV: str(pause_at), PAUSE_DIR_ENV: str(pause_dir)}
    if rank is not None:
        env[PAUSE_RANK_ENV] = str(rank)
    with open(pause_dir / "out.txt", "w") as out:
        return subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[2], env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)


def kill_when_paused(proc: subprocess.Popen, pause_dir: Path, ranks: int = 1,
                     deadline_s: float = 300.0) -> int:
    """Poll ``pause_dir`` until all ``ranks`` processes have paused, SIGKILL them and return
    ``proc``'s exit status. Fails if ``proc`` ends first or the deadline passes."""
    end = time.monotonic() + deadline_s
    while len(pids := sorted(pause_dir.glob("rank*.pid"))) < ranks:
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            proc.wait()
            raise AssertionError(f"exit {proc.returncode} before the pause:\n"
                                 + (pause_dir / "out.txt").read_text()[-3000:])
        time.sleep(0.05)                         # the polling interval, not a timing
    for pid in pids:
        os.kill(int(pid.read_text()), signal.SIGKILL)
    return proc.wait(timeout=deadline_s)


def _pause_before(train_step, at: int, pause_dir: Path, rank: str | None):
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

    def paused(self, *args, **kwargs):
        if self.state.step == at and first_attempt and rank in (None, str(self.info.rank)):
            tmp = pause_dir / f".rank{self.info.rank}.tmp"
            tmp.write_text(str(os.getpid()))
            tmp.replace(pause_dir / f"rank{self.info.rank}.pid")
            threading.Event().wait()             # until SIGKILLed
        return train_step(self, *args, **kwargs)
    return paused


if __name__ == "__main__":
    from nmt.cli.train import main
    from nmt.training.trainer import Trainer

    Trainer.train_step = _pause_before(Trainer.train_step, int(os.environ[PAUSE_ENV]),
                                       Path(os.environ[PAUSE_DIR_ENV]),
                                       os.environ.get(PAUSE_RANK_ENV))
    sys.exit(main(sys.argv[1:]))
