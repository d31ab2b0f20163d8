"""Checkpoint ensembling, a room of its own: several models decode as one, as fairseq's
``EnsembleModel``; the core's ``Translator.from_checkpoint`` loads one checkpoint::

    from nmt.extras.decoding.ensemble import ensemble_translator

    translator = ensemble_translator(["runs/a/checkpoints/best.pt", "runs/b/checkpoints/best.pt"])
    nmt-translate checkpoint=[a.pt,b.pt] < input.de > output.en    # nmt-evaluate alike

``Ensemble([m1, m2, ...])`` is just another model (:mod:`nmt.models.base`): a :class:`Seq2Seq`
whose encoder output and decoder state hold those of every member and whose decoder returns
the members' averaged next-token distribution, so every search decodes it without knowing.
Members may differ in architecture (a Transformer with an RNN) but share the tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from nmt.config import ConfigError
from nmt.data.languages import directions
from nmt.inference.translator import Translator, load_for_inference
from nmt.models.base import DecoderState, Encoded, Seq2Seq, check_need_alignment


@dataclass
class EnsembleEncoded(Encoded):
    """Every member's :class:`Encoded` in ``members``; ``memory`` and ``mask`` are the first's."""

    members: list[Encoded] = field(default_factory=list)

    def reorder(self, index: Tensor) -> EnsembleEncoded:
        """Rows ``index`` [B'] of every member's encoder output."""
        parts = [enc.reorder(index) for enc in self.members]
        return EnsembleEncoded(parts[0].memory, parts[0].mask, parts)


class EnsembleState(DecoderState):
    """Every member's :class:`DecoderState` in ``members``, advanced and reordered together."""

    def __init__(self, members: list[DecoderState], steps: int):
        self.members, self.steps = members, steps

    def reorder(self, index: Tensor) -> EnsembleState:
        """Rows ``index`` [B'] of every member's state."""
        return EnsembleState([s.reorder(index) for s in self.members], self.steps)


class Ensemble(Seq2Seq):
    """The mixture of the members' next-token distributions, in log space::

        log p(y_i | y_<i, x) = log( (1/M) sum_m p_m(y_i | y_<i, x) )
                             = logsumexp_m( log p_m(y_i | y_<i, x) ) - log M

    A mixture (fairseq's choice) rather than a product of experts (the mean of log-probs):
    it is normalized as is, so scores stay log-probabilities comparable with one model's, and
    a member confidently wrong about a token cannot veto it. Search's ``log_softmax`` of these
    "logits" leaves them unchanged up to rounding. The alignment is the members' mean.

    ``models`` (>= 1, sharing their vocabularies) become submodules (weights not copied); the
    ensemble starts in eval mode (a search restores the mode it found, so an ensemble left in
    train mode would leave its members there). It has no ``all_attention``: the members'
    layers and heads do not combine. Its ``alignment_full_context``: any member's (teacher
    forcing's mean alignment is then the one to read).
    """

    all_attention = False

    def __init__(self, models: Sequence[Seq2Seq]):
        super().__init__()
        models = list(models)
        sizes = [(m.src_vocab_size, m.tgt_vocab_size) for m in models]
        if len(set(sizes)) != 1:
            raise ValueError(f"ensemble members need one shared vocabulary (tokenizer); their "
                             f"(source, target) vocabulary sizes are {sizes}.")
        self.members = nn.ModuleList(models)
        self.src_vocab_size, self.tgt_vocab_size = sizes[0]
        self.alignment_full_context = any(m.alignment_full_context for m in models)
        self.eval()

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> EnsembleEncoded:
        """Every member encodes ``src`` [B,S]; ``need_weights`` fills the members'
        ``attention`` (of different shapes: the ensemble's own stays None)."""
        parts = [m.encode(src, src_mask, need_weights) for m in self.members]
        return EnsembleEncoded(parts[0].memory, parts[0].mask, parts)

    def init_state(self, enc: EnsembleEncoded) -> EnsembleState:
        states = [m.init_state(e) for m, e in zip(self.members, enc.members, strict=True)]
        return EnsembleState(states, 0)

    def decode(self, tgt_in: Tensor, enc: EnsembleEncoded | None,
               state: EnsembleState | None = None, need_alignment: bool | str = True
               ) -> tuple[Tensor, Tensor | None, EnsembleState | None]:
        """As :meth:`Seq2Seq.decode`: float32 log-probabilities [B,T,V] of the mixture, the
        mean alignment (None when no member has one). ``"all"`` (not ``all_attention``)
        raises ValueError: capture every weight from one member."""
        if check_need_alignment(need_alignment):
            raise ValueError("need_alignment='all': an ensemble has no all_attention; "
                             "capture the weights from one member.")
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


def ensemble_translator(paths: Sequence[str | Path], device: str | torch.device = "cpu",
                        weights: str = "inference") -> Translator:
    """A :class:`Translator` over the :class:`Ensemble` of these checkpoints of ``nmt-train`` /
    ``nmt-average`` (one path: that model alone); ``weights``: ``load_for_inference``.
    ConfigError: no path, or members with another tokenizer or other directions."""
    paths = list(paths)
    if not paths:
        raise ConfigError("give at least one checkpoint.")
    loaded = [load_for_inference(p, device, weights) for p in paths]
    model, tokenizer, config = loaded[0]
    for p, (_, tok, cfg) in zip(paths[1:], loaded[1:], strict=True):
        if tok.fingerprint != tokenizer.fingerprint:
            raise ConfigError(f"{p} uses another tokenizer than {paths[0]}: an ensemble "
                              "needs one vocabulary (data.tokenizer.model=...).")
        if directions(cfg.data) != directions(config.data):
            raise ConfigError(f"{p} and {paths[0]} translate other directions: an ensemble "
                              "needs the same data.pairs.")
    if len(loaded) > 1:
        model = Ensemble([m for m, _, _ in loaded])
    return Translator(model, tokenizer, config, device)
