"""The model FLOPs of a training step, per model, for MFU (:mod:`nmt.training.throughput`,
``scripts/bench_model.py``): the 6N rule (Kaplan et al. 2020, section 2.1) needs N per source
and per target token, and the attention scores are counted apart (PaLM, Chowdhery et al.
2022, appendix B). Kept out of the models' files: nothing here changes what a model computes.
"""

from __future__ import annotations

import numpy as np
import torch

from nmt.models.rnn import BahdanauRNN
from nmt.models.transformer import Transformer


def _params(*modules: torch.nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def flop_params(model: torch.nn.Module) -> tuple[int, int]:
    """(N_src, N_tgt): the parameters applied per source and per target token, the output
    projection counted even when tied, lookups not; projections of the encoder memory (the
    Transformer's cross-attention K, V; the RNN's U_a h_j) per source token, the RNN's W_s
    (once per sentence) as the decoder's. A training step then costs about
    ``6 * (N_src * src_tokens + N_tgt * tgt_tokens)`` FLOPs (Kaplan et al. 2020) plus
    :func:`attention_flops`. Another model: every parameter per target token."""
    if isinstance(model, Transformer):
        kv = sum(_params(layer.cross_attn.kv_proj) for layer in model.decoder)
        enc, dec = _params(model.encoder, model.encoder_norm), _params(model.decoder,
                                                                       model.decoder_norm)
        return enc + kv, dec - kv + model.tgt_vocab_size * model.d_model
    total = _params(model)
    if isinstance(model, BahdanauRNN):
        embeds = dict.fromkeys((model.src_embed.weight, model.tgt_embed.weight))  # tied: once
        enc = _params(model.encoder, model.attention.key_proj)
        return enc, total - sum(p.numel() for p in embeds) - enc
    return 0, total


def attention_flops(model: torch.nn.Module, src_lens: np.ndarray, tgt_lens: np.ndarray
                    ) -> float:
    """FLOPs of the attention scores and weighted sums, forward and backward (x3), of a step
    over pairs of ``src_lens``, ``tgt_lens`` [N] real tokens (PaLM, Chowdhery et al. 2022,
    app. B): the Transformer's QK^T and AV, 2 matmuls x 2 FLOPs x d_model per query-key pair
    and layer; the RNN's v_a^T tanh(.) and alpha_ij h_j, 2 FLOPs per dimension per (i, j).
    Another model: 0."""
    s, t = np.asarray(src_lens, np.float64), np.asarray(tgt_lens, np.float64)
    if isinstance(model, Transformer):
        pairs = len(model.encoder) * (s * s).sum() + len(model.decoder) * (t * t + t * s).sum()
        return 12.0 * model.d_model * float(pairs)
    if isinstance(model, BahdanauRNN):
        key_proj = model.attention.key_proj
        return 6.0 * (key_proj.out_features + key_proj.in_features) * float((t * s).sum())
    return 0.0
