"""The one model interface that search, trainer and evaluator rely on.

Every model implements three calls (cf. fairseq's ``reorder_incremental_state``: the model
owns its cache, the search only asks it to reorder rows)::

    enc = model.encode(src, src_mask)              # Encoded(memory [B,S,H], mask [B,S])
    logits, alignment, _ = model.decode(tgt_in, enc)          # teacher forcing, state=None
    state = model.init_state(enc)                  # incremental decoding
    logits, alignment, state = model.decode(tokens [B,t], None, state)   # t new steps
    state = state.reorder(index)                   # beam search: select / repeat rows
    logits, attention = model(src, src_mask, tgt_in, need_alignment="all")  # every weight

Shapes: ``src`` [B,S] int64, ``src_mask`` [B,S] bool (True = real token), ``tgt_in`` [B,T]
int64 (bos + y), ``logits`` [B,T,V] float, ``alignment`` [B,T,S] float (rows sum to 1 over
real source positions, 0 on padding). Nothing outside ``nmt/models`` branches on the model
type.

Capture: ``need_alignment="all"`` makes ``decode`` (and ``forward``) return an
:class:`Attention` in place of the alignment, holding every attention weight the model
computes; ``encode(..., need_weights=True)`` keeps the encoder's self-attention in
``Encoded.attention``. By default neither is computed, so training and plain decoding pay
nothing (the Transformer keeps the fused ``scaled_dot_product_attention`` kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn


@dataclass
class Encoded:
    """Encoder output.

    Attributes:
        memory: [batch, src_len, hidden] encoder states (h_j).
        mask: [batch, src_len] bool, True at real (non-padding) source positions.
        attention: encoder self-attention [B,L,H,S,S] (query row over key columns, 0 at
            padded keys) when ``encode(..., need_weights=True)`` and the model has one;
            else None (the RNN's encoder has no attention).
    """

    memory: Tensor
    mask: Tensor
    attention: Tensor | None = field(default=None, kw_only=True)

    def reorder(self, index: Tensor) -> Encoded:
        """Select/repeat rows: ``index`` [B'] int64 into the batch dimension."""
        return Encoded(self.memory.index_select(0, index), self.mask.index_select(0, index),
                       attention=reorder_tensors(self.attention, index))


@dataclass
class Attention:
    """Every attention weight of a decode call, returned for ``need_alignment="all"``.

    Weights are batch-first; L counts layers, H heads, T the target positions of the call,
    S source positions. Rows sum to 1 over the positions a query may see and are exactly
    0 elsewhere (source padding, future target positions).

    Attributes:
        alignment: [B,T,S] the default alignment (what ``need_alignment=True`` returns).
        cross: [B,L,H,T,S] cross-attention of every decoder layer and head (Transformer);
            the RNN's alpha_ij (Bahdanau et al. 2015, eq. 6) as L = H = 1.
        decoder: [B,L,H,T,K] decoder self-attention over the K = steps + T target
            positions seen so far (K = T in teacher forcing; causal: 0 above the diagonal),
            or None (RNN).
        encoder: [B,L,H,S,S] encoder self-attention, or None: filled by :meth:`Seq2Seq.forward`
            (``decode`` alone never sees the source; read ``Encoded.attention``).
    """

    alignment: Tensor
    cross: Tensor
    decoder: Tensor | None = None
    encoder: Tensor | None = None


def check_need_alignment(need_alignment: bool | str) -> bool:
    """True for ``"all"``, False for a bool; any other value raises ValueError."""
    if isinstance(need_alignment, str):
        if need_alignment != "all":
            raise ValueError(f"need_alignment={need_alignment!r}: expected True, False or 'all'.")
        return True
    return False


class DecoderState:
    """Cache carried between incremental ``decode`` calls (model-specific contents).

    It holds everything decoding needs from the encoder (already projected where the
    model can, e.g. cross-attention keys/values or ``U h_j``), so incremental ``decode``
    calls get ``enc=None``. ``steps`` counts target positions consumed so far.
    """

    steps: int

    def reorder(self, index: Tensor) -> DecoderState:
        """Return the state for rows ``index`` [B'] (int64, may repeat rows)."""
        raise NotImplementedError


class Seq2Seq(nn.Module):
    """Base class of the encoder-decoder models.

    Subclasses implement :meth:`encode`, :meth:`decode` and :meth:`init_state`.
    Attributes ``src_vocab_size`` and ``tgt_vocab_size`` (ints) are set by subclasses.
    """

    src_vocab_size: int
    tgt_vocab_size: int

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> Encoded:
        """Encode ``src`` [B,S] with ``src_mask`` [B,S] -> :class:`Encoded`.

        ``need_weights``: also return the encoder self-attention in ``Encoded.attention``
        (models without one leave it None).
        """
        raise NotImplementedError

    def init_state(self, enc: Encoded) -> DecoderState:
        """Start incremental decoding for the rows of ``enc`` (no target step consumed)."""
        raise NotImplementedError

    def decode(
        self,
        tgt_in: Tensor,
        enc: Encoded | None,
        state: DecoderState | None = None,
        need_alignment: bool | str = True,
    ) -> tuple[Tensor, Tensor | Attention | None, DecoderState | None]:
        """Decode target positions.

        Args:
            tgt_in: [B,T] target input ids (bos + y for teacher forcing; the newest
                token(s) when incremental).
            enc: encoder output; required when ``state`` is None, ignored otherwise.
            state: None for teacher forcing over all T positions (returns state None);
                otherwise the cache from :meth:`init_state` / a previous call, advanced
                by T steps and returned.
            need_alignment: False lets a model skip computing explicit attention weights
                (training); the returned alignment is then None. ``"all"`` returns an
                :class:`Attention` with every cross- and decoder self-attention weight
                (the logits are those of the default path up to float rounding).

        Returns:
            logits [B,T,V], alignment [B,T,S] (an :class:`Attention` for ``"all"``) or
            None, new state or None.

        Raises:
            ValueError: ``need_alignment`` is a string other than ``"all"``.
        """
        raise NotImplementedError

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                need_alignment: bool | str = True) -> tuple[Tensor, Tensor | Attention | None]:
        """Teacher-forced pass: ``decode(tgt_in, encode(src, src_mask))`` -> (logits, alignment).

        With ``need_alignment="all"`` the second value is an :class:`Attention` that also
        holds the encoder self-attention.
        """
        everything = check_need_alignment(need_alignment)
        enc = self.encode(src, src_mask, need_weights=True) if everything else self.encode(src, src_mask)
        logits, alignment, _ = self.decode(tgt_in, enc, None, need_alignment)
        if everything:
            alignment = replace(alignment, encoder=enc.attention)
        return logits, alignment

    def flop_params(self) -> tuple[int, int]:
        """Parameter counts for the analytic training-FLOP estimate (Kaplan et al. 2020).

        Returns:
            ``(n_encoder, n_decoder)``: parameters applied once per source token (encoder)
            and once per target token (decoder plus the output projection, V x d counted
            also when tied to an embedding). Embedding lookups are not counted. A training
            step then costs about ``6 * (n_encoder * src_tokens + n_decoder * tgt_tokens)``
            FLOPs (``scripts/bench_model.py``).
        """
        raise NotImplementedError

    def compiled(self) -> nn.Module:
        """The module ``train.compile=true`` trains through (``torch.compile``, dynamic shapes).

        Default: the whole model, ``torch.compile(self, dynamic=True)``: batch size and both
        lengths are symbolic, so token-bucketed batches reuse one graph. A model whose
        forward loops over time steps in Python overrides this (Dynamo would unroll the loop
        and build one graph per target length) and compiles its loop body instead. The
        parameters are shared and ``state_dict()`` keeps plain keys either way.
        """
        return torch.compile(self, dynamic=True)

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied matrices counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def reorder_tensors(tensors, index: Tensor):
    """``index_select`` along dim 0 of every tensor in a (nested) list/tuple; None kept."""
    if tensors is None:
        return None
    if isinstance(tensors, torch.Tensor):
        return tensors.index_select(0, index)
    return type(tensors)(reorder_tensors(t, index) for t in tensors)


def regroup_rows(rows: Tensor, index: Tensor, n_src: int) -> tuple[Tensor | None, Tensor, int | None]:
    """Beam-search bookkeeping for encoder-side tensors shared by the rows of a sentence.

    Decoder rows (beams) point into per-sentence encoder tensors instead of copying them.

    Args:
        rows: [B] int64, the encoder row of each current decoder row.
        index: [B'] int64, the decoder rows to keep (``DecoderState.reorder``'s argument).
        n_src: number of encoder rows now stored.

    Returns:
        ``used``: [n'] encoder rows still referenced, or None when all are (then the encoder
        tensors stay as they are; otherwise select ``used`` from them); ``rows`` [B']: the new
        map into the (selected) encoder rows; ``group``: g when ``rows`` equals
        ``arange(n').repeat_interleave(g)`` (each sentence's beams consecutive, as beam
        search lays them out), else None.
    """
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
