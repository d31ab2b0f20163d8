"""R-Drop, SimCut and CrossConST (nmt.extras.training.consistency) against hand computations.

Checked against a hand computation, the authors' computations and the closed-form gradient of the
fused version they replaced; then through the objective (one forward of the doubled batch) and the
trainer (the KL logged apart)."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_MODEL, TINY_RNN, TINY_TRAIN, tiny_model_and_batch, train
from omegaconf import OmegaConf

from nmt.config import compose_config
from nmt.extras.training.consistency import (
    crossconst_loss,
    rdrop_loss,
    simcut_loss,
    target_as_source,
)
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
    ce = sum(F.cross_entropy(z.reshape(-1, vocab), t, label_smoothing=eps,
                             ignore_index=ignore_index, reduction="sum") for z in (z1, z2))
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
    assert rdrop_loss(changed, target, 0.1, 5.0)[0].item() == pytest.approx(objective.item(),
                                                                            rel=1e-6)
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


# ---------------------------------------------------------------- CrossConST (Gao et al. 2023)
def test_crossconst_kl_direction_and_loss_match_hand_computation():
    # V = 3, one pair of 3 target positions, the last one padding. f(x, y) / f(y, y):
    #   token 1 (gold 1): P_x = [1/2, 1/4, 1/4], P_y = [1/8, 1/2, 3/8]
    #   token 2 (gold 2): P_x = P_y = [1/4, 1/4, 1/2]
    p_x = [[0.5, 0.25, 0.25], [0.25, 0.25, 0.5], [0.98, 0.01, 0.01]]
    p_y = [[0.125, 0.5, 0.375], [0.25, 0.25, 0.5], [0.01, 0.01, 0.98]]
    logits = torch.tensor([p_x, p_y], dtype=torch.float64).log().requires_grad_(True)  # [2, 3, 3]
    target = torch.tensor([[1, 2, 0]])
    objective, loss, nll, kl = crossconst_loss(logits, target, epsilon=0.0, alpha=0.5)
    # KL(P_x || P_y), token 1: 1/2 ln(4) + 1/4 ln(1/2) + 1/4 ln(2/3) = ln2 - 1/4 ln3; token 2: 0.
    # (The other direction, KL(P_y || P_x), would be 1/8 ln(1/4) + 1/2 ln2 + 3/8 ln(3/2).)
    assert kl.item() == pytest.approx(LN2 - math.log(3.0) / 4, abs=1e-12)
    # The cross-entropy is f(x, y)'s alone: -ln 1/4 - ln 1/2 = 3 ln2.
    assert nll.item() == pytest.approx(3 * LN2, abs=1e-12) and loss.item() == nll.item()
    assert objective.item() == pytest.approx(3 * LN2 + 0.5 * (LN2 - math.log(3.0) / 4), abs=1e-12)
    objective.backward()
    # No stop-gradient: both passes learn from the KL term (the authors' criterion), the
    # padding position of neither.
    assert logits.grad[1, 0].abs().sum() > 0 and logits.grad[0, 0].abs().sum() > 0
    assert torch.all(logits.grad[:, 2] == 0)


def _layout_batch():
    """Two pairs, the second row a static shape's padding row (all PAD, first source key kept)."""
    from nmt.data.batching import Batch

    src = torch.tensor([[40, 5, 6, 3], [0, 0, 0, 0]])                  # <2xx> x </s> | padding
    src_mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    tgt_in = torch.tensor([[2, 7, 8, 9], [0, 0, 0, 0]])
    tgt_out = torch.tensor([[7, 8, 9, 3], [0, 0, 0, 0]])
    return Batch(src, src_mask, tgt_in, tgt_out, 4, 4)


