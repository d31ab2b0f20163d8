"""Attention heatmaps in the style of Bahdanau et al. (2015), Figure 3, one or a grid.

Source subwords run along the x axis, target subwords down the y axis, one grey cell
per weight alpha_ij (black 0, white 1 with the default ``gray`` colormap), and a colour bar
from 0 to 1. Figure and font sizes grow with the sentence so that 60 subwords stay
readable. Uses matplotlib's object API with the Agg canvas (no display, no pyplot state).

* :func:`plot_alignment`: one matrix (source labels on top).
* :func:`plot_attention`: every layer (rows) and head (columns, plus the head mean) of one
  kind of attention, ``[L,H,R,C]`` as ``nmt-evaluate attention=all`` stores it; one
  layer and head gives the single heatmap of :func:`plot_alignment`.
* Gold links: word-level Pharaoh links (source word i, target word j) become the cells of
  every subword pair of the two words (:func:`word_link_cells`, words from the ``▁``
  boundaries of the labels), drawn as markers on top of the cross-attention: a hollow
  square on a sure link's cells, a hollow circle on a possible link's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nmt.config import ConfigError

Cell = tuple[int, int]  # (row, column) of a heatmap
MARK_COLOR = "tab:red"


def attention_labels(kind: str, src: Sequence[str], tgt: Sequence[str]
                     ) -> tuple[list[str], list[str], tuple[str, str]]:
    """Row labels, column labels and (row, column) axis names of an attention ``kind``.

    Args:
        kind: ``cross`` (rows = target subwords t, each the step predicting it; columns =
            source subwords), ``encoder`` (source over source) or ``decoder`` (rows and
            columns = decoder inputs: ``<s>`` then the target subwords before ``</s>``,
            so row t reads input t and predicts ``tgt[t]``); ``alignment`` as ``cross``.
        src: S source subwords (with ``</s>``); tgt: T target subwords (with ``</s>``).

    Raises:
        ValueError: unknown ``kind``.
    """
    src, tgt = list(src), list(tgt)
    if kind in ("cross", "alignment"):
        return tgt, src, ("target", "source")
    if kind == "encoder":
        return src, src, ("source (query)", "source (key)")
    if kind == "decoder":
        inputs = ["<s>", *tgt[:-1]]
        return inputs, inputs, ("target input (query)", "target input (key)")
    raise ValueError(f"attention kind {kind!r} is not one of alignment, cross, encoder, decoder.")


def word_link_cells(links: Iterable[tuple[int, int]], src: Sequence[str], tgt: Sequence[str]
                    ) -> set[Cell]:
    """Heatmap cells (target subword row, source subword column) of word links.

    Args:
        links: 0-based (source word, target word) pairs, as :func:`read_gold` returns.
        src, tgt: the subword labels, each ending with ``</s>`` (which never gets a mark);
            words start at pieces beginning with ``▁`` (:func:`word_ids`).

    Returns:
        Every (t, s) whose target piece belongs to the link's target word and source piece
        to its source word.

    Raises:
        ValueError: a link names a word the labels do not have.
    """
    from nmt.extras.word_alignment import word_ids

    def pieces_of(labels: Sequence[str]) -> dict[int, list[int]]:
        words: dict[int, list[int]] = {}
        for k, w in enumerate(word_ids(list(labels)[:-1])):
            words.setdefault(w, []).append(k)
        return words

    src_words, tgt_words = pieces_of(src), pieces_of(tgt)
    cells = set()
    for i, j in links:
        if i not in src_words or j not in tgt_words:
            raise ValueError(f"link {i}-{j} (0-based) names a word the sentence lacks: it has "
                             f"{len(src_words)} source and {len(tgt_words)} target words.")
        cells.update((t, s) for t in tgt_words[j] for s in src_words[i])
    return cells


def _font_and_cell(longest: int) -> tuple[int, float]:
    fontsize = 11 if longest <= 20 else 9 if longest <= 40 else 8
    return fontsize, fontsize / 72 * 1.6  # inches per cell: a bit more than one line of text


def _draw_marks(ax, marks: tuple[Iterable[Cell], Iterable[Cell]] | None, size: float) -> None:
    """Hollow squares on the ``marks[0]`` (sure) cells, hollow circles on ``marks[1]``."""
    if not marks:
        return
    for cells, marker, scale, label in ((marks[0], "s", 0.8, "gold sure"),
                                        (marks[1], "o", 0.5, "gold possible")):
        cells = sorted(set(cells))
        if cells:
            rows, cols = zip(*cells, strict=True)
            ax.plot(cols, rows, linestyle="none", marker=marker, markersize=size * scale,
                    markerfacecolor="none", markeredgecolor=MARK_COLOR, markeredgewidth=1.5,
                    label=label)


def plot_alignment(matrix: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str],
                   out_path: str | Path | None = None, cmap: str = "gray", dpi: int = 120,
                   title: str | None = None,
                   marks: tuple[Iterable[Cell], Iterable[Cell]] | None = None,
                   axis_names: tuple[str, str] = ("target", "source")) -> Figure:
    """Draw the alignment heatmap; save it as PNG when ``out_path`` is given.

    Args:
        matrix: [T, S] weights in 0..1 (row t: target subword t over the source subwords).
        src_labels: S source subword strings (x axis, top).
        tgt_labels: T target subword strings (y axis).
        out_path: PNG file to write (parent directories are created); None = do not save.
        cmap: matplotlib colormap name.
        dpi: resolution of the saved PNG.
        title: optional title under the figure.
        marks: (sure, possible) cells (row t, column s) to mark, e.g. gold links
            (:func:`word_link_cells`); a legend names them.
        axis_names: names of the (y, x) axes (self-attention: query and key).

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
    fontsize, cell = _font_and_cell(max(n_src, n_tgt, 1))
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
    ax.set_xlabel(axis_names[1], fontsize=fontsize)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel(axis_names[0], fontsize=fontsize)
    if title:
        ax.set_title(title, fontsize=fontsize, y=-0.04, va="top")
    _draw_marks(ax, marks, cell * 72)
    if marks and any(marks):
        fig.legend(loc="outside lower right", fontsize=fontsize, frameon=False, ncols=2)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, shrink=min(1.0, max(0.4, 8 / max(n_tgt, 1))))
    bar.ax.tick_params(labelsize=fontsize)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_path, dpi=dpi)
    return fig


