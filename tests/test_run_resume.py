"""Tests of resuming a run: exactness on both kinds of batches, and the refusals.

A resume continues exactly (the same weights as the uninterrupted run) or is
refused in one line: no checkpoint left, other data, another model. Also the
run directory's crash-safe writes and the removal of their leftovers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

import pytest
import tensorflow as tf
from conftest import tiny_config
from test_run_trainer import Interrupted

from transformer import rundir
from transformer.rundir import RunDirError


@pytest.fixture(scope="module", autouse=True)
def no_test_evaluation():
    """No test here reads a run's test evaluation: the runs skip it
    (`conftest.without_test_evaluation`); the weights are made before it."""
    from conftest import without_test_evaluation

    with without_test_evaluation():
        yield


@pytest.fixture(scope="module")
def resume_tsv(tmp_path_factory):
    """A private copy of tiny TSV files (some tests edit them)."""
    from conftest import write_toy_tsv

    return write_toy_tsv(tmp_path_factory.mktemp("resume_tsv"), n_train=120, n_valid=16,
                         n_test=16)


def resumed_config(tsv, run_dir, **changes):
    """The tiny settings on fixed-size batches (120 pairs of 16: 8 steps per epoch) with
    dropout on, so that a resumed run must also draw the uninterrupted run's masks."""
    from conftest import TINY

    model = {**TINY["model"], "dropout_rate": 0.1}
    settings = {"batch_tokens": 0, "steps_per_epoch": None, "epochs": 3,
                "checkpoint_every": 5, "model": model, **changes}
    return tiny_config(tsv, run_dir, **settings)


def interrupt_at(monkeypatch, step):
    """Makes `train` raise `Interrupted` after update `step` (after its checkpoint, if any)."""
    from transformer import run

    original = run.CheckpointSaver.on_train_batch_end

    def interrupt(self, batch, logs=None):
        original(self, batch, logs)
        if run.optimizer_step(self.model.optimizer) == step:
            raise Interrupted

    monkeypatch.setattr(run.CheckpointSaver, "on_train_batch_end", interrupt)


def interrupted_run(config, monkeypatch, step):
    from transformer import run

    interrupt_at(monkeypatch, step)
    with pytest.raises(Interrupted):
        run.train(config, verbose=0, export=False)
    monkeypatch.undo()


@pytest.fixture(scope="module")
def reference(resume_tsv, tmp_path_factory):
    """Three uninterrupted epochs (24 steps) of `resumed_config`; tests copy and damage its
    directory (resuming a copy trains nothing)."""
    from transformer import run

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    return run.train(resumed_config(resume_tsv, run_dir), verbose=0, export=False)


def test_resume_mid_epoch_on_fixed_size_batches_ends_with_the_uninterrupted_weights(
        resume_tsv, tmp_path, monkeypatch, reference):
    """Interrupted in epoch 2 and resumed, the run finishes epoch 2, then fits epoch 3
    on a stream built anew: the same batches, the same dropout masks, the same weights.
    (Token-budget batches: test_run_trainer.py and the SIGKILL test of test_train_cli.py.)"""
    from transformer import run

    assert (reference.config.steps_per_epoch, reference.final_step) == (8, 24)
    config = resumed_config(resume_tsv, tmp_path / "run")
    interrupted_run(config, monkeypatch, 12)  # mid-epoch 2; the last checkpoint is step 10
    resumed = run.train(config, resume=True, verbose=0, export=False)
    assert (resumed.initial_step, resumed.final_step) == (10, 24)
    assert len(resumed.history["loss"]) == 2  # two fits: the end of epoch 2, then epoch 3
    assert resumed.weights_sha256 == reference.weights_sha256


def test_the_moving_average_resumes_exactly_and_is_not_the_final_weights(
        resume_tsv, tmp_path, monkeypatch, reference):
    """A corpus run's model is the moving average of its weights (`ema_momentum`),
    saved with the checkpoints: the reference resumes exactly (the test above),
    and so does a run that keeps its final weights, which end elsewhere."""
    from transformer import run
    from transformer.run.recipes import CORPUS_DEFAULTS

    assert reference.config.ema_momentum == CORPUS_DEFAULTS["ema_momentum"] > 0
    final = run.train(resumed_config(resume_tsv, tmp_path / "whole", ema_momentum=0.0),
                      verbose=0, export=False)
    config = resumed_config(resume_tsv, tmp_path / "run", ema_momentum=0.0)
    interrupted_run(config, monkeypatch, 12)
    resumed = run.train(config, resume=True, verbose=0, export=False)
    assert (resumed.initial_step, resumed.final_step) == (10, 24)
    assert resumed.weights_sha256 == final.weights_sha256
    assert final.weights_sha256 != reference.weights_sha256


