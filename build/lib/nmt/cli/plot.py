"""``nmt-plot``: alignment heatmaps (Bahdanau et al. 2015, Fig. 3) from ``alignments.npz``.

    nmt-plot alignments=runs/tf/eval/alignments.npz index=3 out=fig.png
    nmt-plot alignments=runs/tf/eval/alignments.npz index=all out=figs      # figs/align_0000.png ...
    nmt-plot alignments=runs/tf/eval/alignments.npz index=10:20 out=figs

``index`` is a 0-based sentence number (one PNG at ``out``), ``all``, or a Python-style
range ``start:stop`` (one PNG per sentence in the directory ``out``).
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


def _run(cfg: DictConfig) -> int:
    from nmt.evaluation.alignments import load_alignments
    from nmt.evaluation.plot import plot_alignment

    try:
        data = load_alignments(cfg.alignments)
    except ValueError as err:
        raise ConfigError(f"alignments={cfg.alignments}: {err}") from None
    indices, many = parse_index(cfg.index, len(data))
    out = Path(cfg.out)
    if many and out.suffix.lower() == ".png":
        raise ConfigError(f"index={cfg.index} writes one PNG per sentence: out={out} must be a directory.")
    if not many and out.is_dir():
        raise ConfigError(f"out={out} is a directory: index={cfg.index} writes one PNG file, "
                          "give out=FILE.png.")
    # Fail before drawing anything if the output place cannot be written.
    ensure_writable_dir(out if many else out.parent, "out")
    for i in indices:
        item = data[i]
        path = out / f"align_{i:04d}.png" if many else out
        try:
            plot_alignment(item.matrix, item.src, item.tgt, path, cmap=str(cfg.cmap),
                           dpi=int(cfg.dpi))
        except OSError as err:
            raise ConfigError(f"out={out}: cannot write {path} ({err.strerror or err}); "
                              "choose a writable path with out=...") from None
    print(f"wrote {len(indices)} PNG file(s) to {out}")
    return 0


def _check(cfg: DictConfig) -> DictConfig:
    """Required keys, a colormap matplotlib knows, a positive dpi.

    Raises:
        ConfigError: naming the key and what it accepts.
    """
    require(cfg, "alignments", "out")
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
