"""Tests of transformer.run.fitting's subword sampling plan: when a run reads drawn segmentations.

Training with the draws, and resuming it, is in test_run_resume.py.
"""

from __future__ import annotations

import itertools
import json
import types

import pytest

from transformer import rundir
from transformer.run import fitting, recipes
from transformer.run.config import RunConfig
from transformer.run.fitting import record_legacy_sampling
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
    assert fitting.expected_passes(_config(), best, 100, 60.0) == 20.0
    budget = _config(time_budget=900.0)
    assert fitting.expected_passes(budget, best, 100, 60.0) == pytest.approx(15.0)
    assert fitting.expected_passes(budget, best, 200, 600.0) == pytest.approx(3.0)
    assert fitting.expected_passes(budget, best, 100, 10.0) == 20.0  # never past the epochs
    # Epochs of two passes each: passes, not epochs, count.
    assert fitting.expected_passes(_config(steps_per_epoch=200), best, 200, 1.0) == 40.0
    # The workers of a multi-worker run count the chief's seconds, so they decide alike.
    workers = _config(time_budget=900.0, strategy="multi-worker")
    assert fitting.expected_passes(workers, best, 100, 60.0) == pytest.approx(15.0)


def test_only_a_run_long_enough_splits_off_its_first_epoch():
    best = _Pairs()
    assert fitting.may_sample(_config(subword_sampling=0.5), best)
    few = recipes.SAMPLING_MIN_PASSES - 1
    assert not fitting.may_sample(_config(subword_sampling=0.5, epochs=few), best)
    assert not fitting.may_sample(_config(subword_sampling=0.0), best)


@pytest.fixture
def data():
    return types.SimpleNamespace(train_tokens=_Pairs(), corpus=types.SimpleNamespace(train=["p"]),
                                 tokenizers="tokenizers")


@pytest.fixture
def drawn(monkeypatch):
    calls = []

    def sample_pairs(pairs, tokenizers, max_tokens, alpha, variants, seed, from_pass, best,
                     directory=None):
        calls.append((alpha, variants, seed, from_pass))
        return types.SimpleNamespace(variants=variants + 1, best=best)

    monkeypatch.setattr(fitting, "sample_pairs", sample_pairs)
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


# -- token-budget passes of different lengths --------------------------------

_PAIRS = 400
_BUDGET = 24


def _numbered_pairs(variants=1, from_pass=0):
    """`TokenizedPairs` whose pair `i` reads id `100 + i` in its best split and
    `1000 + i` in its drawn one, at its source's position 1; lengths 3 to 23,
    seeded so that with `_BUDGET` and seed 0 the first passes make 285, 284 and
    283 batches."""
    import numpy as np
    import tensorflow as tf

    from transformer.data.batching import TokenizedPairs

    lengths = np.random.default_rng(2).integers(3, 24, _PAIRS)
    context = [[2, base + i] + [7] * (int(n) - 3) + [3]
               for base in (100, 1000)[:variants] for i, n in enumerate(lengths)]
    target = [[2, 5, 3]] * (_PAIRS * variants)
    return TokenizedPairs(tf.ragged.constant(context, dtype=tf.int32),
                          tf.ragged.constant(target, dtype=tf.int32), max_tokens=64,
                          variants=variants, sampled_from_pass=from_pass)


def _stream_ids(tokens, start_step=0, batches=None):
    """The pairs' ids of each batch `fit` reads from `start_step` on (the trainer's stream)."""
    from transformer.run.fitting import train_stream as _train_stream

    stream = _train_stream(tokens, _BUDGET, 32, 0, start_step)
    return [batch[0][0][:, 1].numpy().tolist() for batch in stream.take(batches)]


@pytest.fixture(scope="module")
def pass_starts():
    """The step at which each of the first five passes over `_numbered_pairs` begins,
    counted on the stream itself: a pass ends when every pair was read once."""
    starts, seen = [0], set()
    for step, ids in enumerate(_stream_ids(_numbered_pairs(), batches=5 * 290), 1):
        assert not seen & set(ids)
        seen |= set(ids)
        if len(seen) == _PAIRS:
            starts.append(step)
            seen = set()
    return starts


def test_token_budget_passes_differ_in_length_and_are_counted_pass_by_pass(pass_starts):
    from transformer.data.batching import batches_per_pass

    best = _numbered_pairs()
    lengths = [b - a for a, b in itertools.pairwise(pass_starts)]
    assert len(set(lengths[:3])) == 3  # the test's premise: passes differ in length
    assert [batches_per_pass(best, _BUDGET, seed=0, pass_index=p)
            for p in range(len(lengths))] == lengths
    config = _config(batch_tokens=_BUDGET, seed=0, steps_per_epoch=lengths[0],
                     subword_sampling=0.5)
    for start in pass_starts[1:-1]:
        for step in (start - 1, start, start + 1):
            expected = min(p for p, begins in enumerate(pass_starts) if begins >= step)
            assert fitting.first_pass_from(config, best, step) == expected, step


@pytest.mark.parametrize("after", [0, 1, 2])
def test_drawn_segmentations_are_read_from_the_first_whole_pass_after_the_decision(
        pass_starts, tmp_path, after):
    """Decided at the end of the first epoch (the first pass), or later within a
    pass or at its end, the plan's draws begin exactly at the next pass the stream begins."""
    from transformer.run.fitting import fit_calls as _fit_calls

    config = _config(batch_tokens=_BUDGET, seed=0, steps_per_epoch=pass_starts[1],
                     subword_sampling=0.5)
    best = _numbered_pairs()
    (_, _, first_steps, _), (_, _, _, step) = _fit_calls(0, config.steps_per_epoch,
                                                         config.epochs, first_alone=True)
    assert step == first_steps == pass_starts[1]  # the first epoch is the first pass
    step += (0, 1, pass_starts[2] - pass_starts[1])[after]
    plan, new = fitting.sampling_plan(config, best, step, 60.0, tmp_path)
    assert new and plan["samples"]
    begins = pass_starts[plan["from_pass"]]
    assert begins >= step and (plan["from_pass"] == 1 or pass_starts[plan["from_pass"] - 1] < step)
    drawn = _numbered_pairs(variants=2, from_pass=plan["from_pass"])
    read = _stream_ids(drawn, step, begins - step + 3)
    assert all(max(ids) < 1000 for ids in read[: begins - step])  # the pass begun: best split
    assert all(min(ids) >= 1000 for ids in read[begins - step:])  # then the draws
