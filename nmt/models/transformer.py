"""Transformer encoder-decoder (Vaswani et al. 2017).

Sinusoidal positions (section 3.5), embeddings scaled by sqrt(d_model) (section 3.4),
pre-norm (Wang et al. 2019) or post-norm (the paper) sub-layers with residual dropout on each
sub-layer output and on embeddings + positions (section 5.4); the final LayerNorm of each
stack exists only with pre-norm. Tied source/target/output embeddings for a joint vocabulary.

Incremental decoding: :meth:`Transformer.init_state` projects the encoder memory into each
decoder layer's cross-attention keys/values once; every ``decode`` call appends the new
positions' self-attention keys/values to a per-layer cache, so step t costs O(t) attention and
no recomputation of earlier positions.

Attention capture (``need_alignment="all"``, ``encode(..., need_weights=True)``): every
layer's and head's weights, computed with an explicit softmax; otherwise only the
alignment layer's cross-attention is explicit and everything else runs the fused kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.models.attention import MultiHeadAttention
from nmt.models.base import (
    Attention,
    DecoderState,
    Encoded,
    Seq2Seq,
    check_need_alignment,
    regroup_rows,
    reorder_tensors,
)


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...) -> [length, d_model]."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)[:, : d_model // 2]
    return pe


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2 (section 3.3): [B,T,d] -> [B,T,d]."""

    def __init__(self, d_model: int, ff_dim: int, activation: str, dropout: float):
        super().__init__()
        self.linear1 = nn.Linear(d_model, ff_dim)
        self.linear2 = nn.Linear(ff_dim, d_model)
        self.act = F.relu if activation == "relu" else F.gelu
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.linear1(x))
        if self.dropout > 0.0 and self.training:
            h = F.dropout(h, self.dropout, True)
        return self.linear2(h)


