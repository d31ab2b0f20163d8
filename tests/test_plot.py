"""nmt.evaluation.plot: the single heatmap (labels, colour bar, size), the layer x head grid,
gold marks, and ``nmt.plot_alignment`` on a Translation with ``kind``/``layer``/``head``."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure
from test_translator import SHORT, _fresh, transformer  # noqa: F401 (fixture)

import nmt
from nmt.config import ConfigError
from nmt.evaluation.plot import plot_alignment, plot_attention

SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand .", ""]


def _panels(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.images]


def test_plot_alignment_labels_colorbar_and_size(tmp_path):
    src = ["▁Ein", "▁Mädchen", "▁läuft", "▁über", "▁die", "▁Straße", "</s>"]
    tgt = ["▁A", "▁girl", "▁runs", "▁across", "▁the", "▁street", "</s>"]
    fig = plot_alignment(np.eye(7, dtype=np.float32), src, tgt, tmp_path / "sub" / "f.png")
    assert isinstance(fig, Figure) and (tmp_path / "sub" / "f.png").stat().st_size > 1000
    ax, bar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert bar.get_ylim() == pytest.approx((0.0, 1.0))
    long = plot_alignment(np.full((55, 60), 1 / 60), [f"▁wört{i}" for i in range(60)],
                          [f"▁w{i}" for i in range(55)])
    assert long.get_figwidth() > fig.get_figwidth() and long.get_figheight() > fig.get_figheight()
    with pytest.raises(ValueError):
        plot_alignment(np.zeros((2, 2)), ["a"], ["b", "c"])
    with pytest.raises(ValueError):
        plot_alignment(np.eye(2))                    # a bare matrix needs its labels


def test_marks_are_drawn_and_named_in_the_legend():
    src, tgt = ["▁Ein", "▁groß", "er", "</s>"], ["▁A", "▁big", "</s>"]
    marks = ({(0, 0), (1, 1), (1, 2)}, {(2, 2)})
    for fig in (plot_alignment(np.full((3, 4), 0.25), src, tgt, marks=marks),
                plot_attention(np.full((2, 2, 3, 4), 0.25), src, tgt, marks=marks)):
        for ax in _panels(fig):
            drawn = {line.get_label(): len(line.get_xdata()) for line in ax.lines}
            assert drawn == {"gold sure": 3, "gold possible": 1}
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["gold sure", "gold possible"]


def test_grid_has_a_row_per_layer_and_a_column_per_head_plus_the_mean(transformer):  # noqa: F811
    r = transformer.translate(SOURCES[0], return_attention=True, **SHORT)
    fig = nmt.plot_alignment(r, layer="all", head="all")       # kind=cross
    panels = _panels(fig)
    assert len(panels) == 3 * 3
    assert [ax.get_title() for ax in panels[:3]] == ["head 0", "head 1", "head mean"]
    np.testing.assert_allclose(panels[5].images[0].get_array(), r.attention["cross"][1].mean(0))
    assert [t.get_text() for t in panels[0].get_yticklabels()] == r.tokens
    assert len(_panels(nmt.plot_alignment(r, kind="encoder", layer=-1))) == 3   # the last layer
    (ax,) = _panels(nmt.plot_alignment(r, kind="decoder", layer=0, head=1))    # one heatmap
    np.testing.assert_allclose(ax.images[0].get_array(), r.attention["decoder"][0, 1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<s>", *r.tokens[:-1]]
    (ax,) = _panels(nmt.plot_alignment(r))                     # the alignment
    np.testing.assert_allclose(ax.images[0].get_array(), r.alignment)
    with pytest.raises(ConfigError, match="layer=3"):
        nmt.plot_alignment(r, kind="decoder", layer=3)
    with pytest.raises(ValueError, match="return_attention"):
        nmt.plot_alignment(transformer.translate(SOURCES[0], **SHORT), layer="all")


def test_rnn_has_no_self_attention_to_draw():
    rnn = _fresh(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                  "model.decoder_hidden=8", "model.attention_dim=8", "model.output_dim=8"])
    r = rnn.translate(SOURCES[0], return_attention=True, **SHORT)
    with pytest.raises(ConfigError, match="kind='encoder'"):
        nmt.plot_alignment(r, kind="encoder")
    assert len(_panels(nmt.plot_alignment(r, layer="all", head="all"))) == 1


def test_tensorboard_alignment_is_the_models_not_searchs(transformer):  # noqa: F811
    import dataclasses

    from nmt.evaluation.plot import tensorboard_figures
    from nmt.inference.translator import capture_attention

    model, tok = transformer.model, transformer.tokenizer
    src_ids = [[], tok.encode_src_batch([SOURCES[0]])[0]]       # the first with a source: 1
    hyp = transformer.hypotheses(src_ids[1:], transformer.search_settings(**SHORT, beam_size=1)
                                 | {"first_token": None}, None)[0][0]
    searched = dataclasses.replace(hyp, alignment=np.zeros_like(hyp.alignment))
    model.alignment_full_context = True   # the extra pass: not search's alignment
    try:
        figures = tensorboard_figures(model, src_ids, [[], [searched]], tok, "cpu", 7)
        full = capture_attention(model, src_ids[1:], [hyp.tokens], everything=False)[0]
    finally:
        model.alignment_full_context = False
    (ax,) = _panels(figures["valid/alignment"])
    np.testing.assert_allclose(ax.images[0].get_array(), full["alignment"], rtol=0, atol=1e-6)
    assert not np.allclose(full["alignment"], hyp.alignment, atol=1e-4)   # it differs here
    assert set(figures) == {"valid/alignment", "valid/attention"}
