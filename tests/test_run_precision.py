"""Tests of transformer.run.precision: the default precision from the CPU flags."""

from __future__ import annotations


def test_default_precision_reads_cpu_flags(tmp_path):
    from transformer.run.precision import cpu_flags, default_precision, explain_default_precision

    assert default_precision({"avx2", "amx_bf16", "amx_tile"}) == "mixed_bfloat16"
    # AVX-512 BF16 without AMX: bfloat16 trains faster on AMD CPUs, not on Intel's.
    assert default_precision({"AuthenticAMD", "avx512f", "avx512_bf16"}) == "mixed_bfloat16"
    assert default_precision({"GenuineIntel", "avx512f", "avx512_bf16"}) == "float32"
    assert default_precision({"avx512f", "avx512_bf16"}) == "float32"
    assert default_precision({"AuthenticAMD", "avx2"}) == "float32"
    assert default_precision({"avx2", "avx512f"}) == "float32"
    assert default_precision(set()) == "float32"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                       "flags\t\t: fpu sse avx512_bf16\nprocessor\t: 1\n")
    assert cpu_flags(cpuinfo) == {"AuthenticAMD", "fpu", "sse", "avx512_bf16"}
    assert default_precision(cpu_flags(cpuinfo)) == "mixed_bfloat16"
    assert cpu_flags(tmp_path / "missing") == set()
    assert explain_default_precision({"amx_bf16"}).startswith("mixed_bfloat16")
    assert "AMD" in explain_default_precision({"AuthenticAMD", "avx512_bf16"})
    assert explain_default_precision({"avx512_bf16"}).startswith("float32")
    assert explain_default_precision(set()).startswith("float32")
