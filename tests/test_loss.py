"""Label-smoothed cross-entropy: the fused version against a hand computation, padding, and
the reference (torch's own label smoothing), values and gradients. R-Drop and SimCut:
tests/test_consistency.py."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.training.loss import (
    label_smoothed_nll,
    label_smoothed_nll_reference,
    perplexity,
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
    assert label_smoothed_nll(changed, target, 0.1)[0].item() == pytest.approx(loss.item(),
                                                                               rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_the_reference_is_pytorchs_label_smoothing(eps):
    """Szegedy's convention (eps / V on every class) is F.cross_entropy's label_smoothing."""
    import torch.nn.functional as F

    logits = torch.randn(4, 7, 9, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    target = torch.randint(1, 9, (4, 7), generator=torch.Generator().manual_seed(3))
    target[2, 5:] = 0
    loss, nll = label_smoothed_nll_reference(logits, target, eps, ignore_index=0)
    flat, gold = logits.reshape(-1, 9), target.reshape(-1)
    assert loss.item() == pytest.approx(F.cross_entropy(
        flat, gold, label_smoothing=eps, ignore_index=0, reduction="sum").item(), rel=1e-12)
    assert nll.item() == pytest.approx(F.cross_entropy(
        flat, gold, ignore_index=0, reduction="sum").item(), rel=1e-12)


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
