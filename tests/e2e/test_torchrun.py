"""DDP: two gloo processes on CPU take the same steps as one process with the same global
batch (gradient accumulation included), a killed two-process run (with R-Drop) resumes
exactly, two hosts (network namespaces joined by a veth pair) train the weights of one host
with two ranks, and a worker killed under ``torchrun --max-restarts`` costs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, free_port, train, write_corpus, write_multilingual_corpus
from paused_train import kill_when_paused, popen

sys.path.insert(0, str(REPO_ROOT / "scripts"))
try:
    from torchrun_check import Hosts, HostsUnavailable  # scripts/: the two-host benchmark's
finally:
    sys.path.pop(0)

from nmt.checkpoint import load_checkpoint
from nmt.config import compose_config
from nmt.data.batching import make_src_batch
from nmt.data.vocab import BOS_ID
from nmt.models import build_model

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# The tiny corpus at 512 tokens makes 14 batches per epoch: with 2 processes x 2 batches
# (4 per step) steps 1-3 take 4 batches, step 4 the last 2 (one per rank, the epoch ends),
# steps 5-6 are in epoch 1. Validation and checkpoints at steps 2, 4 (epoch end) and 6.
TINY = ["model.d_model=16", "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1",
        "model.decoder_layers=1", "train.batch_tokens=512", "train.lr=0.01",
        "train.warmup_steps=2", "train.max_steps=6", "train.eval_every_steps=2",
        "train.log_every_steps=1", "search.max_len_b=3", "search.max_len_a=0.5", "device=cpu",
        "train.precision=fp32"]   # exact comparisons: bf16 rounds the two reduction orders apart
# No dropout: the two ranks draw different dropout masks than a single process would.
NO_DROPOUT = ["model.dropout=0.0", "model.attention_dropout=0.0", "model.activation_dropout=0.0"]


def _overrides(root: Path) -> list[str]:
    return [f"data.root={root / 'corpus'}", f"data.cache_dir={root / 'cache'}",
            "data.test_split=test", "data.tokenizer.vocab_size=120"] + TINY


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _torchrun_cmd(*script: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", *script]


def _torchrun(args: list[str]) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=2 -m nmt.cli.train ARGS`` (gloo)."""
    return subprocess.run(_torchrun_cmd("-m", "nmt.cli.train", *args), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=180)


def _assert_same_weights(got: dict, expected: dict, atol: float) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, atol=atol, rtol=0, msg=name)


def _without_key_biases(state: dict, d_model: int = 16) -> dict:
    """``state`` with the attention key biases zeroed (qkv_proj.bias is [q | k | v],
    kv_proj.bias [k | v]). A key bias adds q . b_k to every logit of a query's row, which
    softmax ignores: its exact gradient is 0, and Adam turns the rounding noise left in it
    (which depends on the order the micro-batch gradients were summed) into lr-sized steps
    that change no output."""
    out = dict(state)
    for name, value in state.items():
        if name.endswith("qkv_proj.bias") or name.endswith("kv_proj.bias"):
            start = d_model if name.endswith("qkv_proj.bias") else 0
            out[name] = value.clone()
            out[name][start:start + d_model] = 0.0
    return out


def _loss_and_grad_norm(run_dir: Path) -> list[tuple[float, float]]:
    """(loss, grad_norm) as train.log prints them (4 and 3 decimals), one pair per step."""
    lines = [ln for ln in (run_dir / "train.log").read_text().splitlines() if "train | step" in ln]
    fields = [dict(f.strip().rsplit(" ", 1) for f in ln.split("|")[1:]) for ln in lines]
    assert [f["step"] for f in fields] == [str(i) for i in range(1, len(lines) + 1)]
    return [(float(f["loss"]), float(f["grad_norm"])) for f in fields]


