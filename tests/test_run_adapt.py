"""Tests of transformer.run.adapt: a run started from another run's weights and vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from transformer.rundir import RunDirError


@pytest.fixture(scope="module")
def parent(tiny_reference_run, tmp_path_factory):
    """A finished tiny run (the session's `tiny_reference_run`, which tests must
    not modify) and a second corpus (other sentences) to adapt it to."""
    from conftest import write_toy_tsv

    new_tsv = write_toy_tsv(tmp_path_factory.mktemp("new_tsv"), n_train=60, n_valid=8,
                            n_test=8, seed=7)
    return Path(tiny_reference_run.run_dir), tiny_reference_run, new_tsv


def adapted_config(tsv, output_dir, parent_dir, **changes):
    """The tiny settings without the model, which comes from the parent run."""
    from conftest import TINY

    from transformer.run import RunConfig

    settings = {key: value for key, value in TINY.items() if key != "model"}
    train, valid, test = map(str, tsv)
    return RunConfig(output_dir=str(output_dir), data=train, valid=valid, test=test,
                     init_from=str(parent_dir), **{**settings, **changes})


def _weights(path):
    model = keras.saving.load_model(path, compile=False)
    return [np.array(w) for w in model.get_weights()]


def test_an_adapted_run_starts_from_the_parents_weights_with_a_fresh_optimizer(
        parent, tmp_path, monkeypatch):
    from transformer import run
    from transformer.run import checkpoints

    parent_dir, parent_result, new_tsv = parent
    started = {}
    original = checkpoints.load_parent_weights

    def spy(model, init_from):
        original(model, init_from)
        started["weights"] = [np.array(w) for w in model.get_weights()]
        started["step"] = int(model.optimizer.iterations)

    monkeypatch.setattr("transformer.run.trainer.load_parent_weights", spy)
    child_dir = tmp_path / "child"
    config = adapted_config(new_tsv, child_dir, parent_dir, epochs=1)
    result = run.train(config, verbose=0, export=False)
    for given, delivered in zip(started["weights"], _weights(parent_dir / "model.keras"),
                                strict=True):
        np.testing.assert_array_equal(given, delivered)
    assert started["step"] == 0  # a fresh optimizer: its schedule starts again
    assert result.final_step == result.config.steps_per_epoch
    assert result.config.model == parent_result.config.model
    assert result.config.vocab_size == parent_result.config.vocab_size
    record = json.loads((child_dir / "config.json").read_text())
    assert record["init_from"] == str(parent_dir)
    assert record["init_from_run"]["weights_sha256"] == parent_result.weights_sha256
    assert record["init_from_run"]["data_fingerprint"] == json.loads(
        (parent_dir / "config.json").read_text())["data_fingerprint"]
    for name in ("source", "target"):  # the parent's vocabulary, copied
        ours = sorted(p.name for p in (child_dir / "tokenizers").rglob("*"))
        assert ours == sorted(p.name for p in (parent_dir / "tokenizers").rglob("*")), name


def test_a_choice_that_contradicts_the_parent_is_refused(parent, tmp_path):
    from transformer.run import RunConfig

    parent_dir, parent_result, new_tsv = parent
    other = parent_result.config.model.d_model * 2
    with pytest.raises(ValueError, match=r"`d_model` comes from that run \(d_model=16\)"):
        RunConfig(data=str(new_tsv[0]), init_from=str(parent_dir),
                  model={**parent_result.config.model.to_dict(), "d_model": other})
    with pytest.raises(ValueError, match=r"`vocab_size` comes from that run"):
        RunConfig(data=str(new_tsv[0]), init_from=str(parent_dir), vocab_size=12345)


def test_init_from_a_run_that_has_not_finished_says_so(tmp_path):
    from transformer.run import RunConfig

    with pytest.raises(RunDirError, match="not a run directory"):
        RunConfig(data="x.tsv", init_from=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(RunDirError, match="has not finished"):
        RunConfig(data="x.tsv", init_from=str(tmp_path))


def test_the_command_line_refuses_a_contradicting_size(parent, tmp_path, capsys):
    """(README.md's `--init-from` command, run by tests/test_readme.py, adapts.)"""
    from transformer.cli.train import main

    parent_dir, _, new_tsv = parent
    train, valid, test = map(str, new_tsv)
    common = ["--data", train, "--valid", valid, "--test", test, "--init-from", str(parent_dir),
              "--epochs", "1", "--steps-per-epoch", "2", "--eval-beam", "1", "--no-export",
              "--precision", "float32"]
    assert main([*common, "--d-model", "32", "--output-dir", str(tmp_path / "bad")]) != 0
    assert "`d_model` comes from that run" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
