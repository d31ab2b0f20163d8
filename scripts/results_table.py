"""Print the results of main-job runs (scripts/run_multi30k.sh) as README table rows.

    python scripts/results_table.py runs/transformer_de_en [runs/rnn_de_en ...]

Reads, per run directory, what the commands wrote: ``config.yaml`` (nmt-train),
``summary.json`` (nmt-train: the whole run across resumes, with the machine and the date it
trained), ``eval/<split>{,_greedy}/scores.json`` (nmt-evaluate) for the config's
``data.valid_split`` and ``data.test_split``. Prints one markdown row per run, then the
sacreBLEU signatures. Numbers are pasted from those files, never recomputed, and the date is
the training's, not today's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from nmt.config import ConfigError

COLUMNS = ("model", "data", "params", "train min", "train tok/s", "peak RSS GiB", "length penalty",
           "val BLEU beam 5", "val chrF beam 5", "val BLEU lc beam 5", "test BLEU greedy",
           "test BLEU beam 5", "test chrF beam 5", "test BLEU lc beam 5", "decoding",
           "test s per 1k sentences", "machine", "date")


def _scores(run: Path, name: str) -> dict:
    path = run / "eval" / name / "scores.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def decoding(scores: dict) -> str:
    """How the test split was decoded: ``beam 5``, ``greedy``, or ``MBR chrf 16 beam (beam 5)``
    (utility, candidates and their kind, then the search the MBR run also timed)."""
    if "beam_size" not in scores:
        return "n/a"
    search = "greedy" if scores["beam_size"] == 1 else f"beam {scores['beam_size']}"
    if scores.get("decoding") != "mbr":
        return search
    mbr = scores["mbr"]
    return f"MBR {mbr['utility']} {mbr['num']} {mbr['candidates']} ({search})"


def row(run: Path) -> tuple[list[str], str]:
    """Table cells and the BLEU/chrF signatures of one run directory."""
    for name in ("config.yaml", "summary.json"):
        if not (run / name).is_file():
            raise ConfigError(f"{run / name}: not found; give the run_dir of a finished "
                              "nmt-train run (bash scripts/run_multi30k.sh writes one).")
    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"))
    summary = json.loads((run / "summary.json").read_text())
    valid_split, test_split = cfg["data"]["valid_split"], cfg["data"]["test_split"]
    val, test = _scores(run, valid_split), _scores(run, test_split)
    test_greedy = _scores(run, f"{test_split}_greedy")
    machine = summary.get("machine") or {}

    def fmt(d: dict, key: str) -> str:
        return f"{d[key]:.1f}" if key in d else "n/a"

    cells = [
        cfg["model"]["name"], f"{cfg['data']['src_lang']}->{cfg['data']['tgt_lang']}",
        f"{summary['params'] / 1e6:.1f}M", f"{summary['wall_time_s'] / 60:.0f}",
        f"{summary['train_tokens_per_s']:.0f}", f"{summary['peak_rss_mb'] / 1024:.1f}",
        f"{test['length_penalty']:g}" if "length_penalty" in test else "n/a",
        *(fmt(val, key) for key in ("bleu", "chrf", "bleu_lowercase")), fmt(test_greedy, "bleu"),
        *(fmt(test, key) for key in ("bleu", "chrf", "bleu_lowercase")), decoding(test),
        fmt(test, "ms_per_sentence"),   # ms per sentence = seconds per 1,000 sentences
        f"{machine.get('cores', '?')} cores {machine.get('cpu', '?')}, "
        f"{summary.get('device', '?')}",
        str(summary.get("date", "n/a")),
    ]
    signatures = (f"{run}: BLEU {test.get('bleu_signature', 'n/a')} | "
                  f"chrF {test.get('chrf_signature', 'n/a')}")
    return cells, signatures


def main(argv: list[str]) -> int:
    if not argv:
        raise ConfigError("give one or more run directories: python scripts/results_table.py "
                          "runs/transformer_de_en [...]")
    rows = [row(Path(a)) for a in argv]
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for cells, _ in rows:
        print("| " + " | ".join(cells) + " |")
    for _, signatures in rows:
        print(signatures)
    return 0


if __name__ == "__main__":
    from nmt.cli.common import exit_on_user_error

    raise SystemExit(exit_on_user_error("results_table.py", lambda: main(sys.argv[1:])))
