"""The multilingual main job's table: every direction of a model before and after its
zero-resource fine-tuning, direct, beside the base model through the pivot.

    python scripts/zero_resource_table.py RUN/eval/test_2016_flickr_pivot RUN/zero_resource/eval

Reads the ``directions.json`` of two ``nmt-evaluate directions=all`` runs (as
``scripts/run_multi30k.sh`` writes them): ``BASE``, the base model's (``pivot=LANG``: each
direction of neither side through it, the others direct), and ``TUNED``, the fine-tuned
model's (direct). Prints a markdown table, a row per direction: its kind for the tuned model
(supervised or zero-resource), the base's BLEU (and whether through the pivot), the tuned
model's BLEU and off-target rate and their difference; then the mean of each kind and the
ratio of the tuned model's direct mean to the base's pivot mean on the zero-resource rows.
A missing or foreign file is a user error (exit status 2) naming it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nmt.cli.common import exit_on_user_error
from nmt.config import ConfigError


def read_rows(out_dir: Path) -> dict[tuple[str, str], dict]:
    """``(src, tgt) -> row`` of ``out_dir/directions.json``. ConfigError: missing or not one."""
    path = out_dir / "directions.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["directions"]
        return {(row["src"], row["tgt"]): row for row in rows}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{path}: not the directions.json of nmt-evaluate directions=all "
                          f"({type(err).__name__}: {err}).") from None


def table(base: dict[tuple[str, str], dict], tuned: dict[tuple[str, str], dict]) -> str:
    """The markdown table of the module docstring over the directions both runs scored."""
    def rate(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines = ["| direction | kind | base BLEU | via | tuned BLEU | off-target % | difference |",
             "|---|---|---:|---|---:|---:|---:|"]
    kinds: dict[str, list[tuple[dict, dict]]] = {}
    for key in (k for k in tuned if k in base):
        b, t = base[key], tuned[key]
        kinds.setdefault(t["direction"], []).append((b, t))
        lines.append(f"| {'-'.join(key)} | {t['direction']} | {b['bleu']:.2f} | "
                     f"{b['pivot'] or 'direct'} | {t['bleu']:.2f} | "
                     f"{rate(t['off_target_percent'])} | {t['bleu'] - b['bleu']:+.2f} |")
    for kind, pairs in kinds.items():
        b = sum(p[0]["bleu"] for p in pairs) / len(pairs)
        t = sum(p[1]["bleu"] for p in pairs) / len(pairs)
        ratio = "" if kind == "supervised" else \
            f" (tuned / base: {t / b:.2f})" if b > 0 else " (tuned / base: n/a)"
        lines.append(f"| mean of {len(pairs)} | {kind} | {b:.2f} | | {t:.2f}{ratio} | | "
                     f"{t - b:+.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise ConfigError("usage: python scripts/zero_resource_table.py BASE_EVAL TUNED_EVAL")
    base, tuned = (read_rows(Path(a)) for a in argv)
    if not any(k in base for k in tuned):
        raise ConfigError(f"{argv[0]} and {argv[1]} share no direction.")
    print(table(base, tuned), end="")


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error("zero_resource_table.py", lambda: main(sys.argv[1:])))
