"""The training precision: a Keras dtype policy, and the one default for this CPU.

Standard library only: the command line reads the choices and the default
before TensorFlow is imported.
"""

from __future__ import annotations

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
_AMX_BF16 = "amx_bf16"


def cpu_flags(cpuinfo_path="/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of `/proc/cpuinfo` (empty where there is none, e.g. macOS)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def default_precision(flags: set[str] | None = None) -> str:
    """The precision `train.py` uses unless told: the one decision, in one place.

    `mixed_bfloat16` when the CPU has AMX tiles for bfloat16 (the `amx_bf16`
    flag of `/proc/cpuinfo`), else `float32`. bfloat16 keeps float32's exponent
    range, so it needs no loss scaling; variables stay float32.

    AVX-512 BF16 alone (`avx512_bf16`, without AMX) is not enough: its
    bfloat16 matrix products run slower than float32's, so a
    `mixed_bfloat16` step is slower than a float32 one there (measurements in
    BENCHMARKS.md, "Training speed", and bench/TRAIN_SPEED.md).

    Args:
        flags: CPU flags to decide from; read from `/proc/cpuinfo` by default.

    Returns:
        `"mixed_bfloat16"` or `"float32"`.
    """
    flags = cpu_flags() if flags is None else flags
    return "mixed_bfloat16" if _AMX_BF16 in flags else "float32"


def explain_default_precision(flags: set[str] | None = None) -> str:
    """A few words saying what `default_precision` picks on this machine, and why."""
    flags = cpu_flags() if flags is None else flags
    if _AMX_BF16 in flags:
        return "mixed_bfloat16 here, as this CPU has AMX bfloat16 (amx_bf16)"
    if "avx512_bf16" in flags:
        return "float32 here: this CPU has avx512_bf16 but no AMX, and bfloat16 trains no faster"
    return "float32 here: this CPU has no native bfloat16"

