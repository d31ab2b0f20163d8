"""Print the table of a sweep (``nmt-train -m ...``) again: one row per job.

    python scripts/sweep_table.py sweeps/2026-11-22_10-00-00

Columns: the job's directory, its overrides (those shared by every job are printed above the
table), steps, best validation BLEU and its step, training tokens/s and minutes, and the
stop reason ("not finished" for a job without summary.json). The same table that
``nmt-train -m`` prints when the sweep ends (:mod:`nmt.training.run`).
"""

from __future__ import annotations

import sys

from nmt.cli.common import exit_on_user_error
from nmt.cli.sweep import sweep_table
from nmt.config import ConfigError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise ConfigError("give one sweep directory: python scripts/sweep_table.py SWEEP_DIR")
    print(sweep_table(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error("sweep_table.py", lambda: main(sys.argv[1:])))
