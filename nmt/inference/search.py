"""Greedy, beam and sampling search over batches of sentences, for any :class:`Seq2Seq`.

The search talks to a model only through ``encode`` / ``init_state`` / ``decode`` /
``state.reorder`` (:mod:`nmt.models.base`), so one implementation serves the RNN, the
Transformer and an ensemble of them (:class:`nmt.models.ensemble.Ensemble`). Design
(fairseq-style, see Ott et al. 2019):

* All beams of all sentences of a batch are rows of one tensor: row ``b * k + j`` is beam
  ``j`` of active sentence ``b``. Each step is one ``decode`` call on the newest tokens
  (cached incremental decoding), one ``log_softmax`` and one ``topk`` over ``k * V``
  candidates per sentence.
* Hypotheses are not copied around: each step stores its chosen tokens, backpointers
  (parent rows) and alignment rows; the returned hypotheses are rebuilt by backtracking
  once at the end (:class:`_History`).
* Finished sentences leave the active batch: one ``state.reorder(index)`` per step both
  selects the surviving beams and drops finished sentences, so tensors shrink as the batch
  is translated.

Conventions:

* Scores are sums of natural-log token probabilities including EOS, divided by the length
  penalty ``lp(y) = ((5 + |y|) / 6) ** alpha`` of Wu et al. (2016, eq. 14), where ``|y|``
  counts the output tokens including EOS; ``alpha = length_penalty`` (0 = raw log-prob).
* Output length: at most ``floor(max_len_a * |x| + max_len_b)`` tokens before EOS, where
  ``|x|`` counts the real source positions (subwords + EOS, i.e. ``src_mask.sum(1)``).
  When a hypothesis reaches it, EOS is forced (its model probability is still scored), so
  every sentence gets an output.
* PAD and BOS are never generated.
* Sampling (:func:`sample_search`) walks one path per sentence like greedy search, drawing
  each token from the temperature-scaled, top-k / nucleus-filtered distribution with an
  explicit ``torch.Generator`` (seeded, never the global RNG).
* Beam search stops a sentence when ``beam_size`` hypotheses have ended (an EOS among the
  ``beam_size`` best candidates of a step, as in fairseq), at the maximum length, or (with
  ``n_best == 1``) when no alive hypothesis can still beat the best ended one: an alive
  hypothesis' log-prob only falls, so its final score is at most its current log-prob
  divided by the largest length penalty it can still reach (at the maximum length for
  ``alpha >= 0``).

The batching around these functions (length-sorted batches, input order, empty sources) is
:func:`nmt.inference.translator.decode`. Arguments are trusted: the search settings were
validated where they entered (:func:`nmt.config.validate_search`,
:func:`nmt.inference.translator.search_settings`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt.models.base import Seq2Seq


@dataclass
class Hypothesis:
    """One translation of one source sentence: ``tokens`` are output subword ids without BOS
    and EOS; ``score`` is the length-penalised log-probability (natural log, EOS included);
    ``alignment`` is float32 [len(tokens) + 1, S_real], row i the attention of output token i
    (the last row: EOS) over the real source positions (subwords + EOS, padding removed)."""

    tokens: list[int]
    score: float
    alignment: np.ndarray


def length_penalty_factor(length: Tensor | float, alpha: float) -> Tensor | float:
    """Wu et al. (2016) length penalty ``((5 + length) / 6) ** alpha``; length counts EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_output_lengths(src_mask: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence maximum number of output tokens before EOS: ``floor(a * |x| + b)``, [B]
    int64 >= 0, where ``src_mask`` is [B, S] bool, True at real positions (|x| = row sum)."""
    src_len = src_mask.sum(1).double()
    return torch.floor(max_len_a * src_len + max_len_b).clamp_min(0).long()


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module):
    """Evaluation mode (no dropout) inside, the model's previous mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class _History:
    """Backpointer record of a search, rebuilt into hypotheses once at the end.

    Level ``t`` holds the alive rows after ``t`` output tokens. For each level it stores
    the alignment row of the *next* token of every row (``align[t]`` [N_t, S]); for
    ``t >= 1`` also the token that created each row (``tokens[t]`` [N_t]) and its parent row
    in level ``t - 1`` (``parents[t]`` [N_t]). A finished hypothesis is named by
    ``(level t, row r)``: the prefix of row ``r`` followed by EOS.
    """

    def __init__(self) -> None:
        self.align: list[Tensor | None] = []
        self.tokens: list[Tensor | None] = [None]
        self.parents: list[Tensor | None] = [None]

    def add_alignment(self, align: Tensor | None) -> None:
        """Alignment [N_t, S] of the rows of the current level (None: model gave none)."""
        self.align.append(None if align is None else align.float())

    def add_level(self, tokens: Tensor, parents: Tensor) -> None:
        """Open the next level: rows made of ``parents`` [N] extended by ``tokens`` [N]."""
        self.tokens.append(tokens)
        self.parents.append(parents)

    def backtrack(self, levels: np.ndarray, rows: np.ndarray, src_len: int
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Rebuild M finished hypotheses from ``levels`` [M] (output tokens before EOS) and
        ``rows`` [M] (the row in that level): tokens [M, max_level] int64 (row h valid up to
        ``levels[h]``) and alignment [M, max_level + 1, src_len] float32."""
        m = len(levels)
        top = int(levels.max()) if m else 0
        tokens = np.zeros((m, top), dtype=np.int64)
        align = np.zeros((m, top + 1, src_len), dtype=np.float32)
        cur = rows.astype(np.int64).copy()
        for t in range(top, -1, -1):
            act = np.nonzero(levels >= t)[0]
            if len(act) == 0:
                continue
            r = cur[act]
            if self.align[t] is not None:
                align[act, t] = self.align[t].cpu().numpy()[r]
            if t >= 1:
                tokens[act, t - 1] = self.tokens[t].cpu().numpy()[r]
                cur[act] = self.parents[t].cpu().numpy()[r]
        return tokens, align


def _step_log_probs(model: Seq2Seq, last: Tensor, state) -> tuple[Tensor, Tensor | None, Any]:
    """One incremental decoder step: last tokens [N] -> log-probs [N, V], alignment [N, S]."""
    logits, align, state = model.decode(last.unsqueeze(1), None, state, need_alignment=True)
    logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
    logp[:, PAD_ID] = -torch.inf
    logp[:, BOS_ID] = -torch.inf
    return logp, (None if align is None else align[:, -1]), state


def _force_eos(logp: Tensor, forced: Tensor) -> None:
    """In place: rows ``forced`` [N] bool may only produce EOS (its log-prob is kept)."""
    if bool(forced.any()):
        eos = logp[:, EOS_ID].clone()
        logp.masked_fill_(forced.unsqueeze(1), -torch.inf)
        logp[:, EOS_ID] = eos


def _collect(history: _History, src_mask: Tensor, fin_sent: np.ndarray, fin_level: np.ndarray,
             fin_row: np.ndarray, fin_score: np.ndarray, n_best: int) -> list[list[Hypothesis]]:
    """Pick the ``n_best`` best finished hypotheses of every sentence and backtrack them."""
    batch = src_mask.size(0)
    order = np.lexsort((-fin_score, fin_sent))  # by sentence, then best score first
    fin_sent, fin_level, fin_row, fin_score = (a[order] for a in (fin_sent, fin_level, fin_row, fin_score))
    first = np.searchsorted(fin_sent, np.arange(batch))
    rank = np.arange(len(fin_sent)) - first[fin_sent]
    keep = rank < n_best
    fin_sent, fin_level, fin_row, fin_score = (a[keep] for a in (fin_sent, fin_level, fin_row, fin_score))
    tokens, align = history.backtrack(fin_level, fin_row, src_mask.size(1))
    real = src_mask.cpu().numpy()
    out: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for h in range(len(fin_sent)):
        b, n = int(fin_sent[h]), int(fin_level[h])
        out[b].append(Hypothesis(tokens=tokens[h, :n].tolist(), score=float(fin_score[h]),
                                 alignment=np.ascontiguousarray(align[h, : n + 1][:, real[b]])))
    return out


@torch.inference_mode()
def greedy_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float,
                  max_len_b: int, length_penalty: float = 1.0) -> list[list[Hypothesis]]:
    """Greedy decoding of a batch: at every step the most probable token.

    ``src`` [B, S] int64 holds source ids (subwords + EOS, PAD-padded), ``src_mask`` [B, S]
    bool is True at real positions (at least one per row). The model runs in eval mode for
    the call. ``length_penalty`` only scales the reported score. Returns per sentence a list
    with one :class:`Hypothesis`.
    """
    with _eval_mode(model):
        return _single_path_search(model, src, src_mask, max_len_a, max_len_b, length_penalty,
                                   _most_probable)


@torch.inference_mode()
def sample_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float,
                  max_len_b: int, *, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, generator: torch.Generator | None = None,
                  length_penalty: float = 0.0) -> list[list[Hypothesis]]:
    """Ancestral sampling of one translation per sentence (e.g. for back-translation).

    Each step draws the next token after three filters, in Hugging Face's order: divide the
    log-probabilities by ``temperature`` (0 = the most probable token, i.e. greedy search);
    keep the ``top_k`` most probable (0 = all); keep the nucleus, the smallest set of most
    probable tokens whose probability reaches ``top_p`` (Holtzman et al. 2020, eq. 2).

    The score is the sampled tokens' log-probability under the *unfiltered, temperature-1*
    model (the model log-likelihood, comparable with greedy and beam scores), divided by the
    length penalty with ``alpha = length_penalty``. ``generator`` lives on ``src.device``
    (None: a fresh one seeded with 0; the global RNG is never used); a row's draws depend on
    the whole batch. Tensors as :func:`greedy_search`.
    """
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(0)

    def draw(logp: Tensor) -> Tensor:
        probs = torch.softmax(filter_logits(logp / temperature, top_k, top_p), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    choose = _most_probable if temperature == 0 else draw
    with _eval_mode(model):
        return _single_path_search(model, src, src_mask, max_len_a, max_len_b, length_penalty,
                                   choose)


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Top-k, then nucleus (top-p) filtering of ``logits`` [N, V] (unnormalized
    log-probabilities; -inf = impossible): a new [N, V] tensor, filtered-out entries -inf.

    Top-k keeps exactly k per row (0 or >= V: all). Top-p keeps a token when the softmax
    mass (after top-k) of the tokens ranked above it is below ``top_p``: the smallest set
    reaching ``top_p``, never empty (Holtzman et al. 2020).
    """
    vocab = logits.size(-1)
    if 0 < top_k < vocab:
        top = logits.topk(top_k, dim=-1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top, True)
        logits = logits.masked_fill(~keep, -torch.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_above = probs.cumsum(dim=-1) - probs
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, order, mass_above >= top_p)
        logits = logits.masked_fill(drop, -torch.inf)
    return logits


def _most_probable(logp: Tensor) -> Tensor:
    """Greedy choice: [N, V] log-probs -> [N] int64 index of each row's maximum."""
    return logp.max(dim=-1).indices


def _single_path_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float,
                        max_len_b: int, length_penalty: float,
                        choose: Callable[[Tensor], Tensor]) -> list[list[Hypothesis]]:
    """One hypothesis per sentence, one token per step: ``choose(logp [N, V]) -> [N]`` picks
    each row's next token from the step's log-probs (PAD, BOS and forced EOS applied). The
    score adds ``logp`` of the chosen tokens. Shared by greedy and sampling search."""
    batch, device = src.size(0), src.device
    max_lens = max_output_lengths(src_mask, max_len_a, max_len_b)
    state = model.init_state(model.encode(src, src_mask))
    history = _History()
    active = torch.arange(batch, device=device)      # sentence id of each row
    last = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)
    fins: list[tuple[Tensor, ...]] = []
    t = 0
    while True:
        logp, align, state = _step_log_probs(model, last, state)
        history.add_alignment(align)
        _force_eos(logp, max_lens[active] <= t)
        token = choose(logp)
        scores = scores + logp.gather(1, token.unsqueeze(1)).squeeze(1)
        done = token == EOS_ID
        if bool(done.any()):
            rows = done.nonzero().squeeze(1)
            lp = length_penalty_factor(float(t + 1), length_penalty)
            fins.append((active[rows], torch.full_like(rows, t), rows, scores[rows] / lp))
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            state = state.reorder(keep)
            active, scores, token = active[keep], scores[keep], token[keep]
        else:
            keep = torch.arange(token.size(0), device=device)
        history.add_level(token, keep)
        last = token
        t += 1
    fin = [torch.cat(x).cpu().numpy() for x in zip(*fins, strict=True)]
    return _collect(history, src_mask, *fin, n_best=1)


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam_size: int,
                length_penalty: float, max_len_a: float, max_len_b: int,
                n_best: int = 1) -> list[list[Hypothesis]]:
    """Batched beam search (all beams of all sentences are rows of one tensor) with the
    length penalty ``((5 + |y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14; alpha 0 = none).

    Tensors as :func:`greedy_search`; ``1 <= n_best <= beam_size``. Returns per sentence its
    ``n_best`` hypotheses (fewer only if fewer ended), best first.
    """
    with _eval_mode(model):
        return _beam_search(model, src, src_mask, beam_size, length_penalty, max_len_a,
                            max_len_b, n_best)


