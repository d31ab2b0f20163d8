"""nmt-plot end to end on small alignments files: one PNG, ranges, grids, pages and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_evaluate_cli import user_error

from nmt.cli import plot as cli_plot
from nmt.evaluation.alignments import save_alignments

pytestmark = pytest.mark.slow
PNG = b"\x89PNG\r\n\x1a\n"


def _npz(path: Path, n: int, attention: bool = False) -> Path:
    """``n`` sentences of 3 source and 2 target subwords; with ``attention`` also 2-layer,
    2-head cross-attention."""
    rng = np.random.default_rng(0)
    cross = [rng.dirichlet(np.ones(3), size=(2, 2, 2)).astype(np.float32) for _ in range(n)]
    save_alignments(path, [c.mean((0, 1)) for c in cross], [["▁Ein", "▁Hund", "</s>"]] * n,
                    [["▁A", "</s>"]] * n, [{"cross": c} for c in cross] if attention else None)
    return path


def test_plot_one_sentence_a_range_and_all(tmp_path, capsys):
    npz = _npz(tmp_path / "a.npz", 12)
    assert cli_plot.main([f"alignments={npz}", "index=3", f"out={tmp_path / 'one.png'}"]) == 0
    assert (tmp_path / "one.png").read_bytes()[:8] == PNG
    assert cli_plot.main([f"alignments={npz}", "index=2:5", f"out={tmp_path / 'r'}"]) == 0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "align_0002.png", "align_0003.png", "align_0004.png"]
    small = _npz(tmp_path / "small.npz", 2)
    assert cli_plot.main([f"alignments={small}", "index=all", f"out={tmp_path / 'all'}"]) == 0
    names = sorted(p.name for p in (tmp_path / "all").iterdir())
    assert names == ["align_0000.png", "align_0001.png"]


def test_plot_layer_head_grid_and_html_page(tmp_path):
    npz = _npz(tmp_path / "a.npz", 3, attention=True)
    for args in (["layer=all", "head=all"], ["layer=1", "head=0"], ["head=mean"]):
        assert cli_plot.main([f"alignments={npz}", "index=1", f"out={tmp_path / 'g.png'}",
                              *args]) == 0
        assert (tmp_path / "g.png").read_bytes()[:8] == PNG
    page = tmp_path / "page.html"
    assert cli_plot.main([f"alignments={npz}", "index=all", "format=html", f"out={page}"]) == 0
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("args, key", [
    (["index=12"], "index"),
    (["index=x"], "index"),
    (["index=all", "out={tmp}/x.png"], "out"),
    (["out={tmp}"], "out"),
    (["out={tmp}/a_file/one.png"], "out"),
    (["index=all", "out={tmp}/a_file/dir"], "out"),
    (["alignments={tmp}/no.npz"], "alignments"),
    (["cmap=no_such_map"], "cmap"),
    (["dpi=0"], "dpi"),
    (["dpi=high"], "dpi"),
    (["layer=5"], "layer"),
    (["head=first"], "head"),
    (["kind=self"], "kind"),
    (["kind=encoder"], "kind=encoder"),
    (["kind=alignment", "head=0"], "kind=alignment"),
    (["format=pdf"], "format"),
    (["format=html"], "out"),
    (["format=html", "out={tmp}/x.html", "layer=0"], "layer"),
    (["gold={tmp}/g.txt"], "gold_one_based"),
    (["gold={tmp}/g.txt", "gold_one_based=true", "kind=decoder"], "kind=decoder"),
    (["gold={tmp}/g.txt", "gold_one_based=true"], "g.txt"),
])
def test_plot_user_errors_exit_2_naming_the_key(tmp_path, capsys, args, key):
    npz = _npz(tmp_path / "a.npz", 12, attention=True)
    (tmp_path / "a_file").write_text("x")
    argv = [f"alignments={npz}", *(a.format(tmp=tmp_path) for a in args)]
    if not any(a.startswith("out=") for a in argv):
        argv.append(f"out={tmp_path / 'x.png'}")
    assert cli_plot.main(argv) == 2
    assert key in user_error(capsys, "nmt-plot")
