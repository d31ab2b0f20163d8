"""Cached incremental decoding for the Transformer: search's new positions, one call each.

Each decoder layer keeps the self-attention keys and values of the positions decoded so far
and the cross-attention keys and values of the encoder memory (projected once, by
``Transformer.init_state``), so a step attends with them instead of recomputing the prefix:
step t costs O(t). The equations are :class:`~nmt.models.transformer.DecoderLayer`'s (tested:
cached = full decoding); a sentence's beams share one cross-attention call (the fold), and
beam search's reorder is fused into the next append. Skip it on a first reading.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.models.base import DecoderState, regroup_rows, reorder_tensors


def layer_step(layer: nn.Module, x: Tensor, cross_kv: tuple[Tensor, Tensor], src_mask: Tensor,
               self_kv: tuple[Tensor, Tensor] | None, order: Tensor | None, need_weights: bool,
               need_self_weights: bool, group: int
               ) -> tuple[Tensor, Tensor | None, Tensor | None, tuple[Tensor, Tensor]]:
    """:meth:`DecoderLayer.forward <nmt.models.transformer.DecoderLayer.forward>` of decoder
    ``layer`` for T new positions from :class:`TransformerState`'s caches: ``self_kv``
    2 x [B0,h,t0,d_head] or None, of which rows ``order`` [B] (None: all); ``cross_kv`` 2 x
    [B/g,h,S,d_head] and ``src_mask`` serve g = ``group`` rows each (a sentence's beams,
    folded into one call). Adds the t0+T keys/values."""
    q, k, v = layer.self_attn.project_qkv(layer.res1.inp(x))        # [B,h,T,dh] each
    if self_kv is not None:                                      # -> [B,h,t0+T,dh]
        k, v = append_kv(self_kv[0], k, order), append_kv(self_kv[1], v, order)
    y, self_weights = layer.self_attn.attend(q, k, v, causal=True,
                                             need_weights=need_self_weights)
    x = layer.res1.out(x, y)
    q = layer.cross_attn.project_q(layer.res2.inp(x))               # [B,h,T,dh]
    b, h, t, dh = q.shape
    if group > 1:   # a sentence's g beams as g*T queries of one row: [B/g,h,g*T,dh]
        q = q.view(b // group, group, h, t, dh).transpose(1, 2)
        q = q.reshape(b // group, h, group * t, dh)
    y, weights = layer.cross_attn.attend(q, cross_kv[0], cross_kv[1], src_mask,
                                        need_weights=need_weights)  # [B/g,g*T,d], [B/g,h,g*T,S]
    if group > 1:   # unfold: [B,T,d] and [B,h,T,S]
        y = y.reshape(b, t, -1)
        if weights is not None:
            weights = weights.view(b // group, h, group, t, -1).transpose(1, 2)
            weights = weights.reshape(b, h, t, -1)
    x = layer.res2.out(x, y)
    return layer.res3(x, layer.ff), weights, self_weights, (k, v)


def append_kv(past: Tensor, new: Tensor, order: Tensor | None) -> Tensor:
    """Cached keys or values ``past`` [B0,h,t0,d] (its rows ``order`` [B]; None: all) followed
    by ``new`` [B,h,T,d] -> [B,h,t0+T,d]: one copy, beam search's reorder fused into the
    append."""
    if order is None:
        return torch.cat([past, new], dim=2)
    out = new.new_empty(new.size(0), new.size(1), past.size(2) + new.size(2), new.size(3))
    torch.index_select(past, 0, order, out=out[:, :, :past.size(2)])
    out[:, :, past.size(2):] = new
    return out


class TransformerState(DecoderState):
    """Per decoder layer: encoder keys/values ``cross_kv`` 2 x [n_src,h,S,d_head] (with
    ``src_attn_mask`` [n_src,1,1,S]) and self-attention keys/values ``self_kv`` 2 x
    [B0,h,steps,d_head] (None before the first call), of which the rows ``order`` [B] (None: all)
    are the state's: a reorder only records them, the next step copies. Beams share their
    sentence's encoder side: ``rows`` and ``group`` as returned by
    :func:`~nmt.models.base.regroup_rows`."""

    def __init__(self, cross_kv, src_attn_mask, self_kv, steps: int, rows: Tensor | None = None,
                 group: int | None = 1, order: Tensor | None = None):
        self.cross_kv, self.src_attn_mask = cross_kv, src_attn_mask
        self.self_kv, self.steps, self.group, self.order = self_kv, steps, group, order
        self.rows = rows if rows is not None else \
            torch.arange(src_attn_mask.size(0), device=src_attn_mask.device)

    def reorder(self, index: Tensor) -> TransformerState:
        """Rows ``index`` [B'] of the self-attention cache; the encoder side stays shared."""
        used, rows, group = regroup_rows(self.rows, index, self.src_attn_mask.size(0))
        cross_kv, mask = self.cross_kv, self.src_attn_mask
        if used is not None:  # some sentences left: drop their encoder side
            cross_kv, mask = reorder_tensors(cross_kv, used), mask.index_select(0, used)
        order = None if self.self_kv is None else (
            index if self.order is None else self.order.index_select(0, index))
        return TransformerState(cross_kv, mask, self.self_kv, self.steps, rows, group, order)

    def encoder_side(self) -> tuple[list, Tensor, int]:
        """``(cross_kv, src_attn_mask, g)`` as the decoder rows read them: shared by g beams each,
        or, rows in no beam layout, gathered per row (g = 1)."""
        if self.group is None:
            return (reorder_tensors(self.cross_kv, self.rows),
                    self.src_attn_mask.index_select(0, self.rows), 1)
        return self.cross_kv, self.src_attn_mask, self.group

    def advanced(self, self_kv: list, new_steps: int) -> TransformerState:
        """The state after a decode call that appended ``new_steps`` positions: its caches
        ``self_kv``, all rows in order."""
        return TransformerState(self.cross_kv, self.src_attn_mask, self_kv,
                                self.steps + new_steps, self.rows, self.group)
