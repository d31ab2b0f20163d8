"""The model contract: as in fairseq, the model owns its cache and the search only asks it to
reorder rows, so one search serves the RNN, the Transformer and an ensemble::

    enc = model.encode(src, src_mask)                         # Encoded(memory [B,S,H], mask)
    logits, alignment, _ = model.decode(tgt_in, enc)          # teacher forcing
    state = model.init_state(enc)                             # incremental decoding:
    logits, alignment, state = model.decode(tokens, None, state)   # T more positions
    state = state.reorder(index)                              # beam search: select/repeat rows

``src`` [B,S] int64, ``src_mask`` [B,S] bool (True = real token), ``tgt_in`` [B,T] int64
(bos + y), ``logits`` [B,T,V], ``alignment`` [B,T,S] (rows sum to 1 over the real source
positions, 0 on padding). Attention is an output: ``need_alignment=False`` computes none
(training keeps the fused kernels), True the alignment, ``"all"`` an :class:`Attention`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from nmt.config import ConfigError


@dataclass
class Encoded:
    """Encoder output; ``attention`` only with ``encode(..., need_weights=True)`` (not the RNN)."""

    memory: Tensor  # [B,S,H], the annotations h_j
    mask: Tensor  # [B,S] bool, True at real positions
    attention: Tensor | None = field(default=None, kw_only=True)  # [B,L,H,S,S] self-attention

    def reorder(self, index: Tensor) -> Encoded:
        """Rows ``index`` [B'] int64 (may repeat)."""
        return Encoded(self.memory.index_select(0, index), self.mask.index_select(0, index),
                       attention=reorder_tensors(self.attention, index))


@dataclass
class Attention:
    """Every weight of a decode call (``need_alignment="all"``) for L layers, H heads, T target
    and S source positions; rows sum to 1 over what a query may see, exactly 0 elsewhere."""

    alignment: Tensor  # [B,T,S], what need_alignment=True returns
    cross: Tensor  # [B,L,H,T,S] cross-attention (the RNN's alpha_ij: L = H = 1)
    decoder: Tensor | None = None  # [B,L,H,T,steps+T] causal self-attention (RNN: None)
    encoder: Tensor | None = None  # [B,L,H,S,S], filled by Seq2Seq.forward only


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Evaluation mode (no dropout) inside, the model's previous mode restored after, also
    when the block raises: search, validation and attention capture run in it."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def check_need_alignment(need_alignment: bool | str) -> bool:
    """True for ``"all"``, False for a bool; another string raises ValueError."""
    if isinstance(need_alignment, str) and need_alignment != "all":
        raise ValueError(f"need_alignment={need_alignment!r}: expected True, False or 'all'.")
    return isinstance(need_alignment, str)


class DecoderState:
    """Cache between incremental ``decode`` calls, holding what decoding needs from the encoder
    (already projected); ``steps`` counts the target positions consumed."""

    steps: int

    def reorder(self, index: Tensor) -> DecoderState:
        """The state of rows ``index`` [B'] int64 (may repeat rows)."""
        raise NotImplementedError


class Seq2Seq(nn.Module):
    """Base of the models; subclasses set ``src_vocab_size`` and ``tgt_vocab_size``. The
    alignment that ``decode`` returns is ``Attention.cross[:, alignment_layer,
    :alignment_heads].mean(1)`` (a guided model's supervised heads; the RNN's one alpha)."""

    src_vocab_size: int
    tgt_vocab_size: int
    alignment_layer: int = 0
    alignment_heads: int = 1
    all_attention: bool = True     # decode(..., need_alignment="all") gives every weight
    alignment_full_context: bool = False   # teacher forcing's alignment sees the whole target:
                                           # search's (causal) one is not the model's

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        raise NotImplementedError

    def init_state(self, enc: Encoded) -> DecoderState:
        raise NotImplementedError

    def decode(self, tgt_in: Tensor, enc: Encoded | None, state: DecoderState | None = None,
               need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | Attention | None, DecoderState | None]:
        """``tgt_in`` [B,T] -> (logits [B,T,V], alignment, state): teacher forcing over ``enc``
        when ``state`` is None (state None returned), else T more steps from ``state``."""
        raise NotImplementedError

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                need_alignment: bool | str = True) -> tuple[Tensor, Tensor | Attention | None]:
        """``decode(tgt_in, encode(src, src_mask))`` -> (logits, alignment or Attention)."""
        everything = check_need_alignment(need_alignment)
        enc = self.encode(src, src_mask, need_weights=True) if everything else \
            self.encode(src, src_mask)
        logits, alignment, _ = self.decode(tgt_in, enc, None, need_alignment)
        if everything:
            alignment = replace(alignment, encoder=enc.attention)
        return logits, alignment

    def compiled(self, mode: str | None = None) -> nn.Module:
        """What ``train.compile=true`` trains: ``torch.compile(self, dynamic=True, mode=mode)``,
        one graph for all batch shapes (a model looping over steps in Python compiles its step
        instead); ``mode="reduce-overhead"`` adds CUDA graphs, recorded once per shape."""
        return torch.compile(self, dynamic=True, mode=mode)

    def num_parameters(self) -> int:
        """Trainable parameters, tied matrices counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def reorder_tensors(tensors, index: Tensor):
    """``index_select(0, index)`` of every tensor in a nested list/tuple; None stays None."""
    if tensors is None:
        return None
    if isinstance(tensors, Tensor):
        return tensors.index_select(0, index)
    return type(tensors)(reorder_tensors(t, index) for t in tensors)


def regroup_rows(rows: Tensor, index: Tensor, n_src: int
                 ) -> tuple[Tensor | None, Tensor, int | None]:
    """Beam bookkeeping: beams point into their sentence's encoder tensors instead of copies.
    ``rows`` [B] maps decoder to encoder rows, ``index`` [B'] keeps decoder rows -> (encoder rows
    still used or None for all, new ``rows`` [B'], g if rows = ``arange(n).repeat_interleave(g)``
    (decoders then fold a sentence's g queries into one call) else None)."""
    rows = rows.index_select(0, index)
    used, inverse = torch.unique(rows, sorted=True, return_inverse=True)
    if used.numel() < n_src:
        n_src, rows = used.numel(), inverse
    else:
        used = None
    group = rows.numel() // n_src if rows.numel() % n_src == 0 else None
    if group is not None and not torch.equal(
            rows, torch.arange(n_src, device=rows.device).repeat_interleave(group)):
        group = None
    return used, rows, group


def require(ok: bool, cfg, key: str, allowed: str) -> None:
    """ConfigError ``model.<key>=<value> <allowed>.`` unless ``ok`` (the model configs' checks)."""
    if not ok:
        raise ConfigError(f"model.{key}={cfg[key]!r} {allowed}.")
