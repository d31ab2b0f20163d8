"""Label-smoothed cross-entropy: the fused version against a hand computation, padding, and
the reference (torch's own label smoothing), values and gradients; R-Drop and SimCut against
a hand computation and the authors' computations."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.training.loss import (
    label_smoothed_nll,
    label_smoothed_nll_reference,
    perplexity,
    rdrop_loss,
    simcut_loss,
)

LN2 = math.log(2.0)


def _hand_case():
    # V = 4 classes, p = [1/8, 1/8, 2/8, 4/8] for every position; id 0 is padding.
    logits = torch.log(torch.tensor([1.0, 1.0, 2.0, 4.0])).expand(1, 3, 4).clone()
    target = torch.tensor([[3, 2, 0]])                      # last position is padding
    return logits, target


def test_matches_hand_computation():
    logits, target = _hand_case()
    loss, nll = label_smoothed_nll(logits, target, epsilon=0.1, ignore_index=0)
    # -log p(3) = ln2, -log p(2) = 2 ln2; sum_k -log p(k) = (3 + 3 + 2 + 1) ln2 = 9 ln2.
    # l = 0.9 * nll + 0.1 / 4 * 9 ln2  ->  1.125 ln2 and 2.025 ln2.
    assert nll.item() == pytest.approx(3 * LN2, abs=1e-6)
    assert loss.item() == pytest.approx((1.125 + 2.025) * LN2, abs=1e-6)


def test_no_smoothing_is_plain_nll():
    logits, target = _hand_case()
    loss, nll = label_smoothed_nll(logits, target, epsilon=0.0)
    assert loss.item() == pytest.approx(nll.item()) and nll.item() == pytest.approx(3 * LN2)


def test_padding_positions_do_not_matter():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, requires_grad=True)
    target = torch.tensor([[4, 5, 6, 0, 0], [1, 2, 3, 4, 5]])
    loss, _ = label_smoothed_nll(logits, target, 0.1)
    loss.backward()
    assert torch.all(logits.grad[0, 3:] == 0)
    changed = logits.detach().clone()
    changed[0, 3:] = 100.0
    assert label_smoothed_nll(changed, target, 0.1)[0].item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_fused_equals_the_reference_in_values_and_gradients(eps):
    torch.manual_seed(1)
    target = torch.randint(0, 11, (3, 6))
    target[1, 4:] = 0                                   # padding
    grads = []
    for fn in (label_smoothed_nll, label_smoothed_nll_reference):
        logits = torch.randn(3, 6, 11, generator=torch.Generator().manual_seed(5),
                             dtype=torch.float64, requires_grad=True)
        loss, nll = fn(logits, target, eps, ignore_index=0)
        (loss * 0.37).backward()
        grads.append((loss.item(), nll.item(), logits.grad))
    (loss_a, nll_a, grad_a), (loss_b, nll_b, grad_b) = grads
    assert loss_a == pytest.approx(loss_b, rel=1e-12) and nll_a == pytest.approx(nll_b, rel=1e-12)
    torch.testing.assert_close(grad_a, grad_b, atol=1e-12, rtol=0)


def smoothed_loss_floor(epsilon: float, vocab: int) -> float:
    """The entropy of q' (nats): no model's per-token smoothed loss goes below it."""
    p_true = 1.0 - epsilon + epsilon / vocab
    p_other = epsilon / vocab
    return -(p_true * math.log(p_true) + (vocab - 1) * p_other * math.log(p_other))


def test_floor_is_the_loss_of_the_smoothed_target_distribution():
    eps, vocab = 0.1, 4
    q = torch.full((vocab,), eps / vocab)
    q[3] += 1 - eps
    loss, _ = label_smoothed_nll(q.log().view(1, vocab), torch.tensor([3]), eps)
    assert loss.item() == pytest.approx(smoothed_loss_floor(eps, vocab), rel=1e-6)


def test_perplexity():
    assert perplexity(LN2) == pytest.approx(2.0)
    assert perplexity(1e4) == float("inf")


def _unfused(logits, target, eps, ignore_index=0):
    """The textbook composition (log_softmax, gather, sum), autograd's gradient."""
    vocab = logits.size(-1)
    lp = F.log_softmax(logits.reshape(-1, vocab), -1)
    t = target.reshape(-1)
    keep = (t != ignore_index).to(lp.dtype)
    nll = (-lp.gather(-1, t.unsqueeze(-1)).squeeze(-1) * keep).sum()
    return (1 - eps) * nll + eps / vocab * (-lp.sum(-1) * keep).sum()


