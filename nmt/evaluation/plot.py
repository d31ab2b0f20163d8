"""Attention heatmaps in the style of Bahdanau et al. (2015), Figure 3: one, or a grid.

Source subwords run along the x axis, target subwords down the y axis, one grey cell per
weight alpha_ij (black 0, white 1 with the default ``gray`` colormap), with a colour bar
from 0 to 1. The figure and its font grow with the sentence, so 60 subwords stay readable.
A grid of one kind of attention [L,H,R,C] has a row per layer and a column per head, then
the head mean. Marks (e.g. gold word links as heatmap cells) are hollow squares for sure
and hollow circles for possible links. matplotlib's object API with the Agg canvas: no
display and no pyplot state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nmt.config import ConfigError
from nmt.evaluation.alignments import attention_labels, attention_panel, panel_choices

if TYPE_CHECKING:
    from nmt.inference.translator import Translation

Cell = tuple[int, int]  # (row, column) of a heatmap
Marks = tuple[Iterable[Cell], Iterable[Cell]]  # (sure, possible) cells
MARK_COLOR = "tab:red"


def plot_alignment(result: Translation | np.ndarray, src_tokens: Sequence[str] | None = None,
                   tgt_tokens: Sequence[str] | None = None, out_path: str | Path | None = None, *,
                   kind: str | None = None, layer: int | str | None = None,
                   head: int | str | None = None, cmap: str = "gray", dpi: int = 120,
                   title: str | None = None, marks: Marks | None = None) -> Figure:
    """The heatmap of a :class:`~nmt.inference.translator.Translation`'s alignment [T, S], or
    of a bare [T, S] matrix with its ``src_tokens`` (S) and ``tgt_tokens`` (T); saved as a PNG
    at ``out_path`` when given (``nmt.plot_alignment``).

    ``kind``/``layer``/``head`` draw ``result.attention`` (translated with
    ``return_attention=True``) with :func:`plot_attention`: ``kind`` cross (default),
    encoder or decoder; ``layer``/``head`` an index, ``"mean"`` or ``"all"`` (default).
    ValueError: a bare matrix without labels, or kind/layer/head without ``attention``;
    ConfigError: a kind the model does not have, a layer or head out of range.
    """
    if kind is not None or layer is not None or head is not None:
        if getattr(result, "attention", None) is None:
            raise ValueError("kind/layer/head draw Translation.attention: translate with "
                             "return_attention=True and pass the result.")
        kind = kind or "cross"
        if kind not in result.attention:
            raise ConfigError(f"kind={kind!r}: this model's attention has "
                              f"{', '.join(result.attention)} only (the RNN has no "
                              "self-attention).")
        return plot_attention(result.attention[kind], src_tokens or result.src_tokens,
                              tgt_tokens or result.tokens, kind, "all" if layer is None else layer,
                              "all" if head is None else head, out_path, cmap, dpi, title, marks)
    if hasattr(result, "alignment"):
        result, src_tokens, tgt_tokens = (result.alignment, src_tokens or result.src_tokens,
                                          tgt_tokens or result.tokens)
    elif src_tokens is None or tgt_tokens is None:
        raise ValueError("a bare matrix needs src_tokens and tgt_tokens (its axis labels).")
    return _draw(np.asarray(result, dtype=np.float32)[None, None], list(tgt_tokens),
                 list(src_tokens), ("target", "source"), [0], [0], title, out_path, cmap, dpi,
                 marks)


def plot_attention(weights: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str],
                   kind: str = "cross", layer: int | str = "all", head: int | str = "all",
                   out_path: str | Path | None = None, cmap: str = "gray", dpi: int = 120,
                   title: str | None = None, marks: Marks | None = None) -> Figure:
    """A grid of one kind of attention: rows = layers, columns = heads, then the head mean.

    ``weights`` is [L,H,R,C] (``Translation.attention[kind]`` or an ``alignments.npz``
    entry): ``cross`` [L,H,T,S], ``decoder`` [L,H,T,T], ``encoder`` [L,H,S,S], labelled by
    :func:`~nmt.evaluation.alignments.attention_labels` from the S source and T target
    subwords. ``layer``/``head``: an index, ``"mean"`` or ``"all"``; one layer and one head
    give a single heatmap. ``marks`` go on every panel. ConfigError: ``layer`` / ``head`` out
    of range.
    """
    rows, cols, names = attention_labels(kind, src_labels, tgt_labels)
    layers, heads = panel_choices(weights, layer, head, kind)
    heading = f"{kind} attention" + (f": {title}" if title else "")
    if len(layers) == len(heads) == 1:
        heading += f", {_name(layers[0], 'layer')}, {_name(heads[0], 'head')}"
    return _draw(np.asarray(weights, dtype=np.float32), rows, cols, names, layers, heads,
                 heading, out_path, cmap, dpi, marks)


def _name(value: int | str, key: str) -> str:
    return f"{key} mean" if value == "mean" else f"{key} {value}"


def _draw(weights: np.ndarray, rows: list[str], cols: list[str], names: tuple[str, str],
          layers: list, heads: list, heading: str | None, out_path: str | Path | None,
          cmap: str, dpi: int, marks: Marks | None) -> Figure:
    """The figure of the ``layers`` x ``heads`` panels of [L,H,R,C] ``weights``; a single
    panel gets the layout of Bahdanau et al.'s figure (labels on top, title below)."""
    if weights.shape[2:] != (len(rows), len(cols)):
        raise ValueError(f"attention shape {weights.shape} does not match {len(rows)} rows x "
                         f"{len(cols)} columns of labels.")
    single = len(layers) == len(heads) == 1
    longest = max(len(rows), len(cols), 1)
    fontsize = 11 if longest <= 20 else 9 if longest <= 40 else 8
    cell = fontsize / 72 * 1.6  # inches per cell: a bit more than one line of text
    if not single:  # many panels: a smaller, still legible font
        fontsize, cell = fontsize - 2, cell * 0.8
    label_space = fontsize / 72 * 0.62 * max([len(s) for s in (*rows, *cols)] + [1])
    pad = (0.0, 0.0, 0.8) if single else (0.3, 0.45, 1.0)
    width = len(heads) * (len(cols) * cell + pad[0]) + label_space + 1.6
    height = len(layers) * (len(rows) * cell + pad[1]) + label_space + pad[2]
    fig = Figure(figsize=(max(width, 4.0), max(height, 3.0)), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(layers), len(heads), squeeze=False, sharex=True, sharey=True)
    sure, possible = [sorted(set(cells)) for cells in marks] if marks else ([], [])
    for r, lay in enumerate(layers):
        for c, hd in enumerate(heads):
            ax = axes[r][c]
            image = ax.imshow(attention_panel(weights, lay, hd), cmap=cmap, vmin=0.0, vmax=1.0,
                              aspect="equal", interpolation="nearest")
            ax.tick_params(length=0, labelsize=fontsize)
            ax.tick_params(axis="x", labelrotation=90)
            for cells, marker, scale, label in ((sure, "s", 0.8, "gold sure"),
                                                (possible, "o", 0.5, "gold possible")):
                if cells:
                    ys, xs = zip(*cells, strict=True)
                    ax.plot(xs, ys, linestyle="none", marker=marker, markersize=cell * 72 * scale,
                            markerfacecolor="none", markeredgecolor=MARK_COLOR,
                            markeredgewidth=1.5, label=label)
            if not single and r == 0:
                ax.set_title(_name(hd, "head"), fontsize=fontsize + 1)
            if not single and c == 0:
                ax.set_ylabel(f"{_name(lay, 'layer')}\n{names[0]}", fontsize=fontsize)
            if not single and r == len(layers) - 1:
                ax.set_xlabel(names[1], fontsize=fontsize)
    ax = axes[0][0]
    ax.set_yticks(range(len(rows)), labels=rows)
    ax.set_xticks(range(len(cols)), labels=cols)
    if single:
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        ax.set_xlabel(names[1], fontsize=fontsize)
        ax.set_ylabel(names[0], fontsize=fontsize)
        if heading:
            ax.set_title(heading, fontsize=fontsize, y=-0.04, va="top")
    else:
        fig.suptitle(heading, fontsize=fontsize + 2)
    shrink = min(1.0, max(0.4 if single else 0.3, 8 / max(len(rows), 1)))
    bar = fig.colorbar(image, ax=axes, fraction=0.05 if single else 0.03, shrink=shrink)
    bar.ax.tick_params(labelsize=fontsize)
    if sure or possible:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower right",
                   fontsize=fontsize, frameon=False, ncols=2)
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_path, dpi=dpi)
    return fig


