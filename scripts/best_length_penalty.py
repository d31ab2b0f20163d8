"""Pick the beam's length penalty on the validation split: print the alpha with the best BLEU.

    python scripts/best_length_penalty.py runs/transformer_de_en/eval/val_length_penalty

Reads every ``*/scores.json`` under the directory (the jobs of one ``nmt-evaluate -m
length_penalty=...`` sweep on val, as ``scripts/run_multi30k.sh`` runs it), prints a table of
alpha, BLEU, brevity penalty and chrF on stderr and the chosen alpha alone on stdout. The
choice is the highest BLEU; a tie (to 0.01 BLEU) goes to the alpha closest to 1.0, the
neutral length normalisation of Wu et al. (2016), eq. 14. Every file must come from the same
checkpoint, split and beam size, else it is a user error (exit status 2) naming the files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nmt.cli.common import exit_on_user_error
from nmt.config import ConfigError

SAME = ("checkpoint", "split", "beam_size", "weights")   # what every job of the sweep shares


def read_scores(sweep: Path) -> list[tuple[Path, dict]]:
    """The ``scores.json`` files under ``sweep`` (one level down), sorted by length penalty.

    Raises:
        ConfigError: no such directory, no scores in it, a file without BLEU or length
            penalty, or files that differ in checkpoint, split, beam size or weights.
    """
    if not sweep.is_dir():
        raise ConfigError(f"{sweep} is not a directory: give the out_dir parent of an "
                          "nmt-evaluate -m length_penalty=... sweep")
    found = []
    for path in sorted(sweep.glob("*/scores.json")):
        scores = json.loads(path.read_text())
        if "bleu" not in scores or "length_penalty" not in scores:
            raise ConfigError(f"{path}: no 'bleu' or 'length_penalty'; not written by nmt-evaluate")
        found.append((path, scores))
    if not found:
        raise ConfigError(f"{sweep}: no */scores.json under it; run nmt-evaluate -m "
                          "length_penalty=a,b,... out_dir=DIR/<alpha> first")
    first_path, first = found[0]
    for path, scores in found[1:]:
        differ = [key for key in SAME if scores.get(key) != first.get(key)]
        if differ:
            raise ConfigError(f"{path} and {first_path} differ in {', '.join(differ)}: one sweep "
                              "compares length penalties of one checkpoint on one split")
    return sorted(found, key=lambda item: item[1]["length_penalty"])


def best_length_penalty(scores: list[dict]) -> float:
    """The length penalty alpha of the highest BLEU; ties (within 0.01 BLEU) go to the alpha
    closest to 1.0."""
    top = max(s["bleu"] for s in scores)
    tied = [s["length_penalty"] for s in scores if s["bleu"] >= top - 0.01]
    return min(tied, key=lambda alpha: (round(abs(alpha - 1.0), 6), alpha))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise ConfigError("give one directory: python scripts/best_length_penalty.py SWEEP_OUT_DIR")
    found = read_scores(Path(argv[0]))
    alpha = best_length_penalty([s for _, s in found])
    print(f"{'alpha':>6} {'BLEU':>6} {'BP':>6} {'chrF':>6}  ({found[0][1].get('split')}, "
          f"beam {found[0][1].get('beam_size')})", file=sys.stderr)
    for _, s in found:
        mark = "  <- chosen" if s["length_penalty"] == alpha else ""
        print(f"{s['length_penalty']:>6g} {s['bleu']:>6.2f} {s.get('bleu_bp', float('nan')):>6.3f} "
              f"{s.get('chrf', float('nan')):>6.2f}{mark}", file=sys.stderr)
    print(f"{alpha:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error("best_length_penalty.py", lambda: main(sys.argv[1:])))
