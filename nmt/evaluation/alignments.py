"""Alignment dumps: one ``.npz`` file holding, per sentence, the attention matrix and labels.

Layout (plain arrays, readable with ``np.load(path, allow_pickle=False)``):

================  ==================================================================
``count``         int64 scalar: number of sentences N
``align_{i}``     float32 [T_i, S_i]: row t = attention of target subword t over the
                  source subwords (rows of real models sum to 1)
``src_{i}``       unicode [S_i]: source subwords (incl. ``</s>``)
``tgt_{i}``       unicode [T_i]: target subwords (incl. ``</s>``)
``cross_{i}``     optional (``nmt-evaluate attention=all``): float16 [L,H,T_i,S_i]
                  cross-attention of every decoder layer and head (the RNN: L = H = 1)
``decoder_{i}``   optional: float16 [L,H,T_i,T_i] decoder self-attention; query and key
                  t read decoder input t (``<s>``, then the target subwords before t)
``encoder_{i}``   optional: float16 [L,H,S_i,S_i] encoder self-attention
================  ==================================================================

for ``i`` in ``0 .. N-1`` (the line number in the evaluated file). Files without the
optional arrays (older ones, or ``attention=alignment``) read the same; a kind the model
does not have (the RNN's self-attentions) is simply absent. Size: the optional arrays
take 2 bytes per weight before compression, ``L*H*(T*S + T*T + S*S)`` weights per
sentence for the Transformer. For test_2016_flickr (1,000 sentences, on average 16.0
source and 15.6 target subwords with ``</s>`` under the 8,000-piece joint vocabulary,
reference lengths standing in for the outputs) that is about 20 MB before compression
for the reference Transformer (3+3 layers, 4 heads), computed from the shapes, and
0.55 MB for the RNN; the zero upper triangle of the decoder self-attention compresses
away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ATTENTION_KINDS = ("cross", "decoder", "encoder")


@dataclass
class Alignment:
    """One sentence: ``matrix`` float32 [T, S], ``src`` S source and ``tgt`` T target labels.

    ``attention`` holds the optional arrays of the file by kind (``"cross"`` [L,H,T,S],
    ``"decoder"`` [L,H,T,T], ``"encoder"`` [L,H,S,S], float32); empty when it has none.
    """

    matrix: np.ndarray
    src: list[str]
    tgt: list[str]
    attention: dict[str, np.ndarray] = field(default_factory=dict)


def attention_shapes(kind: str, n_src: int, n_tgt: int) -> tuple[int, int]:
    """(rows, columns) of one head's matrix of ``kind`` for S = ``n_src``, T = ``n_tgt``.

    Raises:
        ValueError: ``kind`` is not one of :data:`ATTENTION_KINDS`.
    """
    shapes = {"cross": (n_tgt, n_src), "decoder": (n_tgt, n_tgt), "encoder": (n_src, n_src)}
    if kind not in shapes:
        raise ValueError(f"attention kind {kind!r} is not one of {', '.join(ATTENTION_KINDS)}.")
    return shapes[kind]


def save_alignments(path: str | Path, alignments: Sequence[np.ndarray],
                    src_pieces: Sequence[Sequence[str]], tgt_pieces: Sequence[Sequence[str]],
                    attention: Sequence[Mapping[str, np.ndarray] | None] | None = None) -> None:
    """Write alignment matrices [T_i, S_i] with their labels to ``path`` (compressed npz).

    Args:
        attention: optional, per sentence a dict of :data:`ATTENTION_KINDS` arrays
            (``Translation.attention``; None for a sentence without), stored as float16.

    Raises:
        ValueError: the sequences differ in length, a matrix shape does not match its
            label counts, or an attention kind is unknown or has the wrong shape.
    """
    if not len(alignments) == len(src_pieces) == len(tgt_pieces):
        raise ValueError(f"{len(alignments)} alignments, {len(src_pieces)} source and "
                         f"{len(tgt_pieces)} target label lists: they must pair up.")
    if attention is not None and len(attention) != len(alignments):
        raise ValueError(f"{len(attention)} attention entries for {len(alignments)} alignments.")
    arrays: dict[str, np.ndarray] = {"count": np.array(len(alignments), dtype=np.int64)}
    for i, (matrix, src, tgt) in enumerate(zip(alignments, src_pieces, tgt_pieces, strict=True)):
        matrix = np.asarray(matrix, dtype=np.float32)
        if matrix.shape != (len(tgt), len(src)):
            raise ValueError(f"sentence {i}: alignment shape {matrix.shape} does not match "
                             f"{len(tgt)} target x {len(src)} source labels.")
        arrays[f"align_{i}"] = matrix
        arrays[f"src_{i}"] = np.array(list(src), dtype=np.str_)
        arrays[f"tgt_{i}"] = np.array(list(tgt), dtype=np.str_)
        for kind, weights in ((attention[i] if attention is not None else None) or {}).items():
            weights = np.asarray(weights)
            rows, cols = attention_shapes(kind, len(src), len(tgt))
            if weights.ndim != 4 or weights.shape[2:] != (rows, cols):
                raise ValueError(f"sentence {i}: {kind} attention shape {weights.shape} is not "
                                 f"[layers, heads, {rows}, {cols}].")
            arrays[f"{kind}_{i}"] = weights.astype(np.float16)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)


class AlignmentFile:
    """Lazy reader of an alignments ``.npz``: ``len(f)``, ``f[i]`` -> :class:`Alignment`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._npz = np.load(self.path, allow_pickle=False)
            self._count = int(self._npz["count"])
            self._keys = set(self._npz.files)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"{self.path}: not an alignments file written by nmt-evaluate "
                             f"({type(err).__name__}: {err}).") from None

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> Alignment:
        """Sentence ``i`` (0-based; negative counts from the end), loaded on access.

        Returns:
            :class:`Alignment` with ``matrix`` float32 [T, S] (T target subwords + ``</s>``,
            S source subwords + ``</s>``) and the ``src`` / ``tgt`` subword strings.

        Raises:
            IndexError: ``i`` outside ``-len(self) .. len(self) - 1`` (message names the file).
        """
        if not -self._count <= i < self._count:
            raise IndexError(f"{self.path}: index {i} out of range (it holds {self._count} sentences).")
        i %= self._count
        attention = {kind: self._npz[f"{kind}_{i}"].astype(np.float32)
                     for kind in ATTENTION_KINDS if f"{kind}_{i}" in self._keys}
        return Alignment(self._npz[f"align_{i}"], self._npz[f"src_{i}"].tolist(),
                         self._npz[f"tgt_{i}"].tolist(), attention)

    def labels(self, i: int) -> tuple[list[str], list[str]]:
        """(source, target) subword strings of sentence ``i`` without loading any matrix."""
        i %= self._count
        return self._npz[f"src_{i}"].tolist(), self._npz[f"tgt_{i}"].tolist()

    def close(self) -> None:
        self._npz.close()


def load_alignments(path: str | Path) -> AlignmentFile:
    """Open an alignments file written by :func:`save_alignments` (entries load on access).

    Raises:
        ValueError: the file is missing or not in this layout (message names the file).
    """
    return AlignmentFile(path)
