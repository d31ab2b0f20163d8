"""nmt.models.transformer: TransformerConfig's checks, positions and embeddings, initialisation."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from test_models import make_model

from nmt.config import ConfigError, compose_config
from nmt.models import validate_model
from nmt.models.transformer import Residual, sinusoidal_positions


@pytest.mark.parametrize(("overrides", "keys"), [
    ({"heads": 3}, ["model.d_model", "model.heads=3"]),
    ({"d_model": 18, "heads": 4}, ["model.d_model=18", "model.heads=4"]),
    ({"encoder_layers": 0}, ["model.encoder_layers=0"]),
    ({"decoder_layers": 0}, ["model.decoder_layers=0"]),
    ({"heads": -2}, ["model.heads=-2"]),
    ({"attention_dropout": 1.0}, ["model.attention_dropout=1.0"]),
    ({"norm": "mid"}, ["model.norm", "pre"]),
    ({"activation": "tanh"}, ["model.activation", "gelu"]),
    ({"alignment_layer": 3}, ["model.alignment_layer=3"]),
    ({"alignment_layer": -4}, ["model.alignment_layer=-4"]),
    ({"encoder_drop_residual": 3}, ["model.encoder_drop_residual=3", "0..2"]),
])
def test_impossible_settings_name_the_key(overrides, keys):
    base = compose_config(["model=transformer"], validate_fn=None).model
    section = OmegaConf.merge(base, overrides)
    with pytest.raises(ConfigError) as err:
        validate_model(section)
    assert all(key in str(err.value) for key in keys) and "\n" not in str(err.value)


def test_valid_settings_come_back_typed():
    section = compose_config(["model=transformer", "model.alignment_layer=-3"],
                             validate_fn=None).model
    typed = validate_model(section)
    assert typed.alignment_layer == -3 and OmegaConf.get_type(typed).__name__ == "TransformerConfig"


@pytest.mark.parametrize(("pre_norm", "residual", "expected"), [
    (True, True, [-1.0, 5.0]),    # x + f(LN(x)), LN(x) = [-1, 1]
    (True, False, [-2.0, 2.0]),   # f(LN(x)): Liu et al. (2021)
    (False, True, [-1.0, 1.0]),   # LN(x + f(x)) = LN(3x)
    (False, False, [-1.0, 1.0]),  # LN(f(x)) = LN(2x)
])
def test_sublayer_connection_with_and_without_the_residual(pre_norm, residual, expected):
    connection = Residual(2, 0.0, pre_norm).eval()
    connection.residual = residual
    out = connection(torch.tensor([[1.0, 3.0]]), lambda h: 2 * h)
    assert torch.allclose(out, torch.tensor([expected]), atol=1e-4)


def test_only_the_named_encoder_layer_drops_its_attention_residual():
    """Same seed, same weights: the models differ only in layer 1's first connection."""
    plain, liu = (make_model("transformer", {"encoder_drop_residual": k}) for k in (None, 1))
    assert [layer.res1.residual for layer in liu.encoder] == [True, False]
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                 liu.state_dict().values(), strict=True))
    x, mask = torch.randn(2, 5, 16), torch.ones(2, 1, 1, 5, dtype=torch.bool)
    layer = plain.encoder[1]
    h, _ = layer.self_attn(layer.res1.norm(x), layer.res1.norm(x), mask)
    assert torch.allclose(liu.encoder[1](x, mask)[0], layer.res2(h, layer.ff), atol=1e-6)
    assert torch.allclose(layer(x, mask)[0], layer.res2(x + h, layer.ff), atol=1e-6)


def test_untied_initialisation_depends_on_the_seed_only():
    """Source and target embeddings are drawn in a fixed order (a set once made it random)."""
    weights = [make_model("transformer", {"tie_embeddings": False}).src_embed.weight
               for _ in range(6)]
    assert all(torch.equal(w, weights[0]) for w in weights)


def test_sinusoidal_positions_match_hand_computed_values():
    """Vaswani et al. (2017), 3.5, by hand.

    PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).
    """
    pe = sinusoidal_positions(50, 8)
    assert pe.shape == (50, 8)
    assert pe[0].tolist() == [0.0, 1.0] * 4                        # sin 0, cos 0
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=1e-6)  # 2i = 0: frequency 1
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0), abs=1e-6)
    # 2i = 2, d = 8: wavelength 10000^(2/8) = 10 (times 2 pi); 2i = 6: 10000^(6/8) = 1000.
    assert pe[10, 2].item() == pytest.approx(math.sin(1.0), abs=1e-6)
    assert pe[10, 3].item() == pytest.approx(math.cos(1.0), abs=1e-6)
    assert pe[3, 6].item() == pytest.approx(math.sin(3 / 1000), abs=1e-6)
    assert pe[3, 7].item() == pytest.approx(math.cos(3 / 1000), abs=1e-6)
    expected = torch.tensor([[f(pos / 10000 ** ((j - j % 2) / 8)) for j, f in
                              zip(range(8), [math.sin, math.cos] * 4, strict=True)]
                             for pos in range(50)])
    torch.testing.assert_close(pe, expected, atol=2e-5, rtol=0)


def test_transformer_adds_positions_to_scaled_embeddings():
    """sqrt(d) * E[ids] + PE: the model's table is the sinusoid, offset by the decoding step."""
    model = make_model("transformer", {})
    ids = torch.tensor([[5, 6, 5, 7]])
    pe = sinusoidal_positions(10, 16)
    torch.testing.assert_close(model.positions[:10], pe)
    x = model.embed(model.src_embed, ids, 0)
    torch.testing.assert_close(x, model.src_embed(ids) * 4.0 + pe[:4])     # sqrt(16) = 4
    # The same word at two positions differs by exactly PE[2] - PE[0].
    torch.testing.assert_close(x[0, 2] - x[0, 0], pe[2] - pe[0], atol=1e-5, rtol=0)
    # Incremental decoding at step 6 adds PE[6].
    step = model.embed(model.tgt_embed, ids[:, :1], 6)
    torch.testing.assert_close(step[0, 0], model.tgt_embed(ids[0, :1])[0] * 4.0 + pe[6])


def test_transformer_positions_beyond_table_leave_buffer_untouched():
    """Sequences longer than the cached table use a local table (DDP broadcasts buffers)."""
    model = make_model("transformer", {})
    buffer = model.positions
    before = buffer.clone()
    n = model.max_cached_positions + 40
    ids = torch.full((1, n), 5)
    model.embed(model.src_embed, ids, 0)            # past the table: no error
    assert model.positions is buffer and torch.equal(model.positions, before)
    # the first step past the table, in incremental decoding, gets the exact sinusoid
    x = model.embed(model.tgt_embed, ids[:, :1], n - 1)
    expected = model.tgt_embed(ids[:, :1]) * model.emb_scale + sinusoidal_positions(n, 16)[n - 1]
    assert torch.allclose(x, expected, atol=1e-5)
    assert model.positions is buffer and buffer.size(0) == model.max_cached_positions
