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
from transformer.run.sampling import record_legacy_sampling
from transformer.run.trainer import _training_pairs


class _Pairs:
    """Stands for the best split's `TokenizedPairs`: 3,200 pairs, one variant."""

    variants = 1

    def __len__(self):
        return 3200


def _config(**changes):
    settings = {"data": "a.tsv", "epochs": 20, "steps_per_epoch": 100, "batch_tokens": 0,
                "batch_size": 32, **changes}  # 100 batches a pass
    return RunConfig(**settings)


def _training(tmp_path, data, **changes):
    """The trainer's choice of the pairs `fit` reads from a step after some seconds."""
    config = _config(**changes)
    session = types.SimpleNamespace(run_dir=tmp_path, write_dir=tmp_path)

    def pairs(step, seconds, current=None):
        current = data.train_tokens if current is None else current
        return _training_pairs(session, config, data, current, step, seconds)

    return pairs


def _record(tmp_path):
    return json.loads((tmp_path / rundir.SAMPLING_FILE).read_text())


def test_expected_passes_are_the_epochs_or_what_the_budget_allows():
    best = _Pairs()
    assert sampling.expected_passes(_config(), best, 100, 60.0) == 20.0
    budget = _config(time_budget=900.0)
    assert sampling.expected_passes(budget, best, 100, 60.0) == pytest.approx(15.0)
    assert sampling.expected_passes(budget, best, 200, 600.0) == pytest.approx(3.0)
    assert sampling.expected_passes(budget, best, 100, 10.0) == 20.0  # never past the epochs
    # Epochs of two passes each: passes, not epochs, count.
    assert sampling.expected_passes(_config(steps_per_epoch=200), best, 200, 1.0) == 40.0
    # Workers keep their own clocks: with a budget they cannot agree, so none samples.
    workers = _config(time_budget=900.0, strategy="multi-worker")
    assert sampling.expected_passes(workers, best, 100, 60.0) == 0.0


def test_only_a_run_long_enough_splits_off_its_first_epoch():
    best = _Pairs()
    assert sampling.may_sample(_config(subword_sampling=0.5), best)
    few = recipes.SAMPLING_MIN_PASSES - 1
    assert not sampling.may_sample(_config(subword_sampling=0.5, epochs=few), best)
    assert not sampling.may_sample(_config(subword_sampling=0.0), best)


@pytest.fixture
def data():
    return types.SimpleNamespace(train_tokens=_Pairs(), corpus=types.SimpleNamespace(train=["p"]),
                                 tokenizers="tokenizers")


@pytest.fixture
def drawn(monkeypatch):
    calls = []

    def sample_pairs(pairs, tokenizers, max_tokens, alpha, variants, seed, from_pass, best):
        calls.append((alpha, variants, seed, from_pass))
        return types.SimpleNamespace(variants=variants + 1, best=best)

    monkeypatch.setattr(sampling, "sample_pairs", sample_pairs)
    return calls


def test_a_budget_run_decides_after_its_first_epoch_and_records_it(tmp_path, data, drawn):
    training = _training(tmp_path, data, time_budget=900.0, seed=3, subword_sampling=0.5)
    first = training(0, 0.0)
    assert first is data.train_tokens and not drawn  # the first epoch reads the best split
    assert not (tmp_path / rundir.SAMPLING_FILE).exists()
    pairs = training(100, 60.0)  # on course for 15
    assert drawn == [(0.5, recipes.SAMPLED_SEGMENTATIONS, 3, 1)]
    assert pairs.best is data.train_tokens
    assert _record(tmp_path) == {"samples": True, "expected_passes": 15.0,
                                 "decided_at_step": 100, "from_pass": 1}
    assert training(500, 300.0, pairs) is pairs  # already drawn: kept, not drawn again
    assert len(drawn) == 1


def test_a_run_decided_late_samples_from_the_next_whole_pass(tmp_path, data, drawn):
    """Resumed past its first epoch without a record (a crash before it was
    written), a run keeps the best split for the passes it has begun."""
    _training(tmp_path, data, subword_sampling=0.5)(250, 1.0)
    assert drawn[0][3] == 3 and _record(tmp_path)["from_pass"] == 3


def test_a_short_budget_run_keeps_the_best_split_and_so_does_its_resume(tmp_path, data, drawn,
                                                                         monkeypatch):
    training = _training(tmp_path, data, time_budget=300.0, subword_sampling=0.5)
    assert training(100, 60.0) is data.train_tokens
    record = _record(tmp_path)
    assert record["samples"] is False and record["expected_passes"] == 5.0
    # Resumed later with a larger budget, or another rule: the record stands.
    monkeypatch.setattr(recipes, "SAMPLING_MIN_PASSES", 2)
    longer = _training(tmp_path, data, time_budget=3000.0, subword_sampling=0.5)
    assert longer(400, 1.0) is data.train_tokens
    assert not drawn


def test_without_sampling_nothing_is_decided(tmp_path, data, drawn):
    training = _training(tmp_path, data, subword_sampling=0.0)
    assert training(100, 1.0) is data.train_tokens
    assert not drawn and not (tmp_path / rundir.SAMPLING_FILE).exists()


@pytest.mark.parametrize("text", ['{"samples": "yes"}', "[1]", "{", '{"samples": true}',
                                  '{"samples": true, "from_pass": 0}', b"\xff\xfe"])
def test_a_damaged_record_is_refused_naming_the_file(tmp_path, data, drawn, text):
    path = tmp_path / rundir.SAMPLING_FILE
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(rundir.RunDirError, match=rundir.SAMPLING_FILE):
        _training(tmp_path, data, subword_sampling=0.5)(100, 1.0)
    assert not drawn


def test_a_run_of_format_9_keeps_its_draws_from_pass_9(tmp_path):
    record_legacy_sampling(tmp_path, {"format_version": 9, "subword_sampling": 0.0})
    assert not (tmp_path / rundir.SAMPLING_FILE).exists()
    record_legacy_sampling(tmp_path, {"format_version": 9, "subword_sampling": 0.5})
    assert _record(tmp_path) == {"samples": True, "from_pass": 8, "decided_at_step": 0}
    (tmp_path / rundir.SAMPLING_FILE).unlink()
    record_legacy_sampling(tmp_path, {"format_version": 10, "subword_sampling": 0.5})
    assert not (tmp_path / rundir.SAMPLING_FILE).exists()
