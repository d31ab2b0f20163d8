"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; Vaswani et al. 2017, section 5.4).

Smoothing convention (Szegedy's, the one of ``torch.nn.functional.cross_entropy(...,
label_smoothing=eps)``): the target distribution is

    q'(k) = (1 - eps) * 1[k = y] + eps / V        for every class k of the V classes,

i.e. the uniform part spreads ``eps`` over *all* V classes, the true class included (fairseq
instead spreads it over the V - 1 others). The per-token loss is the cross-entropy with q':

    l = -(1 - eps) * log p(y) - eps / V * sum_k log p(k).

Padding (``ignore_index``) contributes nothing. The functions return *sums* over tokens; the
trainer divides by the target tokens of the whole (accumulated, distributed) batch.

:func:`objective` is one step's loss: this cross-entropy, then the add-ons (guided alignment;
R-Drop or SimCut).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from nmt.data.vocab import PAD_ID


def _at_least_fp32(x: Tensor) -> Tensor:   # fp16/bf16 -> fp32; fp32/fp64 unchanged
    return x.float() if x.element_size() < 4 else x


def label_smoothed_nll_reference(logits: Tensor, target: Tensor, epsilon: float,
                                 ignore_index: int = 0) -> tuple[Tensor, Tensor]:
    """``(loss_sum, nll_sum)`` in nats over the targets that are not ``ignore_index``: the
    smoothed cross-entropy ``l`` of the module docstring (carries the gradient, through
    autograd) and the plain NLL (detached, for logging), 0-dim float32 (float64 for float64
    logits). ``logits`` [batch, tgt_len, vocab] or [N, vocab], any float dtype (fp16/bf16
    computed in float32); ``target`` [batch, tgt_len] or [N]. Equal to
    ``F.cross_entropy(..., label_smoothing=epsilon)`` (tested); ``train.compile`` trains with
    it compiled (:func:`compiled_label_smoothed_nll`)."""
    z = _at_least_fp32(logits.reshape(-1, logits.size(-1)))                    # [N, V]
    target = target.reshape(-1)
    keep = target != ignore_index
    log_p = z.log_softmax(-1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)                # [N]
    loss = ((1.0 - epsilon) * nll - (epsilon / z.size(-1)) * log_p.sum(-1)) * keep
    return loss.sum(), (nll.detach() * keep).sum()


