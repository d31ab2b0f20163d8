"""One rank of the device check's nccl step: all_reduce between the ranks of this torchrun job,
every rank on the one device (cuda:0: ranks share the GPU) or on the CPU (dry run), over
$DC_BACKEND; the process group gives up after $DC_PG_TIMEOUT seconds.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        scripts/device_check/nccl_check.py
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    backend = os.environ["DC_BACKEND"]
    device = torch.device("cuda", 0) if os.environ["DC_DEVICE"] == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=int(os.environ["DC_PG_TIMEOUT"])))
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(x)
    total = x[0].item()   # note: a CPU-GPU sync point
    assert total == world * (world + 1) / 2, (total, world)
    print(f"rank {rank}: all_reduce ok: {backend} world {world} on {device}, sum {total:g}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
