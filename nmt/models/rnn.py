"""RNN encoder-decoder with additive attention (Bahdanau, Cho, Bengio 2015, "RNNsearch").

Encoder: bidirectional GRU over packed sequences (padding never enters the recurrence);
annotation h_j = [h_j forward; h_j backward] (section 3.2).
Decoder (appendix A.2.2), for i = 1..T:

    c_i = sum_j alpha_ij h_j,  alpha_i = softmax_j(v^T tanh(W_a s_{i-1} + U_a h_j))   (attention)
    s_i = GRU([E y_{i-1}; c_i], s_{i-1})                                             (state)
    t_i = maxout(U_o s_i + V_o E y_{i-1} + C_o c_i),  p(y_i) = softmax(W_o t_i)       (deep output)

with s_0 = tanh(W_s h_1 backward). Only the attention and the GRU update are sequential:
the step loop computes them; the embeddings' share of the GRU input gates, the deep output,
the vocabulary projection (and the caller's log-softmax) run once over all T steps. Inside
the loop ``s_{i-1}`` is multiplied once by one stacked [U_gates; W_a] matrix (``recurrent``),
giving the GRU's recurrent gates and the attention query together.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.attention import AdditiveAttention, mask_bias
from nmt.models.base import (
    Attention,
    DecoderState,
    Encoded,
    Seq2Seq,
    check_need_alignment,
    regroup_rows,
)


class RNNState(DecoderState):
    """Incremental-decoding cache of :class:`BahdanauRNN`.

    The encoder side (keys, memory, bias) is stored once per source sentence and shared by
    the rows (beams) that decode it, as in :class:`nmt.models.transformer.TransformerState`.

    Attributes:
        hidden: s_{i-1} [B, decoder_hidden].
        keys: U_a h_j [n_src,S,attention_dim] (projected once per sentence).
        memory: h_j [n_src,S,2*encoder_hidden].
        bias: [n_src,S] float attention bias, 0 at real source positions, -inf at padding.
        steps: target positions consumed so far.
        rows: [B] int64, source row of each decoder row.
        group: g when ``rows`` is ``arange(n_src).repeat_interleave(g)``, else None.
    """

    def __init__(self, hidden: Tensor, keys: Tensor, memory: Tensor, bias: Tensor, steps: int,
                 rows: Tensor | None = None, group: int | None = 1):
        self.hidden, self.keys, self.memory, self.bias, self.steps = hidden, keys, memory, bias, steps
        self.rows = torch.arange(keys.size(0), device=keys.device) if rows is None else rows
        self.group = group

    def reorder(self, index: Tensor) -> RNNState:
        """Rows ``index`` [B'] (may repeat) of the decoder state; encoder side shared."""
        used, rows, group = regroup_rows(self.rows, index, self.keys.size(0))
        keys, memory, bias = self.keys, self.memory, self.bias
        if used is not None:
            keys, memory, bias = (t.index_select(0, used) for t in (keys, memory, bias))
        return RNNState(self.hidden.index_select(0, index), keys, memory, bias, self.steps,
                        rows, group)


class BahdanauRNN(Seq2Seq):
    """Bahdanau et al. (2015) attentional GRU encoder-decoder.

    All arguments after the vocabulary sizes are keyword-only and required: their defaults
    live in ``configs/model/rnn.yaml`` only; build models with :func:`nmt.models.build_model`,
    which validates the config and the vocabulary sizes.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (must be equal with
            ``tie_embeddings``; :func:`nmt.models.build_model` checks this).
        emb_dim: embedding size m.
        encoder_hidden: GRU size per direction n (annotations have 2n).
        encoder_layers: stacked bidirectional GRU layers.
        decoder_hidden: decoder GRU size.
        attention_dim: n' of the additive attention.
        output_dim: size of t~_i (before maxout; halved by maxout with pool 2).
        maxout: maxout over pairs (appendix A.2.2); otherwise tanh.
        dropout: on source/target embeddings and on t_i (before W_o).
        tie_embeddings: share source and target embeddings.
        pad_id: padding id (``nmt.data.tokenizer.PAD_ID``).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, *, emb_dim: int,
                 encoder_hidden: int, encoder_layers: int, decoder_hidden: int,
                 attention_dim: int, output_dim: int, maxout: bool, dropout: float,
                 tie_embeddings: bool, pad_id: int):
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.dropout, self.maxout, self.pad_id = dropout, maxout, pad_id
        self.decoder_hidden, self.attention_dim = decoder_hidden, attention_dim
        mem = 2 * encoder_hidden
        self.src_embed = nn.Embedding(src_vocab_size, emb_dim, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if tie_embeddings else nn.Embedding(
            tgt_vocab_size, emb_dim, padding_idx=pad_id)
        self.encoder = nn.GRU(emb_dim, encoder_hidden, encoder_layers, batch_first=True,
                              bidirectional=True, dropout=dropout if encoder_layers > 1 else 0.0)
        self.init_proj = nn.Linear(encoder_hidden, decoder_hidden)  # W_s
        # U_a h_j + v_a; W_a s_{i-1} is part of `recurrent` below
        self.attention = AdditiveAttention(decoder_hidden, mem, attention_dim, query_proj=False)
        # GRU decoder, gates ordered (r, z, n) as in nn.GRUCell; input [E y_{i-1}; c_i].
        self.gru_in_emb = nn.Linear(emb_dim, 3 * decoder_hidden)  # W E y (+ b_ih): outside loop
        self.gru_in_ctx = nn.Linear(mem, 3 * decoder_hidden, bias=False)  # C c_i
        # rows [0, 3n): GRU recurrent gates U s_{i-1} (+ b_hh); rows [3n, 3n+a): W_a s_{i-1}
        self.recurrent = nn.Linear(decoder_hidden, 3 * decoder_hidden + attention_dim)
        # deep output t~_i = U_o s_i + V_o E y_{i-1} + C_o c_i
        self.out_state = nn.Linear(decoder_hidden, output_dim)
        self.out_emb = nn.Linear(emb_dim, output_dim, bias=False)
        self.out_ctx = nn.Linear(mem, output_dim, bias=False)
        self.output_proj = nn.Linear(output_dim // 2 if maxout else output_dim, tgt_vocab_size)
        self._reset_parameters()
        self._compiled_step = None

    def _reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, 0.0, 0.1)
                with torch.no_grad():
                    p[self.pad_id].zero_()
            elif p.dim() > 1 and "weight_hh" in name:
                for block in p.data.chunk(3, 0):
                    nn.init.orthogonal_(block)
            elif name == "recurrent.weight":
                n = self.decoder_hidden
                for block in p.data[: 3 * n].chunk(3, 0):
                    nn.init.orthogonal_(block)
                nn.init.xavier_uniform_(p.data[3 * n:])
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            else:
                nn.init.zeros_(p)

    def flop_params(self) -> tuple[int, int]:
        """(encoder params, decoder + output-projection params) for 6*N*tokens FLOP counts.

        Embedding lookups are not counted; W_s and U_a (once per sentence) count as decoder.
        """
        enc = sum(p.numel() for p in self.encoder.parameters())
        embeds = {id(p) for p in (self.src_embed.weight, self.tgt_embed.weight)}
        total = sum(p.numel() for p in self.parameters() if id(p) not in embeds)
        return enc, total - enc

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, True) if self.dropout > 0.0 and self.training else x

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        """``src`` [B,S], ``src_mask`` [B,S] -> Encoded(memory [B,S,2*encoder_hidden], mask).

        ``memory[:, 0, encoder_hidden:]`` is h_1 backward of the top layer (the backward GRU's
        final state), from which :meth:`init_state` derives s_0. The GRU encoder has no
        attention, so ``need_weights`` changes nothing (``Encoded.attention`` is None).
        """
        lengths = src_mask.sum(1)
        emb = self._drop(self.src_embed(src))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        return Encoded(memory, src_mask)

    def init_state(self, enc: Encoded) -> RNNState:
        """s_0 = tanh(W_s h_1 backward), keys U_a h_j, padding bias; once per sentence."""
        hidden = torch.tanh(self.init_proj(enc.memory[:, 0, self.encoder.hidden_size:]))
        return RNNState(hidden, self.attention.project_keys(enc.memory), enc.memory,
                        mask_bias(enc.mask, enc.memory.dtype), 0)

    def _recurrent_step(self, s: Tensor, gi_emb: Tensor, keys: Tensor, bias: Tensor,
                        memory: Tensor, group: int) -> tuple[Tensor, Tensor, Tensor]:
        """One decoder step i (Bahdanau et al. 2015, appendix A.2.2): attention, then GRU.

        Args:
            s: s_{i-1} [B, n]; gi_emb: the input-gate share of E y_{i-1} [B, 3n];
            keys, bias, memory: the encoder side of :class:`RNNState` (see
            :meth:`AdditiveAttention.score`); group: beam rows per source row.

        Returns:
            ``(s_i [B, n], context c_i [B, 2*encoder_hidden], alpha_i [B, S])``.
        """
        n = self.decoder_hidden
        # one matmul for the recurrent gates U s_{i-1} and the attention query W_a s_{i-1}
        rec = torch.addmm(self.recurrent.bias, s, self.recurrent.weight.t())  # [B, 3n + a]
        gh, query = rec[:, : 3 * n], rec[:, 3 * n:]
        context, alpha = self.attention.score(query, keys, bias, memory, group)
        gi = torch.addmm(gi_emb, context, self.gru_in_ctx.weight.t())
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        cand = torch.tanh(i_n + r * h_n)
        return cand + z * (s - cand), context, alpha  # (1 - z) * cand + z * s_{i-1}

    def compiled(self) -> nn.Module:
        """Compile the decoder step (:meth:`_recurrent_step`, dynamic shapes), not the loop.

        Compiling the whole model would unroll the Python loop over target positions into
        one graph per target length. The step has the same shapes at every position, so
        one graph (plus its backward) serves all lengths and batch sizes; search (eval
        mode) stays eager. Returns ``self``.
        """
        self._compiled_step = torch.compile(self._recurrent_step, dynamic=True)
        return self

    def decode(self, tgt_in: Tensor, enc: Encoded | None, state: RNNState | None = None,
               need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | Attention | None, RNNState | None]:
        """Teacher forcing (``state`` None) or T incremental steps; see :class:`Seq2Seq`.

        Returns logits [B,T,V], alignment alpha [B,T,S] or None, advanced state (None in
        teacher forcing). ``need_alignment="all"``: an :class:`Attention` whose ``cross``
        is alpha as one layer and one head [B,1,1,T,S], with no decoder self-attention.
        """
        everything = check_need_alignment(need_alignment)
        incremental = state is not None
        if not incremental:
            state = self.init_state(enc)
        emb = self._drop(self.tgt_embed(tgt_in))  # E y_{i-1}: [B,T,m]
        gi_emb = self.gru_in_emb(emb)  # [B,T,3n] input-gate share of E y_{i-1}, all steps at once
        keys, memory, bias, group = state.keys, state.memory, state.bias, state.group
        if group is None:  # rows in no beam layout: gather the encoder side per row
            keys, memory, bias = (t.index_select(0, state.rows) for t in (keys, memory, bias))
            group = 1
        s = state.hidden
        # the compiled step (see compiled()) serves training; search runs eager
        step = self._recurrent_step
        if self.training and self._compiled_step is not None:
            step = self._compiled_step
        states, contexts, alphas = [], [], []
        for i in range(tgt_in.size(1)):
            s, context, alpha = step(s, gi_emb[:, i], keys, bias, memory, group)
            states.append(s)
            contexts.append(context)
            alphas.append(alpha)
        s_all = torch.stack(states, 1)  # [B,T,n]
        c_all = torch.stack(contexts, 1)  # [B,T,2*enc]
        t = self.out_state(s_all) + self.out_emb(emb) + self.out_ctx(c_all)
        if self.maxout:
            t = t.view(*t.shape[:-1], -1, 2).amax(-1)
        else:
            t = torch.tanh(t)
        logits = self.output_proj(self._drop(t))
        alignment = torch.stack(alphas, 1) if need_alignment else None
        if everything:
            alignment = Attention(alignment, alignment[:, None, None])
        if not incremental:
            return logits, alignment, None
        return logits, alignment, RNNState(s, state.keys, state.memory, state.bias,
                                           state.steps + tgt_in.size(1), state.rows, state.group)