def _counted(function, calls: list):
    """`function`, appending its arguments to `calls` at every call."""
    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)
    return counted


def test_subword_sampling_resumes_exactly_and_changes_what_is_learnt(
        resume_tsv, tmp_path, monkeypatch, caplog, reference):
    """With `--subword-sampling` on token-budget batches, a run on course for fewer
    than `SAMPLING_MIN_PASSES` passes draws nothing. A longer one draws once,
    after its first pass, and learns other weights; interrupted before that
    decision, its resume makes it, and interrupted after it, the resume reads
    it: one run interrupted at both points resumes to those weights."""
    # The first epoch is as long as the first pass: the draws are read from pass 2.
    from transformer import run
    from transformer.run import fitting, recipes

    def config(name, **changes):
        return resumed_config(resume_tsv, tmp_path / name,
                              **{"batch_tokens": None, "subword_sampling": 0.2, **changes})

    def decision(name):
        return json.loads((tmp_path / name / rundir.SAMPLING_FILE).read_text())["samples"]

    draws = []
    monkeypatch.setattr(fitting, "sample_pairs", _counted(fitting.sample_pairs, draws))
    assert recipes.SAMPLING_MIN_PASSES > 3
    short = run.train(config("short"), verbose=0, export=False)  # 3 passes: the best split
    assert not draws and not (tmp_path / "short" / rundir.SAMPLING_FILE).exists()  # undecided
    monkeypatch.setattr(recipes, "SAMPLING_MIN_PASSES", 3)
    whole = run.train(config("whole"), verbose=0, export=False)
    per_epoch = whole.config.steps_per_epoch
    assert whole.final_step == 3 * per_epoch
    assert len(draws) == 1 and decision("whole") is True
    saved = json.loads((tmp_path / "whole" / rundir.CONFIG_FILE).read_text())
    assert saved["subword_sampling"] == 0.2
    assert short.weights_sha256 != whole.weights_sha256  # the same run, but sampled
    assert per_epoch > 6  # a checkpoint every 5 steps: one in the first epoch
    # One run, interrupted twice: before the decision (step 6, in the first pass),
    # and its resume, which decides, after it (3 steps into the second pass); the
    # next resume reads the decision (its rule would not sample).
    interrupt_at(monkeypatch, 6)
    with pytest.raises(Interrupted):
        run.train(config("resumed"), verbose=0, export=False)
    assert not (tmp_path / "resumed" / rundir.SAMPLING_FILE).exists()  # not decided yet
    monkeypatch.undo()
    monkeypatch.setattr(recipes, "SAMPLING_MIN_PASSES", 3)
    interrupt_at(monkeypatch, per_epoch + 3)
    with caplog.at_level("INFO", logger="transformer"), pytest.raises(Interrupted):
        run.train(config("resumed"), resume=True, verbose=0, export=False)
    (resumed_at,) = re.findall(r"Resuming .* at step (\d+) \(", caplog.text)
    assert 0 < int(resumed_at) <= 6
    assert decision("resumed") is True  # decided by the resumed run
    monkeypatch.undo()
    monkeypatch.setattr(recipes, "SAMPLING_MIN_PASSES", 100)
    resumed = run.train(config("resumed"), resume=True, verbose=0, export=False)
    assert per_epoch <= resumed.initial_step <= per_epoch + 3  # after the decision
    assert resumed.weights_sha256 == whole.weights_sha256


