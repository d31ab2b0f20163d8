"""Sampling search: greedy limits, filter sets recomputed with the model, seeds, toy frequencies."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_search import TABLE, VOCAB, A, B, MarkovToy, forced_log_prob, random_sources, tiny_model

from nmt.data.batching import make_src_batch
from nmt.inference.search import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    filter_logits,
    greedy_search,
    length_penalty_factor,
    sample,
    sample_search,
)

CFG = {"beam_size": 1, "length_penalty": 0.0, "max_len_a": 1.5, "max_len_b": 5,
       "batch_sentences": 4, "n_best": 1}


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def model(request):
    return tiny_model(request.param)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _assert_same(hyps_a, hyps_b):
    for a, b in zip(hyps_a, hyps_b, strict=True):
        assert a[0].tokens == b[0].tokens
        assert a[0].score == b[0].score
        np.testing.assert_array_equal(a[0].alignment, b[0].alignment)


@pytest.mark.parametrize("settings", [{"temperature": 1e-6}, {"temperature": 0.0}, {"top_k": 1},
                                      {"temperature": 3.0, "top_k": 1}, {"top_p": 1e-6}])
def test_greedy_limits_equal_greedy_exactly(model, settings):
    src, mask = make_src_batch(random_sources(12))
    greedy = greedy_search(model, src, mask, 1.5, 5, length_penalty=0.6)
    sampled = sample_search(model, src, mask, 1.5, 5, length_penalty=0.6, generator=_gen(3),
                            **settings)
    _assert_same(greedy, sampled)


def _step_log_probs_teacher_forced(model, ids, tokens):
    """[len(tokens) + 1, V] log-probs of every step of ``tokens + EOS``, PAD/BOS masked."""
    src, mask = make_src_batch([ids])
    with torch.inference_mode():
        logits, _ = model(src, mask, torch.tensor([[BOS_ID] + tokens]))
    logp = logits[0].float().log_softmax(-1)
    logp[:, [PAD_ID, BOS_ID]] = -math.inf
    return logp


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 5, 1.0), (0.7, 0, 0.5),
                                                     (1.5, 8, 0.6)])
def test_every_sampled_token_is_in_its_steps_top_k_and_nucleus(model, temperature, top_k, top_p):
    """Recompute each step's distribution by teacher forcing and check, independently of
    :func:`filter_logits`: the token's rank < top_k, and the (top-k-renormalized,
    temperature-scaled) mass of the tokens more probable than it is below top_p."""
    sources = random_sources(8, seed=4)
    src, mask = make_src_batch(sources)
    a, b = 1.5, 5
    hyps = sample_search(model, src, mask, a, b, temperature=temperature, top_k=top_k,
                         top_p=top_p, generator=_gen(0))
    kept_sizes = []
    for ids, (h,) in zip(sources, hyps, strict=True):
        logp = _step_log_probs_teacher_forced(model, ids, h.tokens)
        max_len = math.floor(a * (len(ids) + 1) + b)
        for t, tok in enumerate(h.tokens + [EOS_ID]):
            if t >= max_len:          # EOS forced at the length limit: no free choice
                assert tok == EOS_ID
                continue
            row = logp[t] / temperature
            rank = int((row > row[tok]).sum())
            if top_k:
                assert rank < top_k, (t, rank)
                row = torch.where(row >= row.topk(top_k).values[-1], row, -math.inf)
            q = row.softmax(-1)
            assert float(q[q > q[tok]].sum()) < top_p + 1e-5, (t, tok)
            qs = q.sort(descending=True).values
            nucleus = int((qs.cumsum(0) - qs < top_p).sum())
            kept_sizes.append(min(nucleus, top_k or VOCAB))
        # score: unfiltered, temperature-1 log-likelihood (length penalty alpha 0)
        assert h.score == pytest.approx(forced_log_prob(model, ids, h.tokens), abs=1e-4)
    assert 1 < max(kept_sizes) < VOCAB - 2          # the filters did cut, and left a choice


def test_seed_determinism_and_global_rng_untouched(model):
    sources = random_sources(10, seed=2)
    sources[3] = []
    rng_before = torch.get_rng_state()
    first = sample(model, sources, CFG, seed=11)
    again = sample(model, sources, CFG, seed=11)
    other = sample(model, sources, CFG, seed=12)
    assert torch.equal(torch.get_rng_state(), rng_before)
    _assert_same(first, again)
    assert [h[0].tokens for h in first] != [h[0].tokens for h in other]
    assert first[3][0].tokens == [] and first[3][0].score == 0.0
    assert all(len(h) == 1 for h in first)


def test_sample_keeps_input_order():
    """Batches are length-sorted inside; a sentence's greedy limit is found at its index."""
    m = tiny_model("transformer")
    sources = random_sources(7, seed=8)
    out = sample(m, sources, CFG, temperature=0.0)
    for ids, hyps in zip(sources, out, strict=True):
        src, mask = make_src_batch([ids])
        assert hyps[0].tokens == greedy_search(m, src, mask, 1.5, 5)[0][0].tokens


