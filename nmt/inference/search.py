"""Greedy, beam and sampling search over batches of sentences, for any :class:`Seq2Seq`.

The search talks to a model only through ``encode`` / ``init_state`` / ``decode`` /
``state.reorder`` (:mod:`nmt.models.base`), so one implementation serves the RNN, the
Transformer and an ensemble of them (:class:`nmt.extras.decoding.ensemble.Ensemble`). Design
(fairseq-style, see Ott et al. 2019):

* All beams of all sentences of a batch are rows of one tensor: row ``b * k + j`` is beam
  ``j`` of active sentence ``b``. Each step is one ``decode`` call on the newest tokens
  (cached incremental decoding), one ``log_softmax`` and one ``topk`` over ``k * V``
  candidates per sentence.
* Hypotheses are not copied from step to step: each step keeps its rows' alignments, tokens
  and parent rows, and the returned hypotheses are rebuilt from these backpointers once.
* Finished sentences leave the active batch: one ``state.reorder(index)`` per step both
  selects the surviving beams and drops finished sentences, so tensors shrink as the batch
  is translated.

Conventions:

* Scores are sums of natural-log token probabilities including EOS, divided by the length
  penalty ``lp(y) = ((5 + |y|) / 6) ** alpha`` of Wu et al. (2016, eq. 14), where ``|y|``
  counts the output tokens including EOS; ``alpha = length_penalty`` (0 = raw log-prob).
* Output length: at most ``floor(max_len_a * |x| + max_len_b)`` tokens before EOS, where
  ``|x|`` counts the real source positions (subwords + EOS, i.e. ``src_mask.sum(1)``).
  When a hypothesis reaches it, EOS is forced and its log-probability added, as in fairseq
  (transformers' ``forced_eos_token_id`` adds 0), so every sentence gets an output.
* PAD and BOS are never generated.
* Beam search ends a sentence when ``beam_size`` hypotheses have ended (an EOS among the
  ``beam_size`` best candidates of a step, as in fairseq), at the maximum length, or (with
  ``n_best == 1``) when no alive hypothesis can still beat the best ended one.

Sampling (:mod:`nmt.inference.sampling`, skip on a first reading) walks one path per sentence
as greedy search does; the batching around these functions is
:func:`nmt.inference.translator.decode`. Arguments are trusted: the search settings were
validated where they entered (:func:`nmt.config.validate_search`: ``alpha >= 0``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt.models.base import Seq2Seq, eval_mode


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


def _collect(src_mask: Tensor, aligns: list[Tensor | None], links: list[tuple[Tensor, Tensor]],
             fins: list[tuple[Tensor, ...]], n_best: int) -> list[list[Hypothesis]]:
    """The ``n_best`` best finished hypotheses of every sentence, best first, rebuilt once from
    backpointers. The rows of step t chose their token with alignment ``aligns[t]`` [N_t, S]
    (None: zeros); ``links[t]`` = (token, parent row at step t) of each row of step t + 1.
    ``fins`` holds per step (sentence [M], score [M], step t [M], row [M]): that row's tokens,
    then EOS."""
    sent, score, step, row = (torch.cat(x).cpu().numpy() for x in zip(*fins, strict=True))
    order = np.lexsort((-score, sent))  # by sentence, then best score first
    first = np.searchsorted(sent[order], np.arange(src_mask.size(0)))
    keep = order[np.arange(len(order)) - first[sent[order]] < n_best]
    sent, score, step, cur = sent[keep], score[keep], step[keep], row[keep]
    top = int(step.max())
    tokens = np.zeros((len(keep), top), np.int64)
    align = np.zeros((len(keep), top + 1, src_mask.size(1)), np.float32)
    for t in range(top, -1, -1):  # walk every hypothesis back from its last step
        act = np.nonzero(step >= t)[0]
        if aligns[t] is not None:
            align[act, t] = aligns[t].float().cpu().numpy()[cur[act]]
        if t > 0:
            token, parent = (x.cpu().numpy() for x in links[t - 1])
            tokens[act, t - 1], cur[act] = token[cur[act]], parent[cur[act]]
    real = src_mask.cpu().numpy()
    out: list[list[Hypothesis]] = [[] for _ in range(src_mask.size(0))]
    for h, (b, n) in enumerate(zip(sent, step, strict=True)):
        out[b].append(Hypothesis(tokens=tokens[h, :n].tolist(), score=float(score[h]),
                                 alignment=np.ascontiguousarray(align[h, :n + 1][:, real[b]])))
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
    with eval_mode(model):
        return _single_path_search(model, src, src_mask, max_len_a, max_len_b, length_penalty,
                                   _most_probable)


def _most_probable(logp: Tensor) -> Tensor:
    """Greedy choice: [N, V] log-probs -> [N] int64 index of each row's maximum."""
    return logp.max(dim=-1).indices


