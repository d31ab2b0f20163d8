"""The full-context alignment pass of ``model.alignment_full_context`` (Garg et al. 2019,
"Jointly Learning to Align and Translate with Transformer Models", section 4; fairseq's
``full_context_alignment``), off by default: teacher forcing's alignment comes from an extra
pass whose decoder self-attention sees the whole target, not only its prefix. Skip it on a
first reading: :meth:`nmt.models.transformer.Transformer.decode` calls it where it is on.
"""

from __future__ import annotations

from torch import Tensor, nn

from nmt.models.base import Encoded


def full_context_pass(model: nn.Module, tgt_in: Tensor, enc: Encoded) -> Tensor:
    """The alignment [B,T,S] of an extra pass of the Transformer ``model`` over the whole
    target ``tgt_in`` [B,T] through decoder layers 0..``alignment_layer``, their
    self-attention unmasked (but padding), so row t also sees the target tokens from t on.
    Guided training supervises it and forced alignment reads it; search, which has no future,
    does not."""
    x = model.embed(model.tgt_embed, tgt_in, 0)
    tgt_mask = (tgt_in != model.pad_id)[:, None, None, :]
    for layer in model.decoder[: model.alignment_layer + 1]:
        x, weights, _ = layer(x, enc.memory, enc.mask[:, None, None, :], True, tgt_mask=tgt_mask)
    return weights[:, : model.alignment_heads].mean(dim=1)
