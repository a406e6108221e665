"""The peer benchmark's pure-Python parts: the JoeyNMT configs and their
parameter count, and reading JoeyNMT's report (JoeyNMT itself is not installed
here). The shared scoring is tested in tests/test_bench_common.py."""

from __future__ import annotations

import pytest
from bench_helpers import BENCH, load_bench_module

configs = load_bench_module("configs", BENCH / "peer_joeynmt" / "configs.py")
run = load_bench_module("peer_joeynmt_run", BENCH / "peer_joeynmt" / "run.py")

ARCH = {"num_layers": 4, "d_model": 128, "num_heads": 8, "dff": 512,
        "normalize_first": True, "tie_embeddings": True}
DATA = dict.fromkeys(("train", "dev", "test", "model_file", "vocab_file"), "x")


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


def test_the_fair_peer_takes_the_presets_architecture_and_the_runs_other_settings(tmp_path):
    """`--preset small` gives JoeyNMT the sizes the size rule would train, with
    the real-text run's norms and tying; its count equals JoeyNMT's at them."""
    default, _ = run.project_model(tmp_path, 800)
    small, parameters = run.project_model(tmp_path, 800, "small")
    assert (small["num_layers"], small["d_model"], small["num_heads"], small["dff"]) == \
        (2, 128, 8, 512) != (default["num_layers"], default["d_model"], default["num_heads"],
                             default["dff"])
    assert (small["normalize_first"], small["tie_embeddings"]) == \
        (default["normalize_first"], default["tie_embeddings"])
    assert configs.parameter_count(configs.recipe_arch(DATA, "m", small), 800) == parameters
    for setup, preset in (("cpu", "huge"), ("recipe", "small")):  # recipe: JoeyNMT's own
        with pytest.raises(SystemExit):
            run.parse_args(["--setup", setup, "--minutes", "1", "--preset", preset])


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


launch = load_bench_module("peer_joeynmt_launch", BENCH / "peer_joeynmt" / "launch.py")


@pytest.mark.parametrize("counts_validations, spent", [(False, 70.0), (True, 100.0)])
def test_the_peers_budget_counts_its_validations_only_when_asked(counts_validations, spent):
    clock = launch._TrainingClock(90.0, counts_validations)
    clock.started, clock.validation_seconds = 1000.0, 30.0
    assert clock.spent(1100.0) == spent
    clock.stopped = 1100.0
    assert clock.to_dict()["budget_counts"] == ("training and validations" if counts_validations
                                                else "training batches only")