def test_fixed_size_stream_is_the_same_however_often_it_is_built_or_iterated(resume_tsv):
    """Pass p's order is a function of (seed, p): a second iterator, or a stream
    built anew, gives the same batches; each pass holds every pair once."""
    from transformer.data.batching import fixed_batches_from_tokens, tokenize_pairs
    from transformer.data.tokenizers import build_tokenizers
    from transformer.data.tsv import read_tsv

    pairs = read_tsv(resume_tsv[0])
    tokenized = tokenize_pairs(pairs, build_tokenizers(pairs, 200, False, kind="wordpiece"), 32)

    def contexts(stream, count):
        return [context.numpy().tolist() for (context, _), _ in stream.take(count)]

    stream = fixed_batches_from_tokens(tokenized, 16, seed=3)
    first = contexts(stream, 24)  # three passes of 8 batches
    stream.take(1).reduce(0, lambda state, _: state)  # another iterator in between
    assert contexts(stream, 24) == first
    assert contexts(fixed_batches_from_tokens(tokenized, 16, seed=3), 24) == first
    assert contexts(fixed_batches_from_tokens(tokenized, 16, seed=4), 24) != first
    assert first[:8] != first[8:16]  # each pass has its own order
    rows = [tuple(row) for batch in first[:8] for row in batch]
    expected = [tuple(row) for row in tokenized.context.to_list()]
    # Without the padding, pass 1 holds each pair once.
    assert sorted(tuple(t for t in row if t) for row in rows) == sorted(expected)


# --------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------


