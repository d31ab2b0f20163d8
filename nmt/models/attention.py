"""Attention: a query scores every key, a softmax turns the scores into weights that sum to 1,
and the output is the weighted sum of the values.

Bahdanau et al. (2015) score with a small network (:class:`AdditiveAttention`); the
Transformer (Vaswani et al. 2017) with a scaled dot product
(:func:`scaled_dot_product_attention`), h times side by side (:class:`MultiHeadAttention`).
Each has a reference path that computes the weights explicitly, and a fused path that
training and search run. Masks are bool with True = may attend (a real key, an allowed causal
link), the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 mask: Tensor | None = None, causal: bool = False,
                                 dropout_p: float = 0.0, need_weights: bool = False
                                 ) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (Vaswani et al. 2017, eq. 1).

    ``query`` [..., Tq, d_k], ``key`` [..., Tk, d_k], ``value`` [..., Tk, d_v] -> output
    [..., Tq, d_v] and, with ``need_weights``, the weights [..., Tq, Tk] (else None: the fused
    ``F.scaled_dot_product_attention`` kernel). ``mask`` broadcasts to [..., Tq, Tk] and
    leaves every query at least one key; ``causal`` also forbids key j > i + (Tk - Tq) (the
    queries are the last Tq keys, as in incremental decoding); ``dropout_p`` drops weights.
    """
    tq, tk = query.size(-2), key.size(-2)
    if causal:
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=query.device).tril(tk - tq)
        mask = allowed if mask is None else mask & allowed
    if not need_weights:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)
        return out, None
    scores = torch.matmul(query, key.transpose(-2, -1)) * (1.0 / math.sqrt(query.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    attn = F.dropout(weights, dropout_p) if dropout_p > 0.0 else weights
    return torch.matmul(attn, value), weights


class AdditiveAttention(nn.Module):
    """Additive attention (Bahdanau et al. 2015, appendix A.1.2)::

        e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),  alpha_ij = softmax_j(e_ij),
        c_i = sum_j alpha_ij h_j

    over the real source positions j. ``U_a h_j`` does not depend on the step i, so
    :meth:`project_keys` computes it once per sentence. :meth:`forward` is the reference;
    the RNN computes ``W_a s_{i-1}`` inside a larger fused matmul (``query_proj=False``) and
    calls :meth:`score`. Sizes: ``query_dim`` n (of s), ``key_dim`` 2n (of h_j, bidirectional),
    ``attention_dim`` n'.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int, query_proj: bool = True):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False) \
            if query_proj else None                                               # W_a
        self.key_proj = nn.Linear(key_dim, attention_dim)  # U_a (its bias shared by all steps)
        self.energy = nn.Linear(attention_dim, 1, bias=False)  # v_a

    def project_keys(self, memory: Tensor) -> Tensor:
        """U_a h_j for every j: [B,S,key_dim] -> [B,S,attention_dim]."""
        return self.key_proj(memory)

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor
                ) -> tuple[Tensor, Tensor]:
        """s_{i-1} ``query`` [B,query_dim], ``keys`` = project_keys(memory), ``memory`` h
        [B,S,key_dim], ``mask`` [B,S] bool -> (c_i [B,key_dim], alpha_i [B,S], 0 on padding)."""
        return self.score(self.query_proj(query), keys, mask_bias(mask, keys.dtype), memory)

    def score(self, projected_query: Tensor, keys: Tensor, mask_bias: Tensor, memory: Tensor,
              group: int = 1) -> tuple[Tensor, Tensor]:
        """:meth:`forward` given ``projected_query`` = W_a s_{i-1} [B,attention_dim].

        ``keys`` [B/g,S,attention_dim], ``mask_bias`` [B/g,S] (0 real, -inf padding) and
        ``memory`` [B/g,S,key_dim] serve ``group`` = g consecutive query rows each (the beams
        of one sentence: broadcast, never copied).
        """
        n = keys.size(0)
        query = projected_query.view(n, group, 1, -1)
        energies = self.energy(torch.tanh(keys.unsqueeze(1) + query)).squeeze(-1)  # e: [n,g,S]
        alpha = torch.softmax(energies + mask_bias.unsqueeze(1), dim=-1)
        context = torch.bmm(alpha, memory)  # [n,g,key_dim]
        return context.reshape(-1, memory.size(-1)), alpha.reshape(-1, alpha.size(-1))


def mask_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """bool mask (True = real) -> additive bias: 0.0 where True, -inf where False."""
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill_(~mask, float("-inf"))


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2)::

        MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

    with h = ``heads`` heads of d_model / h. Self-attention projects Q, K, V with one fused
    [d, 3d] matrix; cross-attention Q with [d, d] and K, V with one [d, 2d], so that decoding
    projects the encoder memory once per sentence (:meth:`project_kv`) and then calls
    :meth:`attend` step by step. ``dropout`` applies to the weights in training.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, self_attention: bool = True):
        super().__init__()
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.dropout = dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        else:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)  # W^O

    def forward(self, query: Tensor, key_value: Tensor, mask: Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """MultiHead(Q, K, V): queries of ``query`` [B,Tq,d] over keys and values of
        ``key_value`` [B,Tk,d] (self-attention: ``key_value`` is ``query``) -> output
        [B,Tq,d] and, with ``need_weights``, the weights [B,h,Tq,Tk] (else None: fused kernel).

        ``mask`` bool broadcasts to [B,h,Tq,Tk] (e.g. [B,1,1,S] for source padding);
        ``causal``: position i sees keys 1..i only (the decoder's masked self-attention).
        """
        if self.self_attention:
            q, k, v = self.project_qkv(query)
        else:
            q = self.project_q(query)
            k, v = self.project_kv(key_value)
        return self.attend(q, k, v, mask, causal, need_weights)

    def _split(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        """[B,T,n*d] -> n tensors [B,h,T,d_head] (views, no copy)."""
        b, t, _ = x.shape
        x = x.view(b, t, n, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return tuple(x.unbind(0))

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention Q, K, V of ``x`` [B,T,d] -> 3 x [B,h,T,d_head]."""
        return self._split(self.qkv_proj(x), 3)

    def project_q(self, x: Tensor) -> Tensor:
        """Cross-attention Q of ``x`` [B,T,d] -> [B,h,T,d_head]."""
        return self._split(self.q_proj(x), 1)[0]

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention K, V of ``memory`` [B,S,d] -> 2 x [B,h,S,d_head]."""
        return self._split(self.kv_proj(memory), 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attention of projected heads ``q`` [B,h,Tq,d_head] over ``k``, ``v`` [B,h,Tk,d_head],
        then W^O -> output [B,Tq,d] and weights [B,h,Tq,Tk] or None (as :meth:`forward`)."""
        p = self.dropout if self.training else 0.0
        if causal and not need_weights and mask is None and q.size(2) == k.size(2):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            weights = None
        elif causal and q.size(2) == 1:  # one new query sees every cached key
            out, weights = scaled_dot_product_attention(q, k, v, mask, False, p, need_weights)
        else:
            out, weights = scaled_dot_product_attention(q, k, v, mask, causal, p, need_weights)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.d_model)
        return self.out_proj(out), weights
