"""nmt.evaluation.alignments: the npz round trip (with every layer's and head's attention, and
without), the labels of each kind, and the one layer/head selection; and the attention that
``Translator.translate(return_attention=True)`` captures for it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT

import nmt
from nmt.config import ConfigError, compose_config
from nmt.evaluation.alignments import (
    attention_labels,
    attention_panel,
    load_alignments,
    panel_choices,
    save_alignments,
)
from nmt.models import build_model

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand .", ""]
SHORT = {"max_len_a": 0.0, "max_len_b": 8}     # untrained models: keep outputs short


def _translator(model_overrides: list[str]) -> nmt.Translator:
    """A fresh (seeded) model over the tiny checkpoint's tokenizer."""
    base = nmt.Translator.from_checkpoint(CKPT)
    cfg = compose_config(model_overrides, validate_fn=None)
    torch.manual_seed(0)
    model = build_model(cfg.model, base.tokenizer.src_vocab_size, base.tokenizer.tgt_vocab_size)
    return nmt.Translator(model, base.tokenizer, base.config)


@pytest.fixture(scope="module")
def transformer() -> nmt.Translator:
    """2 encoder and 3 decoder layers, 2 heads, alignment from the middle decoder layer."""
    return _translator(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                        "model.encoder_layers=2", "model.decoder_layers=3",
                        "model.alignment_layer=1"])


# ------------------------------------------------------------------------------ npz
def test_alignments_round_trip_without_pickle(tmp_path):
    mats = [np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], np.float32), np.ones((1, 1), np.float32)]
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


def test_npz_round_trip_with_every_attention(transformer, tmp_path):
    results = transformer.translate(SOURCES, return_attention=True, **SHORT)
    path = tmp_path / "a.npz"
    save_alignments(path, [r.alignment for r in results], [r.src_tokens for r in results],
                    [r.tokens for r in results], [r.attention for r in results])
    data = load_alignments(path)
    for i, r in enumerate(results):
        assert data.labels(i) == (r.src_tokens, r.tokens)
        assert set(data[i].attention) == {"cross", "decoder", "encoder"}
        for kind, w in r.attention.items():   # float16 storage
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


# ---------------------------------------------------------- capture (Translator API)
@pytest.mark.parametrize("search", [{"beam_size": 1}, {"beam_size": 3, "n_best": 2},
                                    {"sampling": True, "seed": 5}])
def test_return_attention_head_mean_at_the_alignment_layer_is_the_alignment(transformer, search):
    results = transformer.translate(SOURCES, return_attention=True, **search, **SHORT)
    for r in results:
        t, s = len(r.tokens), len(r.src_tokens)
        a = r.attention
        assert {k: v.shape for k, v in a.items()} == {
            "cross": (3, 2, t, s), "decoder": (3, 2, t, t), "encoder": (2, 2, s, s)}
        assert all(v.dtype == np.float32 for v in a.values())
        np.testing.assert_allclose(a["cross"][1].mean(0), r.alignment, atol=1e-5)
        for w in a.values():
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(a["decoder"], k=1) == 0)          # causal
        assert all(h.attention is None for h in r.hypotheses[1:])  # only the chosen one
    assert transformer.translate(SOURCES[0], **search, **SHORT).attention is None


def test_rnn_attention_is_alpha_alone():
    rnn = _translator(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                       "model.decoder_hidden=8", "model.attention_dim=8", "model.output_dim=8"])
    for r in rnn.translate(SOURCES, beam_size=2, return_attention=True, **SHORT):
        assert list(r.attention) == ["cross"]
        assert r.attention["cross"].shape == (1, 1, len(r.tokens), len(r.src_tokens))
        np.testing.assert_allclose(r.attention["cross"][0, 0], r.alignment, atol=1e-5)


def test_ensemble_cannot_return_attention():
    twice = nmt.Translator.from_checkpoint([CKPT, CKPT])
    with pytest.raises(ConfigError):
        twice.translate(SOURCES[0], return_attention=True, **SHORT)
