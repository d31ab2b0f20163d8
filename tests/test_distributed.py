"""DDP: two gloo processes on CPU take the same steps as one process with the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from nmt.config import compose_config
from nmt.models import build_model
from nmt.training.checkpoint import load_checkpoint
from nmt.training.distributed import DistInfo, free_port, local_share, truncate_to_multiple
from nmt.training.trainer import train

REPO = Path(__file__).resolve().parents[1]
# No dropout: the two ranks draw different dropout masks than a single process would.
TINY = ["model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.dropout=0.0", "model.attention_dropout=0.0",
        "train.batch_tokens=512", "train.lr=0.01", "train.warmup_steps=2", "train.max_steps=3",
        "train.eval_every_steps=100", "train.log_every_steps=1", "search.max_len_b=3",
        "search.max_len_a=0.5", "device=cpu"]


def test_sharding_gives_each_rank_its_stride():
    batches = [np.array([i]) for i in range(7)]
    kept = truncate_to_multiple(batches, 2)
    assert len(kept) == 6
    group = kept[2:6]                                         # one step: world 2 x accum 2
    assert [int(b[0]) for b in local_share(group, DistInfo(0, 2))] == [2, 4]
    assert [int(b[0]) for b in local_share(group, DistInfo(1, 2))] == [3, 5]


def test_two_process_ddp_matches_one_process_with_accumulation(tiny_overrides, tmp_path):
    single_dir, ddp_dir = tmp_path / "single", tmp_path / "ddp"
    overrides = tiny_overrides[:-1] + TINY

    # Reference: one process, two batches per step (same global batch as 2 ranks x 1).
    train(compose_config(overrides + ["train.accum_steps=2", f"run_dir={single_dir}"]))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1", "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "nmt.cli.train",
           *overrides, "train.accum_steps=1", f"run_dir={ddp_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]

    single = load_checkpoint(single_dir / "checkpoints" / "last.pt")
    ddp = load_checkpoint(ddp_dir / "checkpoints" / "last.pt")
    assert single["step"] == ddp["step"] == 3
    assert single["batch_in_epoch"] == ddp["batch_in_epoch"] == 6
    assert len(ddp["rng"]) == 2                               # one RNG state per rank
    for name, value in single["model"].items():
        torch.testing.assert_close(ddp["model"][name], value, atol=1e-5, rtol=1e-4, msg=name)
    # ... and training did move them away from the (seeded, shared) initialisation.
    cfg = compose_config(overrides)
    torch.manual_seed(cfg.train.seed)
    init = build_model(cfg.model, 120, 120).state_dict()
    assert max((ddp["model"][k] - init[k]).abs().max().item() for k in init) > 1e-3
    # Only rank 0 wrote: one log, one event file.
    assert (ddp_dir / "train.log").read_text().count("done (max_steps=3 reached)") == 1
    assert len(list((ddp_dir / "tensorboard").iterdir())) == 1
