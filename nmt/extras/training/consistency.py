"""Consistency regularisation (``train.consistency``), a room of its own, off by default.

Its measurements are in docs/results.md. R-Drop (Liang et al. 2021) between two dropout passes,
SimCut (Gao et al. 2022) between a pass and a copy whose token embeddings were cut off, CrossConST
(Gao et al. 2023) between a pass and one that reads the target sentence as its source. Each runs one
forward over a doubled batch ([2B, ...]) and adds a KL term to the label-smoothed loss of
:mod:`nmt.training.loss`. They enter the training objective as the training hooks' ``regulariser``
(:class:`~nmt.training.loss.Regulariser`, built by :func:`nmt.extras.training.hooks`, which
``nmt-train`` and ``nmt.train()`` call).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.config import has_consistency, is_multilingual
from nmt.data.vocab import EOS_ID, PAD_ID
from nmt.training.loss import label_smoothed_nll


def _halves_fp32(logits: Tensor) -> Tensor:
    """``logits`` [2B, T, V] -> [2, B*T, V] in float32 (float64 stays)."""
    z = logits.reshape(2, -1, logits.size(-1))
    return z.float() if z.element_size() < 4 else z


def rdrop_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float,
               ignore_index: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """R-Drop (Liang et al. 2021, eq. 1-3) from one forward over a batch concatenated with
    itself: ``logits`` [2B, T, V] (rows b and B + b are pair b under two dropout masks, P1 and
    P2), ``target`` [B, T]. Per target token that is not ``ignore_index``, with l the
    label-smoothed cross-entropy of :func:`~nmt.training.loss.label_smoothed_nll`::

        L_KL = 1/2 (KL(P1 || P2) + KL(P2 || P1)) = 1/2 sum_k (P1(k) - P2(k)) (log P1(k) - log P2(k))
        L    = l(P1) + l(P2) + alpha * L_KL                                         (eq. 3)

    Returns ``(objective_sum, loss_sum, nll_sum, kl_sum)`` in nats, 0-dim float32: the sums
    over the tokens of L / 2 (carries the gradient), of the two passes' mean l and mean NLL,
    and of L_KL (the last three detached, for logging). Halving L keeps the cross-entropy at
    the scale of one pass, so the trainer's division by the batch's target tokens, the logged
    loss and ``clip_grad_norm`` mean what they mean without R-Drop, and alpha keeps the
    paper's weight against l(P1) + l(P2). With identical passes (no dropout) L_KL = 0 and the
    objective is one pass's loss. The KL is computed in float32, its gradient by autograd
    (the loss alone takes 1.2-1.4x the time of the hand-written backward it replaced, CPU, one
    thread, [2, 2048, 8000]; the model's forward and backward are unchanged)."""
    loss_sum, nll_sum = label_smoothed_nll(logits, target.repeat(2, 1), epsilon, ignore_index)
    z = _halves_fp32(logits)                                              # [2, B*T, V]
    # log P1 - log P2 = z1 - z2 - (lse1 - lse2), and sum_k (P1 - P2) = 0: the lse's cancel.
    p = z.softmax(-1)
    kl = 0.5 * torch.linalg.vecdot(p[0] - p[1], z[0] - z[1])                # [B*T]
    kl_sum = (kl * (target.reshape(-1) != ignore_index)).sum()
    return (0.5 * (loss_sum + alpha * kl_sum), 0.5 * loss_sum.detach(), 0.5 * nll_sum,
            kl_sum.detach())


def simcut_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float,
                ignore_index: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """SimCut (Gao et al. 2022, "Bi-SimCut", NAACL; the loss of the authors' fairseq criterion)
    from one forward over a batch concatenated with a copy whose token embeddings were cut
    off: ``logits`` [2B, T, V] (rows b: pair b as it is, P; rows B + b: its cut copy, P_cut;
    :func:`add_token_cutoff`), ``target`` [B, T]. Per target token that is not
    ``ignore_index``, with l the label-smoothed cross-entropy::

        L = l(P) + alpha * KL(P || P_cut) = l(P) + alpha * sum_k P(k) (log P(k) - log P_cut(k))

    The gradient flows through both distributions, as in the authors' code. Returns
    ``(objective_sum, loss_sum, nll_sum, kl_sum)`` in nats, 0-dim float32: the sums over the
    tokens of L (carries the gradient), of l(P), of P's NLL and of the KL (the last three
    detached, for logging). The cut copy has no cross-entropy of its own, so the logged loss
    is the plain one. The KL is computed in float32."""
    batch = target.size(0)
    loss_sum, nll_sum = label_smoothed_nll(logits[:batch], target, epsilon, ignore_index)
    log_p = F.log_softmax(_halves_fp32(logits), dim=-1)                  # [2, B*T, V]
    kl = (log_p[0].exp() * (log_p[0] - log_p[1])).sum(-1)                # [B*T]
    kl_sum = (kl * (target.reshape(-1) != ignore_index)).sum()
    return loss_sum + alpha * kl_sum, loss_sum.detach(), nll_sum, kl_sum.detach()


def crossconst_loss(logits: Tensor, target: Tensor, epsilon: float, alpha: float,
                    ignore_index: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """CrossConST (Gao et al. 2023, "Improving Zero-shot Multilingual Neural Machine Translation
    by Leveraging Cross-lingual Consistency Regularization", Findings of ACL)
    from one forward over a batch concatenated with its target-as-source copy: ``logits``
    [2B, T, V] (rows b: f(x, y), pair b as it is; rows B + b: f(y, y), the same decoder input
    with the target sentence y as the source, :func:`target_as_source`), ``target`` [B, T]. Per
    target token that is not ``ignore_index``, with l the label-smoothed cross-entropy::

        L = l(f(x, y)) + alpha * KL(f(x, y) || f(y, y))
          = l(P_x) + alpha * sum_k P_x(k) (log P_x(k) - log P_y(k))

    KL(P_x || P_y) as the authors' criterion computes it (``kl_div(log_softmax(f(y, y)),
    softmax(f(x, y)))``, github.com/gpengzhi/CrossConST-MT), the gradient through both
    distributions (no stop-gradient), the copy without a cross-entropy of its own: the
    computation of :func:`simcut_loss`, whose second half is the cut copy instead; returns its
    ``(objective_sum, loss_sum, nll_sum, kl_sum)`` in nats, 0-dim float32. alpha = 0 is the
    plain objective (tested)."""
    return simcut_loss(logits, target, epsilon, alpha, ignore_index)


def target_as_source(batch, source_tag: bool, target_tag: bool) -> tuple[Tensor, Tensor]:
    """CrossConST's second source (:func:`crossconst_loss`): each row's target sentence y,
    with its direction's tags as the model reads a source, ``(src [B, S'], src_mask [B, S'])``:
    ``y </s>`` from ``batch.tgt_out`` [B, T] (its first column, a target-side tag's PAD, left
    out with ``target_tag``: ``data.lang_tag=target``, whose tag stays in the decoder input),
    after ``batch.src[:, 0]``, the target-language tag, with ``source_tag``
    (``data.lang_tag=source``: Johnson et al. 2017, as the authors prepend ``<2xx>`` to both
    sources); PAD after each row's EOS. S' = T + 1 (``source_tag``), T - 1 (``target_tag``) or
    T. The first position is unmasked in every row, so a padding row of a static shape
    (all PAD) keeps one key."""
    ys = batch.tgt_out[:, 1:] if target_tag else batch.tgt_out                  # [B, T'] y </s>
    if source_tag:
        ys = torch.cat((batch.src[:, :1], ys), dim=1)                           # <2xx> y </s>
    mask = ys != PAD_ID
    mask[:, 0] = True
    return ys, mask


def _stacked(a: Tensor, b: Tensor, pad: int | bool) -> Tensor:
    """[B, S1] and [B, S2] -> [2B, max(S1, S2)], each padded on the right with ``pad``."""
    width = max(a.size(1), b.size(1))
    return torch.cat([F.pad(x, (0, width - x.size(1)), value=pad) for x in (a, b)])


# train.consistency -> its loss over the logits of a doubled batch [2B, T, V]
CONSISTENCY_LOSSES = {"rdrop": rdrop_loss, "simcut": simcut_loss, "crossconst": crossconst_loss}


def add_token_cutoff(model: torch.nn.Module, p: float) -> list:
    """SimCut's token cutoff (Gao et al. 2022; the token cutoff of Shen et al. 2020): cutoffs
    registered with torch's ``register_forward_hook`` on ``model``'s ``src_embed`` and ``tgt_embed``
    (one when tied) that, in training mode, erase with probability ``p`` the embedding vector of
    each token in the second half of the rows of a lookup ([2B, T] ids -> [2B, T, d]: the cut copy
    of a doubled batch), except the special tokens (ids <= EOS_ID: PAD, UNK, BOS, EOS). Positions,
    masks and the first half stay as they are. One ``torch.rand`` [B, T] per lookup, from the RNG
    state the checkpoints hold, so a resumed run cuts what an uninterrupted one cuts. Registered
    once, before ``torch.compile`` (which traces them); in eval mode (validation, the weight
    average, inference) they do nothing. Returns their handles."""
    def cut(module: torch.nn.Module, args: tuple, out: Tensor) -> Tensor:
        if not module.training:
            return out
        ids = args[0]
        rows = ids.size(0) // 2
        erase = (torch.rand(ids[rows:].shape, device=ids.device) < p) & (ids[rows:] > EOS_ID)
        return torch.cat((out[:rows], out[rows:].masked_fill(erase.unsqueeze(-1), 0.0)))

    embeddings = dict.fromkeys((model.src_embed, model.tgt_embed))
    return [emb.register_forward_hook(cut) for emb in embeddings]


class Consistency:
    """R-Drop, SimCut or CrossConST (``t.consistency``) as :func:`nmt.training.loss.objective`'s
    regulariser: one forward of the batch concatenated with itself ([2B, ...]; CrossConST: with
    :func:`target_as_source` as the second half's source, both sources padded to the longer),
    then :func:`rdrop_loss` (loss, nll: the two passes' mean), :func:`simcut_loss` or
    :func:`crossconst_loss` (the first half's). The alignment is the doubled batch's
    ([2B, T, S]); the links name its first B rows. ``data``: the ``data`` section, whose tags
    CrossConST's second source carries (None: a bilingual model's, no tags)."""

    def __init__(self, t, data=None) -> None:
        self.kind, self.alpha, self.cutoff_p = t.consistency, t.consistency_alpha, t.cutoff_p
        multi = data is not None and is_multilingual(data)
        self.source_tag = multi and str(data.lang_tag) == "source"
        self.target_tag = multi and str(data.lang_tag) == "target"

    def prepare(self, model: torch.nn.Module) -> None:
        if self.kind == "simcut":    # after the weight average's copy, before compile
            add_token_cutoff(model, self.cutoff_p)

    def __call__(self, model, batch, t, autocast, need_alignment: bool):
        if self.kind == "crossconst":
            ys, ys_mask = target_as_source(batch, self.source_tag, self.target_tag)
            inputs = (_stacked(batch.src, ys, PAD_ID), _stacked(batch.src_mask, ys_mask, False),
                      torch.cat((batch.tgt_in, batch.tgt_in)))
        else:
            inputs = tuple(torch.cat((x, x)) for x in (batch.src, batch.src_mask, batch.tgt_in))
        with autocast:
            logits, alignment = model(*inputs, need_alignment=need_alignment)   # [2B, T, V]
        total, loss, nll, kl = CONSISTENCY_LOSSES[self.kind](
            logits, batch.tgt_out, t.label_smoothing, self.alpha, PAD_ID)
        return total, {"loss": loss, "nll": nll, "consistency_kl": kl}, alignment


def regulariser(t, data=None) -> Consistency | None:
    """The trainer's regulariser for the ``train`` section ``t`` and the ``data`` section (its
    language tags; None: none) (None: ``consistency=none``)."""
    return Consistency(t, data) if has_consistency(t) else None
