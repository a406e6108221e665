"""Keeps a training step's freed memory in the process for the next step.

A training step allocates and frees tensors of a few to tens of megabytes (the
logits and their gradient are `batch x length x vocabulary` floats). Two
allocators serve them, and both hand freed blocks back to the kernel by default:

- TensorFlow asks malloc for every CPU tensor unless told, before it is
  imported, to use its own best-fit-with-coalescing pool
  (`TF_CPU_ALLOCATOR_USE_BFC`), which keeps freed memory in a pool sized by
  the run's peak.
- glibc serves blocks above its mmap threshold with fresh `mmap` pages and
  unmaps them when they are freed, and it returns the top of its heap to the
  kernel as soon as more than its trim threshold is free. Batches of varying
  shapes (the token-budget batches of section 5.1) keep defeating its adaptive
  threshold; raising both thresholds keeps the memory.

Otherwise every step pays page faults on zeroed pages, and much of the step's
CPU time goes to the kernel (BENCHMARKS.md, "Training speed").
`use_fast_allocators` does both; it is the one entry point of `train.py` and
of `transformer.run.train`. Standard library only: importing it does not
import TensorFlow.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
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
# TensorFlow reads it once, when it creates its CPU allocator (at import).
BFC_ALLOCATOR_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def use_fast_allocators() -> bool:
    """Keeps freed memory for the next step in both allocators (module docstring).

    TensorFlow's memory pool is chosen only when TensorFlow is not imported
    yet (it reads the setting once, at import; setting it later would only
    pass it on to child processes), and a value already in the environment
    (`TF_CPU_ALLOCATOR_USE_BFC=false`) is kept. glibc's thresholds are raised
    in any case (`keep_freed_memory`).

    Returns:
        Whether TensorFlow's pool will be used: False when TensorFlow was
        imported before, or the environment turned it off.

    Example, before TensorFlow is imported::

        use_fast_allocators()  # True: TensorFlow's pool will be used
    """
    pool = False
    if "tensorflow" not in sys.modules:
        value = os.environ.setdefault(BFC_ALLOCATOR_ENV, "true")
        pool = value.lower() in ("true", "1")
    keep_freed_memory()
    return pool


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
