"""The peer benchmark's pure-Python parts: the copyable-token measure, the
JoeyNMT configs and their parameter count (JoeyNMT itself is not installed here)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


copyable = _load("copyable_tokens", BENCH / "copyable_tokens.py")
configs = _load("configs", BENCH / "peer_joeynmt" / "configs.py")
run = _load("peer_joeynmt_run", BENCH / "peer_joeynmt" / "run.py")

ARCH = {"num_layers": 4, "d_model": 128, "num_heads": 8, "dff": 512,
        "normalize_first": True, "tie_embeddings": True}
DATA = dict.fromkeys(("train", "dev", "test", "model_file", "vocab_file"), "x")


@pytest.mark.parametrize("token, kinds", [
    ("GNOME", ["inner_capital"]), ("iPhone", ["inner_capital"]), ("Archivo", []),
    ("v2.0", ["digit"]), ("/etc/fstab", ["slash"]), ("--help", ["leading_dash"]),
    ("-v", ["leading_dash"]), ("-", []), ("--", []), ("x86_64/", ["digit", "slash"]),
])
def test_kinds_of_copyable_tokens(token, kinds):
    assert copyable.kinds(token) == kinds


def test_copyable_share_counts_tokens_the_reference_keeps_and_the_output_copies():
    sources = ['Abrir "/etc/fstab" con -v', "Versión 2.0 de GNOME", "Guardar como PDF"]
    references = ["Open /etc/fstab with -v", "GNOME version 2.0.", "Save as pdf"]
    outputs = ["Open /etc/fstab with -V", "Version 2.0 of Gnome", "Save as PDF"]
    result = copyable.copyable_share(sources, references, outputs)
    # Candidates: /etc/fstab, -v, 2.0, GNOME, PDF; the reference keeps all but PDF;
    # the output copies /etc/fstab and 2.0 ("-V", "Gnome" are changed).
    assert (result["candidates"], result["copyable"], result["copied"]) == (5, 4, 2)
    assert result["copied_share"] == 0.5
    assert result["by_kind"]["inner_capital"] == {"candidates": 2, "copyable": 1, "copied": 0}
    assert result["by_kind"]["slash"] == {"candidates": 1, "copyable": 1, "copied": 1}


def test_copyable_share_counts_repeated_tokens_once_per_copy():
    result = copyable.copyable_share(["KDE y KDE"], ["KDE and KDE"], ["KDE and kde"])
    assert (result["copyable"], result["copied"]) == (2, 1)


def test_copyable_share_without_copyable_tokens_is_none():
    assert copyable.copyable_share(["hola"], ["hello"], ["hi"])["copied_share"] is None


def test_copyable_share_rejects_sequences_of_different_lengths():
    with pytest.raises(ValueError, match="2 sources, 2 references, 1 outputs"):
        copyable.copyable_share(["a", "b"], ["a", "b"], ["a"])


def test_recipe_arch_is_the_recipe_at_the_given_architecture():
    recipe = configs.recipe(DATA, "m")
    arch = configs.recipe_arch(DATA, "m", ARCH)
    for stack in ("encoder", "decoder"):
        part = arch["model"][stack]
        assert (part["num_layers"], part["hidden_size"], part["num_heads"], part["ff_size"],
                part["layer_norm"]) == (4, 128, 8, 512, "pre")
        assert part["dropout"] == recipe["model"][stack]["dropout"] == 0.3
    assert arch["training"] == recipe["training"]
    assert recipe["training"]["batch_size"] == 4096 and recipe["training"]["scheduling"] == "plateau"


def test_parameter_count_is_the_projects_at_its_architecture():
    """The JoeyNMT count (checked against JoeyNMT's own log when the benchmark
    runs) equals the Keras model's count at the same sizes."""
    import tensorflow as tf

    from transformer.model import build_model
    from transformer.model_config import TransformerConfig

    model = build_model(TransformerConfig(num_layers=4, d_model=128, num_heads=8, dff=512,
                                          tie_embeddings=True, normalize_first=True), 800, 800)
    tokens = tf.ones((1, 3), tf.int64)
    model((tokens, tokens), training=False)
    assert configs.parameter_count(configs.recipe_arch(DATA, "m", ARCH), 800) == \
        model.count_params()
    # The recipe at 8000 pieces: 13.1M parameters.
    assert configs.parameter_count(configs.recipe(DATA, "m"), 8000) == 13_108_224


