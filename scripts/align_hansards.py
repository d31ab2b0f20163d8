"""Alignment error rate on the English-French Hansards gold set (issues 13 and 36).

    python scripts/align_hansards.py eflomal=true                  # the anchor: eflomal on the text
    python scripts/align_hansards.py en_fr=runs/align_tf_en_fr/checkpoints/best.pt \\
        fr_en=runs/align_tf_fr_en/checkpoints/best.pt \\
        rnn_en_fr=runs/align_rnn_en_fr/checkpoints/best.pt \\
        rnn_fr_en=runs/align_rnn_fr_en/checkpoints/best.pt

Reads ``enfr.src-tgt`` (``English ||| French``) and ``enfr.gold`` (1-based ``i-j`` sure and
``ipj`` possible links, English word i, French word j) from ``gold_dir`` (default
``$NMT_ALIGNMENT_ROOT``, else ``../shared/data/alignment/hansards_en_fr`` beside the
repository) and scores with AER (Och and Ney 2003).

``eflomal=true`` (``pip install 'nmt[align]'``): eflomal aligns Multi30k's en-fr training
text (``data_root``, default ``$NMT_DATA_ROOT``, else ``../shared/data/multi30k``) together
with the 447 Hansards pairs (text only) by nmt's own preparation step
(:func:`nmt.extras.training.teacher.align_pairs`: lowercased word and punctuation tokens, both
directions), and every symmetrisation of the Hansards part is scored.

A checkpoint teacher-forces the 447 reference pairs once
(:func:`nmt.extras.tools.word_alignment.force_align`); then every extraction is scored: each
decoder layer (head mean) and the mean of the layers, with and without the shift of Chen et
al. (2020), and the model's own alignment (a guided model's supervised head, trained with
``train.alignment_loss_weight``): argmax; argmax with a row on ``</s>`` unaligned; the
threshold 0.5 on the argmax. fr->en models are scored on the flipped pairs and gold; with
both directions of a model the symmetrisations (Koehn et al. 2003) of each direction's best
extraction follow. Prints one markdown table (AER, precision, recall in %, links) and, last,
``best_aer=...``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("en_fr", "fr_en", "rnn_en_fr", "rnn_fr_en")
# The model's own alignment: (method, threshold, a row mostly on </s> unaligned)
OWN = (("argmax", None, False), ("argmax", None, True), ("argmax", 0.5, True))


def _settings(argv: list[str]) -> dict[str, str]:
    from nmt.config import ConfigError

    out = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in (*MODELS, "eflomal", "data_root", "gold_dir", "device"):
            raise ConfigError(f"{arg!r}: give en_fr=CKPT [fr_en=CKPT] [rnn_en_fr=CKPT] "
                              "[rnn_fr_en=CKPT] [eflomal=true] [data_root=DIR] [gold_dir=DIR] "
                              "[device=cpu] (see the docstring).")
        out[key] = value
    if not any(k in out for k in ("en_fr", "rnn_en_fr", "eflomal")):
        raise ConfigError("en_fr=CKPT or rnn_en_fr=CKPT (an English->French checkpoint) or "
                          "eflomal=true is required.")
    return out


def _run_name(checkpoint: str) -> str:
    """``runs/x/checkpoints/best.pt`` -> ``x/best.pt``: short row labels."""
    path = Path(checkpoint)
    if path.parent.name != "checkpoints":
        return checkpoint
    return f"{path.parent.parent.name}/{path.name}"


def main(argv: list[str]) -> int:
    import torch

    from nmt.checkpoint import load_checkpoint
    from nmt.data.links import SYMMETRIZATIONS, flip_links, symmetrize
    from nmt.extras.tools.word_alignment import (
        alignment_scores,
        force_align,
        read_gold,
        read_pair_file,
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

    if opts.get("eflomal", "false").lower() in ("1", "true", "yes"):
        from nmt.data.corpus import iter_text_pair
        from nmt.extras.training.teacher import align_pairs

        root = Path(opts.get("data_root") or os.environ.get(
            "NMT_DATA_ROOT", REPO.parent / "shared" / "data" / "multi30k"))
        text = list(iter_text_pair(root / "train.en", root / "train.fr")) + pairs
        for method, links in align_pairs(text, SYMMETRIZATIONS).items():
            rows.append((f"eflomal, Multi30k en-fr train ({len(text) - len(pairs)} pairs) + the "
                         f"{len(pairs)} Hansards pairs, {method}", score(links[-len(pairs):])))

    def extractions(name: str, path: str, flip: bool):
        """Every extraction of one checkpoint: its rows, and the best (result, links, label)."""
        model, tok, cfg = load_for_inference(path, device)
        bleu = load_checkpoint(path).get("valid_bleu")
        guided = cfg.train.alignment_loss_weight > 0
        name += f" (val BLEU {bleu:.2f}{', guided' if guided else ''})" if bleu is not None else ""
        with torch.inference_mode():
            items = force_align(model, tok, [(t, s) for s, t in pairs] if flip else pairs,
                                device=device)
        n_layers = items[0].cross.shape[0]
        settings = [(f"layer {layer}{' (all)' if n_layers == 1 else ''}, head mean"
                     + (", shift" if shift else ""), dict(layer=layer, shift=shift))
                    for layer in [*range(n_layers), *(["mean"] if n_layers > 1 else [])]
                    for shift in (False, True)]
        settings += [(f"its alignment, {method}" + (f" >= {threshold}" if threshold else "")
                      + (", </s> unaligned" if eos else ""),
                      dict(method=method, threshold=threshold, eos_unaligned=eos))
                     for method, threshold, eos in OWN]
        best = None
        for label, setting in settings:
            links = [word_links(i, **setting) for i in items]
            result = score(links, flip)
            rows.append((f"{name}, {label}", result))
            if best is None or result["aer"] < best[0]["aer"]:
                best = (result, links, label)
        return best

    for prefix, title in (("", "Transformer"), ("rnn_", "RNN")):
        best = {d: extractions(f"{title} {d.replace('_', '->')} ({_run_name(opts[prefix + d])})",
                               opts[prefix + d], d == "fr_en")
                for d in ("en_fr", "fr_en") if prefix + d in opts}
        if len(best) == 2:
            forward, backward = best["en_fr"][1], [flip_links(x) for x in best["fr_en"][1]]
            for method in SYMMETRIZATIONS:
                links = [symmetrize(f, b, method, src_len=n, tgt_len=m)
                         for f, b, n, m in zip(forward, backward, src_len, tgt_len, strict=True)]
                rows.append((f"{title} {method}: en->fr {best['en_fr'][2]} + fr->en "
                             f"{best['fr_en'][2]}", score(links)))
    print("| extraction | AER | precision | recall | links |")
    print("|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {100 * r['aer']:.1f} | {100 * r['precision']:.1f} | "
              f"{100 * r['recall']:.1f} | {r['links']} |")
    best_label, best_row = min(rows, key=lambda row: row[1]["aer"])
    print(f"best: {best_label}")
    print(f"best_aer={100 * best_row['aer']:.1f} pairs={len(pairs)} sure={best_row['sure']} "
          f"possible={best_row['possible']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from nmt.cli.common import exit_on_user_error

    raise SystemExit(exit_on_user_error("align_hansards.py", lambda: main(sys.argv[1:])))
