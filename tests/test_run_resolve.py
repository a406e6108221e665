"""Tests of the run's one configuration: `train.py` and the Python API make the
same config of the same choices, `transformer.run.recipes.resolve` completes it
once from the corpus, and `transformer.run.config` reads and refuses
`config.json` files. Nothing is trained."""

from __future__ import annotations

import dataclasses
import json

import pytest

from transformer.cli.train import _config_from_args, build_parser
from transformer.run.config import (
    CONFIG_FORMAT_VERSION,
    RunConfig,
    load_config,
    read_config,
    resumed_with,
    write_config,
)
from transformer.run.precision import default_precision
from transformer.run.recipes import CorpusFacts, default_model, resolve
from transformer.rundir import RunDirError


def _facts(num_pairs=26_000, mean_tokens=9.0):
    """A corpus of `num_pairs` pairs; its first pass makes one batch per 100 tokens."""
    def pass_batches(batch_tokens, batch_size):
        return -(-num_pairs * (batch_tokens or batch_size) // (100 * (batch_size or 1)))

    return CorpusFacts(num_pairs, mean_tokens, pass_batches)


def _cli(argv):
    return _config_from_args(build_parser().parse_args(argv))


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("uno\tone\ndos\ttwo\n", encoding="utf-8")
    return str(path)


def _choice_sets(tsv):
    """(train.py's options, the Python API's RunConfig) of the same choices."""
    return [
        ([], RunConfig()),
        (["--epochs", "2", "--num-layers", "1", "--seed", "3"],
         RunConfig(epochs=2, seed=3, model=default_model("toy", num_layers=1))),
        (["--data", tsv], RunConfig(data=tsv)),
        (["--data", tsv, "--preset", "toy", "--dropout", "0.2", "--batch-tokens", "0",
          "--time-budget", "10m", "--tokenizer", "wordpiece"],
         RunConfig(data=tsv, preset="toy", batch_tokens=0, time_budget=600.0,
                   tokenizer="wordpiece",
                   model=default_model("toy", data=tsv, dropout_rate=0.2))),
        (["--data", tsv, "--precision", "float32", "--subword-sampling", "0.1"],
         RunConfig(data=tsv, precision="float32", subword_sampling=0.1)),
    ]


def test_train_py_and_the_python_api_resolve_the_same_choices_to_the_same_config(tsv):
    for argv, python in _choice_sets(tsv):
        cli = _cli(argv)
        assert cli == python, argv
        resolved = resolve(cli, _facts())
        assert resolved == resolve(python, _facts()), argv
        assert resolved.resolved and resolve(resolved, _facts()) is resolved
    # Both train in this CPU's fastest precision unless told.
    assert resolve(_cli([]), _facts()).precision == default_precision()
    assert resolve(RunConfig(), _facts()).precision == default_precision()
    assert resolve(_cli(["--precision", "float32"]), _facts()).precision == "float32"


def test_resolve_sizes_what_the_corpus_decides_and_keeps_what_was_given(tsv):
    config = resolve(RunConfig(data=tsv), _facts(26_000, 9.0))
    assert (config.epochs, config.batch_tokens) == (7, 288)  # 180,000 pairs; 32 pairs of 9
    assert config.steps_per_epoch == -(-26_000 * 288 // 3200)
    given = resolve(RunConfig(data=tsv, epochs=3, batch_tokens=0, steps_per_epoch=5,
                              precision="mixed_bfloat16"), _facts())
    assert (given.epochs, given.batch_tokens, given.steps_per_epoch, given.precision) == (
        3, 0, 5, "mixed_bfloat16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 9  # the resolved config is the run's, once


def test_a_resume_keeps_the_saved_precision_unless_it_is_given(tsv):
    saved = resolve(RunConfig(data=tsv, output_dir="runs/x", precision="mixed_float16"),
                    _facts())
    assert resumed_with(saved, RunConfig(data=tsv, output_dir="runs/x")) == saved
    with pytest.raises(ValueError, match="Cannot change `precision`"):
        resumed_with(saved, RunConfig(data=tsv, output_dir="runs/x", precision="float32"))


def test_config_json_is_written_once_and_read_back(tmp_path, tsv):
    config = resolve(RunConfig(data=tsv, output_dir=str(tmp_path)), _facts())
    write_config(tmp_path, config, 100, 120, {"train": {"pairs": 2}})
    assert load_config(tmp_path) == config
    _, record = read_config(tmp_path)
    assert record["format_version"] == CONFIG_FORMAT_VERSION
    assert (record["input_vocab_size"], record["target_vocab_size"]) == (100, 120)


def test_a_config_json_of_a_newer_format_is_refused_in_one_line_naming_it(tmp_path):
    record = RunConfig(epochs=1, steps_per_epoch=2, batch_tokens=0, precision="float32")
    record = {**record.to_dict(), "format_version": CONFIG_FORMAT_VERSION + 1}
    (tmp_path / "config.json").write_text(json.dumps(record))
    with pytest.raises(RunDirError) as refused:
        load_config(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "config.json" in message
    assert f"config format {CONFIG_FORMAT_VERSION + 1}" in message
    record["format_version"] = "ten"
    (tmp_path / "config.json").write_text(json.dumps(record))
    with pytest.raises(RunDirError, match="format_version should be a positive integer"):
        load_config(tmp_path)


def test_a_config_json_of_format_1_reads_with_the_values_that_run_used(tmp_path):
    record = RunConfig(dataset="ted_hrlr_translate/pt_to_en", epochs=2, steps_per_epoch=3,
                       precision="float32", tokenizer="wordpiece").to_dict()
    for key in ("tokenizer", "batch_tokens", "eval_beam_size", "shared_vocab", "fit_warmup",
                "subword_model", "ema_momentum", "subword_sampling"):
        record.pop(key)
    record["model"].pop("tie_embeddings")
    (tmp_path / "config.json").write_text(json.dumps(record))
    old = load_config(tmp_path)
    assert (old.tokenizer, old.batch_tokens, old.shared_vocab, old.fit_warmup) == (
        "wordpiece", 0, False, False)
    assert (old.ema_momentum, old.subword_sampling, old.subword_model) == (0.0, 0.0, "unigram")
    assert old.resolved