@pytest.mark.parametrize(("source_tag", "target_tag", "ids"), [
    (False, False, [[7, 8, 9, 3], [0, 0, 0, 0]]),            # bilingual: y </s>
    (True, False, [[40, 7, 8, 9, 3], [0, 0, 0, 0, 0]]),      # lang_tag=source: <2xx> y </s>
    (False, True, [[8, 9, 3], [0, 0, 0]]),                   # lang_tag=target: the tag's PAD cut
])
def test_target_as_source_carries_the_direction_tags_as_the_model_reads_a_source(
        source_tag, target_tag, ids):
    batch = _layout_batch()
    if target_tag:   # <s> <2xx> y: the tag is decoder input, PAD in tgt_out
        batch.tgt_in, batch.tgt_out = torch.tensor([[2, 40, 8, 9], [0] * 4]), \
            torch.tensor([[0, 8, 9, 3], [0] * 4])
    src, mask = target_as_source(batch, source_tag, target_tag)
    assert src.tolist() == ids
    assert mask.tolist() == [[True] * len(ids[0]), [True] + [False] * (len(ids[0]) - 1)]


CROSSCONST = SimpleNamespace(consistency="crossconst", label_smoothing=0.1, consistency_alpha=0.5,
                             alignment_loss_weight=0.0, cutoff_p=0.05)
MULTI = OmegaConf.create({"pairs": ["de-en", "en-de"], "lang_tag": "source"})


def _tiny(model: str):
    """A tiny model without dropout and a batch of 3 pairs whose sources start with a tag (40)."""
    from nmt.config import compose_config
    from nmt.data.batching import Batch, make_src_batch, make_tgt_batch
    from nmt.models import build_model

    args = ["model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1",
            "model.decoder_layers=1", "model.dropout=0", "model.attention_dropout=0",
            "model.activation_dropout=0"] if model == "transformer" else [
        "model=rnn", "model.emb_dim=8", "model.encoder_hidden=8", "model.decoder_hidden=16",
        "model.attention_dim=16", "model.output_dim=16", "model.dropout=0"]
    torch.manual_seed(0)
    net = build_model(compose_config(args).model, 50, 50).train()
    x = [[40, 5, 9, 7], [40, 12], [40, 8, 8, 20, 21, 22, 23]]
    y = [[4, 6], [10, 11, 12, 13, 14], [13]]
    src, src_mask = make_src_batch(x)
    tgt_in, tgt_out, _ = make_tgt_batch(y)
    return net, Batch(src, src_mask, tgt_in, tgt_out, 16, 11), y


def _crossconst_objective(net, batch, t, data=None):
    from nmt.extras.training.consistency import regulariser
    from nmt.training.loss import objective

    return objective(net, batch, t, regulariser=regulariser(t, data))


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_crossconst_is_the_authors_two_pass_loss(model):
    """One forward of the doubled batch against two separate passes, f(x, y) and f(y, y) with
    the tagged target as the source (built by hand from the id lists), and the authors'
    criterion on them: torch's smoothed cross-entropy of the first, plus alpha x
    kl_div(log_softmax(f(y, y)), softmax(f(x, y))); the same objective and gradients."""
    from nmt.data.batching import make_src_batch

    net, batch, y = _tiny(model)
    net.double()                         # the KL of an untrained model is small: exact sums
    objective, parts = _crossconst_objective(net, batch, CROSSCONST, MULTI)
    objective.backward()
    ours = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    z_x = net(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)[0]
    z_y = net(*make_src_batch([[40, *ids] for ids in y]), batch.tgt_in, need_alignment=False)[0]
    target = batch.tgt_out.reshape(-1)
    ce = F.cross_entropy(z_x.reshape(len(target), -1), target, label_smoothing=0.1,
                         ignore_index=0, reduction="sum")
    kl = F.kl_div(F.log_softmax(z_y.reshape(len(target), -1), -1),
                  F.softmax(z_x.reshape(len(target), -1), -1), reduction="none").sum(-1)
    kl = (kl * (target != 0)).sum()
    (ce + 0.5 * kl).backward()
    assert objective.item() == pytest.approx((ce + 0.5 * kl).item(), rel=1e-10)
    assert parts["consistency_kl"].item() == pytest.approx(kl.item(), rel=1e-8) and kl.item() > 0
    assert parts["loss"].item() == pytest.approx(ce.item(), rel=1e-10)
    for name, p in net.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, atol=1e-10, rtol=1e-8, msg=name)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
