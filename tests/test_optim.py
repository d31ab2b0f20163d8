"""The optimizer's learning rate (nmt/training/optim.py): warmup + inverse square root values,
constant, plateau."""

import math

import pytest
import torch

from nmt.training.optim import LRSchedule, inverse_sqrt_factor


def _opt():
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=123.0)


@pytest.mark.parametrize(("step", "expected"), [(1, 0.25e-3), (2, 0.5e-3), (3, 0.75e-3), (4, 1e-3),
                                                (16, 0.5e-3), (64, 0.25e-3), (400, 1e-4)])
def test_inverse_sqrt_values(step, expected):
    opt = _opt()
    sched = LRSchedule(opt, "inverse_sqrt", lr=1e-3, warmup_steps=4)
    assert sched.set_step(step) == pytest.approx(expected)
    assert opt.param_groups[0]["lr"] == pytest.approx(expected)


def test_inverse_sqrt_is_vaswani_eq3_rescaled():
    d_model, warmup = 512, 4000
    def vaswani(s):
        return d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)
    for s in (1, 100, 3999, 4000, 4001, 10_000, 100_000):
        assert inverse_sqrt_factor(s, warmup) == pytest.approx(vaswani(s) / vaswani(warmup))
    assert inverse_sqrt_factor(9, 0) == pytest.approx(1 / 3)   # no warmup: lr / sqrt(step)


def test_constant_with_and_without_warmup():
    assert LRSchedule(_opt(), "constant", lr=0.5, warmup_steps=0).set_step(1) == 0.5
    sched = LRSchedule(_opt(), "constant", lr=0.5, warmup_steps=10)
    assert [sched.lr_at(s) for s in (1, 5, 10, 11, 1000)] == [0.05, 0.25, 0.5, 0.5, 0.5]


def test_plateau_reduces_after_patience_and_respects_min_lr():
    sched = LRSchedule(_opt(), "plateau", lr=1e-3, plateau_factor=0.5, plateau_patience=2,
                       min_lr=3e-4)
    # The argument is the trainer's count of validations without a BLEU gain, e.g. for
    # BLEU 10, 12, 11, 12 -> 0, 0, 1, 2.
    assert [sched.on_validation(n) for n in (0, 0, 1, 2)] == [False, False, False, True]
    assert sched.set_step(50) == pytest.approx(5e-4)
    assert sched.on_validation(3) is False              # the next reduction needs 2 more
    assert sched.on_validation(0) is False              # improvement resets the count
    sched.on_validation(1)
    assert sched.on_validation(2) is True
    assert sched.set_step(60) == pytest.approx(3e-4)    # 2.5e-4 clipped to min_lr
    assert sched.on_validation(4) is False              # at min_lr: no further reduction
    state = sched.state_dict()
    again = LRSchedule(_opt(), "plateau", lr=1e-3, plateau_factor=0.5, plateau_patience=2,
                       min_lr=3e-4)
    again.load_state_dict(state)
    assert again.lr_at(60) == sched.lr_at(60)
    assert math.isclose(again.scale, 0.25)
    assert LRSchedule(_opt(), "constant", lr=1.0).on_validation(10) is False


def test_cooldown_decays_linearly_to_zero_over_the_last_fraction_of_the_budget():
    from nmt.training.optim import cooldown_factor

    # c = 0.5 of a 10-step budget (progress p = s / 10): factor min(1, (1 - p) / 0.5)
    assert [cooldown_factor(s / 10, 0.5) for s in (0, 5, 6, 8, 10)] == pytest.approx(
        [1, 1, 0.8, 0.4, 0])
    assert cooldown_factor(1.3, 0.5) == 0.0 and cooldown_factor(0.99, 0.0) == 1.0
    # on top of inverse_sqrt (lr 1e-3, warmup 4): step 6 -> 1e-3 * sqrt(4/6) * 0.8
    sched = LRSchedule(_opt(), "inverse_sqrt", lr=1e-3, warmup_steps=4, cooldown=0.5)
    assert sched.set_step(4, 0.4) == pytest.approx(1e-3)
    assert sched.set_step(6, 0.6) == pytest.approx(1e-3 * math.sqrt(4 / 6) * 0.8)
    assert sched.set_step(10, 1.0) == 0.0
    # on top of constant (no warmup): 0.5 * (1 - 0.9) / 0.2
    assert LRSchedule(_opt(), "constant", lr=0.5, cooldown=0.2).lr_at(7, 0.9) == pytest.approx(0.25)
    # cooldown 0 leaves every schedule as it was, whatever the progress
    schedule = LRSchedule(_opt(), "inverse_sqrt", lr=1e-3, warmup_steps=4)
    assert schedule.lr_at(16, 0.99) == pytest.approx(0.5e-3)