def _assert_same_steps(got: list[tuple[float, float]], want: list[tuple[float, float]]) -> None:
    """Equal to the last printed digit, give or take one: sums over ranks and over micro-batches
    add in different orders, so a value on a rounding edge may print one unit apart."""
    for (loss, grad_norm), (loss_want, grad_norm_want) in zip(got, want, strict=True):
        assert loss == pytest.approx(loss_want, abs=1.5e-4)
        assert grad_norm == pytest.approx(grad_norm_want, abs=1.5e-3)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The tiny corpus and one tokenizer cache for every run of the module."""
    root = tmp_path_factory.mktemp("ddp")
    write_corpus(root / "corpus")
    return root


@pytest.mark.parametrize(("extra", "batch_in_epoch"), [
    ([], 8), (["data.pairs=[de-en,en-fr]", "data.sampling_temperature=2"], 4)],
    ids=["bilingual", "multilingual"])
def test_two_processes_accumulating_2_match_one_process_accumulating_4(root, extra,
                                                                        batch_in_epoch):
    """accum_steps=2 under DDP: the first micro-batch of each rank runs in ``no_sync``, the
    second all-reduces the sum of both; the result is one process's 4-batch step. With two
    directions (en-fr a third of de-en) every rank cuts the same temperature-sampled epochs."""
    if extra:
        write_multilingual_corpus(root / "corpus", fr_every=3)   # de, en as before; fr added
    args = _overrides(root) + NO_DROPOUT + extra
    name = "multi" if extra else ""
    single_dir, ddp_dir = root / f"single{name}", root / f"ddp_accum2{name}"
    train(compose_config(args + ["train.accum_steps=4", f"run_dir={single_dir}"]))
    proc = _torchrun(args + ["train.accum_steps=2", f"run_dir={ddp_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]

    single = load_checkpoint(single_dir / "checkpoints" / "last.pt")
    ddp = load_checkpoint(ddp_dir / "checkpoints" / "last.pt")
    assert (single["step"], single["epoch"]) == (ddp["step"], ddp["epoch"]) == (6, 1)
    assert single["batch_in_epoch"] == ddp["batch_in_epoch"] == batch_in_epoch
    assert len(ddp["rng"]) == 2                               # one RNG state per rank
    # 4 micro-batch gradients summed in another order ((g0 + g2) + (g1 + g3) against
    # ((g0 + g1) + g2) + g3) agree to rounding, and so do the weights, but for the key biases.
    _assert_same_weights(_without_key_biases(ddp["model"]), _without_key_biases(single["model"]),
                         atol=1e-5)
    # Those do not change what the models compute:
    cfg = compose_config(args)
    models = [build_model(cfg.model, 120, 120).eval() for _ in range(2)]
    models[0].load_state_dict(single["model"])
    models[1].load_state_dict(ddp["model"])
    src, src_mask = make_src_batch([[5, 9, 30, 7], [44, 12]])
    tgt_in = torch.tensor([[BOS_ID, 8, 9, 10, 11], [BOS_ID, 60, 61, 0, 0]])
    with torch.no_grad():
        (single_logits, _), (ddp_logits, _) = (m(src, src_mask, tgt_in) for m in models)
    torch.testing.assert_close(ddp_logits, single_logits, atol=1e-5, rtol=0)
    # ... and training did move the weights away from the (seeded, shared) initialisation.
    torch.manual_seed(cfg.train.seed)
    init = build_model(cfg.model, 120, 120).state_dict()
    assert max((ddp["model"][k] - init[k]).abs().max().item() for k in init) > 1e-3
    # Adam hardly notices gradients scaled by a constant: the logged loss and gradient norm
    # of every step (all ranks together) must agree as well.
    _assert_same_steps(_loss_and_grad_norm(ddp_dir), _loss_and_grad_norm(single_dir))
    # Only rank 0 wrote: one log, one event file.
    assert (ddp_dir / "train.log").read_text().count("done (max_steps=6 reached)") == 1
    assert len(list((ddp_dir / "tensorboard").iterdir())) == 1


def test_killed_two_process_run_resumes_to_the_uninterrupted_weights(root):
    """SIGKILL from outside after step 3 (both ranks paused there, one step past the
    checkpoint of step 2), then the same command: the resumed run redoes step 3, crosses the
    epoch end and ends where an uninterrupted run ends. Dropout stays on, so each rank's own
    RNG state must be restored; R-Drop draws two masks per pair from it (its sums split over
    ranks as over micro-batches: test_consistency.py)."""
    args = _overrides(root) + ["train.accum_steps=2", "train.consistency=rdrop"]
    full_dir, killed_dir = root / "full", root / "killed"
    proc = _torchrun(args + [f"run_dir={full_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]

    killed_args = args + [f"run_dir={killed_dir}"]
    proc = popen(_torchrun_cmd(str(REPO / "tests" / "e2e" / "paused_train.py"), *killed_args),
                 3, root / "pause", ENV)
    assert kill_when_paused(proc, root / "pause", ranks=2) != 0
    assert "train | step 3 " in (killed_dir / "train.log").read_text()
    assert load_checkpoint(killed_dir / "checkpoints" / "last.pt")["step"] == 2

    proc = _torchrun(killed_args)                             # the same command resumes
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in (killed_dir / "train.log").read_text()
    full = load_checkpoint(full_dir / "checkpoints" / "last.pt")
    resumed = load_checkpoint(killed_dir / "checkpoints" / "last.pt")
    assert (resumed["step"], resumed["epoch"]) == (full["step"], full["epoch"]) == (6, 1)
    _assert_same_weights(resumed["model"], full["model"], atol=1e-6)
    for a, b in zip(resumed["rng"], full["rng"], strict=True):        # per rank
        assert torch.equal(a["torch"], b["torch"])
    assert not torch.equal(full["rng"][0]["torch"], full["rng"][1]["torch"])   # own streams


def test_every_rank_trains_on_rank_0s_sampled_segmentation(root):
    """Subword sampling under DDP: rank 0 draws each epoch's segmentation (or reads it from
    the cache) and sends it to rank 1, so both cut the same batches from its lengths: the
    first three steps (12 batches of epoch 0) are one process's steps with the same global
    batch. (Later ones need not be: the last batch of an epoch with an odd number of them
    is dropped under DDP.) The run goes on into epoch 1, which rank 0 sends again."""
    args = _overrides(root) + NO_DROPOUT + ["data.tokenizer.sampling_alpha=0.5"]
    single_dir, ddp_dir = root / "single_sampled", root / "ddp_sampled"
    proc = _torchrun(args + ["train.accum_steps=2", f"run_dir={ddp_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    train(compose_config(args + ["train.accum_steps=4", "train.max_steps=3",
                                 f"run_dir={single_dir}"]))
    _assert_same_steps(_loss_and_grad_norm(ddp_dir)[:3], _loss_and_grad_norm(single_dir))
    assert load_checkpoint(ddp_dir / "checkpoints" / "last.pt")["epoch"] == 1
    log = (ddp_dir / "train.log").read_text()
    assert [ln.split("INFO ")[1][:7] for ln in log.splitlines() if "sampled segmentation" in ln] \
        == ["epoch 0", "epoch 1"]


def test_rank_0_makes_the_teachers_links_then_both_ranks_train_on_them(root, tmp_path):
    """Guided alignment from a config alone under torchrun: rank 0 runs eflomal once, inside
    the setup's collective error handling (not before the rendezvous), the other rank finds
    the links cached; both take the steps of one process with the same global batch."""
    pytest.importorskip("eflomal")
    cache = tmp_path / "cache"
    args = [o if not o.startswith("data.cache_dir=") else f"data.cache_dir={cache}"
            for o in _overrides(root)] + NO_DROPOUT + [
        "train.alignment_loss_weight=0.5", "model.alignment_heads=1", "train.max_steps=3"]
    proc = _torchrun(args + ["train.accum_steps=2", f"run_dir={root / 'ddp_guided'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (root / "ddp_guided" / "train.log").read_text()
    assert log.count("eflomal aligns 200 pairs de-en") == 1 and "| alignment_loss " in log
    assert len(list((cache / "alignments").iterdir())) == 1
    train(compose_config(args + ["train.accum_steps=4", f"run_dir={root / 'one_guided'}"]))
    assert "alignments: cache hit" in (root / "one_guided" / "train.log").read_text()
    _assert_same_steps(_loss_and_grad_norm(root / "ddp_guided"),
                       _loss_and_grad_norm(root / "one_guided"))


def test_no_gloo_thread_outlives_the_process_group(root, tmp_path):
    """After ``nmt.train()`` under torchrun, gloo's threads are joined, not left to end at
    interpreter exit, where one sometimes ended by std::terminate (SIGABRT after a finished
    run). torch.distributed.nn, which DDP imports, must not hold the group, and the DDP
    wrapper must be gone before it is freed: its reducer frees the group with the GIL held,
    while a gloo thread freeing the last barrier's tensors needs the GIL (a hang)."""
    script = tmp_path / "ddp_exit.py"
    script.write_text(
        "import os, sys, nmt\n"
        "nmt.train(sys.argv[1:])\n"
        "tasks = [open(f'/proc/self/task/{t}/comm').read()\n"
        "         for t in os.listdir('/proc/self/task')]\n"
        "print(f'gloo threads: {sum(\"gloo\" in t for t in tasks)}.', flush=True)\n")
    args = [*_overrides(root), "train.max_steps=2", f"run_dir={tmp_path / 'run'}"]
    proc = subprocess.run(_torchrun_cmd(str(script), *args), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("gloo threads: 0") == 2, proc.stdout


# Elastic runs: 7 steps an epoch (14 batches, 2 ranks), validations at the epoch end (step 7)
# and at the last step (10), resume points (last.pt alone) at steps 3, 6 and 9.
ELASTIC = ["train.eval_every_steps=null", "train.save_every_steps=3", "train.max_steps=10"]


@pytest.fixture(scope="module")
def uninterrupted(root) -> dict:
    """``last.pt`` of an uninterrupted run of the elastic settings: one host, two ranks."""
    run_dir = root / "uninterrupted"
    proc = _torchrun(_overrides(root) + ELASTIC + [f"run_dir={run_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")


def _assert_equal_weights(got: dict, want: dict) -> None:
    assert (got["step"], got["epoch"]) == (want["step"], want["epoch"])
    assert got["model"].keys() == want["model"].keys()
    for name, value in want["model"].items():
        assert torch.equal(got["model"][name], value), name


@pytest.mark.parametrize(("step", "rank"), [(2, 1), (5, 0), (8, 1)])
def test_a_killed_worker_is_restarted_and_the_run_ends_with_the_uninterrupted_weights(
        root, uninterrupted, step, rank):
    """kill -9 of one worker after ``step`` steps under ``torchrun --max-restarts=1``: torchrun
    stops the other rank and starts the group again (a fresh key prefix in its store), which
    resumes from last.pt: none yet after step 2 (a fresh start), the resume point of step 3
    after step 5, the epoch end's validation checkpoint of step 7 after step 8."""
    run_dir, pause = root / f"elastic{step}", root / f"pause_elastic{step}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--max-restarts=1", str(REPO / "tests" / "e2e" / "paused_train.py"),
           *_overrides(root), *ELASTIC, f"run_dir={run_dir}"]
    proc = popen(cmd, step, pause, ENV, rank=rank)
    assert kill_when_paused(proc, pause) == 0, (pause / "out.txt").read_text()[-3000:]
    out = (pause / "out.txt").read_text()
    assert "exitcode: -9" in out and f"local_rank: {rank}" in out    # the kill torchrun saw
    log = (run_dir / "train.log").read_text()
    assert log.count("done (max_steps=10 reached)") == 1
    if step > 3:
        resumed_at = 3 if step < 7 else 7
        assert f"at step {resumed_at} (epoch {resumed_at // 7}" in log
    _assert_equal_weights(load_checkpoint(run_dir / "checkpoints" / "last.pt"), uninterrupted)


@pytest.fixture(scope="module")
def hosts() -> Hosts:
    """Two hosts on this machine (scripts/torchrun_check.py); skipped where ``ip netns``
    cannot make them (not root, no iproute2, no network namespaces)."""
    try:
        net = Hosts.create()
    except HostsUnavailable as err:
        pytest.skip(str(err))
    try:
        yield net
    finally:
        net.delete()


def _on_host(hosts: Hosts, i: int, args: list[str], join_timeout: int = 60) -> subprocess.Popen:
    return subprocess.Popen(hosts.command(i, ["-m", "nmt.cli.train", *args], join_timeout),
                            cwd=REPO, env=hosts.env(i, ENV), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_hosts_train_the_weights_of_one_host_with_two_ranks(root, uninterrupted, hosts):
    """``torchrun --nnodes=2`` on two hosts, one rank each, gloo over the veth pair: the same
    all-reduce of two ranks, so exactly the weights of one host running both ranks."""
    run_dir = root / "two_hosts"
    procs = [_on_host(hosts, i, _overrides(root) + ELASTIC + [f"run_dir={run_dir}"])
             for i in (0, 1)]
    outs = [p.communicate(timeout=240) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "world 2" in log and log.count("done (max_steps=10 reached)") == 1
    _assert_equal_weights(load_checkpoint(run_dir / "checkpoints" / "last.pt"), uninterrupted)


def test_a_host_that_never_joins_ends_the_job_within_the_rendezvous_timeout(root, hosts):
    """Host 0 alone: torchrun gives up after ``join_timeout`` seconds with its rendezvous
    timeout error, never waits for ever, and no worker started."""
    proc = _on_host(hosts, 0, _overrides(root) + [f"run_dir={root / 'lone_host'}"],
                    join_timeout=5)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "RendezvousTimeoutError" in err
    assert not (root / "lone_host").exists()