def _indices(n: int, choice: int | str, key: str, kind: str) -> list[int | str]:
    """Panels along one axis: ``all`` (the head mean after the heads, when there are
    several), ``mean`` or one index (negative counts from the end)."""
    if choice == "all":
        return [*range(n), *(["mean"] if key == "head" and n > 1 else [])]
    if choice == "mean":
        return ["mean"]
    if not isinstance(choice, bool) and isinstance(choice, int | np.integer) and -n <= choice < n:
        return [int(choice) % n]
    indices = "0 (or -1)" if n == 1 else f"0..{n - 1} (or -{n}..-1)"
    raise ConfigError(f"{key}={choice!r}: the {kind} attention has {n} {key}{'s' * (n != 1)}; "
                      f"use {key}={indices}, {key}=all or {key}=mean.")


def plot_attention(weights: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str],
                   kind: str = "cross", layer: int | str = "all", head: int | str = "all",
                   out_path: str | Path | None = None, cmap: str = "gray", dpi: int = 120,
                   title: str | None = None,
                   marks: tuple[Iterable[Cell], Iterable[Cell]] | None = None) -> Figure:
    """A grid of heatmaps of one attention kind: rows = layers, columns = heads + head mean.

    Args:
        weights: [L,H,R,C] weights in 0..1 (``Translation.attention[kind]``, or an
            ``alignments.npz`` entry): ``cross`` [L,H,T,S], ``decoder`` [L,H,T,T],
            ``encoder`` [L,H,S,S].
        src_labels, tgt_labels: the S source and T target subwords (each with ``</s>``);
            the axes get :func:`attention_labels`.
        kind: ``cross``, ``encoder`` or ``decoder``.
        layer: ``all`` (one row per layer), ``mean`` (the layer mean) or an index.
        head: ``all`` (one column per head, then their mean), ``mean`` or an index.
            One layer and one head draw the single heatmap of :func:`plot_alignment`.
        out_path, cmap, dpi, title: as :func:`plot_alignment` (``title`` on top).
        marks: (sure, possible) cells to mark on every panel (gold links, ``cross`` only).

    Returns:
        The matplotlib :class:`Figure`.

    Raises:
        ConfigError: ``layer`` / ``head`` out of range, or marks on a self-attention.
        ValueError: ``weights`` is not 4-D or does not match the labels; unknown ``kind``.
        OSError: ``out_path`` cannot be written.
    """
    weights = np.asarray(weights, dtype=np.float32)
    rows, cols, names = attention_labels(kind, src_labels, tgt_labels)
    if kind == "alignment":
        raise ValueError("kind='alignment' is one matrix: draw it with plot_alignment.")
    if weights.ndim != 4 or weights.shape[2:] != (len(rows), len(cols)):
        raise ValueError(f"{kind} attention shape {weights.shape} does not match [layers, heads, "
                         f"{len(rows)}, {len(cols)}] for these labels.")
    if marks and any(marks) and kind != "cross":
        raise ConfigError(f"gold links pair source and target words: they can only be drawn on "
                          f"kind=cross, not on the {kind} self-attention.")
    n_layers, n_heads = weights.shape[:2]
    layers = _indices(n_layers, layer, "layer", kind)
    heads = _indices(n_heads, head, "head", kind)

    def panel(lay: int | str, hd: int | str) -> np.ndarray:
        by_layer = weights.mean(0) if lay == "mean" else weights[lay]  # [H,R,C]
        return by_layer.mean(0) if hd == "mean" else by_layer[hd]

    def name(value: int | str, key: str) -> str:
        return f"{key} mean" if value == "mean" else f"{key} {value}"

    heading = f"{kind} attention" + (f": {title}" if title else "")
    if len(layers) == len(heads) == 1:
        return plot_alignment(panel(layers[0], heads[0]), cols, rows, out_path, cmap, dpi,
                              f"{heading}, {name(layers[0], 'layer')}, {name(heads[0], 'head')}",
                              marks, names)

    n_rows, n_cols = len(layers), len(heads)
    fontsize, cell = _font_and_cell(max(len(rows), len(cols), 1))
    fontsize, cell = fontsize - 2, cell * 0.8   # many panels: a smaller, still legible font
    label_space = fontsize / 72 * 0.62 * max([len(s) for s in (*rows, *cols)] + [1])
    width = n_cols * (len(cols) * cell + 0.3) + label_space + 1.6
    height = n_rows * (len(rows) * cell + 0.45) + label_space + 1.0
    fig = Figure(figsize=(max(width, 4.0), max(height, 3.0)), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True, sharey=True)
    image = None
    for r, lay in enumerate(layers):
        for c, hd in enumerate(heads):
            ax = axes[r][c]
            image = ax.imshow(panel(lay, hd), cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal",
                              interpolation="nearest")
            ax.tick_params(length=0, labelsize=fontsize)
            ax.tick_params(axis="x", labelrotation=90)
            _draw_marks(ax, marks, cell * 72)
            if r == 0:
                ax.set_title(name(hd, "head"), fontsize=fontsize + 1)
            if c == 0:
                ax.set_ylabel(f"{name(lay, 'layer')}\n{names[0]}", fontsize=fontsize)
            if r == n_rows - 1:
                ax.set_xlabel(names[1], fontsize=fontsize)
    axes[0][0].set_yticks(range(len(rows)), labels=rows)
    axes[0][0].set_xticks(range(len(cols)), labels=cols)
    fig.suptitle(heading, fontsize=fontsize + 2)
    shrink = min(1.0, max(0.3, 8 / max(len(rows), 1)))
    bar = fig.colorbar(image, ax=axes, fraction=0.03, shrink=shrink)
    bar.ax.tick_params(labelsize=fontsize)
    if marks and any(marks):
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower right",
                   fontsize=fontsize, frameon=False, ncols=2)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_path, dpi=dpi)
    return fig
