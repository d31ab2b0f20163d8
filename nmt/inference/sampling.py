"""Ancestral sampling: one path per sentence, as greedy search walks it
(:func:`nmt.inference.search._single_path_search`), each token drawn from the temperature-scaled,
top-k / nucleus / epsilon-filtered distribution with an explicit ``torch.Generator`` (seeded,
never the global RNG). Back-translation and MBR's candidates use it; skip it on a first
reading of the search.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.inference.search import Hypothesis, _most_probable, _single_path_search
from nmt.models.base import Seq2Seq, eval_mode


@torch.inference_mode()
def sample_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float,
                  max_len_b: int, *, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, epsilon: float = 0.0,
                  generator: torch.Generator | None = None,
                  length_penalty: float = 0.0) -> list[list[Hypothesis]]:
    """Ancestral sampling of one translation per sentence (back-translation; the candidates
    of MBR decoding, :mod:`nmt.extras.decoding.mbr`, as rows repeated ``num`` times).

    Each step draws the next token after four filters, in Hugging Face's order: divide the
    log-probabilities by ``temperature`` (0 = the most probable token, i.e. greedy search);
    keep the ``top_k`` most probable (0 = all); keep the nucleus, the smallest set of most
    probable tokens whose probability reaches ``top_p`` (Holtzman et al. 2020, eq. 2); keep
    the tokens of probability >= ``epsilon`` (epsilon sampling, Hewitt et al. 2022), see
    :func:`filter_logits`.

    The score is the sampled tokens' log-probability under the *unfiltered, temperature-1*
    model (the model log-likelihood, comparable with greedy and beam scores), divided by the
    length penalty with ``alpha = length_penalty``. ``generator`` lives on ``src.device``
    (None: a fresh one seeded with 0; the global RNG is never used); a row's draws depend on
    the whole batch. Tensors as :func:`greedy_search`.
    """
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(0)

    def draw(logp: Tensor) -> Tensor:
        probs = torch.softmax(filter_logits(logp / temperature, top_k, top_p, epsilon), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    choose = _most_probable if temperature == 0 else draw
    with eval_mode(model):
        return _single_path_search(model, src, src_mask, max_len_a, max_len_b, length_penalty,
                                   choose)


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0,
                  epsilon: float = 0.0) -> Tensor:
    """Top-k, then nucleus (top-p), then epsilon filtering of ``logits`` [N, V] (unnormalized
    log-probabilities; -inf = impossible): a new [N, V] tensor, filtered-out entries -inf.

    Top-k keeps exactly k per row (0 or >= V: all). Top-p keeps a token when the softmax
    mass (after top-k) of the tokens ranked above it is below ``top_p``: the smallest set
    reaching ``top_p``, never empty (Holtzman et al. 2020). Epsilon keeps the tokens whose
    softmax probability (after top-k and top-p) is >= ``epsilon`` (0: all), and always a
    row's most probable token (Hewitt et al. 2022; Hugging Face's EpsilonLogitsWarper).
    """
    vocab = logits.size(-1)
    if 0 < top_k < vocab:
        top = logits.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top, True)
        logits = logits.masked_fill(~keep, -torch.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_above = probs.cumsum(dim=-1) - probs
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, order, mass_above >= top_p)
        logits = logits.masked_fill(drop, -torch.inf)
    if epsilon > 0.0:
        probs = torch.softmax(logits, dim=-1)
        drop = (probs < epsilon) & (logits < logits.max(dim=-1, keepdim=True).values)
        logits = logits.masked_fill(drop, -torch.inf)
    return logits