@pytest.mark.parametrize("data", [None, MULTI])
def test_crossconst_with_weight_zero_is_plain_training(model, data):
    """consistency_alpha = 0: the objective, the loss, the NLL and every gradient are those of
    the plain objective (train.consistency=none), though the KL is not 0."""
    net, batch, _ = _tiny(model)
    t0 = SimpleNamespace(**{**vars(CROSSCONST), "consistency_alpha": 0.0})
    grads, results = [], []
    for t in (t0, SimpleNamespace(**{**vars(CROSSCONST), "consistency": "none"})):
        objective, parts = _crossconst_objective(net, batch, t, data)
        objective.backward()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
        results.append({"objective": objective.item(), **{k: v.item() for k, v in parts.items()}})
        net.zero_grad()
    crossconst, plain = results
    assert crossconst.pop("consistency_kl") > 0
    assert crossconst == pytest.approx(plain, rel=1e-6)
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-7, rtol=1e-6, msg=name)


def test_crossconst_needs_a_joint_vocabulary(tiny_overrides):
    from nmt.config import ConfigError, compose_config

    with pytest.raises(ConfigError,
                       match="train.consistency=crossconst .* data.tokenizer.joint=true"):
        compose_config(tiny_overrides + ["train.consistency=crossconst",
                                         "data.tokenizer.joint=false",
                                         "model.tie_embeddings=false"])


def test_crossconst_trains_a_multilingual_model_through_the_hooks(tmp_path):
    """nmt.extras.training.hooks builds CrossConST with the run's tags (data.lang_tag=source:
    the second source starts with <2xx>), and a multilingual run trains with it."""
    from conftest import TINY_MODEL, TINY_TRAIN, train, write_multilingual_corpus

    from nmt.config import compose_config
    from nmt.extras.training import hooks

    corpus = write_multilingual_corpus(tmp_path / "corpus", {"train": 60, "val": 6, "test": 6})
    cfg = compose_config([f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
                          "data.tokenizer.vocab_size=120", "data.pairs=[de-en,en-fr]",
                          "train.consistency=crossconst", "train.consistency_alpha=0.25",
                          *TINY_MODEL, *TINY_TRAIN, "train.max_steps=3",
                          f"run_dir={tmp_path / 'run'}"])
    built = hooks(cfg).regulariser
    assert (built.kind, built.alpha, built.source_tag, built.target_tag) == \
        ("crossconst", 0.25, True, False)
    assert train(cfg)["steps"] == 3
    assert "consistency_kl" in (tmp_path / "run" / "train.log").read_text()


# ------------------------------------------------------------ through the objective and the trainer
RDROP = SimpleNamespace(consistency="rdrop", label_smoothing=0.1, consistency_alpha=5.0,
                        alignment_loss_weight=0.0, cutoff_p=0.05)


