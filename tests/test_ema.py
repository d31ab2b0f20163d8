"""Weight average (train.ema_decay): exact values by hand, buffers, state round trip."""

from __future__ import annotations

import pytest
import torch

from nmt.training.ema import WeightAverage


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.0, 10.0]))
        self.register_buffer("table", torch.tensor([1.0]))


def test_average_follows_the_warmed_up_decay_by_hand():
    model = Tiny()
    ema = WeightAverage(model, decay=0.5)
    # d_t = min(0.5, (1 + t) / (10 + t)): t=1: 2/11; t=2: 3/12 = 0.25; t=20: 0.5 (21/30 > 0.5).
    assert [ema.decay_at(t) for t in (1, 2, 20)] == pytest.approx([2 / 11, 0.25, 0.5])
    with torch.no_grad():
        model.w.copy_(torch.tensor([11.0, 21.0]))
        model.table.fill_(7.0)
    ema.update(1)          # ema = 2/11 * [0, 10] + 9/11 * [11, 21] = [9, 19]
    torch.testing.assert_close(ema.model.w, torch.tensor([9.0, 19.0]))
    assert ema.model.table.item() == 7.0                      # buffers are copied
    with torch.no_grad():
        model.w.copy_(torch.tensor([13.0, 23.0]))
    ema.update(2)          # ema = 0.25 * [9, 19] + 0.75 * [13, 23] = [12, 22]
    torch.testing.assert_close(ema.model.w, torch.tensor([12.0, 22.0]))
    ema.update(20)         # ema = 0.5 * [12, 22] + 0.5 * [13, 23]
    torch.testing.assert_close(ema.model.w, torch.tensor([12.5, 22.5]))
    assert not ema.model.training and not ema.model.w.requires_grad
    torch.testing.assert_close(model.w, torch.tensor([13.0, 23.0]))   # the model is untouched


def test_state_round_trip():
    model = Tiny()
    ema = WeightAverage(model, decay=0.9)
    with torch.no_grad():
        model.w.add_(1.0)
    ema.update(5)
    other = WeightAverage(Tiny(), decay=0.9)
    other.load_state_dict(ema.state_dict())
    assert set(ema.state_dict()) == {"w", "table"}
    torch.testing.assert_close(other.model.w, ema.model.w)
