"""Tests of transformer.run.sampling: when a run reads drawn segmentations.

Training with the draws, and resuming it, is in test_run_resume.py.
"""

from __future__ import annotations

import json
import types

import pytest

from transformer import rundir
from transformer.run import recipes, sampling
from transformer.run.config import RunConfig


def _config(**changes):
    settings = {"data": "a.tsv", "epochs": 20, "steps_per_epoch": 100, "subword_sampling": 0.5,
                **changes}
    return RunConfig(**settings)


def _clock(seconds):
    return types.SimpleNamespace(seconds=types.SimpleNamespace(numpy=lambda: seconds))


def test_expected_passes_are_the_epochs_or_what_the_budget_allows():
    assert sampling.expected_passes(_config(), 100, 60.0) == 20.0
    budget = _config(time_budget=900.0)
    assert sampling.expected_passes(budget, 100, 60.0) == pytest.approx(15.0)
    assert sampling.expected_passes(budget, 200, 600.0) == pytest.approx(3.0)
    assert sampling.expected_passes(budget, 100, 10.0) == 20.0  # never past the epochs
    workers = _config(time_budget=900.0, strategy="multi-worker")
    assert sampling.expected_passes(workers, 100, 600.0) == 20.0  # one decision for all


def test_the_threshold_is_in_passes():
    assert recipes.samples_subwords(recipes.SAMPLING_MIN_PASSES)
    assert not recipes.samples_subwords(recipes.SAMPLING_MIN_PASSES - 0.5)


@pytest.fixture
def data():
    best = types.SimpleNamespace(variants=1)
    return types.SimpleNamespace(train_tokens=best, corpus=types.SimpleNamespace(train=["pair"]),
                                 tokenizers="tokenizers")


@pytest.fixture
def drawn(monkeypatch):
    calls = []

    def sample_pairs(pairs, tokenizers, max_tokens, alpha, variants, seed, from_pass, best):
        calls.append((alpha, variants, seed, from_pass))
        return types.SimpleNamespace(variants=variants + 1, best=best)

    monkeypatch.setattr(sampling, "sample_pairs", sample_pairs)
    return calls


def test_a_budget_run_decides_after_its_first_pass_and_records_it(tmp_path, data, drawn):
    config = _config(time_budget=900.0, seed=3)
    first = sampling.training_pairs(config, data, 0, _clock(0.0), tmp_path)
    assert first is data.train_tokens and not drawn  # the first pass reads the best split
    assert not (tmp_path / rundir.SAMPLING_FILE).exists()
    pairs = sampling.training_pairs(config, data, 100, _clock(60.0), tmp_path)  # 15 passes
    assert drawn == [(0.5, recipes.SAMPLED_SEGMENTATIONS, 3, 1)]
    assert pairs.best is data.train_tokens
    record = json.loads((tmp_path / rundir.SAMPLING_FILE).read_text())
    assert record == {"samples": True, "expected_passes": 15.0, "decided_at_step": 100}
    data.train_tokens = pairs  # already drawn: kept, not drawn again
    assert sampling.training_pairs(config, data, 500, _clock(300.0), tmp_path) is pairs
    assert len(drawn) == 1


def test_a_short_budget_run_keeps_the_best_split_and_so_does_its_resume(tmp_path, data, drawn):
    config = _config(time_budget=300.0)
    assert sampling.training_pairs(config, data, 100, _clock(60.0), tmp_path) is data.train_tokens
    record = json.loads((tmp_path / rundir.SAMPLING_FILE).read_text())
    assert record["samples"] is False and record["expected_passes"] == 5.0
    # Resumed later, faster: the recorded decision stands.
    assert sampling.training_pairs(config, data, 400, _clock(1.0), tmp_path) is data.train_tokens
    assert not drawn


def test_without_sampling_nothing_is_decided(tmp_path, data, drawn):
    config = _config(subword_sampling=0.0)
    assert sampling.training_pairs(config, data, 100, _clock(1.0), tmp_path) is data.train_tokens
    assert not drawn and not (tmp_path / rundir.SAMPLING_FILE).exists()


@pytest.mark.parametrize("text", ['{"samples": "yes"}', "[1]", "{"])
def test_a_damaged_record_is_refused_naming_the_file(tmp_path, data, drawn, text):
    (tmp_path / rundir.SAMPLING_FILE).write_text(text)
    with pytest.raises(rundir.RunDirError, match=rundir.SAMPLING_FILE):
        sampling.training_pairs(_config(), data, 100, _clock(1.0), tmp_path)
    assert not drawn
