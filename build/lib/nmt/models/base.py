"""The one model interface that search, trainer and evaluator rely on.

Every model implements three calls (cf. fairseq's ``reorder_incremental_state``: the model
owns its cache, the search only asks it to reorder rows)::

    enc = model.encode(src, src_mask)              # Encoded(memory [B,S,H], mask [B,S])
    logits, alignment, _ = model.decode(tgt_in, enc)          # teacher forcing, state=None
    state = model.init_state(enc)                  # incremental decoding
    logits, alignment, state = model.decode(tokens [B,t], None, state)   # t new steps
    state = state.reorder(index)                   # beam search: select / repeat rows

Shapes: ``src`` [B,S] int64, ``src_mask`` [B,S] bool (True = real token), ``tgt_in`` [B,T]
int64 (bos + y), ``logits`` [B,T,V] float, ``alignment`` [B,T,S] float (rows sum to 1 over
real source positions, 0 on padding). Nothing outside ``nmt/models`` branches on the model
type.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class Encoded:
    """Encoder output.

    Attributes:
        memory: [batch, src_len, hidden] encoder states (h_j).
        mask: [batch, src_len] bool, True at real (non-padding) source positions.
    """

    memory: Tensor
    mask: Tensor

    def reorder(self, index: Tensor) -> Encoded:
        """Select/repeat rows: ``index`` [B'] int64 into the batch dimension."""
        return Encoded(self.memory.index_select(0, index), self.mask.index_select(0, index))


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

    def encode(self, src: Tensor, src_mask: Tensor) -> Encoded:
        """Encode ``src`` [B,S] with ``src_mask`` [B,S] -> :class:`Encoded`."""
        raise NotImplementedError

    def init_state(self, enc: Encoded) -> DecoderState:
        """Start incremental decoding for the rows of ``enc`` (no target step consumed)."""
        raise NotImplementedError

    def decode(
        self,
        tgt_in: Tensor,
        enc: Encoded | None,
        state: DecoderState | None = None,
        need_alignment: bool = True,
    ) -> tuple[Tensor, Tensor | None, DecoderState | None]:
        """Decode target positions.

        Args:
            tgt_in: [B,T] target input ids (bos + y for teacher forcing; the newest
                token(s) when incremental).
            enc: encoder output; required when ``state`` is None, ignored otherwise.
            state: None for teacher forcing over all T positions (returns state None);
                otherwise the cache from :meth:`init_state` / a previous call, advanced
                by T steps and returned.
            need_alignment: False lets a model skip computing explicit attention weights
                (training); the returned alignment is then None.

        Returns:
            logits [B,T,V], alignment [B,T,S] or None, new state or None.
        """
        raise NotImplementedError

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor,
                need_alignment: bool = True) -> tuple[Tensor, Tensor | None]:
        """Teacher-forced pass: ``decode(tgt_in, encode(src, src_mask))`` -> (logits, alignment)."""
        logits, alignment, _ = self.decode(tgt_in, self.encode(src, src_mask), None, need_alignment)
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