class _Residual(nn.Module):
    """Sub-layer connection: pre-norm x + drop(f(LN(x))) or post-norm LN(x + drop(f(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.pre_norm = pre_norm

    def inp(self, x: Tensor) -> Tensor:
        """The sub-layer's input."""
        return self.norm(x) if self.pre_norm else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:
        """Combine residual ``x`` and sub-layer output ``y``."""
        if self.dropout > 0.0 and self.training:
            y = F.dropout(y, self.dropout, True)
        return x + y if self.pre_norm else self.norm(x + y)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each with a residual connection: [B,S,d] -> [B,S,d]."""

    def __init__(self, d_model, heads, ff_dim, dropout, attention_dropout, activation_dropout,
                 activation, pre_norm):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, self_attention=True)
        self.ff = FeedForward(d_model, ff_dim, activation, activation_dropout)
        self.res1 = _Residual(d_model, dropout, pre_norm)
        self.res2 = _Residual(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, attn_mask: Tensor, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        """``attn_mask`` [B,1,1,S] bool, True at real source positions.

        Returns the output [B,S,d] and, with ``need_weights``, the self-attention [B,h,S,S].
        """
        q, k, v = self.self_attn.project_qkv(self.res1.inp(x))
        y, weights = self.self_attn.attend(q, k, v, attn_mask, need_weights=need_weights)
        x = self.res1.out(x, y)
        return self.res2.out(x, self.ff(self.res2.inp(x))), weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder, feed-forward: [B,T,d] -> [B,T,d]."""

    def __init__(self, d_model, heads, ff_dim, dropout, attention_dropout, activation_dropout,
                 activation, pre_norm):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, self_attention=True)
        self.cross_attn = MultiHeadAttention(d_model, heads, attention_dropout, self_attention=False)
        self.ff = FeedForward(d_model, ff_dim, activation, activation_dropout)
        self.res1 = _Residual(d_model, dropout, pre_norm)
        self.res2 = _Residual(d_model, dropout, pre_norm)
        self.res3 = _Residual(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, cross_kv: tuple[Tensor, Tensor], src_attn_mask: Tensor,
                self_kv: tuple[Tensor, Tensor] | None, need_weights: bool, group: int = 1,
                need_self_weights: bool = False
                ) -> tuple[Tensor, Tensor | None, Tensor | None, tuple[Tensor, Tensor]]:
        """One layer.

        Args:
            x: [B,T,d] new target positions.
            cross_kv: encoder keys/values 2 x [B/group,h,S,d_head] (projected once per sentence).
            src_attn_mask: [B/group,1,1,S] bool, True at real source positions.
            self_kv: cached self-attention keys/values 2 x [B,h,t0,d_head] of the t0 earlier
                positions, or None (teacher forcing from position 0).
            need_weights: return the cross-attention weights [B,h,T,S].
            group: consecutive rows of ``x`` that share one row of ``cross_kv`` (the beams of
                a sentence); their queries attend in one call, keys/values are never copied.
            need_self_weights: also return the self-attention weights [B,h,T,t0+T].

        Returns:
            output [B,T,d], cross-attention weights or None, self-attention weights or None,
            keys/values of all t0+T positions.
        """
        q, k, v = self.self_attn.project_qkv(self.res1.inp(x))
        if self_kv is not None:
            k = torch.cat([self_kv[0], k], dim=2)
            v = torch.cat([self_kv[1], v], dim=2)
        y, self_weights = self.self_attn.attend(q, k, v, causal=True, need_weights=need_self_weights)
        x = self.res1.out(x, y)
        q = self.cross_attn.project_q(self.res2.inp(x))
        b, h, t, dh = q.shape
        if group > 1:  # the `group` rows of one sentence share its keys/values: fold them into queries
            q = q.view(b // group, group, h, t, dh).transpose(1, 2).reshape(b // group, h, group * t, dh)
        y, weights = self.cross_attn.attend(q, cross_kv[0], cross_kv[1], src_attn_mask,
                                            need_weights=need_weights)
        if group > 1:
            y = y.reshape(b, t, -1)
            if weights is not None:
                weights = weights.view(b // group, h, group, t, -1).transpose(1, 2).reshape(b, h, t, -1)
        x = self.res2.out(x, y)
        return self.res3.out(x, self.ff(self.res3.inp(x))), weights, self_weights, (k, v)


class TransformerState(DecoderState):
    """Incremental-decoding cache of :class:`Transformer`.

    The encoder side is stored once per source sentence and shared by the rows (beams) that
    decode it: ``rows`` maps each decoder row to its source row, so :meth:`reorder` copies
    only the self-attention cache (and the encoder side only when sentences leave).

    Attributes:
        cross_kv: per decoder layer, (key, value) [n_src,h,S,d_head] of the encoder memory.
        src_attn_mask: [n_src,1,1,S] bool.
        self_kv: per decoder layer, (key, value) [B,h,steps,d_head] or None before step 1.
        steps: target positions consumed so far.
        rows: [B] int64, source row of each decoder row.
        group: g when ``rows`` is ``arange(n_src).repeat_interleave(g)`` (beam layout), else
            None (decode then gathers the encoder side per row).
    """

    def __init__(self, cross_kv, src_attn_mask, self_kv, steps: int, rows: Tensor | None = None,
                 group: int | None = 1):
        self.cross_kv = cross_kv
        self.src_attn_mask = src_attn_mask
        self.self_kv = self_kv
        self.steps = steps
        n_src = src_attn_mask.size(0)
        self.rows = torch.arange(n_src, device=src_attn_mask.device) if rows is None else rows
        self.group = group

    def reorder(self, index: Tensor) -> TransformerState:
        """Rows ``index`` [B'] (may repeat) of the decoder cache; encoder side shared."""
        used, rows, group = regroup_rows(self.rows, index, self.src_attn_mask.size(0))
        cross_kv, mask = self.cross_kv, self.src_attn_mask
        if used is not None:  # some sentences left: drop their encoder side
            cross_kv, mask = reorder_tensors(cross_kv, used), mask.index_select(0, used)
        return TransformerState(cross_kv, mask, reorder_tensors(self.self_kv, index), self.steps,
                                rows, group)


class Transformer(Seq2Seq):
    """Transformer encoder-decoder.

    All arguments after the vocabulary sizes are keyword-only and required: their defaults
    live in ``configs/model/transformer.yaml`` only; build models with
    :func:`nmt.models.build_model`, which validates the config and the vocabulary sizes.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (must be equal with
            ``tie_embeddings``; :func:`nmt.models.build_model` checks this).
        d_model, heads, ff_dim, encoder_layers, decoder_layers: sizes (section 3).
        norm: "pre" or "post".
        dropout: residual dropout and dropout on embeddings + positions.
        attention_dropout: dropout on attention weights.
        activation_dropout: dropout after the feed-forward activation.
        activation: "relu" or "gelu".
        tie_embeddings: one matrix for source embeddings, target embeddings and the output
            projection (section 3.4).
        alignment_layer: decoder layer (negative counts from the end) whose cross-attention,
            averaged over heads, is returned as the alignment.
        pad_id: padding id (its embedding row is zero and gets no gradient;
            ``nmt.data.tokenizer.PAD_ID``).
    """

    #: Rows of the precomputed sinusoidal table; longer sequences get a table computed
    #: on the fly in :meth:`_embed` (the buffer itself never changes).
    max_cached_positions = 512

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, *, d_model: int, heads: int,
                 ff_dim: int, encoder_layers: int, decoder_layers: int, norm: str,
                 dropout: float, attention_dropout: float, activation_dropout: float,
                 activation: str, tie_embeddings: bool, alignment_layer: int, pad_id: int):
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.d_model, self.heads, self.pad_id = d_model, heads, pad_id
        self.dropout = dropout
        self.pre_norm = norm == "pre"
        self.alignment_layer = alignment_layer % decoder_layers
        self.tie_embeddings = tie_embeddings
        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if tie_embeddings else nn.Embedding(
            tgt_vocab_size, d_model, padding_idx=pad_id)
        args = (d_model, heads, ff_dim, dropout, attention_dropout, activation_dropout, activation,
                self.pre_norm)
        self.encoder = nn.ModuleList(EncoderLayer(*args) for _ in range(encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(*args) for _ in range(decoder_layers))
        self.encoder_norm = nn.LayerNorm(d_model) if self.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if self.pre_norm else nn.Identity()
        self.output_proj = None if tie_embeddings else nn.Linear(d_model, tgt_vocab_size, bias=False)
        self.register_buffer("positions", sinusoidal_positions(self.max_cached_positions, d_model),
                             persistent=False)
        self.emb_scale = math.sqrt(d_model)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for emb in {self.src_embed, self.tgt_embed}:  # N(0, d^-1/2): scaled by sqrt(d) at input
            nn.init.normal_(emb.weight, 0.0, self.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[self.pad_id].zero_()
        if self.output_proj is not None:
            nn.init.normal_(self.output_proj.weight, 0.0, self.d_model ** -0.5)

    def flop_params(self) -> tuple[int, int]:
        """(encoder params, decoder + output-projection params) for 6*N*tokens FLOP counts.

        Embedding lookups are not counted; the output projection is (tied or not) V x d.
        """
        enc = sum(p.numel() for p in self.encoder.parameters()) + sum(
            p.numel() for p in self.encoder_norm.parameters())
        dec = sum(p.numel() for p in self.decoder.parameters()) + sum(
            p.numel() for p in self.decoder_norm.parameters())
        return enc, dec + self.tgt_vocab_size * self.d_model

    def _embed(self, emb: nn.Embedding, ids: Tensor, start: int) -> Tensor:
        """sqrt(d) * E[ids] + PE[start:start+T], then dropout: [B,T] -> [B,T,d].

        Positions beyond the cached table are computed locally for this call; the
        ``positions`` buffer is never reassigned (DDP broadcasts buffers, and a resized
        buffer would differ between ranks).
        """
        t = ids.size(1)
        table = self.positions
        if start + t > table.size(0):
            table = sinusoidal_positions(start + t, self.d_model).to(table)
        x = emb(ids) * self.emb_scale + table[start:start + t]
        if self.dropout > 0.0 and self.training:
            x = F.dropout(x, self.dropout, True)
        return x

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        """``src`` [B,S] int64, ``src_mask`` [B,S] bool -> Encoded(memory [B,S,d], mask).

        ``need_weights``: ``Encoded.attention`` = self-attention of every layer and head
        [B,L,H,S,S] (padded query rows attend to the real keys like any other row).
        """
        attn_mask = src_mask[:, None, None, :]
        x = self._embed(self.src_embed, src, 0)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, attn_mask, need_weights)
            weights.append(w)
        return Encoded(self.encoder_norm(x), src_mask,
                       attention=torch.stack(weights, 1) if need_weights else None)

    def init_state(self, enc: Encoded) -> TransformerState:
        """Project the memory into every decoder layer's cross-attention keys/values once."""
        cross_kv = [layer.cross_attn.project_kv(enc.memory) for layer in self.decoder]
        return TransformerState(cross_kv, enc.mask[:, None, None, :], None, 0)

    def output_layer(self, h: Tensor) -> Tensor:
        """Vocabulary logits of decoder outputs: [B,T,d] -> [B,T,V]."""
        if self.output_proj is None:
            return F.linear(h, self.tgt_embed.weight)
        return self.output_proj(h)

    def decode(self, tgt_in: Tensor, enc: Encoded | None, state: TransformerState | None = None,
               need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | Attention | None, TransformerState | None]:
        """Teacher forcing (``state`` None) or T incremental steps; see :class:`Seq2Seq`.

        Returns logits [B,T,V], alignment [B,T,S] (cross-attention of ``alignment_layer``
        averaged over heads) or None, and the advanced state (None in teacher forcing).
        ``need_alignment="all"`` returns an :class:`Attention` instead of the alignment:
        cross [B,L,H,T,S] and decoder self-attention [B,L,H,T,steps+T] of every layer.
        """
        everything = check_need_alignment(need_alignment)
        incremental = state is not None
        if not incremental:
            state = self.init_state(enc)  # cross-attention keys/values: built in one place
        cross_kv, src_attn_mask, self_kv, start = (state.cross_kv, state.src_attn_mask,
                                                   state.self_kv, state.steps)
        group = state.group
        if group is None:  # rows in no beam layout: gather the encoder side per row
            cross_kv = reorder_tensors(cross_kv, state.rows)
            src_attn_mask, group = src_attn_mask.index_select(0, state.rows), 1
        x = self._embed(self.tgt_embed, tgt_in, start)
        alignment = None
        new_kv, cross, selfs = [], [], []
        for i, layer in enumerate(self.decoder):
            want = everything or (need_alignment and i == self.alignment_layer)
            x, weights, self_weights, kv = layer(x, cross_kv[i], src_attn_mask,
                                                 None if self_kv is None else self_kv[i], want,
                                                 group, everything)
            if want and i == self.alignment_layer:
                alignment = weights.mean(dim=1)
            new_kv.append(kv)
            cross.append(weights)
            selfs.append(self_weights)
        if everything:
            alignment = Attention(alignment, torch.stack(cross, 1), torch.stack(selfs, 1))
        logits = self.output_layer(self.decoder_norm(x))
        if not incremental:
            return logits, alignment, None
        return logits, alignment, TransformerState(state.cross_kv, state.src_attn_mask, new_kv,
                                                   start + tgt_in.size(1), state.rows, state.group)
