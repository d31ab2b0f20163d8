"""How much attention a multilingual model's language tag receives, per layer.

    nmt-evaluate checkpoint=runs/multi/checkpoints/best.pt src_lang=de tgt_lang=en split=val \
        attention=all out_dir=runs/multi/eval/val_attention/de-en
    python scripts/tag_attention.py runs/multi/eval/val_attention/*/alignments.npz

Reads ``alignments.npz`` files written with ``attention=all`` (every layer and head,
:mod:`nmt.evaluation.alignments`) and prints, per file and layer, the mean attention weight
on the source-side tag ``<2xx>`` (Johnson et al. 2017, sec. 3; ``data.lang_tag=source``):
for ``cross`` and ``encoder`` attention, the weight of the tag's column averaged over heads,
query positions and sentences, in percent (a target-side tag is cut from the dumps with its
decoding step, so it cannot be measured here). ``uniform`` is the same average of 1 / (number
of source positions): the share the tag would get if attention were spread evenly. Prints one
markdown table.
Exit status 2 (a one-line error) when a file is not an ``attention=all`` dump of a tagged
model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from nmt.cli.common import exit_on_user_error
from nmt.config import ConfigError
from nmt.data.languages import LANG_TAG
from nmt.evaluation.alignments import AlignmentFile

TAG_PREFIX, TAG_SUFFIX = LANG_TAG.split("{}")   # "<2", ">": the tag of any language


def tag_shares(path: str | Path) -> dict[str, np.ndarray]:
    """Per kind (``cross``, ``encoder``): float64 [L + 1], the mean attention
    weight on the tag's key position in each layer (averaged over heads, queries and
    sentences), then the uniform share (mean of 1 / keys), both fractions of 1.

    Raises:
        ConfigError: the file has no per-layer attention or no tag among its keys.
    """
    try:
        dump = AlignmentFile(path)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    sums: dict[str, list[np.ndarray]] = {}
    for i in range(len(dump)):
        sentence = dump[i]
        if not sentence.attention:
            raise ConfigError(f"{path}: sentence {i} has no per-layer attention; write it with "
                              "nmt-evaluate attention=all")
        tag = next((j for j, piece in enumerate(sentence.src)
                    if piece.startswith(TAG_PREFIX) and piece.endswith(TAG_SUFFIX)
                    and len(piece) > len(TAG_PREFIX + TAG_SUFFIX)), None)
        if tag is None:
            continue
        for kind in ("cross", "encoder"):   # both attend over the source
            weights = sentence.attention.get(kind)   # [L, H, queries, source positions]
            if weights is not None:
                share = weights[..., tag].mean(axis=(1, 2))
                sums.setdefault(kind, []).append(np.append(share, 1.0 / weights.shape[-1]))
    if not sums:
        raise ConfigError(f"{path}: no language tag <2xx> among the source pieces; not a "
                          "dump of a multilingual model with data.lang_tag=source")
    return {kind: np.mean(rows, axis=0) for kind, rows in sums.items()}


def main(argv: list[str]) -> None:
    """Print the table of :func:`tag_shares` for every file of ``argv``."""
    if not argv:
        raise ConfigError("usage: python scripts/tag_attention.py ALIGNMENTS.npz [...]")
    rows = [(Path(p).parent.name, kind, shares) for p in argv
            for kind, shares in tag_shares(p).items()]
    layers = max(len(s) - 1 for _, _, s in rows)
    print("| file | attention | " + " | ".join(f"layer {k + 1}" for k in range(layers))
          + " | uniform |")
    print("|---|---|" + "---:|" * (layers + 1))
    for name, kind, shares in rows:
        cells = [f"{100 * v:.1f}" for v in shares[:-1]] + [""] * (layers + 1 - len(shares))
        print(f"| {name} | {kind} | " + " | ".join(cells) + f" | {100 * shares[-1]:.1f} |")


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error("tag_attention.py", lambda: main(sys.argv[1:])))
