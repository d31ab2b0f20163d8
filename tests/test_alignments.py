"""nmt.evaluation.alignments: the npz round trip (with every layer's and head's attention, and
without), the labels of each kind, and the one layer/head selection."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.config import ConfigError
from nmt.evaluation.alignments import (
    attention_labels,
    attention_panel,
    load_alignments,
    panel_choices,
    save_alignments,
)


# ------------------------------------------------------------------------------ npz
def test_alignments_round_trip_without_pickle(tmp_path):
    mats = [np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], np.float32),
            np.ones((1, 1), np.float32)]
    src = [["▁Größe", "</s>"], ["</s>"]]
    tgt = [["▁size", "▁ß", "</s>"], ["</s>"]]
    save_alignments(tmp_path / "a.npz", mats, src, tgt)
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]      # no temporary file left
    raw = np.load(tmp_path / "a.npz", allow_pickle=False)       # plain arrays only
    assert int(raw["count"]) == 2 and raw["align_0"].dtype == np.float32
    data = load_alignments(tmp_path / "a.npz")
    assert len(data) == 2
    np.testing.assert_array_equal(data[0].matrix, mats[0])
    assert data[0].src == src[0] and data[0].tgt == tgt[0] and data[-1].tgt == ["</s>"]
    assert data.labels(1) == (src[1], tgt[1]) and data[0].attention == {}   # no attention=all
    with pytest.raises(IndexError):
        data[2]
    with pytest.raises(ValueError, match="missing.npz"):
        load_alignments(tmp_path / "missing.npz")


def test_npz_round_trip_with_every_attention(tmp_path):
    rng = np.random.default_rng(0)
    src, tgt = [["▁a", "▁b", "</s>"], ["</s>"]], [["▁x", "</s>"], ["▁y", "▁z", "</s>"]]
    attention = [{"cross": rng.random((3, 2, len(t), len(s)), np.float32),
                  "decoder": rng.random((3, 2, len(t), len(t)), np.float32),
                  "encoder": rng.random((2, 2, len(s), len(s)), np.float32)}
                 for s, t in zip(src, tgt, strict=True)]
    path = tmp_path / "a.npz"
    save_alignments(path, [a["cross"][1].mean(0) for a in attention], src, tgt, attention)
    data = load_alignments(path)
    for i, a in enumerate(attention):
        assert data.labels(i) == (src[i], tgt[i])
        assert set(data[i].attention) == {"cross", "decoder", "encoder"}
        for kind, w in a.items():   # float16 storage
            np.testing.assert_allclose(data[i].attention[kind], w, atol=5e-4)
    assert np.load(path)["cross_0"].dtype == np.float16


# -------------------------------------------------------------------- labels, selection
def test_labels_of_each_kind():
    src, tgt = ["▁Ein", "▁Hund", "</s>"], ["▁A", "▁dog", "</s>"]
    assert attention_labels("cross", src, tgt)[:2] == (tgt, src)
    assert attention_labels("alignment", src, tgt)[:2] == (tgt, src)
    assert attention_labels("encoder", src, tgt)[:2] == (src, src)
    assert attention_labels("decoder", src, tgt)[:2] == (["<s>", "▁A", "▁dog"],) * 2


def test_panel_choices_and_panels():
    weights = np.arange(2 * 3 * 1 * 2, dtype=np.float32).reshape(2, 3, 1, 2)   # L=2, H=3
    assert panel_choices(weights, "all", "all") == ([0, 1], [0, 1, 2, "mean"])
    assert panel_choices(weights, -1, "mean") == ([1], ["mean"])
    assert panel_choices(weights[:, :1], "all", "all") == ([0, 1], [0])   # one head: no mean
    np.testing.assert_array_equal(attention_panel(weights, 1, 0), weights[1, 0])
    np.testing.assert_allclose(attention_panel(weights, "mean", "mean"), weights.mean((0, 1)))
    np.testing.assert_allclose(attention_panel(weights, 0, "mean"), weights[0].mean(0))
    for layer, head, key in ((2, 0, "layer=2"), (-3, 0, "layer=-3"), (0, 3, "head=3"),
                             ("last", 0, "layer='last'"), (True, 0, "layer=True")):
        with pytest.raises(ConfigError, match=key):
            panel_choices(weights, layer, head)
    with pytest.raises(ConfigError, match="layer='all'"):
        panel_choices(weights, "all", 0, grid=False)
