"""Transformer encoder-decoder (Vaswani et al. 2017).

Embeddings scaled by sqrt(d) (section 3.4) plus sinusoidal positions (3.5) pass through layers
whose sub-layers (self-attention, the decoder's cross-attention, a feed-forward network; 3.1-3.3)
each sit in a residual connection with dropout (5.4), post-norm (the paper) or pre-norm (Wang
et al. 2019; a final LayerNorm ends each stack). Decoding projects the encoder memory into
each layer's cross-attention keys/values once (``init_state``) and caches the self-attention
keys/values of past positions (:mod:`nmt.models.transformer_cache`), so step t costs O(t).
Weights are computed explicitly only where asked for (the alignment layer, or all); everything
else runs fused kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from omegaconf import MISSING
from torch import Tensor, nn

from nmt.config import Choice
from nmt.models.attention import MultiHeadAttention
from nmt.models.base import Attention, Encoded, Seq2Seq, check_need_alignment, require
from nmt.models.full_context import full_context_pass
from nmt.models.transformer_cache import TransformerState, layer_step

Norm = Choice("Norm", {"pre": "pre", "post": "post"}, module=__name__)
Activation = Choice("Activation", {"relu": "relu", "gelu": "gelu", "silu": "silu"}, module=__name__)


@dataclass
class TransformerConfig:
    """The ``model`` section of ``model=transformer`` (meaning: configs/model/transformer.yaml)."""

    name: str = MISSING
    d_model: int = MISSING
    heads: int = MISSING
    ff_dim: int = MISSING
    encoder_layers: int = MISSING
    decoder_layers: int = MISSING
    norm: Norm = MISSING
    dropout: float = MISSING
    attention_dropout: float = MISSING
    activation_dropout: float = MISSING
    activation: Activation = MISSING
    tie_embeddings: bool = MISSING
    alignment_layer: int = MISSING
    alignment_heads: int = MISSING
    alignment_full_context: bool = MISSING
    encoder_drop_residual: int | None = MISSING
    scale_embedding: bool = MISSING
    final_logits_bias: bool = MISSING

    @staticmethod
    def check(cfg) -> None:
        """The ranges that types cannot express (ConfigError naming the key)."""
        for key in ("d_model", "heads", "ff_dim", "encoder_layers", "decoder_layers"):
            require(cfg[key] > 0, cfg, key, "must be > 0")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            require(0.0 <= cfg[key] < 1.0, cfg, key, "must lie in [0, 1)")
        require(cfg.d_model % cfg.heads == 0, cfg, "d_model",
                f"is not divisible by model.heads={cfg.heads} (heads of d_model / heads, "
                "section 3.2.2)")
        n = cfg.decoder_layers
        require(-n <= cfg.alignment_layer < n, cfg, "alignment_layer",
                f"names none of the {n} decoder layers: use {-n}..{n - 1}")
        require(0 <= cfg.alignment_heads <= cfg.heads, cfg, "alignment_heads",
                f"must lie in 0..{cfg.heads} (0: all heads; k: the first k, guided)")
        k = cfg.encoder_drop_residual
        require(k is None or 0 <= k < cfg.encoder_layers, cfg, "encoder_drop_residual",
                f"names none of the encoder layers 0..{cfg.encoder_layers - 1}")


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...) -> [length, d_model]."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                         * (-math.log(10000.0) / d_model))
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
        self.act = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation]
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.linear1(x))
        if self.dropout > 0.0 and self.training:
            h = F.dropout(h, self.dropout, True)
        return self.linear2(h)


class Residual(nn.Module):
    """Sub-layer connection (section 5.4; the Annotated Transformer's SublayerConnection):
    post-norm LN(x + drop(f(x))) (the paper) or pre-norm x + drop(f(LN(x))) (Wang et al. 2019),
    x [B,T,d]. The attention sub-layers, which also return weights, call ``inp`` and ``out``
    around their call. ``residual=False`` leaves x out (Liu et al. 2021, section 3.1: encoder
    states keep less of their position; ``model.encoder_drop_residual``)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout, self.pre_norm, self.residual = dropout, pre_norm, True

    def forward(self, x: Tensor, sublayer) -> Tensor:
        return self.out(x, sublayer(self.inp(x)))

    def inp(self, x: Tensor) -> Tensor:              # f's input: LN(x) (pre-norm) or x
        return self.norm(x) if self.pre_norm else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:   # around f's output y [B,T,d]
        if self.dropout > 0.0 and self.training:     # residual dropout
            y = F.dropout(y, self.dropout, True)
        y = x + y if self.residual else y
        return y if self.pre_norm else self.norm(y)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward, each in a residual connection (section 3.1)."""

    def __init__(self, d_model, heads, ff_dim, dropout, attention_dropout, activation_dropout,
                 activation, pre_norm):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, self_attention=True)
        self.ff = FeedForward(d_model, ff_dim, activation, activation_dropout)
        self.res1 = Residual(d_model, dropout, pre_norm)
        self.res2 = Residual(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        """x [B,S,d], ``mask`` [B,1,1,S] (True at real positions) -> x [B,S,d] and, with
        ``need_weights``, the self-attention [B,h,S,S]."""
        h = self.res1.inp(x)
        y, weights = self.self_attn(h, h, mask, need_weights=need_weights)
        x = self.res1.out(x, y)
        return self.res2(x, self.ff), weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder, feed-forward (section 3.1)."""

    def __init__(self, d_model, heads, ff_dim, dropout, attention_dropout, activation_dropout,
                 activation, pre_norm):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads, attention_dropout, self_attention=True)
        self.cross_attn = MultiHeadAttention(d_model, heads, attention_dropout,
                                             self_attention=False)
        self.ff = FeedForward(d_model, ff_dim, activation, activation_dropout)
        self.res1 = Residual(d_model, dropout, pre_norm)
        self.res2 = Residual(d_model, dropout, pre_norm)
        self.res3 = Residual(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor, need_weights: bool = False,
                need_self_weights: bool = False, tgt_mask: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Teacher forcing: x [B,T,d], ``memory`` [B,S,d], ``src_mask`` [B,1,1,S] -> (x [B,T,d],
        cross-attention [B,h,T,S] or None, self-attention [B,h,T,T] or None). ``tgt_mask``
        [B,1,1,T] replaces the causal mask (:mod:`nmt.models.full_context`)."""
        h = self.res1.inp(x)
        y, self_weights = self.self_attn(h, h, tgt_mask, causal=tgt_mask is None,
                                         need_weights=need_self_weights)
        x = self.res1.out(x, y)
        y, weights = self.cross_attn(self.res2.inp(x), memory, src_mask, need_weights=need_weights)
        x = self.res2.out(x, y)
        return self.res3(x, self.ff), weights, self_weights


class Transformer(Seq2Seq):
    """The Transformer of ``cfg`` (:class:`TransformerConfig`; build with
    :func:`nmt.models.build_model`); ``pad_id``'s embedding row is zero and gets no gradient.
    Options beyond the paper: ``scale_embedding=false`` and ``final_logits_bias`` (a fixed
    bias [V] of the output layer) for imported Marian models, ``encoder_drop_residual``."""

    max_cached_positions = 512  # rows of the sinusoid buffer; embed computes longer tables

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cfg: TransformerConfig,
                 pad_id: int):
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        d = self.d_model = cfg.d_model
        self.pad_id, self.dropout = pad_id, cfg.dropout
        self.alignment_layer = cfg.alignment_layer % cfg.decoder_layers
        self.alignment_heads = cfg.alignment_heads or cfg.heads  # the first k heads align
        self.alignment_full_context = cfg.alignment_full_context
        self.src_embed = nn.Embedding(src_vocab_size, d, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if cfg.tie_embeddings else nn.Embedding(
            tgt_vocab_size, d, padding_idx=pad_id)
        pre_norm = cfg.norm == "pre"
        args = (d, cfg.heads, cfg.ff_dim, cfg.dropout, cfg.attention_dropout,
                cfg.activation_dropout, cfg.activation, pre_norm)
        self.encoder = nn.ModuleList(EncoderLayer(*args) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(*args) for _ in range(cfg.decoder_layers))
        self.encoder_norm = nn.LayerNorm(d) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre_norm else nn.Identity()
        self.output_proj = None if cfg.tie_embeddings else \
            nn.Linear(d, tgt_vocab_size, bias=False)
        self.register_buffer("positions", sinusoidal_positions(self.max_cached_positions, d),
                             persistent=False)
        self.emb_scale = math.sqrt(d) if cfg.scale_embedding else 1.0
        self.register_buffer("final_logits_bias",   # [V], not trained; None: no bias
                             torch.zeros(tgt_vocab_size) if cfg.final_logits_bias else None)
        self._reset_parameters()
        if cfg.encoder_drop_residual is not None:
            self.encoder[cfg.encoder_drop_residual].res1.residual = False

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for emb in dict.fromkeys((self.src_embed, self.tgt_embed)):  # N(0, d^-1/2), in this order
            nn.init.normal_(emb.weight, 0.0, self.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[self.pad_id].zero_()
        if self.output_proj is not None:
            nn.init.normal_(self.output_proj.weight, 0.0, self.d_model ** -0.5)

    def embed(self, emb: nn.Embedding, ids: Tensor, start: int) -> Tensor:
        """sqrt(d) * E[ids] (E[ids] without ``scale_embedding``) + PE[start:start+T], then
        dropout: [B,T] -> [B,T,d]. Positions past the cached table get a local one (a resized
        buffer would differ between DDP ranks)."""
        t = ids.size(1)
        table = self.positions
        if start + t > table.size(0):
            table = sinusoidal_positions(start + t, self.d_model).to(table)
        x = emb(ids) * self.emb_scale + table[start:start + t]
        if self.dropout > 0.0 and self.training:
            x = F.dropout(x, self.dropout, True)
        return x

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        """``src`` [B,S], ``src_mask`` [B,S] -> Encoded(memory [B,S,d], mask); ``need_weights``:
        ``attention`` [B,L,H,S,S] of every layer and head (padded query rows see the real keys)."""
        attn_mask = src_mask[:, None, None, :]
        x = self.embed(self.src_embed, src, 0)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, attn_mask, need_weights)
            weights.append(w)
        return Encoded(self.encoder_norm(x), src_mask,
                       attention=torch.stack(weights, 1) if need_weights else None)

    def init_state(self, enc: Encoded) -> TransformerState:
        """Incremental decoding: every decoder layer's cross-attention K, V of the memory, once."""
        cross_kv = [layer.cross_attn.project_kv(enc.memory) for layer in self.decoder]
        return TransformerState(cross_kv, enc.mask[:, None, None, :], None, 0)

    def decode(self, tgt_in: Tensor, enc: Encoded | None, state: TransformerState | None = None,
               need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | Attention | None, TransformerState | None]:
        """As :meth:`Seq2Seq.decode`; the alignment [B,T,S] is ``alignment_layer``'s
        cross-attention averaged over its first ``alignment_heads`` heads (all by default): a
        guided model's supervised heads (Garg et al. 2019, multi-task learning: one head of the
        penultimate layer, row t the step that predicts target token t), which search, the
        evaluator, nmt-align and serving then read as the model's alignment; with
        ``alignment_full_context``, teacher forcing's is the full-context pass's
        (:mod:`nmt.models.full_context`; the main pass then keeps its fused kernels), which the
        translator reads instead of search's."""
        everything = check_need_alignment(need_alignment)
        if state is not None:   # search: T new positions from the caches
            cross_kv, src_mask, group = state.encoder_side()
        full = bool(need_alignment) and state is None and self.alignment_full_context
        x = self.embed(self.tgt_embed, tgt_in, 0 if state is None else state.steps)
        cross, selfs, new_kv = [], [], []
        for i, layer in enumerate(self.decoder):   # fused kernels where no weight is read
            want = bool(everything or (need_alignment and not full and i == self.alignment_layer))
            if state is None:
                x, weights, self_weights = layer(x, enc.memory, enc.mask[:, None, None, :],
                                                 want, everything)
            else:
                x, weights, self_weights, kv = layer_step(
                    layer, x, cross_kv[i], src_mask,
                    None if state.self_kv is None else state.self_kv[i],
                    state.order, want, everything, group)
                new_kv.append(kv)
            cross.append(weights)
            selfs.append(self_weights)
        alignment = None
        if full:   # the pass above: teacher forcing reads the whole target
            alignment = full_context_pass(self, tgt_in, enc)
        elif need_alignment:
            alignment = cross[self.alignment_layer][:, :self.alignment_heads].mean(dim=1)
        if everything:
            alignment = Attention(alignment, torch.stack(cross, 1), torch.stack(selfs, 1))
        x = self.decoder_norm(x)
        w = self.tgt_embed.weight if self.output_proj is None else self.output_proj.weight
        logits = F.linear(x, w, self.final_logits_bias)   # a fixed bias [V] (Marian's) or None
        return logits, alignment, None if state is None else state.advanced(new_kv, tgt_in.size(1))
