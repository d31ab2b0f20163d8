"""R-Drop and SimCut (nmt.extras.training.consistency) against a hand computation, the authors'
computations and the closed-form gradient of the fused version they replaced."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.extras.training.consistency import rdrop_loss, simcut_loss
from nmt.training.loss import label_smoothed_nll

LN2 = math.log(2.0)


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


def test_rdrop_kl_autograd_equals_the_old_closed_form_gradient():
    """The KL by autograd against the formulas of the hand-written backward it replaced
    (``_SymmetricKL``): with w = z1 - z2 and m_i = E_Pi[w], L_KL = 1/2 (m1 - m2) per token,
    dL_KL/dz1 = 1/2 (P1 (w - m1 + 1) - P2) and dL_KL/dz2 = 1/2 (P2 (m2 - w + 1) - P1)."""
    torch.manual_seed(9)
    target = torch.tensor([[3, 1, 0], [2, 4, 1]])                  # one padding position
    z = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    with_kl, _, _, kl = rdrop_loss(z, target, 0.0, alpha=1.0)
    without_kl = rdrop_loss(z, target, 0.0, alpha=0.0)[0]
    grad, = torch.autograd.grad(2 * (with_kl - without_kl), z)      # d L_KL / dz

    zz = z.detach().reshape(2, -1, 5)                              # [2, N = 6, V]
    p, w = zz.softmax(-1), zz[0] - zz[1]
    m = (p * w).sum(-1)                                            # [2, N]
    keep = (target.reshape(-1) != 0).double()
    assert kl.item() == pytest.approx((0.5 * (m[0] - m[1]) * keep).sum().item(), rel=1e-12)
    old = torch.stack((p[0] * (w - m[0, :, None] + 1) - p[1],
                       p[1] * (m[1, :, None] - w + 1) - p[0])) * 0.5 * keep[:, None]
    torch.testing.assert_close(grad, old.reshape(4, 3, 5), atol=1e-12, rtol=0)
    assert grad.reshape(2, -1, 5)[:, keep == 0].abs().max() == 0   # padding gets none