def _objective(net, batch, t):
    """nmt.training.loss.objective with train.consistency's regulariser, as the trainer calls it."""
    from nmt.config import is_guided
    from nmt.extras.training.consistency import regulariser
    from nmt.training.loss import objective

    return objective(net, batch, t, guided=is_guided(t), regulariser=regulariser(t))


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_rdrop_one_forward_of_the_doubled_batch_is_two_dropout_passes(model, monkeypatch):
    """The objective with train.consistency=rdrop, its dropout masks recorded, against two
    separate passes that replay the two halves of those masks and the authors' loss on them
    (torch's smoothed cross-entropy, kl_div both ways): the same objective and gradients."""
    import torch.nn.functional as F

    net, batch = tiny_model_and_batch(model, dropout=0.3)
    masks: list[torch.Tensor] = []

    def recording(x, p=0.5, training=True, inplace=False):
        masks.append((torch.rand_like(x) >= p).to(x.dtype) / (1 - p))
        return x * masks[-1]

    monkeypatch.setattr(F, "dropout", recording)
    objective, parts = _objective(net, batch, RDROP)
    kl = parts["consistency_kl"]
    objective.backward()
    ours = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    assert masks and all(m.size(0) == 6 for m in masks) and kl.item() > 0

    logits = []
    for half in (slice(0, 3), slice(3, 6)):
        replay = iter(masks)
        monkeypatch.setattr(F, "dropout", lambda x, *a, r=replay, h=half, **k: x * next(r)[h])
        logits.append(net(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)[0])
        assert next(replay, None) is None                    # every mask used once
    target = batch.tgt_out.reshape(-1)
    lp1, lp2 = (F.log_softmax(z.reshape(len(target), -1), -1) for z in logits)
    ce = sum(F.cross_entropy(lp, target, label_smoothing=0.1, ignore_index=0, reduction="sum")
             for lp in (lp1, lp2))
    keep = (target != 0).unsqueeze(-1)
    ref_kl = ((F.kl_div(lp1, lp2, log_target=True, reduction="none") * keep).sum()
              + (F.kl_div(lp2, lp1, log_target=True, reduction="none") * keep).sum()) / 2
    ((ce + 5.0 * ref_kl) / 2).backward()
    assert objective.item() == pytest.approx(((ce + 5.0 * ref_kl) / 2).item(), rel=1e-5)
    assert kl.item() == pytest.approx(ref_kl.item(), rel=1e-5)
    for name, p in net.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_rdrop_without_dropout_is_plain_training(model):
    """Dropout 0: the two passes agree, the KL term is 0, and the objective, its logged parts
    and the gradients are those of one plain pass (train.consistency=none)."""
    net, batch = tiny_model_and_batch(model, dropout=0.0)
    grads, results = [], []
    for t in (RDROP, SimpleNamespace(**{**vars(RDROP), "consistency": "none"})):
        objective, parts = _objective(net, batch, t)
        objective.backward()
        grads.append({n: p.grad.clone() for n, p in net.named_parameters()})
        results.append({"objective": objective.item(), **{k: v.item() for k, v in parts.items()}})
        net.zero_grad()
    (rdrop, plain) = results
    assert list(plain) == ["objective", "loss", "nll"]
    assert rdrop.pop("consistency_kl") == pytest.approx(0.0, abs=1e-6)
    assert rdrop == pytest.approx(plain, rel=1e-6) and plain["objective"] == plain["loss"]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5, msg=name)


