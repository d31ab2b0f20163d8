"""Data-parallel plumbing for ``torchrun`` (DDP): process group, batch sharding, collectives.

Launch (one process per device)::

    torchrun --nproc_per_node=2 -m nmt.cli.train model=transformer run_dir=runs/tf_ddp ...

Every rank builds the *same* epoch batch list (the sampler is deterministic in seed and
epoch). One optimizer step consumes ``world_size * accum_steps`` consecutive batches of that
list; rank ``r`` takes every ``world_size``-th of them starting at ``r``, so two ranks with
``accum_steps=1`` see exactly the batches one process with ``accum_steps=2`` would. The list
is cut to a multiple of ``world_size`` so every rank runs as many micro-batches. Only rank 0
writes files. Without ``torchrun`` (no ``WORLD_SIZE``) no collective is called.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job.

    ``rank`` of ``world_size``; ``local_rank`` on its host.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0             # the only rank that writes files

    @property
    def enabled(self) -> bool:
        return self.world_size > 1        # a process group of several ranks runs


def init_distributed(device_type: str) -> DistInfo:
    """Join ``torchrun``'s process group (gloo on CPU, NCCL on ``cuda:LOCAL_RANK``), if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if not dist.is_initialized():
        # DDP imports torch.distributed.nn, whose functions take `group=group.WORLD` as a
        # default argument: imported after the group exists, they hold it until interpreter
        # exit, past destroy_process_group, and gloo's threads then end there, sometimes by
        # std::terminate (SIGABRT after a finished run). Imported first, they hold None.
        import torch.distributed.nn as _  # noqa: F401
        backend = "nccl" if device_type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, rank=rank, world_size=world,
                                store=_attempt_store(world))
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank)


def _attempt_store(world: int) -> dist.Store | None:
    """The key-value store of this attempt of a ``torchrun`` job, or None (``env://``).

    torchrun's agent hosts one store for the whole job and restarts a failed worker group
    (``--max-restarts``) against the same store: the first attempt's keys are still there,
    and a restarted rank reads a dead peer's address from them (gloo's connectFullMesh:
    connection refused). Each attempt gets its own key prefix, as the agent numbers them."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None                 # rank 0 hosts a new store in every attempt
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                           is_master=False)
    return dist.PrefixStore(f"nmt/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}",
                            client)


def cleanup_distributed() -> None:
    """Leave the process group, with its threads joined here, not at interpreter exit.

    Call it once nothing else holds the group (the DDP wrapper dropped): a C++ holder such
    as DDP's reducer frees the group with the GIL held, while a gloo worker thread may still
    need the GIL to free the last collective's tensors (a deadlock). The reference kept here
    is the last one; its Python destructor releases the GIL while the threads join."""
    if dist.is_available() and dist.is_initialized():
        group = dist.group.WORLD
        dist.destroy_process_group()
        del group


def truncate_to_multiple(batches: Sequence[Any], world_size: int) -> list:
    return list(batches[:len(batches) // world_size * world_size])


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> None:
    """Sum ``tensor`` over ranks in place."""
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def max_over_ranks(value: float, info: DistInfo, device: torch.device) -> float:
    """The largest ``value`` over all ranks (e.g. the seconds a time budget has used)."""
    if not info.enabled:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every rank (pickled)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (e.g. RNG states for a checkpoint)."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


@contextmanager
def collective_errors(info: DistInfo, user_errors: tuple[type[BaseException], ...]
                      ) -> Iterator[None]:
    """Run a block on every rank; if it raised one of ``user_errors`` on any rank, raise on
    every rank (its own error, or the first failing rank's class and message), rather than
    leave the others waiting at the next collective until the process group times out.
    Every rank leaves through one ``all_gather`` (a barrier), so the block must not call
    collectives that a failing rank would skip. Other exceptions (bugs) propagate at once."""
    error: BaseException | None = None
    try:
        yield
    except user_errors as err:
        if not info.enabled:
            raise
        error = err
    if not info.enabled:
        return
    report = None if error is None else (type(error).__name__, str(error))
    failed = [r for r in gather_objects(report, info) if r is not None]
    if error is not None:
        raise error
    if not failed:
        return
    name, message = failed[0]
    cls = next((c for c in user_errors if c.__name__ == name), user_errors[0])
    raise cls(message)