def tensorboard_figures(model, src_ids: Sequence[Sequence[int]], hyps: Sequence, tokenizer,
                        device, step: int) -> dict[str, Figure]:
    """TensorBoard's figures of the first validation sentence with a source and a hypothesis
    (``src_ids`` without EOS, ``hyps`` per sentence its hypotheses, best first), both from one
    teacher-forced pass over the best hypothesis in eval mode (about a second to draw):
    ``valid/alignment``, the model's alignment (a full-context model's extra pass, not
    search's causal one), and ``valid/attention``, the cross-attention grid (rows = layers,
    columns = heads and their mean). ``{}`` when there is no such sentence."""
    from nmt.data.vocab import EOS_ID
    from nmt.inference.translator import capture_attention

    i = next((i for i, h in enumerate(hyps) if h and len(src_ids[i])), None)
    if i is None:
        return {}
    hyp = hyps[i][0]
    src_labels = tokenizer.src_pieces(list(src_ids[i]) + [EOS_ID])
    tgt_labels = tokenizer.tgt_pieces(list(hyp.tokens) + [EOS_ID])
    attention = capture_attention(model, [src_ids[i]], [hyp.tokens], device)[0]
    figures = {"valid/alignment": plot_alignment(attention["alignment"], src_labels, tgt_labels)}
    title = f"validation sentence {i}, step {step}"
    figures["valid/attention"] = plot_attention(attention["cross"], src_labels, tgt_labels,
                                                "cross", dpi=80, title=title)
    return figures
