"""Subword sampling (``data.tokenizer.sampling_alpha``, ``nbest_size``), off by default.

A room of its own; its measurements are in docs/results.md. Every epoch the training split gets new
segmentations of the same texts, drawn by SentencePiece, unigram subword regularisation (Kudo 2018)
or BPE-dropout (Provilkov et al. 2020); validation and test keep the best segmentation. It enters
the trainer as the training hooks' ``resampler`` (:class:`~nmt.training.hooks.Resampler`, built by
:func:`nmt.extras.training.hooks`, which ``nmt-train`` and ``nmt.train()`` call). Rank 0 draws each
epoch's split, or reads it from the cache beside the split's file, and sends it to the other ranks:
all ranks cut the same batches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import sentencepiece as spm
from omegaconf import DictConfig

from nmt.data.pipeline import TokenizedSplit, cache_key
from nmt.data.tokenizer import Tokenizer
from nmt.runtime import atomic_path
from nmt.training.distributed import DistInfo, broadcast_object

log = logging.getLogger("nmt")

_SAMPLING_LOCK = threading.Lock()  # held by encode_sampled while it seeds and samples


def encode_sampled(tokenizer: Tokenizer, src_texts: Sequence[str], tgt_texts: Sequence[str],
                   alpha: float, nbest_size: int, seed: int | Sequence[int]
                   ) -> tuple[list[list[int]], list[list[int]]]:
    """``(src_ids, tgt_ids)`` (no BOS/EOS) of ``tokenizer``'s models with sampled
    segmentations (Kudo 2018, section 3): unigram draws x with probability proportional to
    ``P(x)^alpha`` over all segmentations (``nbest_size=-1``) or the ``nbest_size`` best; BPE
    drops each merge with probability ``alpha`` (BPE-dropout, Provilkov et al. 2020).

    SentencePiece's generator is seeded process-wide, lives per thread, and its threaded
    encoder orders work freely; so each call seeds (``seed`` mixed by ``SeedSequence``,
    one seed per side) and encodes single-threaded in a new thread, one call at a time.
    The same seed then gives the same ids within a process, not across processes.
    """
    src, tgt = tokenizer.processors()
    entropy = [int(x) for x in np.atleast_1d(seed)]
    seeds = [int(np.random.SeedSequence([*entropy, side]).generate_state(1)[0]) & 0x7FFFFFFF
             for side in (0, 1)]   # 0xFFFFFFFF would mean "unseeded" to SentencePiece
    kwargs = dict(out_type=int, num_threads=1, enable_sampling=True, alpha=float(alpha),
                  nbest_size=int(nbest_size))
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            spm.set_random_generator_seed(seeds[0])
            out["src"] = src.encode(list(src_texts), **kwargs)
            spm.set_random_generator_seed(seeds[1])
            out["tgt"] = tgt.encode(list(tgt_texts), **kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            out["error"] = err

    with _SAMPLING_LOCK:
        thread = threading.Thread(target=work, name="nmt-subword-sampling")
        thread.start()
        thread.join()
    if "error" in out:
        raise out["error"]
    return out["src"], out["tgt"]


def sample_split(split: TokenizedSplit, tokenizer: Tokenizer, alpha: float, nbest_size: int,
                 seed: int | Sequence[int], cache: bool = True) -> TokenizedSplit:
    """The training split with segmentations drawn by :func:`encode_sampled` under ``seed``,
    e.g. ``(train.seed, epoch)``. A pair with a sampled side longer than that side's longest
    in ``split`` keeps its segmentation (no batch outgrows the ``train.batch_tokens`` check,
    no side the longest static shape of ``train.shape_buckets``, which is per side).
    SentencePiece's draws repeat within one process only, so with ``cache`` the draw is
    cached beside ``split``'s file, keyed by the settings and ``seed``, for resumed runs;
    without (or for a split held in memory) the draw is held in memory."""
    path = None
    if cache and split.path is not None:
        key = cache_key(split.path.name, float(alpha), int(nbest_size),
                        [int(x) for x in np.atleast_1d(seed)])
        path = split.path.with_name(f"{split.path.stem}.sampled-{key}.arrow")
        if path.is_file():
            return TokenizedSplit(path)
    src_texts, tgt_texts = split.src_texts(), split.tgt_texts()
    src_ids, tgt_ids = encode_sampled(tokenizer, src_texts, tgt_texts, alpha, nbest_size, seed)
    src_limit, tgt_limit = (int(lens.max(initial=1)) - 1
                            for lens in (split.src_lens, split.tgt_lens))
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if len(s) > src_limit or len(t) > tgt_limit:
            src_ids[i], tgt_ids[i] = split.src_ids(i), split.tgt_ids(i)
    drawn = TokenizedSplit.from_ids(src_ids, tgt_ids, src_texts, tgt_texts)
    if path is None:
        return drawn
    with atomic_path(path) as tmp:
        tmp.write_bytes(drawn.ipc_bytes())
    return TokenizedSplit(path)


class SubwordSampling:
    """The trainer's resampler (:class:`~nmt.training.hooks.Resampler`) for the
    ``data.tokenizer`` section ``tok`` and ``train.seed``: epoch e's split is
    :func:`sample_split` under the seed ``(train.seed, e)``, drawn (or found in the cache) by
    rank 0 and sent to the others: all ranks must cut the same batches."""

    def __init__(self, tok: DictConfig, seed: int) -> None:
        self.alpha, self.nbest_size = float(tok.sampling_alpha), int(tok.nbest_size)
        self.seed = int(seed)

    def __call__(self, split: TokenizedSplit, tokenizer: Tokenizer, epoch: int,
                 info: DistInfo) -> TokenizedSplit:
        t0 = time.perf_counter()
        if info.is_main:
            split = sample_split(split, tokenizer, self.alpha, self.nbest_size,
                                 seed=(self.seed, epoch))
        if info.enabled:
            data = broadcast_object(split.ipc_bytes() if info.is_main else None, info)
            if not info.is_main:
                split = TokenizedSplit.from_bytes(data)
        log.info("epoch %d: sampled segmentation of the %d training pairs (%.1f s): %.1f source, "
                 "%.1f target tokens per pair", epoch, len(split), time.perf_counter() - t0,
                 split.src_lens.mean() - 1, split.tgt_lens.mean() - 1)
        return split


def resampler(cfg: DictConfig) -> SubwordSampling | None:
    """The trainer's resampler for ``cfg`` (None: ``data.tokenizer.sampling_alpha`` is off)."""
    tok = cfg.data.tokenizer
    return SubwordSampling(tok, cfg.train.seed) if tok.sampling_alpha else None
