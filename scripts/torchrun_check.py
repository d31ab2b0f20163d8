"""``nmt-train`` under ``torchrun``, measured: clean exits over many launches, two hosts vs one.

Usage::

    python scripts/torchrun_check.py exits [--runs 100] [--timeout 120] [overrides...]
    python scripts/torchrun_check.py hosts [--steps 200] [--repeats 3] [overrides...]   # root

Both train a dim-16 Transformer on 400 pairs of Multi30k de-en (``NMT_DATA_ROOT``, or
``data.root=DIR``) on the CPU, gloo, fp32, with a fresh run directory per launch and one
tokenizer cache. Not run by CI: they measure what the tests assert once.

``exits`` launches ``torchrun --standalone --nproc_per_node=2`` for 4 steps ``--runs`` times,
each under a wall-clock ``--timeout``, and counts each launch as

- ``clean``: exit status 0;
- ``abort``: a rank ended by a signal (torchrun: ``exitcode: -N``, e.g. -6, SIGABRT at
  interpreter exit) after the run had finished;
- ``hang``: still running at the timeout (killed, with every process it started);
- ``fail``: any other non-zero exit.

The output of every launch that was not clean is kept (``--keep``, default a new temporary
folder). Exit status 0 only if every launch was clean (the target: 0 aborts, 0 hangs).

``hosts`` makes two hosts on this machine, network namespaces joined by a veth pair
(:class:`Hosts`; root and iproute2), and trains ``--steps`` steps ``--repeats`` times each
way, alternating: ``torchrun --nnodes=2`` with one rank per host (gloo over the veth pair),
and one host with ``--nproc_per_node=2`` (gloo over loopback). It prints the largest weight
difference between the two runs' last checkpoints (0 expected: the same all-reduce of two
ranks) and the median wall time of each way and their ratio (two hosts / one host).

The last line printed holds every figure as ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

TINY = ["data.max_train_pairs=400", "data.tokenizer.vocab_size=200", "model.d_model=16",
        "model.heads=2", "model.ff_dim=32", "model.encoder_layers=1", "model.decoder_layers=1",
        "train.batch_tokens=512", "train.log_every_steps=1", "search.max_len_b=3",
        "search.max_len_a=0.5", "train.log_figures=false", "device=cpu", "train.precision=fp32"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1"}


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no iproute2, no kernel support)."""


