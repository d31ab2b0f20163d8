"""A wrapper beside the search, for multilingual models with ``data.lang_tag=target``: the
first output token is forced. Skip it on a first reading; :mod:`nmt.inference.search` stays
the reference algorithms, which run on this wrapper unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from nmt.inference.search import Hypothesis
from nmt.models.base import Seq2Seq


class ForcedFirstToken(torch.nn.Module):
    """``model`` behind the same interface, but its first step can only give ``token`` [B]
    int64 (per sentence: a target-side language tag), with log-probability 0: forced, neither
    chosen nor scored (the M2M-100 convention, Fan et al. 2021; not in the loss either). Any
    search runs on it unchanged; hypotheses start with the tag and its alignment row
    (:meth:`strip` cuts both); it counts in the length penalty and ``max_len_b`` (give one more)."""

    def __init__(self, model: Seq2Seq, token: Tensor):
        super().__init__()
        self.model, self.token = model, token
        self.train(model.training)   # the search restores this mode, and with it the model's

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.model.encode(src, src_mask)

    def init_state(self, enc) -> _FirstStep:
        return _FirstStep(self.model.init_state(enc))

    def decode(self, tgt_in: Tensor, enc, state=None, need_alignment: bool | str = True):
        first = isinstance(state, _FirstStep)
        logits, align, state = self.model.decode(tgt_in, enc, state.inner if first else state,
                                                 need_alignment)
        if first:   # [B, 1, V]: 0 at the tag, -inf elsewhere (log_softmax keeps it so)
            logits = torch.full_like(logits, -torch.inf).scatter_(
                -1, self.token.view(-1, 1, 1), 0.0)
        return logits, align, state

    @staticmethod
    def strip(hyps: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """The hypotheses without the forced first token and its alignment row."""
        return [[Hypothesis(h.tokens[1:], h.score, h.alignment[1:]) for h in per_sentence]
                for per_sentence in hyps]


@dataclass
class _FirstStep:
    inner: Any   # the wrapped model's state before its first step
