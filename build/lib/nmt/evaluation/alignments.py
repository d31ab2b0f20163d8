"""Alignment dumps: one ``.npz`` file holding, per sentence, the attention matrix and labels.

Layout (plain arrays, readable with ``np.load(path, allow_pickle=False)``):

================  ==================================================================
``count``         int64 scalar: number of sentences N
``align_{i}``     float32 [T_i, S_i]: row t = attention of target subword t over the
                  source subwords (rows of real models sum to 1)
``src_{i}``       unicode [S_i]: source subwords (incl. ``</s>``)
``tgt_{i}``       unicode [T_i]: target subwords (incl. ``</s>``)
================  ==================================================================

for ``i`` in ``0 .. N-1`` (the line number in the evaluated file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Alignment:
    """One sentence: ``matrix`` float32 [T, S], ``src`` S source and ``tgt`` T target labels."""

    matrix: np.ndarray
    src: list[str]
    tgt: list[str]


def save_alignments(path: str | Path, alignments: Sequence[np.ndarray],
                    src_pieces: Sequence[Sequence[str]], tgt_pieces: Sequence[Sequence[str]]) -> None:
    """Write alignment matrices [T_i, S_i] with their labels to ``path`` (compressed npz).

    Raises:
        ValueError: the three sequences differ in length, or a matrix shape does not
            match its label counts.
    """
    if not len(alignments) == len(src_pieces) == len(tgt_pieces):
        raise ValueError(f"{len(alignments)} alignments, {len(src_pieces)} source and "
                         f"{len(tgt_pieces)} target label lists: they must pair up.")
    arrays: dict[str, np.ndarray] = {"count": np.array(len(alignments), dtype=np.int64)}
    for i, (matrix, src, tgt) in enumerate(zip(alignments, src_pieces, tgt_pieces, strict=True)):
        matrix = np.asarray(matrix, dtype=np.float32)
        if matrix.shape != (len(tgt), len(src)):
            raise ValueError(f"sentence {i}: alignment shape {matrix.shape} does not match "
                             f"{len(tgt)} target x {len(src)} source labels.")
        arrays[f"align_{i}"] = matrix
        arrays[f"src_{i}"] = np.array(list(src), dtype=np.str_)
        arrays[f"tgt_{i}"] = np.array(list(tgt), dtype=np.str_)
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
        return Alignment(self._npz[f"align_{i}"], self._npz[f"src_{i}"].tolist(),
                         self._npz[f"tgt_{i}"].tolist())

    def close(self) -> None:
        self._npz.close()


def load_alignments(path: str | Path) -> AlignmentFile:
    """Open an alignments file written by :func:`save_alignments` (entries load on access).

    Raises:
        ValueError: the file is missing or not in this layout (message names the file).
    """
    return AlignmentFile(path)