def _single_path_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, max_len_a: float,
                        max_len_b: int, length_penalty: float,
                        choose: Callable[[Tensor], Tensor]) -> list[list[Hypothesis]]:
    """One hypothesis per sentence, one token per step: ``choose(logp [N, V]) -> [N]`` picks
    each row's next token from the step's log-probs (PAD, BOS and forced EOS applied). The
    score adds ``logp`` of the chosen tokens. Shared by greedy search and sampling
    (:func:`nmt.inference.sampling.sample_search`)."""
    batch, device = src.size(0), src.device
    max_lens = max_output_lengths(src_mask, max_len_a, max_len_b)   # [B]
    state = model.init_state(model.encode(src, src_mask))
    active = torch.arange(batch, device=device)      # sentence id of each row
    last = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)
    fins: list[tuple[Tensor, ...]] = []
    aligns, links = [], []                           # backpointers (_collect)
    t = 0
    while True:
        logp, align, state = _step_log_probs(model, last, state)
        aligns.append(align)
        _force_eos(logp, max_lens[active] <= t)
        token = choose(logp)
        scores = scores + logp.gather(1, token.unsqueeze(1)).squeeze(1)
        done = token == EOS_ID
        if bool(done.any()):
            rows = done.nonzero().squeeze(1)
            lp = length_penalty_factor(float(t + 1), length_penalty)
            fins.append((active[rows], scores[rows] / lp, torch.full_like(rows, t), rows))
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            state = state.reorder(keep)
            active, scores, token = active[keep], scores[keep], token[keep]
        else:
            keep = torch.arange(token.size(0), device=device)
        links.append((token, keep))
        last = token
        t += 1
    return _collect(src_mask, aligns, links, fins, n_best=1)


@torch.inference_mode()
def beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, beam_size: int,
                length_penalty: float, max_len_a: float, max_len_b: int,
                n_best: int = 1) -> list[list[Hypothesis]]:
    """Batched beam search (all beams of all sentences are rows of one tensor) with the
    length penalty ``((5 + |y|) / 6) ** alpha`` (Wu et al. 2016, eq. 14; alpha 0 = none).

    Tensors as :func:`greedy_search`; ``1 <= n_best <= beam_size``.
    Returns per sentence its ``n_best`` hypotheses (fewer only if fewer ended), best first.
    """
    with eval_mode(model):
        return _beam_search(model, src, src_mask, beam_size, length_penalty, max_len_a,
                            max_len_b, n_best)


def _beam_search(model: Seq2Seq, src: Tensor, src_mask: Tensor, k: int, alpha: float,
                 max_len_a: float, max_len_b: int, n_best: int) -> list[list[Hypothesis]]:
    """:func:`beam_search` (beam size ``k``, length penalty ``alpha``). Each step, with N =
    n_act * per rows (``per`` = 1 at step 0, then k: row ``b * per + j`` is beam j of active
    sentence b):

    1. log-probs [N, V] of the rows' next tokens, added to the rows' scores, viewed as
       [n_act, per * V] candidates per sentence;
    2. the 2k best candidates per sentence; an EOS among the k best ends a hypothesis
       (recorded in ``fins`` with its length-penalised score);
    3. the k best non-EOS candidates continue: their parent rows reorder the decoder state;
    4. a sentence is done when k hypotheses ended, at its maximum length, or (n_best 1) when
       its best alive score can no longer beat its best ended one (the bound below).
    """
    batch, device = src.size(0), src.device
    max_lens = max_output_lengths(src_mask, max_len_a, max_len_b)   # [B]
    state = model.init_state(model.encode(src, src_mask))
    active = torch.arange(batch, device=device)          # sentence id of each active sentence
    last = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)             # [rows] raw log-prob sums
    n_fin = torch.zeros(batch, dtype=torch.long, device=device)
    best_fin = torch.full((batch,), -torch.inf, device=device)
    fins: list[tuple[Tensor, ...]] = []
    aligns, links = [], []                                 # backpointers (_collect)
    per = 1                                                # rows per active sentence
    t = 0
    while True:
        logp, align, state = _step_log_probs(model, last, state)
        aligns.append(align)
        n_act, vocab = active.size(0), logp.size(1)
        row_max = max_lens[active].repeat_interleave(per)
        _force_eos(logp, row_max <= t)
        cand = logp.add_(scores.unsqueeze(1)).view(n_act, per * vocab)   # in place: no 2nd [N, V]
        top_scores, top_idx = cand.topk(min(2 * k, per * vocab), dim=1)   # [n_act, 2k]
        top_rows = torch.div(top_idx, vocab, rounding_mode="floor") + per * torch.arange(
            n_act, device=device).unsqueeze(1)                                # current rows
        top_tok = top_idx % vocab
        is_eos = top_tok == EOS_ID
        # EOS among the k best candidates ends a hypothesis (fairseq's rule).
        ended = is_eos & torch.isfinite(top_scores)
        ended[:, k:] = False
        if bool(ended.any()):
            b_idx, c_idx = ended.nonzero(as_tuple=True)
            sent = active[b_idx]
            final = top_scores[b_idx, c_idx] / length_penalty_factor(float(t + 1), alpha)
            fins.append((sent, final, torch.full_like(sent, t), top_rows[b_idx, c_idx]))
            n_fin.index_add_(0, sent, torch.ones_like(sent))
            best_fin.scatter_reduce_(0, sent, final, reduce="amax")
        # The k best candidates that continue (at least k of the 2k are not EOS).
        go_on = ~is_eos
        go_on &= go_on.cumsum(1) <= k
        next_scores = top_scores[go_on].view(n_act, k)
        next_tok = top_tok[go_on].view(n_act, k)
        next_rows = top_rows[go_on].view(n_act, k)
        # Which sentences are finished? An alive hypothesis' log-prob only falls, so its final
        # score is at most best_alive over the largest length penalty it can still reach: the
        # one at the maximum length (alpha >= 0).
        best_alive = next_scores[:, 0]                                        # [n_act]
        bound = best_alive / length_penalty_factor(max_lens[active].float() + 1, alpha)
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
        links.append((last, parents))
        per = k
        t += 1
    return _collect(src_mask, aligns, links, fins, n_best=n_best)

