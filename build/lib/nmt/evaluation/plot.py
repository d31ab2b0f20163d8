"""Attention heatmaps in the style of Bahdanau et al. (2015), Figure 3.

Source subwords run along the top x axis, target subwords down the y axis, one grey cell
per weight alpha_ij (black 0, white 1 with the default ``gray`` colormap), and a colour bar
from 0 to 1. Figure and font sizes grow with the sentence so that 60 subwords stay
readable. Uses matplotlib's object API with the Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def plot_alignment(matrix: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str],
                   out_path: str | Path | None = None, cmap: str = "gray", dpi: int = 120,
                   title: str | None = None) -> Figure:
    """Draw the alignment heatmap; save it as PNG when ``out_path`` is given.

    Args:
        matrix: [T, S] weights in 0..1 (row t: target subword t over the source subwords).
        src_labels: S source subword strings (x axis, top).
        tgt_labels: T target subword strings (y axis).
        out_path: PNG file to write (parent directories are created); None = do not save.
        cmap: matplotlib colormap name.
        dpi: resolution of the saved PNG.
        title: optional title under the figure.

    Returns:
        The matplotlib :class:`Figure`.

    Raises:
        ValueError: the label counts do not match the matrix shape.
        OSError: ``out_path`` (or its parent directory) cannot be written; the exception's
            ``filename`` names the path (``nmt-plot`` reports it as a user error, exit 2).
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(f"alignment shape {matrix.shape} does not match {len(tgt_labels)} "
                         f"target x {len(src_labels)} source labels.")
    n_tgt, n_src = matrix.shape
    longest = max(n_src, n_tgt, 1)
    fontsize = 11 if longest <= 20 else 9 if longest <= 40 else 8
    cell = fontsize / 72 * 1.6  # inches per cell: a bit more than one line of text
    label_space = fontsize / 72 * 0.62 * max([len(s) for s in (*src_labels, *tgt_labels)] + [1])
    width = max(4.0, n_src * cell + label_space + 1.6)
    height = max(3.0, n_tgt * cell + label_space + 0.8)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal",
                      interpolation="nearest")
    ax.set_xticks(range(n_src), labels=list(src_labels), rotation=90, fontsize=fontsize)
    ax.set_yticks(range(n_tgt), labels=list(tgt_labels), fontsize=fontsize)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    ax.set_xlabel("source", fontsize=fontsize)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("target", fontsize=fontsize)
    if title:
        ax.set_title(title, fontsize=fontsize, y=-0.02, va="top")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, shrink=min(1.0, max(0.4, 8 / max(n_tgt, 1))))
    bar.ax.tick_params(labelsize=fontsize)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_path, dpi=dpi)
    return fig
