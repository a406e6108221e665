"""bench/common.py: pinning, reading pairs, the copyable-token measure, BLEU
and the machine record (no TensorFlow model, no training)."""

from __future__ import annotations

import os
import sys

import pytest
from bench_helpers import BENCH, load_bench_module

common = load_bench_module("common", BENCH / "common.py")


def test_pinned_puts_taskset_before_the_command_and_leaves_it_alone_without_cores():
    assert common.pinned(["python", "train.py"], 0) == ["taskset", "-c", "0", "python",
                                                        "train.py"]
    assert common.pinned(["python"], "0,1")[:3] == ["taskset", "-c", "0,1"]
    assert common.pinned(("python", "x"), None) == ["python", "x"]


def test_read_pairs_names_the_file_and_line_of_a_pair_without_a_tab(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("hola\thello\n\nadiós\tgoodbye\textra\nsin tabulador\n", encoding="utf-8")
    with pytest.raises(common.BenchError, match=r"test\.tsv:4: expected source<TAB>target"):
        common.read_pairs(path)
    path.write_text("hola\thello\n\nadiós\tgoodbye\textra\n", encoding="utf-8")
    assert common.read_pairs(path) == [("hola", "hello"), ("adiós", "goodbye")]
    assert common.read_pairs(path, limit=1) == [("hola", "hello")]
    with pytest.raises(common.BenchError, match="missing.tsv"):
        common.read_pairs(tmp_path / "missing.tsv")


@pytest.mark.parametrize("token, kinds", [
    ("GNOME", ["inner_capital"]), ("iPhone", ["inner_capital"]), ("Archivo", []),
    ("v2.0", ["digit"]), ("/etc/fstab", ["slash"]), ("--help", ["leading_dash"]),
    ("-v", ["leading_dash"]), ("-", []), ("--", []), ("x86_64/", ["digit", "slash"]),
])
def test_kinds_of_copyable_tokens(token, kinds):
    assert common.kinds(token) == kinds


def test_copyable_share_counts_tokens_the_reference_keeps_and_the_output_copies():
    sources = ['Abrir "/etc/fstab" con -v', "Versión 2.0 de GNOME", "Guardar como PDF"]
    references = ["Open /etc/fstab with -v", "GNOME version 2.0.", "Save as pdf"]
    outputs = ["Open /etc/fstab with -V", "Version 2.0 of Gnome", "Save as PDF"]
    result = common.copyable_share(sources, references, outputs)
    # Candidates: /etc/fstab, -v, 2.0, GNOME, PDF; the reference keeps all but PDF;
    # the output copies /etc/fstab and 2.0 ("-V", "Gnome" are changed).
    assert (result["candidates"], result["copyable"], result["copied"]) == (5, 4, 2)
    assert result["copied_share"] == 0.5
    assert result["by_kind"]["inner_capital"] == {"candidates": 2, "copyable": 1, "copied": 0}
    assert result["by_kind"]["slash"] == {"candidates": 1, "copyable": 1, "copied": 1}


def test_copyable_share_counts_repeated_tokens_once_per_copy():
    result = common.copyable_share(["KDE y KDE"], ["KDE and KDE"], ["KDE and kde"])
    assert (result["copyable"], result["copied"]) == (2, 1)


def test_copyable_share_without_copyable_tokens_is_none():
    assert common.copyable_share(["hola"], ["hello"], ["hi"])["copied_share"] is None


def test_copyable_share_rejects_sequences_of_different_lengths():
    with pytest.raises(ValueError, match="2 sources, 2 references, 1 outputs"):
        common.copyable_share(["a", "b"], ["a", "b"], ["a"])


def test_bleu_is_lower_cased_13a_and_all_ways_adds_the_cased_and_train_py_forms():
    hypotheses = ["The cat sat on the mat .", "Hello world"]
    references = ["the cat sat on the mat.", "hello world"]
    assert common.bleu_lc(hypotheses, hypotheses) == 100.0
    scores = common.bleu_all_ways(hypotheses, references)
    assert scores["bleu_lc_13a"] == common.bleu_lc(hypotheses, references)
    assert scores["bleu_cased_13a"] < scores["bleu_lc_13a"]
    assert "case:lc" in scores["bleu_lc_13a_signature"]
    assert scores["exact_match_train_py"] == 1.0  # normalize_text: case and punctuation


def test_machine_record_names_the_cpu_and_the_precision_train_py_picks_there():
    from transformer.run.precision import cpu_flags, default_precision

    record = common.machine()
    flags = cpu_flags()
    assert record["train_py_precision"] == default_precision(flags)
    assert record["avx512_bf16"] == ("avx512_bf16" in flags)
    assert record["amx_bf16"] == ("amx_bf16" in flags)
    assert len(record["loadavg"]) == 3 and record["cpu_count"] == os.cpu_count()


def test_worker_json_returns_the_last_line_and_reports_a_failure(capsys):
    ok = [sys.executable, "-c", "print('noise'); print('{\"ms\": 1.5}')"]
    assert common.worker_json(ok, None, "the worker") == {"ms": 1.5}
    failing = [sys.executable, "-c", "import sys; sys.exit('broken')"]
    with pytest.raises(common.BenchError, match="the worker failed"):
        common.worker_json(failing, None, "the worker")
    assert "broken" in capsys.readouterr().err


def test_the_examples_in_the_docstrings_run():
    import doctest

    failed, attempted = doctest.testmod(common, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted >= 4 and failed == 0