@dataclass(frozen=True)
class Hosts:
    """Two hosts on one machine: network namespaces ``names`` joined by a veth pair, host
    ``i`` with address ``addrs[i]`` on its interface ``ifaces[i]``. Host 0 runs the c10d
    rendezvous store."""

    names: tuple[str, str]
    ifaces: tuple[str, str]
    addrs: tuple[str, str] = ("10.77.0.1", "10.77.0.2")

    @classmethod
    def create(cls) -> Hosts:
        """Make the namespaces and the pair (names unique to this call); HostsUnavailable if
        ``ip netns`` cannot."""
        tag = uuid.uuid4().hex[:6]
        hosts = cls(names=(f"nmt{tag}a", f"nmt{tag}b"), ifaces=(f"v{tag}a", f"v{tag}b"))
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise HostsUnavailable("two hosts need network namespaces: root and iproute2")
        try:
            _ip("netns", "add", hosts.names[0])
        except subprocess.CalledProcessError as err:
            raise HostsUnavailable(f"ip netns add failed: {err.stderr.strip()}") from None
        try:
            _ip("netns", "add", hosts.names[1])
            _ip("link", "add", hosts.ifaces[0], "type", "veth", "peer", "name", hosts.ifaces[1])
            for name, iface, addr in zip(hosts.names, hosts.ifaces, hosts.addrs, strict=True):
                _ip("link", "set", iface, "netns", name)
                _ip("-n", name, "addr", "add", f"{addr}/24", "dev", iface)
                _ip("-n", name, "link", "set", iface, "up")
                _ip("-n", name, "link", "set", "lo", "up")
        except BaseException:
            hosts.delete()
            raise
        return hosts

    def delete(self) -> None:
        """Remove both namespaces (and with them the veth pair)."""
        for name in self.names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)

    def command(self, i: int, script: list[str], join_timeout: int = 60) -> list[str]:
        """``torchrun --nnodes=2`` on host ``i``, one rank, c10d rendezvous at host 0. Host 0
        is named the store's host, and each host gives its own address: a namespaced host
        cannot resolve its host name (torchrun's way to decide both)."""
        return ["ip", "netns", "exec", self.names[i], *TORCHRUN, "--nnodes=2",
                "--nproc_per_node=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={self.addrs[0]}:29500", "--rdzv-id=nmt",
                f"--local-addr={self.addrs[i]}",
                f"--rdzv-conf=is_host={int(i == 0)},join_timeout={join_timeout}", *script]

    def env(self, i: int, env: dict) -> dict:
        """``env`` with gloo bound to host ``i``'s end of the pair."""
        return {**env, "GLOO_SOCKET_IFNAME": self.ifaces[i]}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _wait(proc: subprocess.Popen, timeout: float) -> int | None:
    """``proc``'s exit status, or None after killing it and its children at the timeout."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def launch_once(args: list[str], timeout: float, out: Path) -> str:
    """One ``exits`` launch, its output in ``out``; returns its outcome (module docstring)."""
    cmd = [*TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "nmt.cli.train", *args]
    with open(out, "w") as log:
        status = _wait(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV,
                                        start_new_session=True), timeout)
    text = out.read_text(errors="replace")
    if status is None:
        return "hang"
    if status == 0:
        return "clean"
    return "abort" if re.search(r"exitcode\s*:\s*-\d+", text) and "done (" in text else "fail"


def exits(opts: argparse.Namespace, work: Path) -> dict:
    keep = opts.keep or work / "kept"
    keep.mkdir(parents=True, exist_ok=True)
    counts = {"runs": opts.runs, "clean": 0, "abort": 0, "hang": 0, "fail": 0}
    for i in range(opts.runs):
        run_dir, out = work / f"run{i}", work / f"launch{i}.txt"
        t0 = time.monotonic()
        outcome = launch_once([*TINY, "train.max_steps=4", "train.eval_every_steps=2",
                               f"data.cache_dir={work / 'cache'}", f"run_dir={run_dir}",
                               *opts.overrides], opts.timeout, out)
        counts[outcome] += 1
        if outcome == "clean":
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            out.replace(keep / out.name)
        print(f"launch {i + 1}/{opts.runs}: {outcome} in {time.monotonic() - t0:.1f} s",
              flush=True)
    print(f"output of the launches that were not clean: {keep}")
    return counts


def _max_difference(a: Path, b: Path) -> float:

    from nmt.checkpoint import load_checkpoint

    wa, wb = (load_checkpoint(p / "checkpoints" / "last.pt")["model"] for p in (a, b))
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def hosts(opts: argparse.Namespace, work: Path) -> dict:
    net = Hosts.create()
    try:
        times: dict[str, list[float]] = {"one_host": [], "two_hosts": []}
        for r in range(opts.repeats):
            for way in times:
                run_dir = work / f"{way}{r}"
                args = ["-m", "nmt.cli.train", *TINY, f"train.max_steps={opts.steps}",
                        f"data.cache_dir={work / 'cache'}", f"run_dir={run_dir}",
                        *opts.overrides]
                if way == "one_host":
                    cmds = [([*TORCHRUN, "--standalone", "--nproc_per_node=2", *args], ENV)]
                else:
                    cmds = [(net.command(i, args), net.env(i, ENV)) for i in (0, 1)]
                t0 = time.monotonic()
                procs = [subprocess.Popen(c, env=e, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True) for c, e in cmds]
                for proc in procs:
                    if _wait(proc, opts.timeout) != 0:
                        raise SystemExit(f"{way} failed:\n{proc.stderr.read()[-3000:]}")
                times[way].append(time.monotonic() - t0)
                print(f"{way} {r + 1}/{opts.repeats}: {times[way][-1]:.1f} s", flush=True)
        diff = _max_difference(work / "one_host0", work / "two_hosts0")
    finally:
        net.delete()
    one, two = (statistics.median(times[w]) for w in ("one_host", "two_hosts"))
    return {"steps": opts.steps, "max_weight_difference": diff, "one_host_s": round(one, 1),
            "two_hosts_s": round(two, 1), "wall_ratio": round(two / one, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="check", required=True)
    p_exits = sub.add_parser("exits", help="count clean exits, aborts and hangs")
    p_exits.add_argument("--runs", type=int, default=100)
    p_exits.add_argument("--keep", type=Path, default=None,
                         help="folder for the output of launches that were not clean")
    p_hosts = sub.add_parser("hosts", help="two namespaced hosts against one host")
    p_hosts.add_argument("--steps", type=int, default=200)
    p_hosts.add_argument("--repeats", type=int, default=3)
    for p, timeout in ((p_exits, 120.0), (p_hosts, 600.0)):
        p.add_argument("--timeout", type=float, default=timeout, help="seconds per launch")
        p.add_argument("overrides", nargs="*", help="nmt-train overrides")
    opts = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix=f"torchrun_{opts.check}_"))
    try:
        figures = exits(opts, work) if opts.check == "exits" else hosts(opts, work)
    except HostsUnavailable as err:
        print(f"torchrun_check.py: error: {err}", file=sys.stderr)
        return 2
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    if opts.check == "exits":
        return 0 if figures["clean"] == figures["runs"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
