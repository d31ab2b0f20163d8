"""nmt.models.rnn: RNNConfig's checks; the fused decoder step is Bahdanau's additive attention."""

import pytest
import torch
from omegaconf import OmegaConf
from test_models import batch, make_model

from nmt.config import ConfigError, compose_config
from nmt.models import validate_model
from nmt.models.attention import AdditiveAttention


@pytest.mark.parametrize(("overrides", "key"), [
    ({"decoder_hidden": 0}, "model.decoder_hidden=0"),
    ({"encoder_layers": 0}, "model.encoder_layers=0"),
    ({"attention_dim": -1}, "model.attention_dim=-1"),
    ({"output_dim": 15}, "model.output_dim=15"),
    ({"dropout": 1.5}, "model.dropout=1.5"),
])
def test_impossible_settings_name_the_key(overrides, key):
    section = OmegaConf.merge(compose_config(["model=rnn"], validate_fn=None).model, overrides)
    with pytest.raises(ConfigError) as err:
        validate_model(section)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_odd_output_dim_is_fine_without_maxout():
    section = compose_config(["model=rnn", "model.output_dim=15", "model.maxout=false"],
                             validate_fn=None).model
    assert validate_model(section).output_dim == 15


def test_decoder_step_attention_is_additive_attention_with_the_fused_weights():
    """alpha_i of every decoder step = AdditiveAttention.forward (Bahdanau et al. 2015, A.1.2)
    with W_a = rows [3n:] of ``recurrent`` (their bias moved into U_a's), U_a and v_a."""
    model = make_model("rnn", {})
    torch.manual_seed(1)
    with torch.no_grad():                     # trained-looking biases, not the zeros of init
        model.recurrent.bias.normal_()
        model.attention.key_proj.bias.normal_()
    n, fused = model.decoder_hidden, model.attention
    reference = AdditiveAttention(n, fused.key_proj.in_features, fused.key_proj.out_features)
    with torch.no_grad():
        reference.query_proj.weight.copy_(model.recurrent.weight[3 * n:])          # W_a
        reference.key_proj.weight.copy_(fused.key_proj.weight)                     # U_a
        reference.key_proj.bias.copy_(fused.key_proj.bias + model.recurrent.bias[3 * n:])
        reference.energy.weight.copy_(fused.energy.weight)                         # v_a
    src, src_mask, tgt_in = batch()
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        keys = reference.project_keys(enc.memory)
        state = model.init_state(enc)
        for i in range(tgt_in.size(1)):
            s_prev = state.hidden                                                  # s_{i-1}
            _, alpha, state = model.decode(tgt_in[:, i:i + 1], None, state)
            _, expected = reference(s_prev, keys, enc.memory, src_mask)
            torch.testing.assert_close(alpha[:, 0], expected, atol=1e-6, rtol=0)
            assert expected[1, 3:].eq(0).all()                                     # padding
