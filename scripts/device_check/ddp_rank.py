"""One rank of the device check's ddp step: nmt-train with WORLD_SIZE=2, both ranks on cuda:0
(LOCAL_RANK=0: two ranks share the one GPU) or on the CPU (dry run), over $DC_BACKEND.

When $DC_BACKEND is nmt's own choice for the device (NCCL on CUDA, gloo on the CPU), nmt's
init_distributed joins the process group itself (nmt/training/distributed.py); else (gloo on
CUDA, where NCCL refused two ranks on one device) this rank joins gloo first, giving up after
$DC_PG_TIMEOUT seconds, and nmt keeps that group (it joins only when none is initialised).

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        scripts/device_check/ddp_rank.py OVERRIDES...
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main(argv: list[str]) -> int:
    backend, device = os.environ["DC_BACKEND"], os.environ["DC_DEVICE"]
    if device == "cuda":
        os.environ["LOCAL_RANK"] = "0"
        torch.cuda.set_device(0)
    by = "nmt" if backend == ("nccl" if device == "cuda" else "gloo") else "check"
    if by == "check":
        timeout = timedelta(seconds=int(os.environ["DC_PG_TIMEOUT"]))
        dist.init_process_group(backend, timeout=timeout)
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: ddp on {backend}, process "
          f"group joined by {by}, on {device}", flush=True)
    from nmt.cli.train import main as train

    return train(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
