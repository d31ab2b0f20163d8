"""Print the results of main-job runs (scripts/run_multi30k.sh) as README table rows.

    python scripts/results_table.py runs/transformer_de_en [runs/rnn_de_en ...]

Reads, per run directory, what the commands wrote: ``config.yaml`` (nmt-train),
``summary.json`` (nmt-train), ``eval/{val,test_2016_flickr}{,_greedy}/scores.json``
(nmt-evaluate). Prints one markdown row per run, then the sacreBLEU signatures.
Numbers are pasted from those files, never recomputed.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import date
from pathlib import Path

from omegaconf import OmegaConf

COLUMNS = ("model", "data", "params", "train min", "train tok/s", "peak RSS GiB", "val BLEU",
           "test BLEU greedy", "test BLEU beam 5", "test chrF beam 5", "test BLEU lc beam 5",
           "machine", "date")


def _scores(run: Path, name: str) -> dict:
    path = run / "eval" / name / "scores.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def row(run: Path) -> tuple[list[str], str]:
    """Table cells and the BLEU/chrF signatures of one run directory."""
    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"))
    summary = json.loads((run / "summary.json").read_text())
    val, test, test_greedy = _scores(run, "val"), _scores(run, "test_2016_flickr"), _scores(run, "test_2016_flickr_greedy")

    def fmt(d: dict, key: str) -> str:
        return f"{d[key]:.1f}" if key in d else "n/a"

    cells = [
        cfg["model"]["name"], f"{cfg['data']['src_lang']}->{cfg['data']['tgt_lang']}",
        f"{summary['params'] / 1e6:.1f}M", f"{summary['wall_time_s'] / 60:.0f}",
        f"{summary['train_tokens_per_s']:.0f}", f"{summary['peak_rss_mb'] / 1024:.1f}",
        fmt(val, "bleu"), fmt(test_greedy, "bleu"), fmt(test, "bleu"), fmt(test, "chrf"),
        fmt(test, "bleu_lowercase"),
        f"{platform.machine()}, {summary.get('device', 'cpu')}", date.today().isoformat(),
    ]
    signatures = f"{run}: BLEU {test.get('bleu_signature', 'n/a')} | chrF {test.get('chrf_signature', 'n/a')}"
    return cells, signatures


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = [row(Path(a)) for a in argv]
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for cells, _ in rows:
        print("| " + " | ".join(cells) + " |")
    for _, signatures in rows:
        print(signatures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
