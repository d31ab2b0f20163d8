"""An ensemble of models behind the one model interface (:mod:`nmt.models.base`).

``Ensemble([m1, m2, ...])`` is itself a :class:`Seq2Seq`: its encoder output and decoder
state hold those of every member, and each decoder step returns the members' averaged
next-token distribution, so greedy, beam and sampling search decode an ensemble without
knowing it is one (as fairseq's ``EnsembleModel`` does for its ``SequenceGenerator``).

Members may be of different architectures (a Transformer with an RNN) but must read and
write the same vocabularies, i.e. share the tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from nmt.models.base import DecoderState, Encoded, Seq2Seq, check_need_alignment


@dataclass
class EnsembleEncoded(Encoded):
    """Encoder outputs of all members.

    Attributes:
        memory, mask: those of the first member ([B,S,H_1] and [B,S] bool); every member
            gets the same ``src_mask``, so ``mask`` is shared.
        members: each member's :class:`Encoded`, in member order.
    """

    members: list[Encoded] = field(default_factory=list)

    def reorder(self, index: Tensor) -> EnsembleEncoded:
        """Select/repeat rows ``index`` [B'] (int64) of every member's encoder output."""
        parts = [enc.reorder(index) for enc in self.members]
        return EnsembleEncoded(parts[0].memory, parts[0].mask, parts)


class EnsembleState(DecoderState):
    """Decoder states of all members, advanced and reordered together.

    Attributes:
        members: each member's :class:`DecoderState`, in member order.
        steps: target positions consumed so far (the same for every member).
    """

    def __init__(self, members: list[DecoderState], steps: int):
        self.members, self.steps = members, steps

    def reorder(self, index: Tensor) -> EnsembleState:
        """Rows ``index`` [B'] (int64, may repeat) of every member's state."""
        return EnsembleState([s.reorder(index) for s in self.members], self.steps)


class Ensemble(Seq2Seq):
    """Average of several models' next-token distributions.

    At every target position the ensemble's distribution is the mean of the members'
    probabilities, returned in log space::

        log p(y_i | y_<i, x) = log( (1/M) * sum_m p_m(y_i | y_<i, x) )
                             = logsumexp_m( log p_m(y_i | y_<i, x) ) - log M

    Why the mean of probabilities (a mixture, as fairseq's ``EnsembleModel``) and not the
    mean of log-probabilities (a product of experts): the mixture is a normalized
    distribution as is, so scores stay log-probabilities comparable with a single model's,
    and one member that is confidently wrong about a token cannot veto it (its near-zero
    probability is averaged, not multiplied in). The returned "logits" are these
    log-probabilities, so ``log_softmax`` of them (what search computes) leaves them
    unchanged up to rounding. The alignment is the mean of the members' alignments (each
    row still sums to 1 over the real source positions).

    Args:
        models: the members (>= 1), any :class:`Seq2Seq`; they are registered as
            submodules (``ensemble.train()`` / ``.eval()`` switch all of them), weights not
            copied. The ensemble starts in eval mode and switches its members to it (an
            ensemble is for decoding; a search restores the mode it found, so an ensemble
            left in train mode would leave its members in train mode after a search).

    Raises:
        ValueError: no members, or members whose source or target vocabulary sizes
            differ (they would not read the same ids / their distributions could not be
            averaged token by token).
    """

    def __init__(self, models: Sequence[Seq2Seq]):
        super().__init__()
        models = list(models)
        if not models:
            raise ValueError("An ensemble needs at least one model.")
        for side in ("src_vocab_size", "tgt_vocab_size"):
            sizes = [int(getattr(m, side)) for m in models]
            if len(set(sizes)) > 1:
                raise ValueError(
                    f"Ensemble members must share their vocabularies, but their {side} values "
                    f"are {sizes} (member order): ensemble only models trained with the same "
                    "tokenizer.")
        self.members = nn.ModuleList(models)
        self.src_vocab_size = models[0].src_vocab_size
        self.tgt_vocab_size = models[0].tgt_vocab_size
        self.eval()

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> EnsembleEncoded:
        """Every member encodes ``src`` [B,S] with ``src_mask`` [B,S] -> EnsembleEncoded.

        ``need_weights`` reaches the members (their ``Encoded.attention``); the ensemble's
        own ``attention`` stays None: members' attentions need not have one shape.
        """
        parts = [m.encode(src, src_mask, need_weights) for m in self.members]
        return EnsembleEncoded(parts[0].memory, parts[0].mask, parts)

    def init_state(self, enc: EnsembleEncoded) -> EnsembleState:
        """Every member's :meth:`Seq2Seq.init_state` on its own encoder output."""
        states = [m.init_state(e) for m, e in zip(self.members, enc.members, strict=True)]
        return EnsembleState(states, 0)

    def decode(self, tgt_in: Tensor, enc: EnsembleEncoded | None,
               state: EnsembleState | None = None, need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | None, EnsembleState | None]:
        """Teacher forcing (``state`` None) or T incremental steps; see :class:`Seq2Seq`.

        Returns:
            log-probabilities [B,T,V] float32 of the probability-averaged members (used as
            logits), the mean alignment [B,T,S] (None when no member returns one) and the
            advanced :class:`EnsembleState` (None in teacher forcing).

        Raises:
            TypeError: teacher forcing with an ``enc`` that :meth:`encode` did not return.
            ValueError: ``need_alignment="all"``: members' attentions (of different layer
                and head counts, or none) do not combine; capture them from one member.
        """
        if check_need_alignment(need_alignment):
            raise ValueError("An ensemble returns the mean alignment only: capture every "
                             "attention weight (need_alignment='all') from one member model.")
        if state is None and not isinstance(enc, EnsembleEncoded):
            raise TypeError("Ensemble.decode without a state needs the EnsembleEncoded of "
                            f"Ensemble.encode, got {type(enc).__name__}.")
        log_probs, alignments, states = [], [], []
        for i, member in enumerate(self.members):
            logits, align, new = member.decode(
                tgt_in, None if state is not None else enc.members[i],
                None if state is None else state.members[i], need_alignment)
            log_probs.append(torch.log_softmax(logits.float(), dim=-1))
            if align is not None:
                alignments.append(align.float())
            states.append(new)
        n = len(self.members)
        mixed = torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(n)  # [B,T,V]
        alignment = torch.stack(alignments).mean(0) if alignments else None
        if state is None:
            return mixed, alignment, None
        return mixed, alignment, EnsembleState(states, state.steps + tgt_in.size(1))

    def flop_params(self) -> tuple[int, int]:
        """Sums of the members' ``(n_encoder, n_decoder)`` (every member runs on every token)."""
        counts = [m.flop_params() for m in self.members]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