def _beam_search(model, src, src_mask, k, alpha, max_len_a, max_len_b, n_best):
    batch, device = src.size(0), src.device
    max_lens = max_output_lengths(src_mask, max_len_a, max_len_b)
    # Largest length penalty a hypothesis of each sentence can still reach (alpha >= 0:
    # at maximum length; alpha < 0: at the next step) -- bounds the alive scores.
    state = model.init_state(model.encode(src, src_mask))
    history = _History()
    active = torch.arange(batch, device=device)          # sentence id of each active sentence
    last = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)             # [rows] raw log-prob sums
    n_fin = torch.zeros(batch, dtype=torch.long, device=device)
    best_fin = torch.full((batch,), -torch.inf, device=device)
    fins: list[tuple[Tensor, ...]] = []
    per = 1                                                # rows per active sentence
    t = 0
    while True:
        logp, align, state = _step_log_probs(model, last, state)
        history.add_alignment(align)
        n_act, vocab = active.size(0), logp.size(1)
        row_max = max_lens[active].repeat_interleave(per)
        _force_eos(logp, row_max <= t)
        cand = (scores.unsqueeze(1) + logp).view(n_act, per * vocab)
        top_scores, top_idx = cand.topk(min(2 * k, per * vocab), dim=1)   # [n_act, 2k]
        top_rows = torch.div(top_idx, vocab, rounding_mode="floor") + per * torch.arange(
            n_act, device=device).unsqueeze(1)                                # rows of level t
        top_tok = top_idx % vocab
        is_eos = top_tok == EOS_ID
        # EOS among the k best candidates ends a hypothesis (fairseq's rule).
        ended = is_eos & torch.isfinite(top_scores)
        ended[:, k:] = False
        if bool(ended.any()):
            b_idx, c_idx = ended.nonzero(as_tuple=True)
            sent = active[b_idx]
            final = top_scores[b_idx, c_idx] / length_penalty_factor(float(t + 1), alpha)
            fins.append((sent, torch.full_like(sent, t), top_rows[b_idx, c_idx], final))
            n_fin.index_add_(0, sent, torch.ones_like(sent))
            best_fin.scatter_reduce_(0, sent, final, reduce="amax")
        # The k best candidates that continue (at least k of the 2k are not EOS).
        go_on = ~is_eos
        go_on &= go_on.cumsum(1) <= k
        next_scores = top_scores[go_on].view(n_act, k)
        next_tok = top_tok[go_on].view(n_act, k)
        next_rows = top_rows[go_on].view(n_act, k)
        # Which sentences are finished?
        best_alive = next_scores[:, 0]
        if alpha >= 0:
            bound = best_alive / length_penalty_factor(max_lens[active].float() + 1, alpha)
        else:
            bound = best_alive / length_penalty_factor(float(t + 2), alpha)
        done = (n_fin[active] >= k) | (max_lens[active] <= t)
        if n_best == 1:  # with n_best > 1 the n-th best could still change: run on
            done |= best_fin[active] >= bound
        done |= ~torch.isfinite(best_alive)
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            active = active[keep]
            next_scores, next_tok, next_rows = next_scores[keep], next_tok[keep], next_rows[keep]
        parents = next_rows.reshape(-1)
        state = state.reorder(parents)
        scores, last = next_scores.reshape(-1), next_tok.reshape(-1)
        history.add_level(last, parents)
        per = k
        t += 1
    fin = [torch.cat(x).cpu().numpy() for x in zip(*fins, strict=True)]
    return _collect(history, src_mask, *fin, n_best=n_best)