SIMCUT = SimpleNamespace(consistency="simcut", label_smoothing=0.1, consistency_alpha=3.0,
                         alignment_loss_weight=0.0, cutoff_p=0.4)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_token_cutoff_erases_regular_tokens_of_the_second_copy_in_training_only(model):
    """add_token_cutoff at p = 1: every embedding lookup of a doubled batch keeps its first
    half and the special tokens (PAD, BOS, EOS) of the second, and zeroes the rest; in eval
    mode nothing is cut."""
    from nmt.data.vocab import EOS_ID
    from nmt.extras.training.consistency import add_token_cutoff

    net, batch = tiny_model_and_batch(model, dropout=0.0)
    add_token_cutoff(net, 1.0)
    seen = []
    for emb in dict.fromkeys((net.src_embed, net.tgt_embed)):        # runs after the cutoff
        emb.register_forward_hook(lambda m, args, out: seen.append((m.weight, args[0], out)))
    doubled = [torch.cat((x, x)) for x in (batch.src, batch.src_mask, batch.tgt_in)]
    for training in (True, False):
        seen.clear()
        net.train(training)(*doubled, need_alignment=False)
        assert len(seen) == 2                                         # src, then tgt_in
        for weight, ids, out in seen:
            full = weight[ids]
            erased = (ids > EOS_ID) & (torch.arange(len(ids)) >= 3).unsqueeze(-1) & training
            assert erased.any() == training and (ids[3:] <= EOS_ID).any()
            assert torch.equal(out, full.masked_fill(erased.unsqueeze(-1), 0.0))


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_simcut_one_forward_of_the_doubled_batch_is_the_plain_and_the_cut_pass(model,
                                                                               monkeypatch):
    """The objective with train.consistency=simcut and the cutoff's draws recorded, against two
    separate passes (the second with those draws' tokens erased) and the authors' loss on them:
    the same objective and gradients. With p = 0 (and no dropout) it is plain training."""
    import torch.nn.functional as F

    from nmt.data.vocab import EOS_ID
    from nmt.extras.training.consistency import add_token_cutoff

    net, batch = tiny_model_and_batch(model, dropout=0.0)
    draws, rand = [], torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, **k: draws.append(rand(*a, **k)) or draws[-1])
    hooks = add_token_cutoff(net, 0.4)
    objective, parts = _objective(net, batch, SIMCUT)
    loss, kl = parts["loss"], parts["consistency_kl"]
    objective.backward()
    ours = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    for hook in hooks:
        hook.remove()
    assert len(draws) == 2 and kl.item() > 0

    logits = [net(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)[0]]
    replay = iter(draws)
    for emb in dict.fromkeys((net.src_embed, net.tgt_embed)):
        emb.register_forward_hook(lambda m, args, out, r=replay: out.masked_fill(
            ((next(r) < 0.4) & (args[0] > EOS_ID)).unsqueeze(-1), 0.0))
    logits.append(net(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)[0])
    target = batch.tgt_out.reshape(-1)
    lp, lp_cut = (F.log_softmax(z.reshape(len(target), -1), -1) for z in logits)
    ce = F.cross_entropy(lp, target, label_smoothing=0.1, ignore_index=0, reduction="sum")
    ref_kl = (F.kl_div(lp_cut, lp, log_target=True, reduction="none")
              * (target != 0).unsqueeze(-1)).sum()
    (ce + 3.0 * ref_kl).backward()
    assert objective.item() == pytest.approx((ce + 3.0 * ref_kl).item(), rel=1e-5)
    # the KL is small (~0.006): an absolute tolerance too (summation order differs by host)
    assert (loss.item(), kl.item()) == pytest.approx((ce.item(), ref_kl.item()), rel=1e-5, abs=1e-6)
    for name, p in net.named_parameters():
        torch.testing.assert_close(ours[name], p.grad, atol=1e-6, rtol=1e-4, msg=name)

    net, batch = tiny_model_and_batch(model, dropout=0.0)
    add_token_cutoff(net, 0.0)
    results = [_objective(net, batch, t)
               for t in (SIMCUT, SimpleNamespace(**{**vars(SIMCUT), "consistency": "none"}))]
    assert results[0][1]["consistency_kl"].item() == pytest.approx(0.0, abs=1e-6)
    assert results[0][0].item() == pytest.approx(results[1][0].item(), rel=1e-6)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_rdrop_training_steps_log_the_kl_apart(overrides, tmp_path, model):
    """Two R-Drop steps end to end (the Transformer under bf16 autocast): train.log and
    TensorBoard carry the KL term apart from the loss, which stays the passes' mean."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tiny = TINY_MODEL + ["train.precision=bf16"] if model == "transformer" else TINY_RNN
    run = tmp_path / model
    summary = train(compose_config(overrides[:-1] + TINY_TRAIN + tiny + [
        "train.consistency=rdrop", "train.max_steps=2", "train.log_every_steps=1",
        "search.max_len_b=1", f"run_dir={run}"]))
    assert summary["steps"] == 2
    lines = [ln for ln in (run / "train.log").read_text().splitlines() if "train | step" in ln]
    kls = [float(ln.rsplit("| consistency_kl ", 1)[1]) for ln in lines]
    assert len(kls) == 2 and all(0.0 < kl < 1.0 for kl in kls)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/consistency_kl")] == pytest.approx(kls, abs=1e-4)
    losses = [e.value for e in events.Scalars("train/loss")]
    assert losses[0] == pytest.approx(float(lines[0].split("| loss ")[1].split()[0]), abs=1e-4)
