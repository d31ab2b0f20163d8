"""Greedy, beam and sampling search (nmt/inference/search.py) and the batching driver
``nmt.inference.translator.decode``: a hand-checked toy model, invariants on real tiny models,
tiny models that have learnt a few pairs (exact translations, n-best scores = forced scores),
and sampling (greedy limits, filter sets recomputed with the model, seeds, toy frequencies)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import fit_pairs

from nmt.config import compose_config
from nmt.data.batching import make_src_batch
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt.inference.sampling import filter_logits, sample_search
from nmt.inference.search import (
    beam_search,
    greedy_search,
    length_penalty_factor,
    max_output_lengths,
)
from nmt.inference.translator import decode
from nmt.models import build_model
from nmt.models.base import DecoderState, Encoded, Seq2Seq

A, B = 4, 5  # the toy model's two word ids (after PAD, UNK, BOS, EOS)


# ----------------------------------------------------------------------------- toy model
class _ToyState(DecoderState):
    def __init__(self, mask: torch.Tensor, steps: int):
        self.mask, self.steps = mask, steps

    def reorder(self, index):
        return _ToyState(self.mask.index_select(0, index), self.steps)


class MarkovToy(Seq2Seq):
    """P(next | last token) from a fixed table, independent of the source.

    Alignment of output position t: one-hot on real source position min(t, |x| - 1), so the
    expected alignment of every hypothesis is known exactly.
    """

    def __init__(self, table: dict[int, dict[int, float]], vocab: int = 6):
        super().__init__()
        self.src_vocab_size = self.tgt_vocab_size = vocab
        logp = torch.full((vocab, vocab), -1e9)
        for prev, row in table.items():
            for tok, p in row.items():
                logp[prev, tok] = math.log(p)
        self.register_buffer("logp", logp)

    def encode(self, src, src_mask):
        return Encoded(torch.zeros(*src.shape, 1), src_mask)

    def init_state(self, enc):
        return _ToyState(enc.mask, 0)

    def decode(self, tgt_in, enc, state=None, need_alignment=True):
        assert state is not None, "search must decode incrementally"
        n, t = tgt_in.shape
        logits = self.logp[tgt_in]                                   # [N, T, V]
        real = state.mask.sum(1)                                     # [N]
        pos = torch.minimum(torch.arange(state.steps, state.steps + t)[None, :],
                            (real - 1)[:, None])                     # [N, T]
        align = torch.nn.functional.one_hot(pos, state.mask.size(1)).float()
        return logits, align, _ToyState(state.mask, state.steps + t)


# BOS -> a .5 | b .4 | EOS .1;  a -> EOS .4 | a .3 | b .3;  b -> EOS .9 | a .05 | b .05
TABLE = {BOS_ID: {A: 0.5, B: 0.4, EOS_ID: 0.1}, A: {EOS_ID: 0.4, A: 0.3, B: 0.3},
         B: {EOS_ID: 0.9, A: 0.05, B: 0.05}}


def _toy_batch(lengths=(3,)):
    return make_src_batch([[7] * n for n in lengths])


def test_toy_greedy_takes_locally_best_path():
    src, mask = _toy_batch()
    (hyp,), = greedy_search(MarkovToy(TABLE), src, mask, 2.0, 5, length_penalty=0.0)
    assert hyp.tokens == [A]                                   # a (.5), then EOS (.4)
    assert hyp.score == pytest.approx(math.log(0.5 * 0.4), abs=1e-6)


def test_toy_beam_finds_better_hypothesis_and_n_best():
    src, mask = _toy_batch()
    # step 0: a .5, b .4 alive (EOS .1 ranks 3rd); step 1: "b EOS" .36 and "a EOS" .2 are
    # the two best candidates -> two finished hypotheses = beam_size: stop.
    (best, second), = beam_search(MarkovToy(TABLE), src, mask, beam_size=2, length_penalty=0.0,
                                  max_len_a=2.0, max_len_b=5, n_best=2)
    assert (best.tokens, second.tokens) == ([B], [A])
    assert best.score == pytest.approx(math.log(0.36), abs=1e-6)
    assert second.score == pytest.approx(math.log(0.2), abs=1e-6)
    # With alpha = 1 both have |y| = 2 (word + EOS): scores divided by (5 + 2) / 6.
    (hyp,), = beam_search(MarkovToy(TABLE), src, mask, 2, 1.0, 2.0, 5, n_best=1)
    assert hyp.tokens == [B] and hyp.score == pytest.approx(math.log(0.36) / (7 / 6), abs=1e-6)


def test_toy_max_length_forces_eos_and_scores_it():
    loop = {BOS_ID: {A: 0.9, EOS_ID: 0.1}, A: {A: 0.8, EOS_ID: 0.2}}
    src, mask = _toy_batch((1, 2))                             # |x| = 2 and 3 (with EOS)
    # max output = floor(1 * |x| + 0) = 2 and 3 words, then EOS is forced.
    hyps = greedy_search(MarkovToy(loop), src, mask, 1.0, 0, length_penalty=0.0)
    assert [h[0].tokens for h in hyps] == [[A, A], [A, A, A]]
    assert hyps[0][0].score == pytest.approx(math.log(0.9 * 0.8 * 0.2), abs=1e-6)
    beams = beam_search(MarkovToy(loop), src, mask, 3, 0.0, 1.0, 0, n_best=3)
    assert [h.tokens for h in beams[0]] == [[A], [A, A], []]   # all ended, best first
    assert [h.score for h in beams[0]] == pytest.approx(
        [math.log(0.9 * 0.2), math.log(0.9 * 0.8 * 0.2), math.log(0.1)], abs=1e-6)
    # max length 0: only EOS is possible; every sentence still gets an (empty) output.
    zero = beam_search(MarkovToy(loop), src, mask, 2, 1.0, 0.0, 0, n_best=1)
    assert [h[0].tokens for h in zero] == [[], []]
    assert zero[0][0].score == pytest.approx(math.log(0.1) / length_penalty_factor(1, 1.0))


def test_toy_alignment_rows_follow_backpointers_without_padding_columns():
    loop = {BOS_ID: {A: 0.9, EOS_ID: 0.1}, A: {A: 0.8, EOS_ID: 0.2}}
    src, mask = _toy_batch((1, 4))                            # widths 2 and 5 real columns
    for hyps in (greedy_search(MarkovToy(loop), src, mask, 1.0, 0),
                 beam_search(MarkovToy(loop), src, mask, 3, 1.0, 1.0, 0, n_best=3)):
        for s, per_sentence in enumerate(hyps):
            real = int(mask[s].sum())
            for h in per_sentence:
                assert h.alignment.dtype == np.float32
                assert h.alignment.shape == (len(h.tokens) + 1, real)
                rows = np.minimum(np.arange(len(h.tokens) + 1), real - 1)
                expect = np.eye(real, dtype=np.float32)[rows]
                np.testing.assert_array_equal(h.alignment, expect)


def test_length_penalty_and_max_length_formulas():
    assert length_penalty_factor(1, 1.0) == 1.0                  # (5 + 1) / 6
    assert length_penalty_factor(7, 0.5) == pytest.approx(math.sqrt(2.0))
    assert length_penalty_factor(30, 0.0) == 1.0
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert max_output_lengths(mask, 1.5, 10).tolist() == [13, 14]  # floor(1.5 * |x| + 10)


# ------------------------------------------------------------------------- real models
TINY = {
    "transformer": ["model.d_model=32", "model.heads=2", "model.ff_dim=64",
                    "model.encoder_layers=2", "model.decoder_layers=2"],
    "rnn": ["model.emb_dim=16", "model.encoder_hidden=16", "model.decoder_hidden=32",
            "model.attention_dim=32", "model.output_dim=32"],
}
VOCAB = 40


def tiny_model(name: str, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return build_model(compose_config([f"model={name}"] + TINY[name]).model, VOCAB, VOCAB).eval()


def random_sources(n: int, seed: int = 1, max_len: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_len + 1, (n,), generator=g).tolist()
    return [torch.randint(4, VOCAB, (k,), generator=g).tolist() for k in lens]


def forced_log_prob(model: Seq2Seq, src_ids: list[int], tokens: list[int]) -> float:
    """Teacher-forced sum of log-probs of ``tokens + EOS`` (no incremental cache)."""
    src, mask = make_src_batch([src_ids])
    with torch.inference_mode():
        logits, _ = model(src, mask, torch.tensor([[BOS_ID] + tokens]))
    gold = torch.tensor([tokens + [EOS_ID]])
    return logits.log_softmax(-1).gather(2, gold[..., None]).sum().item()


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def model(request):
    return tiny_model(request.param)


def test_beam1_equals_greedy(model):
    src, mask = make_src_batch(random_sources(16))
    greedy = greedy_search(model, src, mask, 1.5, 5, length_penalty=0.6)
    beam1 = beam_search(model, src, mask, 1, 0.6, 1.5, 5, n_best=1)
    for g, b in zip(greedy, beam1, strict=True):
        assert g[0].tokens == b[0].tokens
        assert g[0].score == pytest.approx(b[0].score, abs=1e-5)
        np.testing.assert_allclose(g[0].alignment, b[0].alignment, atol=1e-6)


def test_alone_equals_in_batch(model):
    sources = random_sources(10)
    src, mask = make_src_batch(sources)
    batch_beam = beam_search(model, src, mask, 4, 1.0, 1.5, 5, n_best=3)
    batch_greedy = greedy_search(model, src, mask, 1.5, 5)
    for i, ids in enumerate(sources):
        s1, m1 = make_src_batch([ids])
        alone = beam_search(model, s1, m1, 4, 1.0, 1.5, 5, n_best=3)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch_beam[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batch_beam[i]], abs=1e-4)
        np.testing.assert_allclose(alone[0].alignment, batch_beam[i][0].alignment, atol=1e-5)
        assert greedy_search(model, s1, m1, 1.5, 5)[0][0].tokens == batch_greedy[i][0].tokens


def test_scores_match_teacher_forcing_and_alignments_are_distributions(model):
    sources = random_sources(6)
    src, mask = make_src_batch(sources)
    alpha = 0.8
    for i, hyps in enumerate(beam_search(model, src, mask, 3, alpha, 1.5, 5, n_best=3)):
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert BOS_ID not in h.tokens and EOS_ID not in h.tokens and 0 not in h.tokens
            raw = forced_log_prob(model, sources[i], h.tokens)
            factor = length_penalty_factor(len(h.tokens) + 1, alpha)
            assert h.score == pytest.approx(raw / factor, abs=1e-4)
            assert h.alignment.shape == (len(h.tokens) + 1, len(sources[i]) + 1)
            np.testing.assert_allclose(h.alignment.sum(1), 1.0, atol=1e-5)
            assert len(h.tokens) <= math.floor(1.5 * (len(sources[i]) + 1) + 5)


def test_matches_naive_reference_beam_search(model):
    """The batched search equals a per-sentence, recompute-everything implementation of the
    same rules (top 2k candidates; EOS among the best k ends a hypothesis; stop at k ended,
    at the length limit, or when no alive hypothesis can beat the best ended one)."""
    k, alpha, a, b = 3, 1.0, 1.0, 3
    sources = random_sources(4, seed=3, max_len=6)
    src, mask = make_src_batch(sources)
    for n_best in (1, k):
        fast = beam_search(model, src, mask, k, alpha, a, b, n_best=n_best)
        for i, ids in enumerate(sources):
            expected = _naive_beam(model, ids, k, alpha, a, b, use_bound=n_best == 1)[:n_best]
            assert [h.tokens for h in fast[i]] == [toks for _, toks in expected]
            assert [h.score for h in fast[i]] == pytest.approx([s for s, _ in expected], abs=1e-4)


def _naive_beam(model, ids, k, alpha, a, b, use_bound):
    """Per-sentence beam search recomputing the whole prefix each step; ended hyps, best first."""
    max_len = math.floor(a * (len(ids) + 1) + b)
    alive, ended = [([], 0.0)], []
    for t in range(max_len + 1):
        cands = []
        for toks, score in alive:
            s1, m1 = make_src_batch([ids])
            with torch.inference_mode():
                logits, _ = model(s1, m1, torch.tensor([[BOS_ID] + toks]))
            logp = logits[0, -1].float().log_softmax(-1)
            for w in range(VOCAB):
                if w in (0, BOS_ID) or (t >= max_len and w != EOS_ID):
                    continue
                cands.append((score + logp[w].item(), toks + [w]))
        cands.sort(key=lambda c: -c[0])
        cands = cands[: 2 * k]
        for rank, (score, toks) in enumerate(cands):
            if toks[-1] == EOS_ID and rank < k:
                ended.append((score / length_penalty_factor(t + 1, alpha), toks[:-1]))
        alive = [(toks, score) for score, toks in cands if toks[-1] != EOS_ID][:k]
        best_end = max((s for s, _ in ended), default=-math.inf)
        bound = alive[0][1] / length_penalty_factor(max_len + 1, alpha) if alive else -math.inf
        if len(ended) >= k or t >= max_len or (use_bound and best_end >= bound):
            break
    return sorted(ended, key=lambda e: -e[0])


def test_translate_restores_order_and_handles_empty_sources(model):
    sources = random_sources(9, seed=5)
    sources[4] = []
    cfg = {"beam_size": 3, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 5,
           "batch_sentences": 2, "batch_tokens": 0, "n_best": 2}
    out = decode(model, sources, cfg)
    assert len(out) == 9
    assert out[4][0].tokens == [] and out[4][0].score == 0.0 and out[4][0].alignment.shape == (1, 1)
    src, mask = make_src_batch([ids for ids in sources if ids])
    direct = beam_search(model, src, mask, 3, 1.0, 1.5, 5, n_best=2)
    expected = direct[:4] + [None] + direct[4:]
    for i in (0, 1, 2, 3, 5, 6, 7, 8):
        assert [h.tokens for h in out[i]] == [h.tokens for h in expected[i]]
    greedy = decode(model, sources, dict(cfg, beam_size=1, n_best=1, batch_sentences=100))
    assert all(len(h) == 1 for h in greedy) and greedy[4][0].tokens == []


def test_search_restores_training_mode():
    m = tiny_model("transformer").train()
    src, mask = make_src_batch(random_sources(2))
    a = beam_search(m, src, mask, 2, 1.0, 1.0, 2)
    b = beam_search(m, src, mask, 2, 1.0, 1.0, 2)       # dropout off inside: deterministic
    assert m.training and [h[0].tokens for h in a] == [h[0].tokens for h in b]


# ------------------------------------------------------- models that have learnt 7 pairs
# Source words 4..19, target words 20..39 (a target id never occurs in a source, so nothing
# can be copied); lengths 1-5 -> 1-6, one target longer than its source, and two sources
# with the same words in another order ([7, 9] and [9, 7]).
PAIRS = [([19, 9], [23]),
         ([7, 11, 13, 7, 9], [36, 39, 38]),
         ([12, 16], [33, 26, 39]),
         ([18, 12, 5, 9, 13], [20, 21, 32, 23]),
         ([7, 9], [39, 31, 28, 38, 23]),
         ([9, 7], [23, 35, 22, 31, 20, 29]),
         ([5], [24, 25])]


@pytest.fixture(scope="module", params=["transformer", "rnn"])
def learnt(request):
    """A tiny model (no dropout) that has learnt PAIRS by heart (training loss < 0.01)."""
    name = request.param
    no_dropout = ["model.dropout=0.0"] + (
        ["model.attention_dropout=0.0", "model.activation_dropout=0.0"]
        if name == "transformer" else [])
    torch.manual_seed(0)
    m = build_model(compose_config([f"model={name}"] + TINY[name] + no_dropout).model, VOCAB, VOCAB)
    loss = fit_pairs(m, PAIRS)
    assert loss < 0.01, f"{name} did not learn the pairs (loss {loss:.4f})"
    return m


def test_learnt_pairs_are_translated_exactly_by_greedy_and_beam(learnt):
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    src, mask = make_src_batch(sources)
    assert [h[0].tokens for h in greedy_search(learnt, src, mask, 2.0, 5)] == targets
    for k, alpha in ((2, 0.0), (4, 1.0), (5, 2.0)):
        assert [h[0].tokens for h in beam_search(learnt, src, mask, k, alpha, 2.0, 5)] == targets
    # translate: length-sorted batches of 3 (three batches), answers back in input order.
    for k in (1, 4):
        cfg = {"beam_size": k, "length_penalty": 1.0, "max_len_a": 2.0, "max_len_b": 5,
               "batch_sentences": 3, "batch_tokens": 0, "n_best": 1}
        assert [h[0].tokens for h in decode(learnt, sources, cfg)] == targets


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_n_best_is_sorted_and_scores_are_length_penalised_forced_log_probs(learnt, alpha):
    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    cfg = {"beam_size": 4, "length_penalty": alpha, "max_len_a": 2.0, "max_len_b": 5,
           "batch_sentences": 3, "batch_tokens": 0, "n_best": 4}
    for ids, target, hyps in zip(sources, targets, decode(learnt, sources, cfg), strict=True):
        assert len(hyps) == 4 and hyps[0].tokens == target
        assert len({tuple(h.tokens) for h in hyps}) == 4                  # four different outputs
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and scores[0] > -0.05 > scores[1]
        for h in hyps:
            forced = forced_log_prob(learnt, ids, h.tokens)                # tokens + EOS
            expected = forced / ((5 + len(h.tokens) + 1) / 6) ** alpha      # Wu et al. (2016)
            assert h.score == pytest.approx(expected, abs=1e-4), (ids, h.tokens)


# --------------------------------------------------------- beam >= greedy (trained models)
def _fit_copy_task(name: str) -> Seq2Seq:
    """A tiny model trained for a few seconds to copy its source (peaked distributions)."""
    m = tiny_model(name).train()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        ids = [torch.randint(4, 12, (int(n),), generator=g).tolist()
               for n in torch.randint(2, 7, (32,), generator=g)]
        src, mask = make_src_batch(ids)
        width = src.size(1)
        tgt_out = src.clone()
        tgt_in = torch.cat([torch.full((len(ids), 1), BOS_ID), src[:, : width - 1]], dim=1)
        tgt_in = tgt_in.masked_fill(tgt_in == EOS_ID, 0)
        logits, _ = m(src, mask, tgt_in, need_alignment=False)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1),
                                                 ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


@pytest.mark.parametrize("name", ["transformer", "rnn"])
def test_beam_score_at_least_greedy_score(name):
    m = _fit_copy_task(name)
    sources = random_sources(20, seed=11, max_len=6)
    src, mask = make_src_batch([[4 + (w % 8) for w in ids] for ids in sources])
    for alpha in (0.0, 1.0):
        greedy = greedy_search(m, src, mask, 1.5, 5, length_penalty=alpha)
        beam = beam_search(m, src, mask, 5, alpha, 1.5, 5)
        for g, b in zip(greedy, beam, strict=True):
            assert b[0].score >= g[0].score - 1e-5


# ------------------------------------------------------------------------------ sampling
CFG = {"beam_size": 1, "length_penalty": 0.0, "max_len_a": 1.5, "max_len_b": 5,
       "batch_sentences": 4, "batch_tokens": 0, "n_best": 1}


def sample(model, sources, seed=0, temperature=1.0, top_k=0, top_p=1.0):
    return decode(model, sources, CFG, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                            seed=seed))


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
    first = sample(model, sources, seed=11)
    again = sample(model, sources, seed=11)
    other = sample(model, sources, seed=12)
    assert torch.equal(torch.get_rng_state(), rng_before)
    _assert_same(first, again)
    assert [h[0].tokens for h in first] != [h[0].tokens for h in other]
    assert first[3][0].tokens == [] and first[3][0].score == 0.0
    assert all(len(h) == 1 for h in first)


def test_sample_keeps_input_order():
    """Batches are length-sorted inside; a sentence's greedy limit is found at its index."""
    m = tiny_model("transformer")
    sources = random_sources(7, seed=8)
    out = sample(m, sources, temperature=0.0)
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
    assert h.tokens == [A]
    assert h.score == pytest.approx(math.log(0.2) / length_penalty_factor(2, 1.0))


def test_filter_logits_hand_case():
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    kept = lambda **kw: torch.isfinite(filter_logits(p.log(), **kw))[0].tolist()  # noqa: E731
    assert kept(top_k=2) == [True, True, False, False, False]
    assert kept(top_p=0.6) == [True, True, False, False, False]    # .5 < .6 <= .7
    assert kept(top_p=0.5) == [True, False, False, False, False]   # mass above .2 is .5
    assert kept(top_p=0.71) == [True, True, True, False, False]
    assert kept(top_k=2, top_p=0.9) == [True, True, False, False, False]
    assert kept(top_k=0, top_p=1.0) == [True] * 5
    assert kept(epsilon=0.12) == [True, True, True, False, False]     # p >= epsilon
    assert kept(epsilon=0.6) == [True, False, False, False, False]    # the best one stays
    assert kept(top_k=2, epsilon=0.3) == [True, False, False, False, False]  # .2 / .7 < .3
