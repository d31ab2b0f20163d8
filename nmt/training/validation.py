"""Validation during training: label-smoothed loss and perplexity per target token over every
direction's validation split, greedy BLEU (sacreBLEU) per direction, and their mean ``bleu``,
which selects ``best.pt`` and drives early stopping. A target-side language tag is forced as
the first output token (the search cuts it from the hypotheses; the references are untagged).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from nmt.data.batching import collate
from nmt.data.pipeline import TokenizedSplit
from nmt.data.sampler import TokenBatchSampler
from nmt.data.vocab import PAD_ID
from nmt.inference.translator import decode
from nmt.models.base import eval_mode
from nmt.training.loss import label_smoothed_nll, perplexity


@dataclass
class ValidSet:
    """One direction's validation split with its source ids (tagged, no EOS), references,
    batches (never filtered: an over-long pair gets a batch of its own) and target-side tag
    (None: none)."""

    name: str                       # "de-en"
    split: TokenizedSplit
    src_ids: list[list[int]]
    refs: list[str]
    batches: list[np.ndarray]
    first_token: int | None


def valid_sets(splits: dict[str, TokenizedSplit], tags: list | None, batch_tokens: int
               ) -> list[ValidSet]:
    """The :class:`ValidSet` of each direction (``tags``: :func:`nmt.data.pipeline.tag_ids`)."""
    out = []
    tags = tags or [(None, None)] * len(splits)
    for (name, split), tag in zip(splits.items(), tags, strict=True):
        lens = (split.src_lens, split.tgt_lens)
        tokens = max(batch_tokens, int(max(lens[0].max(initial=1), lens[1].max(initial=1))))
        out.append(ValidSet(name, split, [split.src_ids(i) for i in range(len(split))],
                            split.tgt_texts(), TokenBatchSampler(*lens, tokens, shuffle=False)
                            .batches(0), tag[1]))
    return out


@torch.no_grad()
def validate(model: torch.nn.Module, sets: list[ValidSet], tokenizer, search: dict,
             label_smoothing: float, device: torch.device, autocast: Callable
             ) -> tuple[dict, list]:
    """``({"loss", "nll", "ppl", "bleu"[, "bleu_directions": {name: BLEU}]}, hypotheses of
    the first direction)`` of ``model`` in eval mode: loss and nll per target token over all
    directions, ``bleu`` the mean of the directions' greedy BLEU (``search``: the search
    settings, searched in fp32 as nmt-evaluate does, so that the figures agree); with one
    direction no ``bleu_directions``; the model's mode is restored after."""
    sums, tokens, bleus, first_hyps = torch.zeros(2, device=device), 0, {}, None
    with eval_mode(model):
        for vs in sets:
            with autocast():
                for idx in vs.batches:
                    batch = collate(vs.split, idx).to(device)
                    logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_alignment=False)
                    sums += torch.stack(label_smoothed_nll(logits, batch.tgt_out, label_smoothing,
                                                           PAD_ID))
                    tokens += batch.n_tgt_tokens
            hyps = decode(model, vs.src_ids, {**search, "first_token": vs.first_token},
                          device=device)
            texts = [tokenizer.decode_tgt(h[0].tokens) if h else "" for h in hyps]
            bleus[vs.name] = float(BLEU().corpus_score(texts, [vs.refs]).score) if texts else 0.0
            first_hyps = first_hyps if first_hyps is not None else hyps
    loss, nll = (sums / max(tokens, 1)).tolist()
    result = {"loss": loss, "nll": nll, "ppl": perplexity(nll),
              "bleu": float(np.mean(list(bleus.values())))}
    return (result if len(bleus) == 1 else {**result, "bleu_directions": bleus}), first_hyps