@pytest.mark.parametrize("warmup", [50, 1000, 4000])
def test_cpu_schedule_peaks_at_the_projects_rate_and_starts_at_its_first_step(warmup):
    training = configs.cpu(DATA, "m", ARCH, warmup=warmup)["training"]
    factor, d = training["learning_rate_factor"], ARCH["d_model"]

    def noam(step):  # JoeyNMT's NoamScheduler
        return factor * d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)

    assert noam(warmup) == pytest.approx(configs.PROJECT_PEAK_RATE)
    assert max(noam(s) for s in range(1, 3 * warmup)) == pytest.approx(configs.PROJECT_PEAK_RATE)
    assert training["learning_rate"] == pytest.approx(noam(1))
    assert training["learning_rate_min"] < noam(1)


@pytest.mark.parametrize("validation_freq", [2, 30, 97, 500, 1000])
def test_cpu_logging_freq_follows_joeynmts_rules(validation_freq):
    training = configs.cpu(DATA, "m", ARCH, validation_freq=validation_freq)["training"]
    logging_freq = training["logging_freq"]
    assert logging_freq < validation_freq and validation_freq % logging_freq == 0
    assert logging_freq <= 50


def test_cpu_rejects_a_validation_every_update():
    with pytest.raises(ValueError, match="validation_freq >= 2"):
        configs.cpu(DATA, "m", ARCH, validation_freq=1)


def test_test_config_decodes_the_test_split_from_the_checkpoint():
    config = configs.cpu(DATA, "m", ARCH)
    test = configs.for_test(config, "/runs/best.ckpt")
    assert "train" not in test["data"] and "dev" not in test["data"]
    assert test["testing"]["load_model"] == "/runs/best.ckpt"
    assert test["testing"]["beam_size"] == 4
    assert "train" in config["data"]  # the original is not changed


def test_validations_are_read_from_joeynmts_report(tmp_path):
    (tmp_path / "validations.txt").write_text(
        "Steps: 30\tloss: 7.36832\tacc: 0.09449\tppl: 1584.96771\tbleu: 0.00000\tLR: 0.0008\t*\n"
        "Steps: 600\tloss: 3.1\tacc: 0.4\tppl: 22.1\tbleu: 12.34000\tLR: 0.0012\t\n",
        encoding="utf-8")
    assert run.validations(tmp_path) == [{"step": 30, "valid_bleu": 0.0},
                                         {"step": 600, "valid_bleu": 12.34}]
    assert run.validations(tmp_path / "missing") == []


def test_budget_curve_plots_its_runs_beside_the_peer(tmp_path):
    import json

    budget_curve = _load("budget_curve", BENCH / "budget_curve.py")
    runs = {"runs": [
        {"minutes": m, "train_seconds": 60.0 * m, "translate_beam4": {"bleu_lc_13a": b}}
        for m, b in ((10, 30.0), (5, 20.0))
    ]}
    peer = {"setup": "cpu", "minutes": 45.0, "bleu": {"bleu_lc_13a": 25.0}}
    (tmp_path / "runs.json").write_text(json.dumps(runs), encoding="utf-8")
    (tmp_path / "peer.json").write_text(json.dumps(peer), encoding="utf-8")
    png = tmp_path / "curve.png"
    assert budget_curve.main(["--from-json", str(tmp_path / "runs.json"), "--peer",
                              str(tmp_path / "peer.json"), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_budget_curve_joins_files_of_one_label_into_one_line(tmp_path, monkeypatch):
    import json

    budget_curve = _load("budget_curve", BENCH / "budget_curve.py")
    paths = []
    for name, label, minutes in (("a", "defaults", 15), ("b", "defaults", 5), ("c", "other", 15)):
        record = {"label": label, "runs": [{"minutes": minutes, "train_seconds": 60.0 * minutes,
                                             "translate_beam4": {"bleu_lc_13a": 1.0}}]}
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(record), encoding="utf-8")
    drawn = []
    monkeypatch.setattr(budget_curve, "plot", lambda series, *rest: drawn.append(series))
    assert budget_curve.main(["--from-json", *map(str, paths)]) == 0
    [series] = drawn
    assert [(label, sorted(r["minutes"] for r in runs)) for label, runs in series] == [
        ("defaults", [5, 15]), ("other", [15])]

def test_machine_record_names_the_cpu_and_the_precision_train_py_picks_there():
    from transformer.run.precision import cpu_flags, default_precision

    scoring = _load("real_text_scoring", BENCH / "real_text_scoring.py")
    record = scoring.machine()
    flags = cpu_flags()
    assert record["train_py_precision"] == default_precision(flags)
    assert record["avx512_bf16"] == ("avx512_bf16" in flags)
    assert record["amx_bf16"] == ("amx_bf16" in flags)
    assert len(record["loadavg"]) == 3 and record["cpu_count"] == os.cpu_count()
