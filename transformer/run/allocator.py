"""Keeps glibc's malloc from handing the step's large buffers back to the kernel.

A training step allocates and frees tensors of a few to tens of megabytes (the
logits and their gradient are `batch x length x vocabulary` floats). glibc
serves blocks above its mmap threshold with fresh `mmap` pages and unmaps them
when they are freed, and it returns the top of its heap to the kernel as soon
as more than its trim threshold is free. Batches of varying shapes (the
token-budget batches of section 5.1) keep defeating its adaptive threshold, so
every step pays page faults on zeroed pages, and much of the step's CPU
time goes to the kernel (BENCHMARKS.md, "Training speed on real text").
Raising both thresholds keeps the memory in the process for the next step.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

# mallopt parameters of glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on 64-bit systems (32 MiB): larger
# blocks are still mapped, smaller ones are reused from the heap.
MMAP_THRESHOLD = 32 * 1024 * 1024
# Keep up to 1 GiB of free heap instead of returning it after every step.
TRIM_THRESHOLD = 1024 * 1024 * 1024
TOP_PAD = 64 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Raises glibc malloc's mmap and trim thresholds for this process.

    Returns:
        True when glibc accepted the settings; False elsewhere (another C
        library or operating system), where nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    accepted = all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (_M_TOP_PAD, TOP_PAD),
        )
    )
    logger.debug("glibc malloc thresholds raised: %s", accepted)
    return accepted