def copy_of(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy


def test_resume_without_checkpoints_is_refused_and_keeps_metrics_csv(
        reference, resume_tsv, tmp_path):
    from transformer import run

    run_dir = copy_of(reference.run_dir, tmp_path)
    metrics = (run_dir / rundir.METRICS_CSV).read_text()
    config = resumed_config(resume_tsv, run_dir)
    shutil.rmtree(run_dir / "checkpoints")
    with pytest.raises(RunDirError) as error:
        run.train(config, resume=True, verbose=0, export=False)
    message = str(error.value)
    assert "\n" not in message
    assert repr(str(run_dir / "checkpoints")) in message
    assert "no checkpoint to continue from" in message
    assert "progress.json records a checkpoint saved at step 24" in message
    assert (run_dir / rundir.METRICS_CSV).read_text() == metrics

    (run_dir / rundir.PROGRESS_FILE).unlink()  # a run of an older version: other traces
    with pytest.raises(RunDirError, match="it holds model.keras"):
        run.train(config, resume=True, verbose=0, export=False)


def test_unreadable_state_file_resumes_from_the_latest_checkpoint_on_disk(
        reference, tmp_path, caplog):
    from transformer.run.checkpoints import latest_checkpoint

    run_dir = copy_of(reference.run_dir, tmp_path)
    directory = run_dir / "checkpoints"
    (directory / "checkpoint").write_text("model_checkpoint_path: {{{")
    (directory / "ckpt-24.index").unlink()  # an interrupted save: data, no index
    with caplog.at_level(logging.WARNING, logger="transformer.run.checkpoints"):
        assert latest_checkpoint(directory) == str(directory / "ckpt-20")
    assert "no readable `checkpoint` state file" in caplog.text
    assert latest_checkpoint(tmp_path / "absent") is None


def test_a_run_stopped_before_its_first_checkpoint_starts_anew(
        reference, resume_tsv, tmp_path, caplog):
    """What such a run leaves: config.json, tokenizers/, logs/ and an empty metrics.csv."""
    from transformer import run

    run_dir = copy_of(reference.run_dir, tmp_path)
    for name in ("checkpoints", "model.keras", "metrics.json", "progress.json"):
        shutil.rmtree(run_dir / name) if name == "checkpoints" else (run_dir / name).unlink()
    (run_dir / rundir.METRICS_CSV).write_text("")
    with caplog.at_level(logging.WARNING, logger="transformer.run.checkpoints"):
        resumed = run.train(resumed_config(resume_tsv, run_dir, epochs=1), resume=True,
                            verbose=0, export=False)
    assert "stopped before its first checkpoint" in caplog.text
    assert (resumed.initial_step, resumed.final_step) == (0, 8)


def test_resume_after_the_corpus_changed_is_refused_naming_the_file(
        reference, resume_tsv, tmp_path):
    from transformer import run

    train_tsv = tmp_path / "train.tsv"
    shutil.copy(resume_tsv[0], train_tsv)
    tsv = (train_tsv, *resume_tsv[1:])
    run_dir = tmp_path / "run"
    shutil.copytree(reference.run_dir, run_dir)
    saved = json.loads((run_dir / "config.json").read_text())
    saved["data"] = str(train_tsv)
    saved["data_fingerprint"]["data"]["path"] = str(train_tsv)
    (run_dir / "config.json").write_text(json.dumps(saved))
    config = resumed_config(tsv, run_dir)
    metrics = (run_dir / rundir.METRICS_CSV).read_text()

    with open(train_tsv, "a", encoding="utf-8") as handle:
        handle.write("o gato novo\tthe new cat\n")
    with pytest.raises(RunDirError) as error:
        run.train(config, resume=True, verbose=0, export=False)
    message = str(error.value)
    assert "\n" not in message and repr(str(train_tsv)) in message
    assert "120 pairs" in message and "121 pairs" in message
    assert (run_dir / rundir.METRICS_CSV).read_text() == metrics

    # The same size and pair count, one letter changed: the hash tells.
    text = resume_tsv[0].read_text(encoding="utf-8")
    train_tsv.write_text(text.replace("o", "a", 1), encoding="utf-8")
    with pytest.raises(RunDirError, match="differs from the data the run was trained on"):
        run.train(config, resume=True, verbose=0, export=False)


def test_fingerprints_of_tfds_and_toy_data_name_what_changed(tmp_path):
    from transformer.data.corpus import Corpus
    from transformer.data.loading import data_fingerprint, pairs_sha256
    from transformer.run import RunConfig
    from transformer.rundir import check_data_unchanged

    corpus = Corpus(train=[("a", "b"), ("c", "d")], valid=[("e", "f")], test=[("g", "h")],
                    version="1.0.0")
    config = RunConfig(dataset="ted_hrlr_translate/pt_to_en")
    tfds = data_fingerprint(config, corpus)
    assert tfds["validation"] == {"name": "ted_hrlr_translate/pt_to_en", "split": "validation",
                                  "version": "1.0.0", "pairs": 1,
                                  "sha256": pairs_sha256([("e", "f")])}
    check_data_unchanged(tmp_path, tfds, tfds)  # the same data: nothing to say
    corpus.version = "1.1.0"
    with pytest.raises(RunDirError) as error:
        check_data_unchanged(tmp_path, tfds, data_fingerprint(config, corpus))
    assert "ted_hrlr_translate/pt_to_en split 'test' differs" in str(error.value)
    assert "version 1.0.0" in str(error.value) and "version 1.1.0" in str(error.value)

    toy = data_fingerprint(RunConfig(), corpus)
    assert toy["toy"]["split_pairs"] == [2, 1, 1] and toy["toy"]["seed"] == 0
    corpus.train[0] = ("a", "B")  # another generator, the same sizes
    with pytest.raises(RunDirError, match=r"the toy corpus \(seed 0\) differs"):
        check_data_unchanged(tmp_path, toy, data_fingerprint(RunConfig(), corpus))


def test_a_config_without_fingerprint_resumes_with_a_warning_and_gets_one(
        reference, resume_tsv, tmp_path, caplog):
    from transformer import run

    run_dir = copy_of(reference.run_dir, tmp_path)
    saved = json.loads((run_dir / "config.json").read_text())
    fingerprint = saved.pop("data_fingerprint")
    assert set(fingerprint) == {"data", "valid", "test"}
    assert fingerprint["data"]["pairs"] == 120 and len(fingerprint["data"]["sha256"]) == 64
    (run_dir / "config.json").write_text(json.dumps({**saved, "format_version": 5}))
    with caplog.at_level(logging.WARNING, logger="transformer.rundir"):
        resumed = run.train(resumed_config(resume_tsv, run_dir), resume=True,
                            verbose=0, export=False)
    assert "records no fingerprint" in caplog.text
    assert resumed.final_step == 24
    assert json.loads((run_dir / "config.json").read_text())["data_fingerprint"] == fingerprint


def test_a_checkpoint_of_another_model_is_a_one_line_error_naming_it(reference, tmp_path):
    from transformer.model import build_model
    from transformer.model_config import TransformerConfig
    from transformer.run.checkpoints import CheckpointError, open_checkpoints

    model = build_model(TransformerConfig(num_layers=1, d_model=8, num_heads=2, dff=16,
                                          max_length=32), 50, 50)
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    path = str(reference.run_dir / "checkpoints" / "ckpt-24")
    with pytest.raises(CheckpointError) as error:
        open_checkpoints(model, tmp_path / "checkpoints", resume_from=path)
    message = str(error.value)
    assert isinstance(error.value, RunDirError)  # a ValueError: the CLI reports it in one line
    assert "\n" not in message and message.startswith(f"Checkpoint {path!r} does not match")


@pytest.mark.parametrize("damage, error", [
    ("checkpoints removed", "Cannot resume"),
    ("model changed", "Checkpoint '{run_dir}/checkpoints/ckpt-24' does not match"),
])
def test_the_cli_refuses_such_resumes_in_one_line(reference, tmp_path, capsys, damage, error):
    from transformer.cli.train import main

    run_dir = copy_of(reference.run_dir, tmp_path)
    if damage == "checkpoints removed":
        shutil.rmtree(run_dir / "checkpoints")
    else:  # config.json edited by hand: the checkpoint holds another model
        saved = json.loads((run_dir / "config.json").read_text())
        saved["model"]["dff"] *= 2
        (run_dir / "config.json").write_text(json.dumps(saved))
    loggers = [logging.getLogger(name) for name in ("transformer", "absl", "tensorflow")]
    saved_state = [(lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    try:
        assert main(["--output-dir", str(run_dir), "--resume", "--no-export"]) == 1
    finally:  # main() sends the package's logs to stdout and quiets the others
        for lg, (handlers, level, propagate) in zip(loggers, saved_state, strict=True):
            lg.handlers[:], lg.propagate = handlers, propagate
            lg.setLevel(level)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("train.py: error: " + error.format(run_dir=run_dir)), lines


# --------------------------------------------------------------------------
# Crash-safe writes
# --------------------------------------------------------------------------


def test_atomic_writes_flush_the_file_before_the_rename_and_the_directory_after(
        tmp_path, monkeypatch):
    from transformer.rundir import save_model_atomic, truncate_metrics_csv

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def replace(src, dst):
        events.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)

    class Model:  # what save_model_atomic needs of a Keras model
        def save(self, path):
            assert str(path).endswith(".keras")
            path.write_bytes(b"weights")

    (tmp_path / "metrics.csv").write_text("epoch,loss\n0,1.0\n1,0.5\n")
    cases = [
        (lambda: rundir.write_json_atomic(tmp_path / "config.json", {"a": 1}), "config.json"),
        (lambda: save_model_atomic(Model(), tmp_path / "model.keras"), "model.keras"),
        (lambda: truncate_metrics_csv(tmp_path / "metrics.csv", 1), "metrics.csv"),
    ]
    for write, name in cases:
        events.clear()
        write()
        tmp = str(rundir.temporary_path(tmp_path / name))
        assert events == [("fsync", tmp), ("replace", tmp, str(tmp_path / name)),
                          ("fsync", str(tmp_path))], name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.json", "metrics.csv", "model.keras"]
    assert (tmp_path / "metrics.csv").read_text() == "epoch,loss\n0,1.0\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        rundir.replace_atomically(path, fail)
    assert path.read_text() == "old" and sorted(tmp_path.iterdir()) == [path]


def test_leftovers_of_interrupted_writes_are_removed_on_the_next_start(reference, tmp_path,
                                                                       resume_tsv):
    from transformer import run
    from transformer.rundir import remove_leftovers

    run_dir = copy_of(reference.run_dir, tmp_path)
    checkpoints = run_dir / "checkpoints"
    leftovers = [run_dir / "model.tmp.keras", run_dir / "config.json.tmp",
                 run_dir / "metrics.csv.tmp", checkpoints / "ckpt-99.data-00000-of-00001",
                 checkpoints / "checkpoint.tmp5f3a", checkpoints / "ckpt-99_temp"]
    kept = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    for path in leftovers[:-1]:
        path.write_bytes(b"partial")
    leftovers[-1].mkdir()
    (leftovers[-1] / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"partial")
    remove_leftovers(run_dir)
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == kept

    # `train --resume` removes them before it starts.
    (run_dir / "model.tmp.keras").write_bytes(b"partial")
    run.train(resumed_config(resume_tsv, run_dir), resume=True, verbose=0, export=False)
    assert not (run_dir / "model.tmp.keras").exists()
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith("ckpt-24")
    assert json.loads((run_dir / "progress.json").read_text()) == {
        "checkpoint": "checkpoints/ckpt-24", "checkpoint_step": 24}
