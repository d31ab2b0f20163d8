"""``nmt-plot``: attention heatmaps (Bahdanau et al. 2015, Fig. 3) from ``alignments.npz``.

    nmt-plot alignments=runs/tf/eval/alignments.npz index=3 out=fig.png
    nmt-plot alignments=runs/tf/eval/alignments.npz index=all out=figs      # figs/align_0000.png ...
    nmt-plot alignments=runs/tf/eval/alignments.npz index=10:20 out=figs
    nmt-plot alignments=... index=3 layer=all head=all kind=encoder out=grid.png
    nmt-plot alignments=... index=3 layer=1 head=0 gold=gold.txt gold_one_based=true out=one.png
    nmt-plot alignments=... index=0:50 format=html out=attention.html

``index`` is a 0-based sentence number (one PNG at ``out``), ``all``, or a Python-style
range ``start:stop`` (one PNG per sentence in the directory ``out``).

What is drawn: without ``kind``/``layer``/``head``, the stored alignment (one matrix per
sentence, every file has it). ``layer`` / ``head`` (an index, ``all`` or ``mean``; the
one not given means ``all``) draw ``kind`` (default ``cross``; ``encoder``, ``decoder``)
from a file written with ``nmt-evaluate ... attention=all``: rows = layers, columns =
heads plus their mean (:func:`nmt.evaluation.plot.plot_attention`).

Gold links (``gold=FILE``, Pharaoh ``i-j`` sure / ``ipj`` possible, ``gold_one_based``
required): line k holds word links of sentence k - 1 of the file, where words are those
of its stored subwords (a piece starting with ``▁`` starts a word), i.e. the words of the
hypothesis for an ``nmt-evaluate`` file and of the given pair for ``nmt-align
attention_out=...``. Each link marks the cells of all subword pairs of its two words (hollow
square: sure, hollow circle: possible) on the cross-attention or the stored alignment.

``format=html`` writes one self-contained page with every kind, layer and head of the
chosen sentences (:mod:`nmt.extras.viewer`).
Options: configs/plot.yaml (``nmt-plot --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import ensure_writable_dir, require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError


def parse_index(index, count: int) -> tuple[list[int], bool]:
    """``index`` setting -> (sentence numbers, many) where many means "write into a directory".

    Raises:
        ConfigError: not an int, ``all`` or ``start:stop``, or out of range.
    """
    text = str(index).strip()
    if text == "all":
        return list(range(count)), True
    if ":" in text:
        try:
            start, stop = (int(p) if p.strip() else None for p in text.split(":", 1))
        except ValueError:
            raise ConfigError(f"index={text!r} is not a range start:stop of integers.") from None
        picked = list(range(count))[slice(start, stop)]
        if not picked:
            raise ConfigError(f"index={text} selects no sentence: the file holds {count} (0..{count - 1}).")
        return picked, True
    try:
        i = int(text)
    except ValueError:
        raise ConfigError(f"index={text!r} must be a sentence number, 'all' or a range start:stop.") from None
    if not -count <= i < count:
        raise ConfigError(f"index={i} is out of range: the file holds {count} sentences (0..{count - 1}).")
    return [i % count], False


KINDS = ("alignment", "cross", "encoder", "decoder")


def plot_kind(cfg: DictConfig) -> str:
    """The kind drawn: ``kind``, else ``cross`` when ``layer`` or ``head`` is given, else
    ``alignment`` (the one stored matrix per sentence)."""
    if cfg.kind:
        return str(cfg.kind)
    return "cross" if cfg.layer is not None or cfg.head is not None else "alignment"


def _word_count(pieces: list[str]) -> int:
    from nmt.extras.word_alignment import word_ids

    ids = word_ids(pieces[:-1])   # without </s>
    return ids[-1] + 1 if ids else 0


def _read_gold(cfg: DictConfig, data) -> tuple[list, list]:
    """(sure, possible) word links per sentence of ``data``, checked against its words.

    Raises:
        ConfigError: unreadable or malformed gold file, a line count other than the file's
            sentence count, or a link outside its sentence (names the line).
    """
    from nmt.extras.word_alignment import AlignmentFormatError, read_gold

    labels = [data.labels(i) for i in range(len(data))]
    try:
        return read_gold(cfg.gold, one_based=bool(cfg.gold_one_based),
                         src_lengths=[_word_count(src) for src, _ in labels],
                         tgt_lengths=[_word_count(tgt) for _, tgt in labels])
    except AlignmentFormatError as err:
        raise ConfigError(f"gold: {err} (gold line k belongs to sentence k - 1 of "
                          f"{cfg.alignments}; its words are counted from its subwords)") from None


def _attention_of(item, kind: str, i: int, path: str):
    """``item.attention[kind]``, or a ConfigError that says how to get it."""
    if kind in item.attention:
        return item.attention[kind]
    if not item.attention:
        raise ConfigError(f"kind={kind}: {path} holds only one alignment per sentence; write every "
                          "layer and head with nmt-evaluate ... attention=all, or drop "
                          "kind/layer/head to draw the stored alignment.")
    raise ConfigError(f"kind={kind}: sentence {i} of {path} has {', '.join(item.attention)} "
                      f"attention only (the RNN has no {kind} self-attention); use kind=cross.")


def _write_html(cfg: DictConfig, data, indices: list[int]) -> int:
    from nmt.extras.viewer import attention_page

    out = Path(cfg.out)
    ensure_writable_dir(out.parent, "out")
    page = attention_page([(i, data[i]) for i in indices],
                          title=f"attention: {Path(cfg.alignments).name}")
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"out={out}: cannot write it ({err.strerror or err}); choose a "
                          "writable path with out=FILE.html.") from None
    print(f"wrote {out} ({len(indices)} sentence(s), {len(page.encode()) / 1024:.0f} KiB)")
    return 0


def _run(cfg: DictConfig) -> int:
    from nmt.evaluation.alignments import load_alignments
    from nmt.evaluation.plot import plot_alignment, plot_attention, word_link_cells

    try:
        data = load_alignments(cfg.alignments)
    except ValueError as err:
        raise ConfigError(f"alignments={cfg.alignments}: {err}") from None
    indices, many = parse_index(cfg.index, len(data))
    if cfg.format == "html":
        return _write_html(cfg, data, indices)
    out = Path(cfg.out)
    if many and out.suffix.lower() == ".png":
        raise ConfigError(f"index={cfg.index} writes one PNG per sentence: out={out} must be a directory.")
    if not many and out.is_dir():
        raise ConfigError(f"out={out} is a directory: index={cfg.index} writes one PNG file, "
                          "give out=FILE.png.")
    kind = plot_kind(cfg)
    gold = _read_gold(cfg, data) if cfg.gold else None
    # Fail before drawing anything if the output place cannot be written.
    ensure_writable_dir(out if many else out.parent, "out")
    for i in indices:
        item = data[i]
        name = "align" if kind == "alignment" else kind
        path = out / f"{name}_{i:04d}.png" if many else out
        marks = None
        if gold is not None:
            marks = (word_link_cells(gold[0][i], item.src, item.tgt),
                     word_link_cells(gold[1][i], item.src, item.tgt))
        try:
            if kind == "alignment":
                plot_alignment(item.matrix, item.src, item.tgt, path, cmap=str(cfg.cmap),
                               dpi=int(cfg.dpi), marks=marks)
            else:
                plot_attention(_attention_of(item, kind, i, cfg.alignments), item.src, item.tgt,
                               kind, "all" if cfg.layer is None else cfg.layer,
                               "all" if cfg.head is None else cfg.head, path,
                               cmap=str(cfg.cmap), dpi=int(cfg.dpi), title=f"sentence {i}",
                               marks=marks)
        except OSError as err:
            raise ConfigError(f"out={out}: cannot write {path} ({err.strerror or err}); "
                              "choose a writable path with out=...") from None
    print(f"wrote {len(indices)} PNG file(s) to {out}")
    return 0


def _check(cfg: DictConfig) -> DictConfig:
    """Required keys, known choices, a colormap matplotlib knows, a positive dpi.

    Raises:
        ConfigError: naming the key and what it accepts.
    """
    require(cfg, "alignments", "out")
    if cfg.format not in ("png", "html"):
        raise ConfigError(f"format={cfg.format!r} is not one of png (heatmaps) or html (one "
                          "interactive page).")
    if cfg.kind is not None and cfg.kind not in KINDS:
        raise ConfigError(f"kind={cfg.kind!r} is not one of {', '.join(KINDS)} (alignment: the "
                          "stored matrix; the others need nmt-evaluate ... attention=all).")
    for key in ("layer", "head"):
        value = cfg[key]
        if value is not None and value not in ("all", "mean") and (
                isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}={value!r} must be an index (0-based, negative counts from "
                              f"the end), {key}=all or {key}=mean.")
    if cfg.format == "html":
        if Path(str(cfg.out)).suffix.lower() not in (".html", ".htm"):
            raise ConfigError(f"format=html writes one self-contained page: give its path as "
                              f"out=FILE.html (got out={cfg.out}).")
        given = [key for key in ("kind", "layer", "head", "gold") if cfg[key] is not None]
        if given:
            raise ConfigError(f"format=html shows every kind, layer and head of the sentences "
                              f"(chosen on the page): drop {', '.join(k + '=' for k in given)}.")
    if plot_kind(cfg) == "alignment" and (cfg.layer is not None or cfg.head is not None):
        raise ConfigError("kind=alignment is the one stored matrix per sentence, it has no "
                          "layers or heads: drop layer/head, or use kind=cross.")
    if cfg.gold:
        if cfg.gold_one_based is None:
            raise ConfigError("gold=... needs gold_one_based=true or false: 0- and 1-based gold "
                              "files look alike, and a wrong guess shifts every link by one.")
        if plot_kind(cfg) not in ("alignment", "cross"):
            raise ConfigError(f"gold links pair source and target words: draw them on kind=cross "
                              f"(or the stored alignment), not on kind={cfg.kind}.")
    if cfg.dpi <= 0:
        raise ConfigError(f"dpi={cfg.dpi} must be a positive number of dots per inch, e.g. dpi=120.")
    from matplotlib import colormaps

    if str(cfg.cmap) not in colormaps:
        close = [n for n in sorted(colormaps) if n.lower().startswith(str(cfg.cmap).lower()[:3])][:6]
        raise ConfigError(f"cmap={cfg.cmap!r} is not a matplotlib colormap: try gray, viridis, "
                          f"magma or Blues{' (or ' + ', '.join(close) + ')' if close else ''}.")
    return cfg


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="plot")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-plot``."""
    run_task(cfg, _run, prog="nmt-plot", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-plot``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="plot", prog="nmt-plot", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
