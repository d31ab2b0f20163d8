"""nmt.models: the MODELS table, validate_model, build_model, and the invariants of every model
(padding, causality, alignment, cached == full decoding, reorder, overfit)."""

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from nmt.config import ConfigError, compose_config
from nmt.models import MODELS, BahdanauRNN, Transformer, build_model, validate_model
from nmt.models.flops import flop_params

V_SRC, V_TGT = 23, 23
PAD, BOS, EOS = 0, 2, 3

TINY = {
    "transformer": {"d_model": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 2,
                    "decoder_layers": 2, "dropout": 0.0, "attention_dropout": 0.0},
    "rnn": {"emb_dim": 8, "encoder_hidden": 8, "decoder_hidden": 12, "attention_dim": 10,
            "output_dim": 14, "dropout": 0.0},
}
VARIANTS = [
    ("transformer", {}),
    ("transformer", {"norm": "post", "activation": "gelu", "tie_embeddings": False,
                     "alignment_layer": 0, "encoder_drop_residual": 1}),
    ("rnn", {}),
    ("rnn", {"maxout": False, "encoder_layers": 2, "tie_embeddings": True}),
]
IDS = ["transformer-pre", "transformer-post", "rnn-maxout", "rnn-2layer"]


def model_cfg(name, **overrides):
    """The validated ``model`` section of configs/model/<name>.yaml, TINY and ``overrides``."""
    cfg = compose_config([f"model={name}"], validate_fn=None).model
    return validate_model(OmegaConf.merge(cfg, TINY[name], overrides))


def make_model(name, overrides, seed=0):
    torch.manual_seed(seed)
    return build_model(model_cfg(name, **overrides), V_SRC, V_TGT).eval()


def batch():
    """Two sentences of different lengths, PAD-padded; returns src, src_mask, tgt_in."""
    src = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, PAD, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 12, 13, 14, 15], [BOS, 16, 17, PAD, PAD]])
    return src, src != PAD, tgt_in


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_padding_invariance_and_alignment_rows(name, overrides):
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    logits, align = model(src, src_mask, tgt_in)
    assert logits.shape == (2, 5, V_TGT) and align.shape == (2, 5, 6)
    # second sentence alone, without any padding
    alone_logits, alone_align = model(src[1:, :3], src_mask[1:, :3], tgt_in[1:, :3])
    assert torch.allclose(logits[1, :3], alone_logits[0], atol=1e-5)
    assert torch.allclose(align[1, :3, :3], alone_align[0], atol=1e-5)
    # rows sum to 1 over real source positions, exactly 0 on padding
    assert torch.allclose(align.sum(-1), torch.ones(2, 5), atol=1e-5)
    assert align[1, :, 3:].eq(0).all()
    logits2, none = model(src, src_mask, tgt_in, need_alignment=False)
    assert none is None and torch.allclose(logits, logits2, atol=1e-5)


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_causality(name, overrides):
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    logits, align = model(src, src_mask, tgt_in)
    changed = tgt_in.clone()
    changed[:, 3] = 20
    logits2, align2 = model(src, src_mask, changed)
    assert torch.allclose(logits[:, :3], logits2[:, :3], atol=1e-6)
    assert torch.allclose(align[:, :3], align2[:, :3], atol=1e-6)
    assert not torch.allclose(logits[0, 3:], logits2[0, 3:], atol=1e-4)


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_cached_decoding_equals_full(name, overrides):
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        full_logits, full_align, none = model.decode(tgt_in, enc)
        assert none is None
        for chunks in ([1, 1, 1, 1, 1], [2, 3], [1, 4]):
            state = model.init_state(enc)
            logits, aligns, pos = [], [], 0
            for size in chunks:
                lg, al, state = model.decode(tgt_in[:, pos:pos + size], None, state)
                pos += size
                assert state.steps == pos
                logits.append(lg)
                aligns.append(al)
            assert torch.allclose(torch.cat(logits, 1), full_logits, atol=1e-5)
            assert torch.allclose(torch.cat(aligns, 1), full_align, atol=1e-5)


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_capture_every_attention(name, overrides):
    """need_alignment="all": shapes, head mean = alignment, rows, causality, same logits."""
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    with torch.no_grad():
        logits, align = model(src, src_mask, tgt_in)
        logits_all, att = model(src, src_mask, tgt_in, need_alignment="all")
    assert torch.allclose(logits_all, logits, atol=1e-5)
    assert torch.allclose(att.alignment, align, atol=1e-6)
    layers, heads = (2, 2) if name == "transformer" else (1, 1)
    assert att.cross.shape == (2, layers, heads, 5, 6)
    layer = overrides.get("alignment_layer", -1)
    assert torch.allclose(att.cross[:, layer].mean(1), align, atol=1e-6)
    weights = [att.cross]
    if name == "transformer":
        assert att.encoder.shape == (2, layers, heads, 6, 6)
        assert att.decoder.shape == (2, layers, heads, 5, 5)
        assert att.decoder.triu(1).eq(0).all()  # causal: nothing above the diagonal
        assert torch.allclose(att.decoder.sum(-1), torch.ones(2, layers, heads, 5), atol=1e-5)
        weights.append(att.encoder)
    else:
        assert att.encoder is None and att.decoder is None
    for w in weights:  # rows sum to 1 over the real source positions, exactly 0 on padding
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
        assert w[1, ..., 3:].eq(0).all()


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_incremental_capture_equals_teacher_forced(name, overrides):
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        _, full, _ = model.decode(tgt_in, enc, need_alignment="all")
        state = model.init_state(enc)
        for t in range(tgt_in.size(1)):
            _, step, state = model.decode(tgt_in[:, t:t + 1], None, state, need_alignment="all")
            assert torch.allclose(step.cross[..., 0, :], full.cross[..., t, :], atol=1e-5)
            if full.decoder is not None:
                assert step.decoder.shape[-1] == t + 1
                assert torch.allclose(step.decoder[..., 0, :], full.decoder[..., t, : t + 1],
                                      atol=1e-5)


