"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; Vaswani et al. 2017, section 5.4).

Smoothing convention (Szegedy's, the one of ``torch.nn.functional.cross_entropy(...,
label_smoothing=eps)``): the target distribution is

    q'(k) = (1 - eps) * 1[k = y] + eps / V        for every class k of the V classes,

i.e. the uniform part spreads ``eps`` over *all* V classes, the true class included (fairseq
instead spreads it over the V - 1 others). The per-token loss is the cross-entropy with q':

    l = -(1 - eps) * log p(y) - eps / V * sum_k log p(k).

Padding (``ignore_index``) contributes nothing. The functions return *sums* over tokens; the
trainer divides by the target tokens of the whole (accumulated, distributed) batch.
:func:`rdrop_loss` adds R-Drop's consistency term (Liang et al. 2021) to it, :func:`simcut_loss`
SimCut's (Gao et al. 2022) against the copy that :func:`add_token_cutoff` cuts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.data.vocab import EOS_ID


def _at_least_fp32(x: Tensor) -> Tensor:   # fp16/bf16 -> fp32; fp32/fp64 unchanged
    return x.float() if x.element_size() < 4 else x


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
    """``(loss_sum, nll_sum)`` in nats over the targets that are not ``ignore_index``: the
    smoothed cross-entropy (carries the gradient) and the plain NLL (detached, for logging),
    0-dim float32 (float64 for float64 logits). ``logits`` [batch, tgt_len, vocab] or
    [N, vocab], any float dtype (fp16/bf16 computed in float32); ``target`` [batch, tgt_len]
    or [N]. Equals :func:`label_smoothed_nll_reference` (tested)."""
    vocab = logits.size(-1)
    return _LabelSmoothedNLL.apply(logits.reshape(-1, vocab), target.reshape(-1),
                                   float(epsilon), int(ignore_index))


def label_smoothed_nll_reference(logits: Tensor, target: Tensor, epsilon: float,
                                 ignore_index: int = 0) -> tuple[Tensor, Tensor]:
    """:func:`label_smoothed_nll` through autograd: PyTorch's label smoothing is Szegedy's."""
    logits, target = _at_least_fp32(logits.reshape(-1, logits.size(-1))), target.reshape(-1)
    loss_sum = F.cross_entropy(logits, target, label_smoothing=epsilon, ignore_index=ignore_index,
                               reduction="sum")
    nll_sum = F.cross_entropy(logits.detach(), target, ignore_index=ignore_index, reduction="sum")
    return loss_sum, nll_sum


class _SymmetricKL(torch.autograd.Function):
    """Fused ``1/2 sum_n keep_n S_n`` over logits z [2, N, V] (the two passes) in float32, with
    ``S = sum_k (P1 - P2)(log P1 - log P2) = sum_k (P1 - P2)(z1 - z2)`` (the log-normalisers
    cancel: sum_k (P1 - P2) = 0). With w = z1 - z2 and m_i = E_Pi[w], S = m1 - m2 and
    ``dS/dz1 = P1 (w - m1 + 1) - P2``, ``dS/dz2 = P2 (m2 - w + 1) - P1``, the softmaxes
    recomputed in backward: 0.56-0.66x the time of autograd through ``log_softmax`` (CPU, one
    thread, [2, 2044, 8000]), which the tests compare it with."""

    @staticmethod
    def forward(ctx, logits: Tensor, keep: Tensor) -> Tensor:  # type: ignore[override]
        z = _at_least_fp32(logits)                                      # [2, N, V]
        p, w = torch.softmax(z, dim=-1), z[0] - z[1]                    # [2, N, V], [N, V]
        m = torch.linalg.vecdot(p, w)                                   # [2, N]: E_P1[w], E_P2[w]
        keep_f = keep.to(z.dtype)
        ctx.save_for_backward(logits, m, keep_f)
        return 0.5 * ((m[0] - m[1]) * keep_f).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        logits, m, keep_f = ctx.saved_tensors
        z = _at_least_fp32(logits)
        p, w = torch.softmax(z, dim=-1), z[0] - z[1]
        out = torch.empty_like(p)
        torch.addcmul(-p[1], p[0], (w - m[0].unsqueeze(-1)).add_(1.0), out=out[0])
        torch.addcmul(-p[0], p[1], w.neg_().add_(m[1].unsqueeze(-1) + 1.0), out=out[1])
        out.mul_((0.5 * grad * keep_f).unsqueeze(-1))
        return out.to(logits.dtype), None


