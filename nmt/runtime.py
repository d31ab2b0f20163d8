"""Process-level settings and chores shared by every layer above: the device and its autocast dtype,
glibc's allocator, oneDNN's cache, the machine for run summaries, peak FLOP/s and model FLOPs for
MFU, and atomic file writes."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmt.config import ConfigError

ONEDNN_CACHE_CAPACITY = 16  # oneDNN primitives kept (bf16 matmuls on CPU: one per shape)


def bound_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> bool:
    """Bound oneDNN's primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) unless the user set it.

    bf16 matmuls on CPU cache one primitive per shape (1,024 by default); token-bucketed
    batches have many, and a bf16 run's RSS grew to 8.6 GB in 25 minutes. 16 keep it flat at
    no measured speed cost (docs/speed.md). Must run before the first bf16 matmul; True if set.
    """
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(int(capacity))
    return True


def tune_cuda() -> None:
    """TF32 matmuls and convolutions, and no cuDNN attention, for training on CUDA.

    cuDNN attention (chosen first for bf16/fp16 on Hopper) builds a plan for every new
    (batch, length) shape, ~0.13 s each: variable-length batches trained 8.8x slower on an
    H200 (docs/speed.md); flash and memory-efficient attention have no such cost.
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.enable_cudnn_sdp(False)


# Dense tensor-core peaks (TFLOP/s) per card, for MFU: the first pattern that matches
# torch.cuda.get_device_name wins. NVIDIA datasheets state the tensor-core figures "with
# sparsity"; the dense rate is half of that. H100 SXM5 (H100 Tensor Core GPU datasheet): bf16
# and fp16 1,979 -> 989.4, TF32 989 -> 494.7, fp32 66.9; H200 SXM (H200 Tensor Core GPU
# datasheet): the same as the H100 SXM (NVL cards are lower and not listed); A100 SXM4 and PCIe
# (A100 Tensor Core GPU datasheet): 312, 156, 19.5 dense; L4 (L4 Tensor Core GPU datasheet):
# 242 -> 121, 120 -> 60, 30.3; T4 (T4 Tensor Core GPU datasheet): mixed fp16 65, fp32 8.1, no
# bf16 or TF32 tensor cores. Any other card: train.peak_tflops.
GPU_PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"\bH100 (80GB HBM3|SXM)|\bH200\b(?! NVL)",
     {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"\bA100\b", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"\bT4\b", {"fp16": 65.0, "fp32": 8.1}),
)


def gpu_peak_tflops(name: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of the card called ``name`` (``torch.cuda.get_device_name``) for
    ``precision`` (bf16 | fp16 | tf32 | fp32) from :data:`GPU_PEAK_TFLOPS`; None if unknown."""
    for pattern, peaks in GPU_PEAK_TFLOPS:
        if re.search(pattern, name):
            return peaks.get(precision)
    return None


@functools.lru_cache(maxsize=8)
def _matmul_flops(dtype, threads: int, n: int, repeats: int) -> float:
    import torch

    g = torch.Generator().manual_seed(0)   # not the global RNG: dropout masks must not move
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def cpu_matmul_flops(dtype=None, n: int = 1024, repeats: int = 3) -> float:
    """The best rate of ``repeats`` [n,n] x [n,n] ``torch.mm`` in ``dtype`` (default fp32) on
    this CPU at the current torch thread count, FLOP/s (2 n^3 per product); measured once per
    process and setting (well under a second), the CPU's peak for MFU."""
    import torch

    return _matmul_flops(dtype or torch.float32, torch.get_num_threads(), n, repeats)


def peak_flops(device, amp_dtype=None, override_tflops: float | None = None) -> float | None:
    """The peak FLOP/s that MFU divides by, for one ``device`` computing under autocast
    ``amp_dtype`` (None: fp32): ``override_tflops`` (``train.peak_tflops``) if given; on CUDA
    the card's dense bf16 / fp16 / TF32 (fp32 with TF32 matmuls on) / fp32 peak
    (:func:`gpu_peak_tflops`; None for a card not in the table); elsewhere the measured
    :func:`cpu_matmul_flops` in ``amp_dtype``."""
    import torch

    if override_tflops is not None:
        return float(override_tflops) * 1e12
    if getattr(device, "type", str(device)) != "cuda":
        return cpu_matmul_flops(amp_dtype)
    precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        amp_dtype, "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32")
    peak = gpu_peak_tflops(torch.cuda.get_device_name(device), precision)
    return None if peak is None else peak * 1e12


