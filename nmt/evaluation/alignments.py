"""Attention as data: the ``alignments.npz`` dump, its labels, and layer/head selection.

A compressed ``.npz`` of plain arrays (no pickle): ``count`` (int64, N), then per sentence
``i`` ``align_{i}`` float32 [T_i, S_i] (row t: target subword t over the source subwords),
``src_{i}`` / ``tgt_{i}`` the subwords (each ending with ``</s>``) and, with ``nmt-evaluate
attention=all``, float16 ``cross_{i}`` [L,H,T_i,S_i], ``decoder_{i}`` [L,H,T_i,T_i] and
``encoder_{i}`` [L,H,S_i,S_i] (the RNN has cross only, L = H = 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.config import ConfigError
from nmt.runtime import atomic_path

ATTENTION_KINDS = ("cross", "decoder", "encoder")


@dataclass
class Alignment:
    """One sentence: ``matrix`` float32 [T, S], S ``src`` and T ``tgt`` labels, and the
    optional ``attention`` arrays by kind (float32 [L,H,R,C]; empty when the file has none)."""

    matrix: np.ndarray
    src: list[str]
    tgt: list[str]
    attention: dict[str, np.ndarray] = field(default_factory=dict)


def attention_labels(kind: str, src: Sequence[str], tgt: Sequence[str]
                     ) -> tuple[list[str], list[str], tuple[str, str]]:
    """(row labels, column labels, (row, column) axis names) of one ``kind``: ``cross`` (and
    the stored ``alignment``) target over source, ``encoder`` source over source, ``decoder``
    its inputs (``<s>``, then the target before ``</s>``: row t predicts ``tgt[t]``)."""
    src, tgt = list(src), list(tgt)
    if kind in ("cross", "alignment"):
        return tgt, src, ("target", "source")
    if kind == "encoder":
        return src, src, ("source (query)", "source (key)")
    inputs = ["<s>", *tgt[:-1]]   # decoder
    return inputs, inputs, ("target input (query)", "target input (key)")


def panel_choices(weights: np.ndarray, layer: int | str, head: int | str, kind: str = "cross",
                  grid: bool = True) -> tuple[list[int | str], list[int | str]]:
    """The layers and heads of [L,H,R,C] ``weights`` chosen by ``layer`` and ``head``: each an
    index (negative counts from the end), ``"mean"`` or with ``grid`` ``"all"`` (every index,
    and the mean of several heads). The one check of these settings (plot, nmt-align)."""
    picked = []
    for n, choice, key in zip(np.shape(weights)[:2], (layer, head), ("layer", "head"), strict=True):
        if grid and choice == "all":
            picked.append([*range(n), *(["mean"] if key == "head" and n > 1 else [])])
        elif choice == "mean":
            picked.append(["mean"])
        elif (not isinstance(choice, bool) and isinstance(choice, int | np.integer)
              and -n <= choice < n):
            picked.append([int(choice) % n])
        else:
            raise ConfigError(f"{key}={choice!r}: the {kind} attention has {n} {key}"
                              f"{'s' * (n != 1)}; use {key}=0..{n - 1} (or -{n}..-1), "
                              f"{'all, ' if grid else ''}or mean.")
    return tuple(picked)


def attention_panel(weights: np.ndarray, layer: int | str, head: int | str) -> np.ndarray:
    """[L,H,R,C] -> [R,C]: one layer (or the layer mean), then one head (or the head mean)."""
    by_layer = weights.mean(0) if layer == "mean" else weights[layer]  # [H,R,C]
    return by_layer.mean(0) if head == "mean" else by_layer[head]


def save_alignments(path: str | Path, alignments: Sequence[np.ndarray],
                    src_pieces: Sequence[Sequence[str]], tgt_pieces: Sequence[Sequence[str]],
                    attention: Sequence[Mapping[str, np.ndarray] | None] | None = None) -> None:
    """Write matrices [T_i, S_i], their labels and optional attention (per sentence a dict
    of :data:`ATTENTION_KINDS` arrays or None, stored as float16) to ``path``, atomically."""
    arrays: dict[str, np.ndarray] = {"count": np.array(len(alignments), dtype=np.int64)}
    for i, (matrix, src, tgt) in enumerate(zip(alignments, src_pieces, tgt_pieces, strict=True)):
        arrays[f"align_{i}"] = np.asarray(matrix, dtype=np.float32)
        arrays[f"src_{i}"] = np.array(list(src), dtype=np.str_)
        arrays[f"tgt_{i}"] = np.array(list(tgt), dtype=np.str_)
        for kind, weights in ((attention[i] if attention else None) or {}).items():
            arrays[f"{kind}_{i}"] = np.asarray(weights).astype(np.float16)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)


class AlignmentFile:
    """Lazy reader of an ``alignments.npz`` (ValueError: missing or foreign): ``len(f)``;
    ``f[i]`` (negative counts from the end) loads sentence ``i`` as an :class:`Alignment`;
    ``f.labels(i)`` its labels only."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._npz = np.load(self.path, allow_pickle=False)
            self._count, self._keys = int(self._npz["count"]), set(self._npz.files)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"{self.path}: not an alignments file written by nmt-evaluate "
                             f"({type(err).__name__}: {err}).") from None

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> Alignment:
        if not -self._count <= i < self._count:
            raise IndexError(f"{self.path}: index {i} out of range ({self._count} sentences).")
        i %= self._count
        attention = {kind: self._npz[f"{kind}_{i}"].astype(np.float32)
                     for kind in ATTENTION_KINDS if f"{kind}_{i}" in self._keys}
        return Alignment(self._npz[f"align_{i}"], *self.labels(i), attention)

    def labels(self, i: int) -> tuple[list[str], list[str]]:
        i %= self._count
        return self._npz[f"src_{i}"].tolist(), self._npz[f"tgt_{i}"].tolist()


load_alignments = AlignmentFile