class _LabelSmoothedNLL(torch.autograd.Function):
    """Fused smoothed cross-entropy over logits [N, V]. Forward, with ``lse = log sum_k
    exp z_k``: ``nll = lse - z_y`` and ``sum_k -log p(k) = V * lse - sum_k z_k``. Backward in
    closed form, ``dl/dz_k = p(k) - q'(k)``, built in place in one [N, V] buffer; autograd
    through ``log_softmax`` + ``gather`` (the reference) costs an extra scatter buffer, two
    [N, V] gradients and ``log_softmax``'s backward: about a third of a Transformer training
    step on CPU (``scripts/bench_model.py --profile``)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float,  # type: ignore[override]
                ignore_index: int) -> tuple[Tensor, Tensor]:
        z = _at_least_fp32(logits)                                      # [N, V]
        vocab = z.size(-1)
        keep = target != ignore_index                                   # [N]
        gold = torch.where(keep, target, torch.zeros_like(target))      # any valid id on padding
        keep_f = keep.to(z.dtype)
        lse = torch.logsumexp(z, dim=-1)                                # [N]
        nll_sum = ((lse - z.gather(-1, gold.unsqueeze(-1)).squeeze(-1)) * keep_f).sum()
        if epsilon > 0.0:
            smooth = vocab * lse - z.sum(-1)                            # [N] sum_k -log p(k)
            loss_sum = (1.0 - epsilon) * nll_sum + (epsilon / vocab) * (smooth * keep_f).sum()
        else:
            loss_sum = nll_sum.clone()
        ctx.save_for_backward(logits, lse, gold, keep_f)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):  # type: ignore[override]
        logits, lse, gold, keep_f = ctx.saved_tensors
        eps, vocab = ctx.epsilon, logits.size(-1)
        grad = torch.sub(_at_least_fp32(logits), lse.unsqueeze(-1)).exp_()  # p(k), [N, V]
        if eps > 0.0:
            grad.sub_(eps / vocab)
        grad.scatter_add_(-1, gold.unsqueeze(-1),
                          torch.full_like(lse, -(1.0 - eps)).unsqueeze(-1))
        grad.mul_((grad_loss * keep_f).unsqueeze(-1))
        return grad.to(logits.dtype), None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float,
                       ignore_index: int = 0) -> tuple[Tensor, Tensor]:
    """:func:`label_smoothed_nll_reference`, fused (the same values, tested): the trainer's
    default, about a third of a Transformer step faster on CPU (:class:`_LabelSmoothedNLL`)."""
    vocab = logits.size(-1)
    return _LabelSmoothedNLL.apply(logits.reshape(-1, vocab), target.reshape(-1),
                                   float(epsilon), int(ignore_index))


@functools.cache
def compiled_label_smoothed_nll():
    """:func:`label_smoothed_nll_reference` under ``torch.compile`` (``train.compile``): fused
    kernels read the [N, V] logits once each way (docs/speed.md: 1.1x fp32, 2.2x bf16 on CPU)."""
    return torch.compile(label_smoothed_nll_reference, dynamic=True)


def perplexity(nll_per_token: float) -> float:
    """``exp`` of the mean per-token NLL in nats; ``inf`` past overflow (> 700 nats)."""
    return math.exp(nll_per_token) if nll_per_token < 700 else float("inf")


def alignment_loss(alignment: Tensor, links: Tensor) -> Tensor:
    """Guided alignment's cross-entropy (Garg et al. 2019, the multi-task loss; on the RNN's
    alpha_ij the supervised attention of Liu et al. 2016 and Mi et al. 2016)::

        L_a = - sum_(b, t linked) sum_s G_bts log A_bts,   G_bt uniform over t's linked s

    ``alignment`` A [B, T, S] (row t: the step that predicts target position t; computed in
    float32), ``links`` [n, 3] int64 (b, t, s: :attr:`~nmt.data.batching.Batch.links`; a
    doubled batch's copy is not named). Returns the 0-dim sum in nats over the linked target
    positions, like :func:`label_smoothed_nll` (the trainer divides both by the tokens)."""
    if links.numel() == 0:
        return alignment.new_zeros((), dtype=torch.float32)
    row, t, s = links.unbind(1)
    cell = row * alignment.size(1) + t
    _, inverse, counts = torch.unique(cell, return_inverse=True, return_counts=True)
    probs = _at_least_fp32(alignment[row, t, s])
    return -(probs.clamp_min(1e-12).log() / counts[inverse]).sum()


class Regulariser(Protocol):
    """The objective's hook for a consistency regulariser (R-Drop, SimCut:
    :mod:`nmt.extras.training.consistency`), which replaces the plain forward and cross-entropy:
    ``(objective_sum, parts, alignment [B', T, S] or None)``; ``prepare`` runs once on the
    training model, before ``torch.compile`` and DDP."""

    def prepare(self, model: torch.nn.Module) -> None: ...

    def __call__(self, model: torch.nn.Module, batch, t, autocast, need_alignment: bool
                 ) -> tuple[Tensor, dict[str, Tensor], Tensor | None]: ...


def objective(model: torch.nn.Module, batch, t, *, guided: bool = False,
              autocast: Callable = contextlib.nullcontext,
              cross_entropy: Callable = label_smoothed_nll, regulariser: Regulariser | None = None
              ) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one batch (src [B, S], tgt_in / tgt_out [B, T]) under the ``train``
    settings ``t``: one teacher-forced forward, L = label-smoothed cross-entropy (section 5.4)
    [+ lambda * L_align]. Returns ``(objective_sum, parts)``: L in nats summed over the batch's
    target tokens and its named, detached parts: ``loss`` (smoothed), ``nll``, with ``guided``
    alignment (:func:`nmt.config.is_guided`; lambda = ``t.alignment_loss_weight``)
    ``alignment_loss``, and what a ``regulariser`` adds. The trainer binds the rest once:
    ``autocast`` (a context factory), ``cross_entropy`` (:func:`label_smoothed_nll` or its
    compiled equal, ``train.compile``) and the training hooks' ``regulariser``."""
    if regulariser is None:
        with autocast():
            logits, alignment = model(batch.src, batch.src_mask, batch.tgt_in,
                                      need_alignment=guided)          # [B, T, V], [B, T, S]
        total, nll = cross_entropy(logits, batch.tgt_out, t.label_smoothing, PAD_ID)
        parts = {"loss": total.detach(), "nll": nll}
    else:
        total, parts, alignment = regulariser(model, batch, t, autocast(), guided)
    if guided:   # Garg et al. 2019: the supervised heads' cross-entropy against the links
        align = alignment_loss(alignment, batch.links)
        total = total + t.alignment_loss_weight * align
        parts["alignment_loss"] = align.detach()
    return total, parts
