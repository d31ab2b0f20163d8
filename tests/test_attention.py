"""nmt.models.attention: hand-computed values, masks, the paper's formulas, fused == explicit."""

import math

import pytest
import torch

from nmt.models.attention import AdditiveAttention, MultiHeadAttention, scaled_dot_product_attention


def test_scaled_dot_product_hand_computed_2x3():
    # 2 queries, 3 keys, d_k = 4 -> scale 1/2.
    q = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    k = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    out, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    # row 0: scores (1, 0, -1) -> softmax (e, 1, 1/e) / (e + 1 + 1/e); row 1: uniform.
    e = math.e
    z = e + 1 + 1 / e
    w0 = torch.tensor([e / z, 1 / z, (1 / e) / z])
    assert torch.allclose(w[0], w0, atol=1e-6)
    assert torch.allclose(w[1], torch.full((3,), 1 / 3), atol=1e-6)
    assert torch.allclose(out[0], torch.tensor([w0[0] + w0[2], w0[1] + w0[2]]), atol=1e-6)
    assert torch.allclose(out[1], torch.tensor([2 / 3, 2 / 3]), atol=1e-6)
    fused, none = scaled_dot_product_attention(q, k, v)
    assert none is None and torch.allclose(fused, out, atol=1e-6)


def test_scaled_dot_product_padding_mask_hand_computed():
    q = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    k = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    mask = torch.tensor([True, True, False])  # third key is padding
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    e = math.e
    assert torch.allclose(w[0], torch.tensor([e / (e + 1), 1 / (e + 1), 0.0]), atol=1e-6)
    assert torch.allclose(w[1], torch.tensor([0.5, 0.5, 0.0]), atol=1e-6)
    assert w[:, 2].eq(0).all()
    assert torch.allclose(out[1], torch.tensor([0.5, 0.5]), atol=1e-6)
    fused, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.allclose(fused, out, atol=1e-6)


def test_causal_mask_with_offset():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    _, w = scaled_dot_product_attention(q, k, v, causal=True, need_weights=True)
    # the 5 queries are positions 2..6 of the 7 keys
    for i in range(5):
        assert w[:, i, i + 3:].eq(0).all()
        assert w[:, i, : i + 3].gt(0).all()
    full, _ = scaled_dot_product_attention(q, k, v, causal=True)
    exp, _ = scaled_dot_product_attention(q, k, v, causal=True, need_weights=True)
    assert torch.allclose(full, exp, atol=1e-5)


def test_additive_attention_tiny_example():
    att = AdditiveAttention(query_dim=1, key_dim=2, attention_dim=1)
    with torch.no_grad():
        att.query_proj.weight.fill_(1.0)            # W_a s = s
        att.key_proj.weight.copy_(torch.tensor([[1.0, 0.0]]))  # U_a h = h[0]
        att.key_proj.bias.zero_()
        att.energy.weight.fill_(2.0)                # v_a = 2
    memory = torch.tensor([[[0.0, 1.0], [1.0, 3.0], [5.0, 5.0]]])  # [1,3,2], last is padding
    mask = torch.tensor([[True, True, False]])
    s = torch.tensor([[0.5]])
    keys = att.project_keys(memory)
    context, alpha = att(s, keys, memory, mask)
    e = torch.tensor([2 * math.tanh(0.5), 2 * math.tanh(1.5)])
    a = torch.softmax(e, 0)
    assert torch.allclose(alpha[0], torch.tensor([a[0], a[1], 0.0]), atol=1e-6)
    assert torch.allclose(context[0], a[0] * memory[0, 0] + a[1] * memory[0, 1], atol=1e-6)


def test_multi_head_forward_is_the_papers_formula():
    """The paper's multi-head attention, computed head by head.

    MultiHead(Q,K,V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).
    """
    torch.manual_seed(0)
    d, h = 12, 3
    mha = MultiHeadAttention(d, h, self_attention=False).eval()
    x, mem = torch.randn(2, 4, d), torch.randn(2, 5, d)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    out, weights = mha(x, mem, mask, need_weights=True)
    w_q, b_q = mha.q_proj.weight, mha.q_proj.bias
    (w_k, w_v), (b_k, b_v) = mha.kv_proj.weight.chunk(2), mha.kv_proj.bias.chunk(2)
    heads = []
    for i in range(h):
        part = slice(i * d // h, (i + 1) * d // h)
        q = x @ w_q[part].T + b_q[part]
        k, v = mem @ w_k[part].T + b_k[part], mem @ w_v[part].T + b_v[part]
        head, head_weights = scaled_dot_product_attention(q, k, v, mask[:, 0], need_weights=True)
        heads.append(head)
        torch.testing.assert_close(weights[:, i], head_weights)
    torch.testing.assert_close(out, mha.out_proj(torch.cat(heads, -1)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_fused_equals_explicit(self_attention):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.0, self_attention=self_attention).eval()
    x, mem = torch.randn(3, 5, 16), torch.randn(3, 6, 16)
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    if self_attention:
        a, none = mha(x, x, causal=True)
        b, w = mha(x, x, causal=True, need_weights=True)
        assert w.shape == (3, 4, 5, 5) and w.triu(1).eq(0).all()
        q, k, v = mha.project_qkv(x)                      # the cached path's pieces
        cached, _ = mha.attend(q, k, v, causal=True)
    else:
        a, none = mha(x, mem, mask)
        b, w = mha(x, mem, mask, need_weights=True)
        assert w[1, ..., 4:].eq(0).all()
        cached, _ = mha.attend(mha.project_q(x), *mha.project_kv(mem), mask)
    assert none is None and a.shape == (3, 5, 16)
    assert torch.equal(cached, a)
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.allclose(w.sum(-1), torch.ones(()), atol=1e-5)
