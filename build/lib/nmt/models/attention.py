"""Attention mechanisms: additive (Bahdanau et al. 2015), scaled dot-product and multi-head
(Vaswani et al. 2017).

Masks are boolean with True = may attend (a real key position, or an allowed causal link),
the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask`` convention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (Vaswani et al. 2017, eq. 1).

    Args:
        query: [..., Tq, d_k].
        key: [..., Tk, d_k].
        value: [..., Tk, d_v].
        mask: bool, broadcastable to [..., Tq, Tk]; True where a query may attend to a key
            (e.g. [B,1,1,S] for source padding). Every query must see at least one key.
        causal: also forbid key j > query i + (Tk - Tq) (the queries are the last Tq positions
            of the keys, as in incremental decoding).
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        need_weights: return the attention weights explicitly; otherwise the fused
            ``F.scaled_dot_product_attention`` kernel is used and the weights are None.

    Returns:
        output [..., Tq, d_v] and weights [..., Tq, Tk] (rows sum to 1, exactly 0 at masked
        keys) or None.
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
    """Additive attention of Bahdanau et al. (2015), appendix A.1.2.

    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),  alpha_ij = softmax_j(e_ij) over real source
    positions,  c_i = sum_j alpha_ij h_j.

    ``U_a h_j`` does not depend on the decoder step: :meth:`project_keys` computes it once per
    sentence, and each step only adds ``W_a s_{i-1}``. The decoder may compute ``W_a s_{i-1}``
    itself inside a larger fused matmul (``query_proj=False``) and call :meth:`score`.

    Args:
        query_dim: size of the decoder state s (n in the paper).
        key_dim: size of the annotations h_j (2n for a bidirectional encoder).
        attention_dim: n' in the paper.
        query_proj: False when the caller computes W_a s_{i-1} itself (then only
            :meth:`score` may be used).
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int, query_proj: bool = True):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False) if query_proj else None  # W_a
        self.key_proj = nn.Linear(key_dim, attention_dim)  # U_a (bias shared by all steps)
        self.energy = nn.Linear(attention_dim, 1, bias=False)  # v_a

    def project_keys(self, memory: Tensor) -> Tensor:
        """U_a h_j for all j: [B,S,key_dim] -> [B,S,attention_dim] (once per sentence)."""
        return self.key_proj(memory)

    def score(self, projected_query: Tensor, keys: Tensor, mask_bias: Tensor, memory: Tensor,
              group: int = 1) -> tuple[Tensor, Tensor]:
        """One step given ``W_a s_{i-1}`` already computed.

        Args:
            projected_query: [B, attention_dim] = W_a s_{i-1}.
            keys: [B/group,S,attention_dim] from :meth:`project_keys`.
            mask_bias: [B/group,S] float, 0 at real positions and -inf at padding.
            memory: [B/group,S,key_dim] annotations h_j.
            group: consecutive query rows that share one row of keys/memory (the beams of a
                sentence in beam search; broadcast, never copied).

        Returns:
            context c_i [B,key_dim] and alpha_i [B,S] (0 on padding).
        """
        n = keys.size(0)
        query = projected_query.view(n, group, 1, -1)
        energies = self.energy(torch.tanh(keys.unsqueeze(1) + query)).squeeze(-1)  # [n,g,S]
        alpha = torch.softmax(energies + mask_bias.unsqueeze(1), dim=-1)
        context = torch.bmm(alpha, memory)  # [n,g,key_dim]
        return context.reshape(-1, memory.size(-1)), alpha.reshape(-1, alpha.size(-1))

    def forward(self, query: Tensor, keys: Tensor, memory: Tensor, mask: Tensor
                ) -> tuple[Tensor, Tensor]:
        """Attend with decoder state ``query`` s_{i-1} [B,query_dim].

        Args:
            keys: [B,S,attention_dim] = :meth:`project_keys` (memory).
            memory: [B,S,key_dim].
            mask: [B,S] bool, True at real source positions (at least one per row).

        Returns:
            context [B,key_dim], alpha [B,S].
        """
        return self.score(self.query_proj(query), keys, mask_bias(mask, keys.dtype), memory)


def mask_bias(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """bool mask (True = real) -> additive bias: 0.0 where True, -inf where False."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2).

    MultiHead(Q,K,V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    with h heads of size d_model / h. Self-attention uses one fused [d, 3d] projection for
    Q, K, V; cross-attention one [d, d] projection for Q and one fused [d, 2d] for K, V (so
    the decoder can project the encoder memory once per sentence, :meth:`project_kv`).

    Args:
        d_model: model size.
        heads: number of heads h (d_model % heads == 0, checked by the config).
        dropout: dropout on the attention weights.
        self_attention: True for self-attention (fused QKV), False for cross-attention.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, self_attention: bool = True):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.dropout = dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        else:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)  # W^O

    def _split(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        """[B,T,n*d] -> n tensors [B,h,T,d_head] (views, no copy)."""
        b, t, _ = x.shape
        x = x.view(b, t, n, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return tuple(x.unbind(0))

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values of ``memory`` [B,S,d] -> 2 x [B,h,S,d_head]."""
        return self._split(self.kv_proj(memory), 2)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention queries, keys, values of ``x`` [B,T,d] -> 3 x [B,h,T,d_head]."""
        return self._split(self.qkv_proj(x), 3)

    def project_q(self, x: Tensor) -> Tensor:
        """Cross-attention queries of ``x`` [B,T,d] -> [B,h,T,d_head]."""
        return self._split(self.q_proj(x), 1)[0]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attention over projected heads plus W^O.

        Args:
            q: [B,h,Tq,d_head]; k, v: [B,h,Tk,d_head].
            mask: bool broadcastable to [B,h,Tq,Tk], True = may attend.
            causal: forbid attending to later positions (queries are the last Tq keys).
            need_weights: return the weights [B,h,Tq,Tk] (explicit softmax path).

        Returns:
            output [B,Tq,d_model] and weights or None.
        """
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