def train_flops(flop_params: tuple[int, int], src_tokens: int, tgt_tokens: int,
                copies: int = 1, attention: float = 0.0) -> float:
    """Model FLOPs of a training step (forward and backward) over ``src_tokens`` and
    ``tgt_tokens`` real (non-padding) tokens, by the 6N rule (Kaplan et al. 2020, section 2.1:
    2N per token forward, 4N backward) plus the attention scores (PaLM, appendix B):
    ``copies * (6 * (N_src * src_tokens + N_tgt * tgt_tokens) + attention)``, ``flop_params`` =
    (N_src, N_tgt) of ``nmt.models.flops.flop_params`` (the output projection counted,
    lookups not), ``attention`` = ``flops.attention_flops`` of the step's pairs;
    ``copies``: 2 when every pair runs twice (``train.consistency``)."""
    n_src, n_tgt = flop_params
    return copies * (6.0 * (n_src * src_tokens + n_tgt * tgt_tokens) + attention)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX), as oneDNN reports it
    (elsewhere bf16 autocast is emulated and slower than fp32)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast_dtype(precision: str, device):
    """The autocast dtype of ``train.precision`` on ``device`` (None: fp32). ``auto``: bf16
    on a CUDA card that has it, else fp16 (loss-scaled); on CPU bf16 where it is native
    (:func:`cpu_has_bf16`: 1.4x the Transformer's tokens/s), else fp32. ConfigError: fp16
    off CUDA."""
    import torch

    if precision == "fp32":
        return None
    if precision == "auto" and device.type != "cuda":
        return torch.bfloat16 if device.type == "cpu" and cpu_has_bf16() else None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        if device.type != "cuda":
            raise ConfigError(f"train.precision=fp16 needs a CUDA device, not {device}: use bf16 "
                              "or fp32.")
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def resolve_device(name: str):
    """``"auto"`` -> ``cuda`` when available, else ``cpu``; ConfigError for an unusable name."""
    import torch

    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(name).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for CUDA, but no CUDA device is available: use "
                          "device=cpu.")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(
            f"device={name!r} is not a device: use auto, cpu, cuda or cuda:N.") from None


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_info(device=None) -> dict:
    """What a run's figures depend on (``summary.json``): cpu, cores, torch_threads, torch,
    python, platform, and gpu on a CUDA device."""
    import torch

    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": str(torch.__version__), "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}"}
    if device is not None and getattr(device, "type", str(device)) == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


@contextlib.contextmanager
def atomic_path(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``, renamed to ``path`` (a file, or a directory when
    ``directory``) if the block succeeds, else deleted: a crash leaves the old ``path`` or the
    new one, never a torn one. Every file nmt writes whole goes through here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    if directory:
        tmp.mkdir()      # files and directories get the umask's permissions, as open() gives
    try:
        yield tmp
        if directory and path.exists():    # rename the old one aside, the new one in, then delete
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | Path, data: Any) -> None:
    """``json.dump`` (indent 2, trailing newline) to ``path`` through :func:`atomic_path`."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def ensure_writable_dir(path: str | Path, key: str) -> Path:
    """Create directory ``path`` and check that a file can be written in it, before long work
    (ConfigError naming ``key=path`` if not)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".nmt_write_check_"):
            pass
    except OSError as err:
        raise ConfigError(f"{key}={path} cannot be written ({err.strerror or err}): "
                          f"choose a writable directory with {key}=DIR.") from None
    return path


def compile_stats() -> dict[str, Any]:
    """``{"graphs": int, "compile_s": float}``: the graphs Dynamo built in this process and the
    seconds spent compiling them (tracing and Inductor code generation, forward and backward)."""
    from torch._dynamo import utils as dynamo_utils

    spent = dynamo_utils.calculate_time_spent()
    return {"graphs": int(dynamo_utils.counters["stats"]["unique_graphs"]),
            "compile_s": float(spent.get("total_wall_time", 0.0))}


def progress_enabled() -> bool:
    """Whether to draw a progress bar: stderr is a terminal and ``$CI`` is not set."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MiB (``getrusage``; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