def test_capture_refusals():
    from nmt.extras.decoding.ensemble import Ensemble

    src, src_mask, tgt_in = batch()
    model = make_model("rnn", {})
    with pytest.raises(ValueError, match="'all'"):
        model(src, src_mask, tgt_in, need_alignment="every")
    with pytest.raises(ValueError, match="one member"):
        Ensemble([model, make_model("transformer", {})])(src, src_mask, tgt_in,
                                                         need_alignment="all")


@pytest.mark.parametrize("name,overrides", VARIANTS, ids=IDS)
def test_state_reorder(name, overrides):
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    index = torch.tensor([1, 0, 1])
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask))
        _, _, state = model.decode(tgt_in[:, :2], None, state)
        twice = state.reorder(torch.tensor([1, 0])).reorder(torch.tensor([0, 1, 0]))  # = index
        lg_twice, _, _ = model.decode(tgt_in[index, 2:3], None, twice)
        lg, al, state = model.decode(tgt_in[index, 2:3], None, state.reorder(index))
        full_lg, full_al = model(src[index], src_mask[index], tgt_in[index, :3])
        enc_r = model.encode(src, src_mask).reorder(index)
        lg2, al2, _ = model.decode(tgt_in[index, :3], enc_r)
    assert torch.equal(lg_twice, lg)
    assert lg.shape == (3, 1, V_TGT)
    assert torch.allclose(lg[:, 0], full_lg[:, 2], atol=1e-5)
    assert torch.allclose(al[:, 0], full_al[:, 2], atol=1e-5)
    assert torch.allclose(lg2, full_lg, atol=1e-5) and torch.allclose(al2, full_al, atol=1e-5)