def test_fused_gradient_is_softmax_minus_smoothed_target_by_hand():
    logits, target = _hand_case()
    logits.requires_grad_(True)
    loss, _ = label_smoothed_nll(logits, target, epsilon=0.1)
    loss.backward()
    # p = [1/8, 1/8, 2/8, 4/8]; q' = eps/4 everywhere + (1 - eps) at the gold id.
    expected = torch.tensor([[[0.1, 0.1, 0.225, -0.425],      # gold 3
                              [0.1, 0.1, -0.675, 0.475],      # gold 2
                              [0.0, 0.0, 0.0, 0.0]]])         # padding
    assert torch.allclose(logits.grad, expected, atol=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_fused_gradient_equals_autograd_of_the_composition(eps):
    torch.manual_seed(2)
    logits = torch.randn(3, 5, 13, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 13, (3, 5))
    target[0, 3:] = 0
    grad_out = torch.tensor(0.37, dtype=torch.float64)
    (label_smoothed_nll(logits, target, eps)[0] * grad_out).backward()
    ours = logits.grad.clone()
    logits.grad = None
    (_unfused(logits, target, eps) * grad_out).backward()
    assert torch.allclose(ours, logits.grad, atol=1e-12)
    assert torch.autograd.gradcheck(lambda z: label_smoothed_nll(z, target, eps)[0], (logits,))


def test_fused_loss_keeps_the_logits_dtype_for_the_gradient():
    torch.manual_seed(3)
    logits = torch.randn(2, 4, 9).to(torch.bfloat16).requires_grad_(True)
    target = torch.randint(1, 9, (2, 4))
    loss, nll = label_smoothed_nll(logits, target, 0.1)
    assert loss.dtype == nll.dtype == torch.float32 and not nll.requires_grad
    loss.backward()
    assert logits.grad.dtype == torch.bfloat16
    ref = _unfused(logits.detach().float(), target, 0.1)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


# ---------------------------------------------------------------- R-Drop (Liang et al. 2021)
def _rdrop_hand_case():
    # V = 3, one pair of 3 target positions, the last one padding. Pass 1 / pass 2:
    #   token 1 (gold 1): P1 = [1/2, 1/4, 1/4], P2 = [1/4, 1/2, 1/4]
    #   token 2 (gold 2): P1 = [1/2, 1/4, 1/4], P2 = [1/4, 1/4, 1/2]
    #   padding: two very different distributions, which must not count.
    p1 = torch.tensor([[0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.98, 0.01, 0.01]])
    p2 = torch.tensor([[0.25, 0.5, 0.25], [0.25, 0.25, 0.5], [0.01, 0.01, 0.98]])
    logits = torch.stack((p1, p2)).log()                    # [2B = 2, T = 3, V = 3]
    return logits, torch.tensor([[1, 2, 0]])


def test_rdrop_kl_and_loss_match_hand_computation():
    logits, target = _rdrop_hand_case()
    objective, loss, nll, kl = rdrop_loss(logits, target, epsilon=0.0, alpha=2.0)
    # Each real token: sum_k (P1 - P2)(ln P1 - ln P2) = 1/4 ln2 + 1/4 ln2 (the 1/2 <-> 1/4
    # swap), so L_KL = 1/4 ln2 per token and 1/2 ln2 over both.
    assert kl.item() == pytest.approx(0.5 * LN2, abs=1e-6)
    # -ln P(gold): pass 1 2ln2 + 2ln2, pass 2 ln2 + ln2 -> mean over the passes 3 ln2.
    assert nll.item() == pytest.approx(3 * LN2, abs=1e-6) and loss.item() == nll.item()
    # L / 2 = (l(P1) + l(P2)) / 2 + alpha / 2 * L_KL = 3 ln2 + 1/2 ln2.
    assert objective.item() == pytest.approx(3.5 * LN2, abs=1e-6)


def _rdrop_two_pass_reference(z1, z2, target, eps, alpha, ignore_index=0):
    """The authors' computation on two separate passes: torch's label-smoothed cross-entropy
    of each, and ``kl_div`` both ways (``kl_div(log p, q) = KL(q || p)``), padding masked."""
    vocab = z1.size(-1)
    t = target.reshape(-1)
    lp1, lp2 = (F.log_softmax(z.reshape(-1, vocab), -1) for z in (z1, z2))
    ce = sum(F.cross_entropy(z.reshape(-1, vocab), t, label_smoothing=eps, ignore_index=ignore_index,
                             reduction="sum") for z in (z1, z2))
    keep = (t != ignore_index).unsqueeze(-1)
    kl = ((F.kl_div(lp1, lp2, log_target=True, reduction="none") * keep).sum()
          + (F.kl_div(lp2, lp1, log_target=True, reduction="none") * keep).sum()) / 2
    return ce + alpha * kl, kl


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_rdrop_equals_the_two_pass_reference_in_values_and_gradients(eps):
    torch.manual_seed(4)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    z = torch.randn(6, 5, 11, dtype=torch.float64, requires_grad=True)
    objective, _, _, kl = rdrop_loss(z, target, eps, alpha=5.0)
    (objective * 0.37).backward()
    ours = z.grad.clone()
    z.grad = None
    ref, ref_kl = _rdrop_two_pass_reference(z[:3], z[3:], target, eps, alpha=5.0)
    (ref / 2 * 0.37).backward()
    assert objective.item() == pytest.approx(ref.item() / 2, rel=1e-12)
    assert kl.item() == pytest.approx(ref_kl.item(), rel=1e-12) and kl.item() > 0
    torch.testing.assert_close(ours, z.grad, atol=1e-12, rtol=0)
    small = z.detach()[[0, 3], :3, :4].clone().requires_grad_(True)      # [2B = 2, 3, 4]
    assert torch.autograd.gradcheck(lambda x: rdrop_loss(x, target[:1, :3] % 4, eps, 5.0)[0],
                                    (small,))


def test_rdrop_padding_contributes_nothing_and_identical_passes_give_one_pass():
    torch.manual_seed(5)
    target = torch.tensor([[4, 5, 6, 0, 0], [1, 2, 3, 4, 5]])
    z = torch.randn(4, 5, 7, requires_grad=True)
    objective, loss, nll, kl = rdrop_loss(z, target, 0.1, alpha=5.0)
    objective.backward()
    assert torch.all(z.grad[0, 3:] == 0) and torch.all(z.grad[2, 3:] == 0)
    changed = z.detach().clone()
    changed[0, 3:], changed[2, 3:] = 100.0, -100.0
    assert rdrop_loss(changed, target, 0.1, 5.0)[0].item() == pytest.approx(objective.item(), rel=1e-6)
    # No dropout: both halves equal, the KL is 0 and the objective is one pass's loss.
    same = torch.cat((z[:2], z[:2])).detach()
    objective, loss, nll, kl = rdrop_loss(same, target, 0.1, alpha=5.0)
    one_loss, one_nll = label_smoothed_nll(z[:2].detach(), target, 0.1)
    assert kl.item() == 0.0 and objective.item() == loss.item() == pytest.approx(one_loss.item())
    assert nll.item() == pytest.approx(one_nll.item())


def test_rdrop_sums_over_pairs_so_accumulation_and_ddp_split_it_freely():
    """The sums of a batch are the sums of its parts: any split of a step's pairs into
    micro-batches or ranks (each normalised by the step's token count) gives one gradient."""
    torch.manual_seed(6)
    target = torch.randint(1, 9, (4, 3))
    target[1, 2] = 0
    z = torch.randn(2, 4, 3, 9, dtype=torch.float64)                # [pass, B, T, V]
    whole = rdrop_loss(z.reshape(8, 3, 9), target, 0.1, 5.0)
    parts = [rdrop_loss(z[:, rows].reshape(-1, 3, 9), target[rows], 0.1, 5.0)
             for rows in (slice(0, 1), slice(1, 4))]
    for k in range(4):
        assert whole[k].item() == pytest.approx(parts[0][k].item() + parts[1][k].item(), rel=1e-12)


def test_rdrop_kl_is_computed_in_fp32_from_bf16_logits_and_returns_their_dtype():
    logits, target = _rdrop_hand_case()
    logits = logits.to(torch.bfloat16).requires_grad_(True)
    objective, _, _, kl = rdrop_loss(logits, target, 0.1, 5.0)
    assert objective.dtype == kl.dtype == torch.float32
    assert kl.item() == pytest.approx(0.5 * LN2, rel=1e-2)     # bf16 rounds the logits only
    objective.backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad).all()