def rdrop_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float,
               ignore_index: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """R-Drop (Liang et al. 2021, eq. 1-3) from one forward over a batch concatenated with
    itself: ``logits`` [2B, T, V] (rows b and B + b are pair b under two dropout masks, P1 and
    P2), ``target`` [B, T]. Per target token that is not ``ignore_index``, with l the
    label-smoothed cross-entropy of :func:`label_smoothed_nll`::

        L_KL = 1/2 (KL(P1 || P2) + KL(P2 || P1)) = 1/2 sum_k (P1(k) - P2(k)) (log P1(k) - log P2(k))
        L    = l(P1) + l(P2) + alpha * L_KL                                         (eq. 3)

    Returns ``(objective_sum, loss_sum, nll_sum, kl_sum)`` in nats, 0-dim float32: the sums
    over the tokens of L / 2 (carries the gradient), of the two passes' mean l and mean NLL,
    and of L_KL (the last three detached, for logging). Halving L keeps the cross-entropy at
    the scale of one pass, so the trainer's division by the batch's target tokens, the logged
    loss and ``clip_grad_norm`` mean what they mean without R-Drop, and alpha keeps the
    paper's weight against l(P1) + l(P2). With identical passes (no dropout) L_KL = 0 and the
    objective is one pass's loss. The KL is computed in float32 (fused: :class:`_SymmetricKL`)."""
    loss_sum, nll_sum = label_smoothed_nll(logits, target.repeat(2, 1), epsilon, ignore_index)
    kl_sum = _SymmetricKL.apply(logits.reshape(2, -1, logits.size(-1)),    # [2, B*T, V]
                                target.reshape(-1) != ignore_index)
    return (0.5 * (loss_sum + alpha * kl_sum), 0.5 * loss_sum.detach(), 0.5 * nll_sum,
            kl_sum.detach())


def simcut_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float,
                ignore_index: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """SimCut (Gao et al. 2022, "Bi-SimCut", NAACL; the loss of the authors' fairseq criterion)
    from one forward over a batch concatenated with a copy whose token embeddings were cut
    off: ``logits`` [2B, T, V] (rows b: pair b as it is, P; rows B + b: its cut copy, P_cut;
    :func:`add_token_cutoff`), ``target`` [B, T]. Per target token that
    is not ``ignore_index``, with l the label-smoothed cross-entropy of
    :func:`label_smoothed_nll`::

        L = l(P) + alpha * KL(P || P_cut) = l(P) + alpha * sum_k P(k) (log P(k) - log P_cut(k))

    The gradient flows through both distributions, as in the authors' code. Returns
    ``(objective_sum, loss_sum, nll_sum, kl_sum)`` in nats, 0-dim float32: the sums over the
    tokens of L (carries the gradient), of l(P), of P's NLL and of the KL (the last three
    detached, for logging). The cut copy has no cross-entropy of its own, so the logged loss
    is the plain one. The KL is computed in float32."""
    batch = target.size(0)
    loss_sum, nll_sum = label_smoothed_nll(logits[:batch], target, epsilon, ignore_index)
    log_p = F.log_softmax(_at_least_fp32(logits).reshape(2, -1, logits.size(-1)), dim=-1)
    kl = (log_p[0].exp() * (log_p[0] - log_p[1])).sum(-1)                # [B*T]
    kl_sum = (kl * (target.reshape(-1) != ignore_index)).sum()
    return loss_sum + alpha * kl_sum, loss_sum.detach(), nll_sum, kl_sum.detach()


# train.consistency -> its loss over the logits of a doubled batch [2B, T, V]
CONSISTENCY_LOSSES = {"rdrop": rdrop_loss, "simcut": simcut_loss}


def add_token_cutoff(model: torch.nn.Module, p: float) -> list:
    """SimCut's token cutoff (Gao et al. 2022; the token cutoff of Shen et al. 2020): forward
    hooks on ``model``'s ``src_embed`` and ``tgt_embed`` (one when tied) that, in training
    mode, erase with probability ``p`` the embedding vector of each token in the second half of
    the rows of a lookup ([2B, T] ids -> [2B, T, d]: the cut copy of a doubled batch), except
    the special tokens (ids <= EOS_ID: PAD, UNK, BOS, EOS). Positions, masks and the first half
    stay as they are. One ``torch.rand`` [B, T] per lookup, from the RNG state the checkpoints
    hold, so a resumed run cuts what an uninterrupted one cuts. Registered once, before
    ``torch.compile`` (which traces the hooks); in eval mode (validation, the weight average,
    inference) they do nothing. Returns the hooks' handles."""
    def cut(module: torch.nn.Module, args: tuple, out: Tensor) -> Tensor:
        if not module.training:
            return out
        ids = args[0]
        rows = ids.size(0) // 2
        erase = (torch.rand(ids[rows:].shape, device=ids.device) < p) & (ids[rows:] > EOS_ID)
        return torch.cat((out[:rows], out[rows:].masked_fill(erase.unsqueeze(-1), 0.0)))

    embeddings = dict.fromkeys((model.src_embed, model.tgt_embed))
    return [emb.register_forward_hook(cut) for emb in embeddings]


def perplexity(nll_per_token: float) -> float:
    """``exp`` of the mean per-token NLL in nats; ``inf`` past overflow (> 700 nats)."""
    return math.exp(nll_per_token) if nll_per_token < 700 else float("inf")