@pytest.mark.parametrize(("name", "overrides"), VARIANTS)
def test_beam_style_reorders_equal_full_decoding(name, overrides):
    """Repeat rows per sentence (beam layout), drop a sentence, shuffle within sentences:
    every step still equals teacher-forced decoding of the rows' own prefixes."""
    model = make_model(name, overrides)
    src, src_mask, tgt_in = batch()
    b = src.size(0)
    steps = [torch.arange(b).repeat_interleave(3),                     # 1 -> 3 rows per sentence
             torch.tensor([2, 1, 0, 3, 3, 4] + list(range(6, 3 * b))),  # shuffle inside groups
             torch.arange(3, 3 * b)]                                    # sentence 0 leaves
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask))
        rows = torch.arange(b)       # source sentence of each row
        prefix = tgt_in[:, :1]
        _, _, state = model.decode(prefix, None, state)
        for t, index in enumerate(steps, start=1):
            state, rows, prefix = state.reorder(index), rows[index], prefix[index]
            prefix = torch.cat([prefix, tgt_in[rows, t:t + 1]], dim=1)
            lg, al, state = model.decode(prefix[:, -1:], None, state)
            full_lg, full_al = model(src[rows], src_mask[rows], prefix)
            assert torch.allclose(lg[:, 0], full_lg[:, -1], atol=1e-5)
            assert torch.allclose(al[:, 0], full_al[:, -1], atol=1e-5)


@pytest.mark.parametrize("name", ["transformer", "rnn"])
def test_overfits_20_pairs(name):
    torch.manual_seed(0)
    sizes = {"transformer": {"d_model": 32, "heads": 2, "ff_dim": 64},
             "rnn": {"emb_dim": 32, "encoder_hidden": 32, "decoder_hidden": 48,
                     "attention_dim": 32, "output_dim": 64}}[name]
    model = build_model(model_cfg(name, **sizes), V_SRC, V_TGT).train()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 9, (20,), generator=g)
    s_max = int(lengths.max()) + 1
    src = torch.full((20, s_max), PAD)
    tgt_in = torch.full((20, s_max), PAD)
    tgt_out = torch.full((20, s_max), PAD)
    for i, n in enumerate(lengths.tolist()):
        x = torch.randint(4, V_SRC, (n,), generator=g)
        y = x.flip(0)  # target: reversed source
        src[i, :n + 1] = torch.cat([x, torch.tensor([EOS])])
        tgt_in[i, :n + 1] = torch.cat([torch.tensor([BOS]), y])
        tgt_out[i, :n + 1] = torch.cat([y, torch.tensor([EOS])])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss = None
    for _ in range(400):
        logits, _ = model(src, src != PAD, tgt_in, need_alignment=False)
        loss = F.cross_entropy(logits.reshape(-1, V_TGT), tgt_out.reshape(-1), ignore_index=PAD)
        if loss.item() < 0.02:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.02


def test_build_model_types_and_param_split():
    t = make_model("transformer", {})
    r = make_model("rnn", {})
    assert isinstance(t, Transformer) and isinstance(r, BahdanauRNN)
    assert t.src_embed is t.tgt_embed  # tied (transformer.yaml default)
    enc, dec = flop_params(t)
    assert enc > 0 and dec > V_TGT * 16
    enc, dec = flop_params(r)      # U_a h_j: once per source token
    assert enc == sum(p.numel() for m in (r.encoder, r.attention.key_proj) for p in m.parameters())


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(ConfigError) as err:
        validate_model({"name": "lstm"})
    assert "model.name" in str(err.value) and all(name in str(err.value) for name in MODELS)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize(("override", "key"), [({"dropout": "lots"}, "model.dropout"),
                                               ({"depth": 3}, "model.depth")])
def test_mistyped_or_unknown_keys_are_named(name, override, key):
    section = OmegaConf.to_container(compose_config([f"model={name}"], validate_fn=None).model)
    with pytest.raises(ConfigError) as err:
        validate_model({**section, **override})
    assert key in str(err.value)


@pytest.mark.parametrize("name", list(MODELS))
def test_untied_models_take_different_vocabulary_sizes(name):
    model = build_model(model_cfg(name, tie_embeddings=False), 20, 30).eval()
    src, src_mask, tgt_in = batch()
    logits, _ = model(src.clamp(max=19), src_mask, tgt_in)
    assert logits.shape == (2, 5, 30)


@pytest.mark.parametrize("name", list(MODELS))
def test_constructor_settings_are_keyword_only_and_required(name):
    """Defaults live only in configs/model/*.yaml: the constructors have none."""
    cls = MODELS[name][1]
    with pytest.raises(TypeError):
        cls(V_SRC, V_TGT)
    with pytest.raises(TypeError):
        cls(V_SRC, V_TGT, 16)
