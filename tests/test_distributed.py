"""DDP plumbing in one process: the epoch cut to whole steps and the user-error fan-out (the
torchrun runs, where each rank trains on its stride of a step's batches, are in
tests/e2e/test_torchrun.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from nmt.config import ConfigError
from nmt.training.distributed import (
    DistInfo,
    _attempt_store,
    all_reduce_sum,
    broadcast_object,
    collective_errors,
    gather_objects,
    truncate_to_multiple,
)


def test_an_epoch_is_cut_to_a_multiple_of_the_world_size():
    batches = [np.array([i]) for i in range(7)]
    assert [int(b[0]) for b in truncate_to_multiple(batches, 2)] == list(range(6))
    assert len(truncate_to_multiple(batches, 3)) == 6 and len(truncate_to_multiple(batches, 1)) == 7


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


def test_each_attempt_of_a_torchrun_job_reads_only_its_own_keys(monkeypatch):
    """torchrun's agent keeps one store for every attempt of a job: a restarted worker group
    (``--max-restarts``) must not find the first attempt's keys, such as a dead rank's
    address (gloo: connection refused); outside the agent's store, env:// as usual."""
    server = dist.TCPStore("127.0.0.1", 0, 1, is_master=True)   # port 0: a free one
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    assert _attempt_store(2) is None
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    _attempt_store(2).set("rank_1", "10.0.0.2:4711")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    restarted = _attempt_store(2)
    assert not restarted.check(["rank_1"])
    restarted.set("rank_1", "10.0.0.2:4712")
    assert restarted.get("rank_1") == b"10.0.0.2:4712"
    assert server.get("nmt/attempt_0/rank_1") == b"10.0.0.2:4711"