def test_toy_first_token_frequencies_follow_the_filtered_distribution():
    """BOS -> a .5 | b .4 | EOS .1: the first sampled token over 4,000 rows."""
    src, mask = make_src_batch([[7, 7]] * 4000)
    toy = MarkovToy(TABLE)

    def freqs(**kw):
        hyps = sample_search(toy, src, mask, 2.0, 3, generator=_gen(5), **kw)
        first = np.array([h[0].tokens[0] if h[0].tokens else EOS_ID for h in hyps])
        return [float(np.mean(first == w)) for w in (A, B, EOS_ID)]

    assert freqs() == pytest.approx([0.5, 0.4, 0.1], abs=0.03)
    # T = 2: p ** (1/2) renormalized
    root = np.sqrt([0.5, 0.4, 0.1])
    assert freqs(temperature=2.0) == pytest.approx(list(root / root.sum()), abs=0.03)
    # nucleus 0.6: {a, b} (mass above b is .5 < .6; above EOS .9), renormalized 5/9, 4/9
    assert freqs(top_p=0.6) == pytest.approx([5 / 9, 4 / 9, 0.0], abs=0.03)
    assert freqs(top_k=2)[2] == 0.0
    # scores are the unfiltered model's: "a EOS" = log(.5 * .4) whatever the filter
    (h,), = sample_search(toy, src[:1], mask[:1], 2.0, 3, top_k=1, length_penalty=1.0)
    assert h.tokens == [A] and h.score == pytest.approx(math.log(0.2) / length_penalty_factor(2, 1.0))


def test_filter_logits_hand_case():
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    kept = lambda **kw: torch.isfinite(filter_logits(p.log(), **kw))[0].tolist()  # noqa: E731
    assert kept(top_k=2) == [True, True, False, False, False]
    assert kept(top_p=0.6) == [True, True, False, False, False]    # .5 < .6 <= .7
    assert kept(top_p=0.5) == [True, False, False, False, False]   # mass above .2 is .5
    assert kept(top_p=0.71) == [True, True, True, False, False]
    assert kept(top_k=2, top_p=0.9) == [True, True, False, False, False]
    assert kept(top_k=0, top_p=1.0) == [True] * 5


@pytest.mark.parametrize("bad", [{"temperature": -1.0}, {"temperature": math.inf},
                                 {"temperature": math.nan}, {"top_k": -1}, {"top_p": 0.0},
                                 {"top_p": 1.5}])
def test_invalid_sampling_arguments(bad):
    src, mask = make_src_batch([[5, 6]])
    with pytest.raises(ValueError):
        sample_search(MarkovToy(TABLE), src, mask, 1.0, 2, **bad)
    with pytest.raises(ValueError):
        sample(MarkovToy(TABLE), [[5, 6]], CFG, **bad)