# ---------------------------------------------------------------- SimCut (Gao et al. 2022)
def test_simcut_kl_and_loss_match_hand_computation():
    logits, target = _rdrop_hand_case()                     # P = pass 1, P_cut = pass 2
    objective, loss, nll, kl = simcut_loss(logits, target, epsilon=0.0, alpha=2.0)
    # KL(P || P_cut) per real token: 1/2 ln(1/2 / 1/4) + 1/4 ln(1/4 / 1/2) + 0 = 1/4 ln2;
    # padding (0.98 against 0.01) does not count: 1/2 ln2 over both tokens.
    assert kl.item() == pytest.approx(0.5 * LN2, abs=1e-6)
    # The cross-entropy is P's alone: -ln 1/4 twice = 4 ln2 (the cut copy has none).
    assert nll.item() == pytest.approx(4 * LN2, abs=1e-6) and loss.item() == nll.item()
    assert objective.item() == pytest.approx((4 + 2 * 0.5) * LN2, abs=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_simcut_equals_the_authors_loss_in_values_and_gradients(eps):
    """The authors' criterion on two logits tensors: torch's smoothed cross-entropy of the
    uncut pass and ``kl_div(log P_cut, P)`` = KL(P || P_cut), the gradient through both."""
    torch.manual_seed(7)
    target = torch.randint(1, 11, (3, 5))
    target[1, 2:] = 0
    z = torch.randn(6, 5, 11, dtype=torch.float64, requires_grad=True)
    objective, loss, _, kl = simcut_loss(z, target, eps, alpha=3.0)
    (objective * 0.37).backward()
    ours = z.grad.clone()
    z.grad = None
    t = target.reshape(-1)
    ce = F.cross_entropy(z[:3].reshape(-1, 11), t, label_smoothing=eps, ignore_index=0,
                         reduction="sum")
    lp, lp_cut = (F.log_softmax(h.reshape(-1, 11), -1) for h in (z[:3], z[3:]))
    keep = (t != 0).unsqueeze(-1)
    ref_kl = (F.kl_div(lp_cut, lp, log_target=True, reduction="none") * keep).sum()
    ((ce + 3.0 * ref_kl) * 0.37).backward()
    assert loss.item() == pytest.approx(ce.item(), rel=1e-12)
    assert kl.item() == pytest.approx(ref_kl.item(), rel=1e-12) and kl.item() > 0
    assert objective.item() == pytest.approx((ce + 3.0 * ref_kl).item(), rel=1e-12)
    torch.testing.assert_close(ours, z.grad, atol=1e-12, rtol=0)
    assert z.grad[3:].abs().sum() > 0                       # the cut copy learns too


def test_simcut_sums_over_pairs_so_accumulation_and_ddp_split_it_freely():
    torch.manual_seed(8)
    target = torch.randint(1, 9, (4, 3))
    target[2, 1:] = 0
    z = torch.randn(2, 4, 3, 9, dtype=torch.float64)                # [copy, B, T, V]
    whole = simcut_loss(z.reshape(8, 3, 9), target, 0.1, 3.0)
    parts = [simcut_loss(z[:, rows].reshape(-1, 3, 9), target[rows], 0.1, 3.0)
             for rows in (slice(0, 3), slice(3, 4))]
    for k in range(4):
        assert whole[k].item() == pytest.approx(parts[0][k].item() + parts[1][k].item(), rel=1e-12)
