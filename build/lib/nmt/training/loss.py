"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; Vaswani et al. 2017, section 5.4).

Smoothing convention (Szegedy's, the one of ``torch.nn.functional.cross_entropy(...,
label_smoothing=eps)``): the target distribution is

    q'(k) = (1 - eps) * 1[k = y] + eps / V        for every class k of the V classes,

i.e. the uniform part spreads ``eps`` over *all* V classes, the true class included (fairseq
instead spreads it over the V - 1 others). The per-token loss is the cross-entropy with q':

    l = -(1 - eps) * log p(y) - eps / V * sum_k log p(k).

Padding positions (``ignore_index``) contribute nothing. The functions return *sums*
over tokens; the trainer divides by the number of target tokens of the whole (global,
possibly accumulated and distributed) batch, so every token weighs the same.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, ignore_index: int = 0
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over the non-padding targets.

    Args:
        logits: [batch, tgt_len, vocab] (or [N, vocab]) unnormalised scores, any float dtype
            (computed in float32).
        target: [batch, tgt_len] (or [N]) int64 gold ids; ``ignore_index`` marks padding.
        epsilon: smoothing mass in [0, 1) (Szegedy convention, see module docstring).
        ignore_index: padding id whose positions are skipped (``PAD_ID`` = 0).

    Returns:
        ``(loss_sum, nll_sum)``: 0-dim float32 tensors in nats; ``loss_sum`` carries the
        gradient, ``nll_sum`` (unsmoothed -log p(y)) is detached, for logging.

    Raises:
        ValueError: ``logits`` and ``target`` shapes disagree.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match target {tuple(target.shape)}")
    vocab = logits.size(-1)
    logits = logits.reshape(-1, vocab)
    target = target.reshape(-1)
    keep = (target != ignore_index).to(torch.float32)                   # [N]
    # Masking by multiplication (not boolean indexing) avoids a host sync on CUDA.
    lprobs = F.log_softmax(logits.float(), dim=-1)                     # [N, V]
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)          # [N]
    nll_sum = (nll * keep).sum()
    if epsilon > 0.0:
        smooth = -lprobs.sum(-1)                                       # [N] sum_k -log p(k)
        loss_sum = (1.0 - epsilon) * nll_sum + (epsilon / vocab) * (smooth * keep).sum()
    else:
        loss_sum = nll_sum
    return loss_sum, nll_sum.detach()


def perplexity(nll_per_token: float) -> float:
    """``exp`` of the mean per-token NLL in nats; ``inf`` past overflow (> 700 nats)."""
    return math.exp(nll_per_token) if nll_per_token < 700 else float("inf")


def smoothed_loss_floor(epsilon: float, vocab: int) -> float:
    """Smallest achievable per-token smoothed loss: the entropy of q' (nats).

    Useful as a sanity bound: a model cannot go below it, so a training loss under it
    signals a bug (padding counted, wrong normalisation).
    """
    if epsilon == 0.0:
        return 0.0
    p_true = 1.0 - epsilon + epsilon / vocab
    p_other = epsilon / vocab
    return -(p_true * math.log(p_true) + (vocab - 1) * p_other * math.log(p_other))


__all__ = ["label_smoothed_nll", "perplexity", "smoothed_loss_floor"]
