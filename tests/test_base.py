"""nmt.models.base: the beam bookkeeping behind ``state.reorder``, nested row selection and
``eval_mode``."""

import pytest
import torch

from nmt.models.base import eval_mode, regroup_rows, reorder_tensors


def test_regroup_rows_keeps_the_beam_layout_and_drops_finished_sentences():
    rows = torch.arange(2).repeat_interleave(3)              # 2 sentences x 3 beams
    used, new, group = regroup_rows(rows, torch.tensor([2, 0, 0, 5, 3, 4]), 2)   # within sentences
    assert used is None and new.tolist() == [0, 0, 0, 1, 1, 1] and group == 3
    used, new, group = regroup_rows(rows, torch.tensor([3, 4, 5, 5]), 2)     # sentence 0 finished
    assert used.tolist() == [1] and new.tolist() == [0, 0, 0, 0] and group == 4
    used, new, group = regroup_rows(rows, torch.tensor([0, 3, 4]), 2)        # no beam layout
    assert used is None and new.tolist() == [0, 1, 1] and group is None


def test_reorder_tensors_selects_rows_of_nested_tensors():
    a, b = torch.arange(3), torch.arange(6).view(3, 2)
    out = reorder_tensors([(a, b), None], torch.tensor([2, 2]))
    assert out[0][0].tolist() == [2, 2] and out[0][1].tolist() == [[4, 5], [4, 5]]
    assert out[1] is None and reorder_tensors(None, torch.tensor([0])) is None


def test_eval_mode_restores_the_mode_also_when_the_block_raises():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    for training in (True, False):
        model.train(training)
        with pytest.raises(RuntimeError, match="inside"), eval_mode(model):
            assert not model.training and not model[0].training
            raise RuntimeError("inside")
        assert model.training is training and model[0].training is training
