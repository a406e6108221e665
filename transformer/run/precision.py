"""The training precision: a Keras dtype policy, and the one default for this CPU.

Standard library only: the command line reads the choices and the default
before TensorFlow is imported.
"""

from __future__ import annotations

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
_AMX_BF16 = "amx_bf16"
_AVX512_BF16 = "avx512_bf16"
_AMD = "AuthenticAMD"


def cpu_flags(cpuinfo_path="/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of `/proc/cpuinfo`, and its `vendor_id` among them
    (empty where there is none, e.g. macOS)."""
    found: set[str] = set()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    found.add(value.strip())
                elif line.startswith("flags"):
                    return found | set(value.split())
    except OSError:
        pass
    return found


def default_precision(flags: set[str] | None = None) -> str:
    """The precision `train.py` uses unless told: the one decision, in one place.

    `mixed_bfloat16` where bfloat16 matrix products are faster than float32's:
    on CPUs with AMX tiles for bfloat16 (the `amx_bf16` flag of
    `/proc/cpuinfo`), and on AMD CPUs with AVX-512 BF16 (`avx512_bf16`, Zen 4
    and later); `float32` elsewhere. bfloat16 keeps float32's exponent range,
    so it needs no loss scaling; variables stay float32.

    On Intel CPUs AVX-512 BF16 without AMX is not enough: there a
    `mixed_bfloat16` step is slower than a float32 one (BENCHMARKS.md,
    "Machines"; the measurements behind it are in the git history of
    BENCHMARKS.md and in bench/TRAIN_SPEED.md).

    Args:
        flags: CPU flags (and vendor) to decide from, as `cpu_flags` returns
            them; read from `/proc/cpuinfo` by default.

    Returns:
        `"mixed_bfloat16"` or `"float32"`.
    """
    return "mixed_bfloat16" if _native_bfloat16(flags)[0] else "float32"


def _native_bfloat16(flags: set[str] | None) -> tuple[bool, str]:
    """Whether bfloat16 trains faster than float32 on this CPU, and why, in a few words."""
    flags = cpu_flags() if flags is None else flags
    if _AMX_BF16 in flags:
        return True, "this CPU has AMX bfloat16 (amx_bf16)"
    if _AVX512_BF16 in flags and _AMD in flags:
        return True, "this AMD CPU has avx512_bf16, which trains faster than float32"
    if _AVX512_BF16 in flags:
        return False, "this CPU has avx512_bf16 but no AMX, and bfloat16 trains no faster"
    return False, "this CPU has no native bfloat16"


def explain_default_precision(flags: set[str] | None = None) -> str:
    """A few words saying what `default_precision` picks on this machine, and why."""
    native, reason = _native_bfloat16(flags)
    return f"{'mixed_bfloat16' if native else 'float32'} here" + (
        f", as {reason}" if native else f": {reason}")

