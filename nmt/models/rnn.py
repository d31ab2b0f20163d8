"""RNN encoder-decoder with additive attention (Bahdanau, Cho, Bengio 2015, "RNNsearch").

The encoder is a bidirectional GRU over packed sequences (padding never enters the
recurrence); annotation h_j = [forward h_j; backward h_j] (section 3.2). The decoder, for
i = 1..T, with s_0 = tanh(W_s backward h_1) (appendix A.2.2)::

    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),  alpha_i = softmax_j(e_i),  c_i = sum_j alpha_ij h_j
    s_i = GRU([E y_{i-1}; c_i], s_{i-1})
    t_i = maxout(U_o s_i + V_o E y_{i-1} + C_o c_i),  p(y_i) = softmax(W_o t_i)   (deep output)

Only attention and GRU update are sequential: the loop computes them, while the embeddings'
share of the GRU gates, the deep output and the vocabulary projection run once over all T
steps. Inside the loop one matmul of s_{i-1} with the stacked [U_r; U_z; U_n; W_a]
(``recurrent``) gives the GRU's recurrent gates and the attention query together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from omegaconf import MISSING
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
    require,
)


@dataclass
class RNNConfig:
    """The ``model`` section of ``model=rnn`` (meaning: configs/model/rnn.yaml)."""

    name: str = MISSING
    emb_dim: int = MISSING
    encoder_hidden: int = MISSING
    encoder_layers: int = MISSING
    decoder_hidden: int = MISSING
    attention_dim: int = MISSING
    output_dim: int = MISSING
    maxout: bool = MISSING
    dropout: float = MISSING
    tie_embeddings: bool = MISSING

    @staticmethod
    def check(cfg) -> None:
        """The ranges that types cannot express (ConfigError naming the key)."""
        for key in ("emb_dim", "encoder_hidden", "encoder_layers", "decoder_hidden",
                    "attention_dim", "output_dim"):
            require(cfg[key] > 0, cfg, key, "must be > 0")
        require(0.0 <= cfg.dropout < 1.0, cfg, "dropout", "must lie in [0, 1)")
        require(not (cfg.maxout and cfg.output_dim % 2), cfg, "output_dim",
                "must be even with model.maxout=true (pool size 2)")


class RNNState(DecoderState):
    """``hidden`` s_{i-1} [B,n]; per sentence ``keys`` U_a h_j [n_src,S,n'], ``memory`` h_j
    [n_src,S,2*encoder_hidden] and ``bias`` [n_src,S] (0 real, -inf padding), shared by its
    beams through ``rows`` and ``group`` (:func:`~nmt.models.base.regroup_rows`)."""

    def __init__(self, hidden: Tensor, keys: Tensor, memory: Tensor, bias: Tensor, steps: int,
                 rows: Tensor | None = None, group: int | None = 1):
        self.hidden, self.keys, self.memory = hidden, keys, memory
        self.bias, self.steps = bias, steps
        self.rows = torch.arange(keys.size(0), device=keys.device) if rows is None else rows
        self.group = group

    def reorder(self, index: Tensor) -> RNNState:
        """Rows ``index`` [B'] of the decoder state; the encoder side stays shared."""
        used, rows, group = regroup_rows(self.rows, index, self.keys.size(0))
        keys, memory, bias = self.keys, self.memory, self.bias
        if used is not None:
            keys, memory, bias = (t.index_select(0, used) for t in (keys, memory, bias))
        return RNNState(self.hidden.index_select(0, index), keys, memory, bias, self.steps,
                        rows, group)


class BahdanauRNN(Seq2Seq):
    """The RNNsearch model of ``cfg`` (:class:`RNNConfig`; build with
    :func:`nmt.models.build_model`). Sizes in the paper's names: ``emb_dim`` m,
    ``encoder_hidden`` n per direction, ``attention_dim`` n', ``output_dim`` 2l (t~_i before
    maxout); dropout acts on embeddings and on t_i."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, cfg: RNNConfig, pad_id: int):
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.dropout, self.maxout, self.pad_id = cfg.dropout, cfg.maxout, pad_id
        emb, dec, att, out = cfg.emb_dim, cfg.decoder_hidden, cfg.attention_dim, cfg.output_dim
        self.decoder_hidden, mem = dec, 2 * cfg.encoder_hidden
        self.src_embed = nn.Embedding(src_vocab_size, emb, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if cfg.tie_embeddings else nn.Embedding(
            tgt_vocab_size, emb, padding_idx=pad_id)
        self.encoder = nn.GRU(emb, cfg.encoder_hidden, cfg.encoder_layers, batch_first=True,
                              bidirectional=True,
                              dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0)
        self.init_proj = nn.Linear(cfg.encoder_hidden, dec)  # W_s
        # U_a h_j + v_a; W_a s_{i-1} is part of `recurrent` below
        self.attention = AdditiveAttention(dec, mem, att, query_proj=False)
        # GRU decoder, gates ordered (r, z, n) as in nn.GRUCell; input [E y_{i-1}; c_i].
        self.gru_in_emb = nn.Linear(emb, 3 * dec)  # W E y (+ b_ih): outside the loop
        self.gru_in_ctx = nn.Linear(mem, 3 * dec, bias=False)  # C c_i
        # rows [0, 3n): GRU recurrent gates U s_{i-1} (+ b_hh); rows [3n, 3n+a): W_a s_{i-1}
        self.recurrent = nn.Linear(dec, 3 * dec + att)
        # deep output t~_i = U_o s_i + V_o E y_{i-1} + C_o c_i
        self.out_state = nn.Linear(dec, out)
        self.out_emb = nn.Linear(emb, out, bias=False)
        self.out_ctx = nn.Linear(mem, out, bias=False)
        self.output_proj = nn.Linear(out // 2 if cfg.maxout else out, tgt_vocab_size)
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

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, True) if self.dropout > 0.0 and self.training else x

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        """``src`` [B,S], ``src_mask`` [B,S] -> Encoded(memory [B,S,2*encoder_hidden], mask);
        ``memory[:, 0, encoder_hidden:]`` is backward h_1, the backward GRU's final state. No
        attention here: ``need_weights`` changes nothing."""
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
        """Decoder step i: s_{i-1} ``s`` [B,n], ``gi_emb`` E y_{i-1}'s share of the GRU gates
        [B,3n], and :class:`RNNState`'s encoder side -> (s_i [B,n], c_i [B,2*encoder_hidden],
        alpha_i [B,S])."""
        n = self.decoder_hidden
        # The paper's matrices in the fused weights (the reference is AdditiveAttention.forward):
        # recurrent.weight = [U_r; U_z; U_n; W_a], rows [0, 3n) the GRU's recurrent gates (as
        # nn.GRUCell's weight_hh), rows [3n:] W_a (their bias adds to U_a's); U_a and v_a are
        # self.attention.key_proj and .energy. So `query` is W_a s_{i-1}, and score() computes
        # e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), alpha_i and c_i.
        rec = torch.addmm(self.recurrent.bias, s, self.recurrent.weight.t())  # [B, 3n + n']
        gh, query = rec[:, : 3 * n], rec[:, 3 * n:]
        context, alpha = self.attention.score(query, keys, bias, memory, group)
        gi = torch.addmm(gi_emb, context, self.gru_in_ctx.weight.t())
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = gh.chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        # One deviation from the paper: Bahdanau et al. (A.2.2) have U [r o s_{i-1}], the reset
        # gate before the matrix; we use r o (U s_{i-1} + b), PyTorch's (and cuDNN's) GRU,
        # which lets U_n share the fused matmul above (nn.GRUCell computes the same).
        cand = torch.tanh(i_n + r * h_n)                 # s~_i [B, n]
        return cand + z * (s - cand), context, alpha  # (1 - z) * cand + z * s_{i-1}

    def compiled(self, mode: str | None = None) -> nn.Module:
        """Compile :meth:`_recurrent_step` (dynamic shapes), not the loop, which Dynamo would
        unroll into one graph per target length; training uses it, search stays eager.
        ``mode`` is not used: CUDA graphs would keep every position's outputs of a forward."""
        self._compiled_step = torch.compile(self._recurrent_step, dynamic=True)
        return self

    def decode(self, tgt_in: Tensor, enc: Encoded | None, state: RNNState | None = None,
               need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | Attention | None, RNNState | None]:
        """As :meth:`Seq2Seq.decode`; the alignment is alpha [B,T,S] (``"all"``: the same as
        one layer and head, [B,1,1,T,S]), which guided alignment supervises (supervised
        attention, Liu et al. 2016: row i, the step that predicts y_i)."""
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
