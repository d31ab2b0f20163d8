"""Ensemble behind the model interface: self-ensemble = member, mixture math, search unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_search import VOCAB, forced_log_prob, random_sources, tiny_model

from nmt.data.batching import make_src_batch
from nmt.extras.decoding.ensemble import Ensemble
from nmt.inference.sampling import sample_search
from nmt.inference.search import BOS_ID, beam_search, greedy_search


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def model(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def mixed():
    """A Transformer and an RNN over the same 40-word vocabularies."""
    return Ensemble([tiny_model("transformer", seed=1), tiny_model("rnn", seed=2)])


def _close(hyps_a, hyps_b, atol=1e-6):
    """Same tokens and alignments; scores within ``atol`` per scored token (EOS included):
    search re-normalizes the ensemble's log-probs with ``log_softmax``, which moves a
    float32 log-prob by up to one ulp (~5e-7), and a sum of ~10 of them by a few ulps."""
    for a_list, b_list in zip(hyps_a, hyps_b, strict=True):
        assert [h.tokens for h in a_list] == [h.tokens for h in b_list]
        for a, b in zip(a_list, b_list, strict=True):
            assert a.score == pytest.approx(b.score, abs=atol * (len(a.tokens) + 1))
            np.testing.assert_allclose(a.alignment, b.alignment, atol=atol)


def test_self_ensemble_equals_the_model(model):
    src, mask = make_src_batch(random_sources(12))
    twice = Ensemble([model, model])
    _close(greedy_search(twice, src, mask, 1.5, 5, length_penalty=0.6),
           greedy_search(model, src, mask, 1.5, 5, length_penalty=0.6))
    _close(beam_search(twice, src, mask, 4, 1.0, 1.5, 5, n_best=3),
           beam_search(model, src, mask, 4, 1.0, 1.5, 5, n_best=3))
    _close(sample_search(twice, src, mask, 1.5, 5, generator=torch.Generator().manual_seed(1)),
           sample_search(model, src, mask, 1.5, 5, generator=torch.Generator().manual_seed(1)))


def test_teacher_forcing_is_log_of_mean_probability_and_mean_alignment(mixed):
    src, mask = make_src_batch(random_sources(3, seed=5))
    tgt_in = torch.tensor([[BOS_ID, 9, 10, 11], [BOS_ID, 12, 13, 0], [BOS_ID, 14, 0, 0]])
    with torch.inference_mode():
        logp, align = mixed(src, mask, tgt_in)
        members = [m(src, mask, tgt_in) for m in mixed.members]
    probs = torch.stack([lg.softmax(-1) for lg, _ in members]).mean(0)
    torch.testing.assert_close(logp, probs.log(), atol=1e-6, rtol=0)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 4))       # a distribution
    torch.testing.assert_close(align, (members[0][1] + members[1][1]) / 2, atol=1e-6, rtol=0)
    torch.testing.assert_close(align.sum(-1), torch.ones(3, 4), atol=1e-5, rtol=0)


def test_incremental_equals_teacher_forcing_after_reorder(mixed):
    src, mask = make_src_batch(random_sources(2, seed=6))
    tgt_in = torch.tensor([[BOS_ID, 9, 10, 11], [BOS_ID, 12, 13, 14]])
    with torch.inference_mode():
        full, full_align = mixed(src, mask, tgt_in)
        state = mixed.init_state(mixed.encode(src, mask))
        steps, aligns = [], []
        index = torch.tensor([1, 0, 1])                       # reorder: swap, repeat a row
        state = state.reorder(index)
        for t in range(4):
            logits, align, state = mixed.decode(tgt_in[index, t : t + 1], None, state)
            steps.append(logits)
            aligns.append(align)
    assert state.steps == 4
    torch.testing.assert_close(torch.cat(steps, 1), full[index], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(aligns, 1), full_align[index], atol=1e-5, rtol=0)


def test_search_scores_are_the_ensembles_log_likelihood(mixed):
    sources = random_sources(4, seed=9)
    src, mask = make_src_batch(sources)
    for hyps in (greedy_search(mixed, src, mask, 1.5, 5, length_penalty=0.0),
                 beam_search(mixed, src, mask, 3, 0.0, 1.5, 5, n_best=2)):
        for ids, per_sentence in zip(sources, hyps, strict=True):
            for h in per_sentence:
                assert h.score == pytest.approx(forced_log_prob(mixed, ids, h.tokens), abs=1e-4)
                assert h.alignment.shape == (len(h.tokens) + 1, len(ids) + 1)


def test_members_switch_mode_together(mixed):
    mixed.train()
    assert all(m.training for m in mixed.members)
    mixed.eval()
    assert not any(m.training for m in mixed.members)
    assert mixed.tgt_vocab_size == VOCAB


def test_members_must_share_one_vocabulary():
    from nmt.config import compose_config
    from nmt.models import build_model

    small = build_model(compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                                        "model.decoder_hidden=8", "model.attention_dim=8",
                                        "model.output_dim=8"]).model, VOCAB, VOCAB - 1)
    for members in ([tiny_model("transformer"), small], []):
        with pytest.raises(ValueError, match="vocabulary"):
            Ensemble(members)


def test_single_member_ensemble_keeps_scores():
    m = tiny_model("transformer")
    src, mask = make_src_batch(random_sources(3, seed=12))
    _close(beam_search(Ensemble([m]), src, mask, 3, 1.0, 1.5, 5),
           beam_search(m, src, mask, 3, 1.0, 1.5, 5))
    assert math.isclose(forced_log_prob(Ensemble([m]), [5, 6], [7]),
                        forced_log_prob(m, [5, 6], [7]), abs_tol=1e-5)
