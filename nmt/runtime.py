"""Process-level performance settings shared by the CLIs and the benchmarks."""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def tune_malloc() -> bool:
    """Keep freed memory in the process heap (glibc ``mallopt``); True if applied.

    glibc serves allocations above ``M_MMAP_THRESHOLD`` (<= 32 MiB) with fresh ``mmap``
    pages and unmaps them on free, so every large activation (the [batch*tgt_len, vocab]
    logits and their gradient are ~130 MB at 4096 tokens x 8000 types) is page-faulted in
    again at each training step; on our 2-core VM that cost more than the log-softmax
    itself (Transformer step: ~1,350 -> ~2,300 target tokens/s). ``M_MMAP_MAX=0`` serves
    everything from the heap and ``M_TRIM_THRESHOLD`` = 2 GiB keeps it mapped, so steps
    reuse warm pages. The price: the process does not hand freed memory back to the OS.
    A no-op (False) on non-glibc platforms.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
