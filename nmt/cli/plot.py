"""``nmt-plot``: attention heatmaps (Bahdanau et al. 2015, Fig. 3) from ``alignments.npz``.

    nmt-plot alignments=runs/tf/eval/alignments.npz index=3 out=fig.png
    nmt-plot alignments=runs/tf/eval/alignments.npz index=10:20 out=figs   # figs/align_0010.png
    nmt-plot alignments=... index=3 layer=all head=all kind=encoder out=grid.png
    nmt-plot alignments=... index=3 layer=1 head=0 gold=gold.txt gold_one_based=true out=one.png
    nmt-plot alignments=... index=0:50 format=html out=attention.html

One sentence gives one PNG at ``out``; ``index=all`` or ``start:stop`` one PNG per sentence in
the directory ``out``. Options and their meaning: configs/plot.yaml (``nmt-plot --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError
from nmt.runtime import ensure_writable_dir, write_text_atomic


def parse_index(index, count: int) -> tuple[list[int], bool]:
    """``index`` -> (sentence numbers, many), where many means "write into a directory"."""
    text = str(index).strip()
    many = text == "all" or ":" in text
    try:
        if many:   # all: the whole range ":"
            parts = text.replace("all", ":").split(":")
            start, stop = (int(p) if p.strip() else None for p in parts)
            picked = list(range(count))[start:stop]
        else:
            picked = [int(text) % count] if -count <= int(text) < count else []
    except ValueError:
        raise ConfigError(f"index={text!r} must be a sentence number, all or start:stop.") from None
    if not picked:
        raise ConfigError(f"index={text} is out of range: the file holds {count} sentences.")
    return picked, many


def plot_kind(cfg: DictConfig) -> str:
    if cfg.kind is not None:
        return str(cfg.kind)
    return "cross" if cfg.layer is not None or cfg.head is not None else "alignment"


def _run(cfg: DictConfig) -> None:
    from nmt.evaluation.alignments import load_alignments
    from nmt.evaluation.plot import plot_alignment, plot_attention
    from nmt.extras.tools.word_alignment import read_gold, word_ids, word_link_cells

    try:
        data = load_alignments(cfg.alignments)
    except ValueError as err:
        raise ConfigError(f"alignments={cfg.alignments}: {err}") from None
    indices, many = parse_index(cfg.index, len(data))
    if cfg.format == "html":
        from nmt.extras.tools.viewer import attention_page

        ensure_writable_dir(Path(cfg.out).parent, "out")
        page = attention_page([(i, data[i]) for i in indices],
                              f"attention: {Path(cfg.alignments).name}")
        write_text_atomic(cfg.out, page)
        print(f"wrote {cfg.out} ({len(indices)} sentence(s), {len(page.encode()) / 1024:.0f} KiB)")
        return
    out, kind = Path(cfg.out), plot_kind(cfg)
    if many and out.suffix.lower() == ".png":
        raise ConfigError(f"index={cfg.index} writes one PNG per sentence: out={out} must be a "
                          "directory.")
    if not many and out.is_dir():
        raise ConfigError(f"out={out} is a directory: index={cfg.index} writes one file "
                          "out=FILE.png.")
    gold = None   # (sure, possible) links, checked against the words of the stored subwords
    if cfg.gold:
        counts = [[len(set(word_ids(p[:-1]))) for p in data.labels(i)] for i in range(len(data))]
        gold = read_gold(cfg.gold, one_based=bool(cfg.gold_one_based),
                         src_lengths=[n for n, _ in counts], tgt_lengths=[n for _, n in counts])
    ensure_writable_dir(out if many else out.parent, "out")  # before drawing anything
    for i in indices:
        item = data[i]
        path = out / f"{'align' if kind == 'alignment' else kind}_{i:04d}.png" if many else out
        marks = None if gold is None else tuple(
            word_link_cells(links[i], item.src, item.tgt) for links in gold)
        if kind == "alignment":
            plot_alignment(item.matrix, item.src, item.tgt, path, cmap=str(cfg.cmap),
                           dpi=int(cfg.dpi), marks=marks)
        else:
            if kind not in item.attention:
                have = (", ".join(item.attention)
                        or "none (write it with nmt-evaluate attention=all)")
                raise ConfigError(f"kind={kind}: sentence {i} of {cfg.alignments} has no {kind} "
                                  f"attention; the kinds it has: {have}.")
            plot_attention(item.attention[kind], item.src, item.tgt,
                           kind, "all" if cfg.layer is None else cfg.layer,
                           "all" if cfg.head is None else cfg.head, path,
                           cmap=str(cfg.cmap), dpi=int(cfg.dpi), title=f"sentence {i}", marks=marks)
    print(f"wrote {len(indices)} PNG file(s) to {out}")


def _check(cfg: DictConfig) -> DictConfig:
    from matplotlib import colormaps

    require(cfg, "alignments", "out")
    given = [key for key in ("kind", "layer", "head", "gold") if cfg[key] is not None]
    if cfg.format == "html" and Path(str(cfg.out)).suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"format=html writes one page: give out=FILE.html, not out={cfg.out}.")
    if cfg.format == "html" and given:
        raise ConfigError(f"format=html shows every kind, layer and head: drop {given[0]}=.")
    if plot_kind(cfg) == "alignment" and (cfg.layer is not None or cfg.head is not None):
        raise ConfigError("kind=alignment is one matrix per sentence, without layers or heads: "
                          "drop layer/head, or use kind=cross.")
    if cfg.gold and cfg.gold_one_based is None:
        raise ConfigError("gold=... needs gold_one_based=true or false (the files look alike).")
    if cfg.gold and plot_kind(cfg) not in ("alignment", "cross"):
        raise ConfigError(f"gold links pair source and target words: draw them on kind=cross, "
                          f"not on kind={plot_kind(cfg)}.")
    if cfg.dpi <= 0:
        raise ConfigError(f"dpi={cfg.dpi} must be > 0.")
    if str(cfg.cmap) not in colormaps:
        raise ConfigError(f"cmap={cfg.cmap!r} is not a matplotlib colormap: try gray or viridis.")
    return cfg


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="plot")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-plot", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-plot``; returns the exit status."""
    return run_app(app, argv, config_name="plot", prog="nmt-plot", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
