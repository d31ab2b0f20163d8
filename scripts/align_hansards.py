"""Alignment error rate of attention on the English-French Hansards gold set (issue 13 table).

    python scripts/align_hansards.py en_fr=runs/align_tf_en_fr/checkpoints/best.pt \\
        fr_en=runs/align_tf_fr_en/checkpoints/best.pt rnn_en_fr=runs/align_rnn_en_fr/checkpoints/best.pt

Reads ``enfr.src-tgt`` (``English ||| French``) and ``enfr.gold`` (1-based ``i-j`` sure and
``ipj`` possible links, English word i, French word j) from ``gold_dir`` (default
``$NMT_ALIGNMENT_ROOT``, else ``../shared/data/alignment/hansards_en_fr`` beside the
repository). Each model teacher-forces the 447 reference pairs once
(:func:`nmt.extras.word_alignment.force_align`); then every extraction is scored with
AER (Och and Ney 2003): each decoder layer (head mean) and the mean of the layers, with and
without the shift of Chen et al. (2020); the fr->en model on the flipped pairs and gold; and
the symmetrisations (Koehn et al. 2003) of the best en->fr and fr->en settings. Prints one
markdown table (AER, precision, recall in %, links) and, last, ``best_aer=...``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _settings(argv: list[str]) -> dict[str, str]:
    from nmt.config import ConfigError

    out = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in ("en_fr", "fr_en", "rnn_en_fr", "gold_dir", "device"):
            raise ConfigError(f"{arg!r}: give en_fr=CKPT [fr_en=CKPT] [rnn_en_fr=CKPT] "
                              "[gold_dir=DIR] [device=cpu] (see the docstring).")
        out[key] = value
    if "en_fr" not in out:
        raise ConfigError("en_fr=CKPT (an English->French checkpoint) is required.")
    return out


def main(argv: list[str]) -> int:
    import torch

    from nmt.extras.word_alignment import (
        alignment_scores,
        flip_links,
        force_align,
        read_gold,
        read_pair_file,
        symmetrize,
        word_links,
    )
    from nmt.inference.translator import load_for_inference
    from nmt.runtime import resolve_device

    opts = _settings(argv)
    gold_dir = Path(opts.get("gold_dir") or os.environ.get(
        "NMT_ALIGNMENT_ROOT", REPO.parent / "shared" / "data" / "alignment" / "hansards_en_fr"))
    pairs = read_pair_file(gold_dir / "enfr.src-tgt")
    src_len = [len(s.split()) for s, _ in pairs]
    tgt_len = [len(t.split()) for _, t in pairs]
    sure, possible = read_gold(gold_dir / "enfr.gold", one_based=True, src_lengths=src_len,
                               tgt_lengths=tgt_len)
    device = resolve_device(opts.get("device", "cpu"))
    rows: list[tuple[str, dict]] = []

    def score(links, flip=False):
        links = [flip_links(x) for x in links] if flip else links
        return alignment_scores(links, sure, possible)

    def layers(name: str, path: str, flip: bool):
        model, tok, cfg = load_for_inference(path, device)
        with torch.inference_mode():
            items = force_align(model, tok, [(t, s) for s, t in pairs] if flip else pairs,
                                device=device)
        n_layers = items[0].cross.shape[0]
        choices = list(range(n_layers)) + (["mean"] if n_layers > 1 else [])
        best = None
        for layer in choices:
            for shift in (False, True):
                links = [word_links(i, layer=layer, shift=shift) for i in items]
                result = score(links, flip)
                label = f"{name}, layer {layer}{' (all)' if n_layers == 1 else ''}, head mean" + (
                    ", shift" if shift else "")
                rows.append((label, result))
                if best is None or result["aer"] < best[0]["aer"]:
                    best = (result, links, layer, shift)
        return items, best

    en_fr_items, en_fr_best = layers(f"Transformer en->fr ({opts['en_fr']})", opts["en_fr"], False)
    if "rnn_en_fr" in opts:
        layers(f"RNN en->fr ({opts['rnn_en_fr']})", opts["rnn_en_fr"], False)
    if "fr_en" in opts:
        _, fr_en_best = layers(f"Transformer fr->en ({opts['fr_en']})", opts["fr_en"], True)
        forward = en_fr_best[1]
        backward = [flip_links(x) for x in fr_en_best[1]]
        for method in ("intersection", "union", "grow-diag", "grow-diag-final",
                       "grow-diag-final-and"):
            links = [symmetrize(f, b, method, src_len=n, tgt_len=m)
                     for f, b, n, m in zip(forward, backward, src_len, tgt_len, strict=True)]
            rows.append((f"{method}: en->fr layer {en_fr_best[2]}{', shift' if en_fr_best[3] else ''}"
                         f" + fr->en layer {fr_en_best[2]}{', shift' if fr_en_best[3] else ''}",
                         score(links)))
    print("| extraction | AER | precision | recall | links |")
    print("|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {100 * r['aer']:.1f} | {100 * r['precision']:.1f} | "
              f"{100 * r['recall']:.1f} | {r['links']} |")
    best_label, best = min(rows, key=lambda row: row[1]["aer"])
    print(f"best: {best_label}")
    print(f"best_aer={100 * best['aer']:.1f} pairs={len(pairs)} sure={best['sure']} "
          f"possible={best['possible']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from nmt.cli.common import exit_on_user_error

    raise SystemExit(exit_on_user_error("align_hansards.py", lambda: main(sys.argv[1:])))
