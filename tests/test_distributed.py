"""DDP plumbing in one process: batch sharding and the user-error fan-out (the torchrun runs
are in tests/e2e/test_distributed.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmt.config import ConfigError
from nmt.training.distributed import (
    DistInfo,
    all_reduce_sum,
    broadcast_object,
    collective_errors,
    gather_objects,
    local_share,
    truncate_to_multiple,
)


def test_sharding_gives_each_rank_its_stride():
    batches = [np.array([i]) for i in range(7)]
    kept = truncate_to_multiple(batches, 2)
    assert len(kept) == 6
    group = kept[2:6]                                         # one step: world 2 x accum 2
    assert [int(b[0]) for b in local_share(group, DistInfo(0, 2))] == [2, 4]
    assert [int(b[0]) for b in local_share(group, DistInfo(1, 2))] == [3, 5]


def test_one_process_needs_no_collective_and_raises_its_own_error():
    info = DistInfo()
    assert not info.enabled and info.is_main
    assert broadcast_object({"a": 1}, info) == {"a": 1} and gather_objects(3, info) == [3]
    with pytest.raises(ConfigError, match="key"):
        with collective_errors(info, (ConfigError,)):
            raise ConfigError("key=1 is bad")
    with pytest.raises(KeyError):                      # not a user error: propagates as it is
        with collective_errors(info, (ConfigError,)):
            raise KeyError("bug")
    t = torch.ones(2)
    all_reduce_sum(t, info)
    assert t.tolist() == [1.0, 1.0]
