"""Tests of transformer.run.trainer: tiny runs, resume mid-epoch, seeds, NaN stop, run directory."""

from __future__ import annotations

import logging
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, tiny_config, without_test_evaluation

from transformer.rundir import RunDirError


def testtruncate_metrics_csv(tmp_path):
    from transformer.rundir import truncate_metrics_csv

    path = tmp_path / "metrics.csv"
    path.write_text("epoch,loss\n0,3.0\n1,2.0\n2,1.0\n")
    truncate_metrics_csv(path, 2)
    assert path.read_text() == "epoch,loss\n0,3.0\n1,2.0\n"
    truncate_metrics_csv(tmp_path / "absent.csv", 0)  # nothing to do


# --------------------------------------------------------------------------
# Training through the library: tiny runs
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_tsv(tiny_reference_run):
    """The reference run's train, valid and test files (120, 16 and 16 toy pairs)."""
    config = tiny_reference_run.config
    return tuple(Path(path) for path in (config.data, config.valid, config.test))


def load_weights(run_dir):
    model = keras.saving.load_model(run_dir / "model.keras")
    return [w.numpy() for w in model.weights], int(model.optimizer.iterations)


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def reference_run(tiny_reference_run):
    """Three uninterrupted epochs of the tiny settings on `tiny_tsv`, seed 0 (its
    weights are compared; its test evaluation is skipped): the session's
    `tiny_reference_run` (tests/conftest.py), which tests must not modify."""
    return tiny_reference_run


def test_resume_mid_epoch_continues_exactly(tiny_tsv, tmp_path, monkeypatch, reference_run):
    """Weights, optimizer state, schedule step, epoch and data order all survive."""
    from transformer import run

    assert reference_run.final_step == 15
    assert set(reference_run.history) >= {"loss", "masked_accuracy", "val_loss", "learning_rate"}
    assert len(reference_run.history["loss"]) == 3

    # Interrupt at step 8, mid-epoch 2; the last checkpoint is step 6 (every 3).
    original = run.CheckpointSaver.on_train_batch_end

    def interrupt(self, batch, logs=None):
        original(self, batch, logs)
        if run.optimizer_step(self.model.optimizer) == 8:
            raise Interrupted

    monkeypatch.setattr(run.CheckpointSaver, "on_train_batch_end", interrupt)
    config = tiny_config(tiny_tsv, tmp_path / "run", epochs=3, checkpoint_every=3)
    with pytest.raises(Interrupted):
        run.train(config, verbose=0, export=False)
    monkeypatch.undo()
    checkpoints = tf.train.get_checkpoint_state(str(tmp_path / "run" / "checkpoints"))
    assert checkpoints.model_checkpoint_path.endswith("ckpt-6")

    with pytest.raises(RunDirError, match="not empty"):
        run.train(config, verbose=0)
    resumed = run.train(config, resume=True, verbose=0, export=False)
    assert (resumed.initial_step, resumed.final_step) == (6, 15)
    # Epoch 2 was finished (4 steps), then epoch 3 ran: two history rows.
    assert len(resumed.history["loss"]) == 2
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["0", "1", "2"]

    assert resumed.weights_sha256 == reference_run.weights_sha256
    ref_weights, ref_step = load_weights(reference_run.run_dir)
    run_weights, run_step = load_weights(tmp_path / "run")
    assert ref_step == run_step == 15
    for a, b in zip(ref_weights, run_weights, strict=True):
        np.testing.assert_array_equal(a, b)

    # A finished run resumes to nothing, and is evaluated again.
    again = run.train(run.load_config(tmp_path / "run"), resume=True, verbose=0,
                           export=False)
    assert (again.initial_step, again.final_step) == (15, 15)
    assert again.evaluation.exact_match == resumed.evaluation.exact_match


@pytest.fixture(scope="module")
def averaged_run(tiny_tsv, tmp_path_factory):
    """Two epochs (10 steps) with the linear decay, a checkpoint every 2 steps and
    model.keras the mean of the last 4: `(result, what transformer.run.checkpoints
    logged)`. test_the_model_is_the_mean_of_the_last_checkpoints reads its
    checkpoints; the linear case of test_a_decay_to_zero_... its rates, which the
    averaging, after the fit, leaves alone."""
    from transformer import run

    lines = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("transformer.run.checkpoints")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    config = tiny_config(tiny_tsv, tmp_path_factory.mktemp("averaged") / "run", epochs=2,
                         checkpoint_every=2, average_checkpoints=4, decay="linear")
    try:
        with without_test_evaluation():
            return run.train(config, verbose=0, export=False), "\n".join(lines)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_the_model_is_the_mean_of_the_last_checkpoints(averaged_run):
    """Section 6.1: model.keras holds the mean of the last checkpoints' weights,
    also of more checkpoints than a run keeps without averaging."""
    from transformer.run.checkpoints import MAX_CHECKPOINTS_KEPT

    result, log = averaged_run
    run_dir = result.run_dir
    assert result.config.average_checkpoints == 4 > MAX_CHECKPOINTS_KEPT
    # Saved after steps 2, 4, 5 (epoch end), 6, 8 and 10: the last four are averaged.
    assert "Averaged the weights of the last 4 checkpoints (steps 5, 6, 8, 10)" in log
    averaged, step = load_weights(run_dir)
    assert step == 10
    model = keras.saving.load_model(run_dir / "model.keras")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    kept = []
    for number in (5, 6, 8, 10):
        checkpoint.restore(str(run_dir / "checkpoints" / f"ckpt-{number}")).expect_partial()
        kept.append([w.numpy() for w in model.weights])
    for i, weight in enumerate(averaged):
        np.testing.assert_allclose(weight, np.mean([k[i] for k in kept], axis=0), atol=1e-6)
    # The final weights differ from the mean (the run did average).
    assert any(not np.allclose(a, f) for a, f in zip(averaged, kept[-1], strict=True))


def test_another_seed_gives_another_run(tiny_tsv, tmp_path, reference_run):
    """The same seed gives the same run: test_resume_mid_epoch_continues_exactly
    trains twice from scratch (tokenizers, initial weights, data order) and ends
    with identical weights. Here, seed 1 must end elsewhere."""
    from transformer import run

    with without_test_evaluation():
        other = run.train(tiny_config(tiny_tsv, tmp_path / "b", epochs=3, seed=1), verbose=0,
                          export=False)
    assert other.final_step == reference_run.final_step
    assert other.weights_sha256 != reference_run.weights_sha256


def test_nan_loss_stops_with_the_step(tiny_tsv, tmp_path, monkeypatch):
    from transformer import run, training

    models = []
    original_compile = keras.Model.compile
    original_call = training.MaskedLoss.call

    def remember(model, *args, **kwargs):
        models.append(model)
        return original_compile(model, *args, **kwargs)

    def poisoned(self, y_true, y_pred):
        # NaN from the 7th update on (the optimizer has made 6 before it).
        loss = original_call(self, y_true, y_pred)
        return tf.where(models[-1].optimizer.iterations >= 6, float("nan"), loss)

    monkeypatch.setattr(keras.Model, "compile", remember)
    monkeypatch.setattr(training.MaskedLoss, "call", poisoned)
    config = tiny_config(tiny_tsv, tmp_path / "run", epochs=2, checkpoint_every=2)
    with pytest.raises(run.TrainingError, match=r"at step 7 \(epoch 2, batch 2\)"):
        run.train(config, verbose=0)
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert latest.endswith("ckpt-6")  # the NaN weights were never saved


def test_tiny_run_fixture_is_a_complete_run(tiny_run):
    from transformer import rundir

    run_dir = rundir.check_run_dir(tiny_run.run_dir)
    for name in (rundir.CHECKPOINTS_DIR, rundir.METRICS_CSV, rundir.METRICS_JSON, rundir.LOGS_DIR):
        assert (run_dir / name).exists(), name
    metrics = rundir.read_json(run_dir / rundir.METRICS_JSON)
    assert metrics["test"]["bleu_signature"].startswith("nrefs:1|")
    assert 0 <= metrics["test"]["exact_match"] <= 1
    # The fingerprint is model.keras's: its weights, reloaded, hashed here.
    import hashlib

    digest = hashlib.sha256()
    for weight in keras.saving.load_model(run_dir / rundir.MODEL_FILE).weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    assert metrics["weights_sha256"] == digest.hexdigest() == tiny_run.weights_sha256
    config = rundir.read_json(run_dir / rundir.CONFIG_FILE)
    assert config["input_vocab_size"] > 4 and config["model"]["d_model"] == 32
    # The model learnt something in its few steps: on the test split it is far
    # better than at chance (1 / vocabulary, about 0.005 for an untrained model)
    # and better than its average over the first epoch of training (0.65
    # against 0.31 on the machine this was written on; the bounds leave room
    # for other machines' weights).
    accuracy = tiny_run.evaluation.masked_accuracy
    assert accuracy > 20 / config["target_vocab_size"]
    assert accuracy > tiny_run.history["masked_accuracy"][0] + 0.1
    # translate.py's loader needs nothing else.
    from transformer.decoding.translator import Translator

    translation = Translator.from_run(run_dir)(tiny_run.examples[0][0], return_attention=False)
    assert translation.text == tiny_run.examples[0][2]


_MALLOC_PROBE = """
import ctypes, importlib.util, sys

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.mallinfo2.restype = MallInfo2
spec = importlib.util.spec_from_file_location("allocator", sys.argv[1])
allocator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)

def mapped_by(size):
    before = libc.mallinfo2().hblkhd
    assert libc.malloc(size)  # kept: freeing would move glibc's own threshold
    return libc.mallinfo2().hblkhd - before

size = 8 * 1024 * 1024
print(mapped_by(size) >= size, allocator.keep_freed_memory(), mapped_by(size) >= size)
"""


def test_malloc_thresholds_are_raised_under_glibc():
    """An 8 MiB block is mapped on its own by default, and comes from the heap
    once `keep_freed_memory` has raised the mmap threshold."""
    import platform
    import subprocess
    import sys
    from pathlib import Path

    from transformer.run import allocator

    if not (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"):
        assert allocator.keep_freed_memory() is False
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018 - glibc 2.33 or later
    except (OSError, AttributeError):
        pytest.skip("glibc without mallinfo2")
    done = subprocess.run([sys.executable, "-c", _MALLOC_PROBE, str(Path(allocator.__file__))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"]


def test_time_budget_stops_training_and_is_counted_over_resumes(
    tiny_tsv, tmp_path, caplog, monkeypatch
):
    """A budget shorter than one step stops after the first step, which ends
    the warm-up (the learning rate is the peak); only training counts against
    the budget (not the slowed-down tokenizers and test evaluation); resuming with
    the same budget trains nothing, and without a budget finishes the epochs."""
    import time

    from transformer import run, rundir
    from transformer.run import trainer

    pause = 0.5  # ten times the tolerance below: counted, it would show

    def slowly(function):
        def slow(*args, **kwargs):
            time.sleep(pause)
            return function(*args, **kwargs)
        return slow

    fits = []

    def timed_fit(*args, **kwargs):
        fit_started = time.perf_counter()
        try:
            return fit(*args, **kwargs)
        finally:
            fits.append(time.perf_counter() - fit_started)

    fit = trainer._fit
    monkeypatch.setattr(trainer, "_fit", timed_fit)
    monkeypatch.setattr(trainer, "build_tokenizers", slowly(trainer.build_tokenizers))
    monkeypatch.setattr(trainer, "evaluate", slowly(trainer.evaluate))
    run_dir = tmp_path / "run"
    config = tiny_config(tiny_tsv, run_dir, epochs=2, time_budget=1e-9, decay="inverse_sqrt")
    with caplog.at_level("INFO", logger="transformer"):
        stopped = run.train(config, verbose=0, export=False)
    assert stopped.final_step == 1
    assert "Time budget of 0 s reached at step 1" in caplog.text
    assert len(stopped.history["loss"]) == 1  # the partial epoch still validates
    # The whole budget is used: the warm-up ends, at the paper's peak rate.
    peak = (TINY["model"]["d_model"] * TINY["warmup_steps"]) ** -0.5
    assert stopped.history["learning_rate"] == pytest.approx([peak], rel=1e-5)
    seconds = rundir.read_json(run_dir / rundir.METRICS_JSON)["train_seconds"]
    assert 0 < seconds <= fits[0] + 0.05  # within the fit (rounded to 0.1 s in the file)
    monkeypatch.undo()
    latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    assert latest.endswith("ckpt-1")
    assert tf.train.load_variable(latest, "train_seconds/.ATTRIBUTES/VARIABLE_VALUE") > 0

    caplog.clear()
    with caplog.at_level("INFO", logger="transformer"), without_test_evaluation():
        again = run.train(run.load_config(run_dir), resume=True, verbose=0, export=False)
    assert (again.initial_step, again.final_step) == (1, 1)
    assert "already used its time budget" in caplog.text

    with without_test_evaluation():
        finished = run.train(config.replace(time_budget=None), resume=True, verbose=0,
                             export=False)
    assert (finished.initial_step, finished.final_step) == (1, 10)
    assert rundir.read_json(run_dir / rundir.METRICS_JSON)["train_seconds"] > seconds


@pytest.mark.parametrize("decay", ["linear", "cooldown"])
def test_a_decay_to_zero_ends_with_the_time_budget_and_with_the_epochs(tiny_tsv, tmp_path,
                                                                       decay, request):
    """With a budget, the rate is zero when the budget runs out (its share of the
    budget, restored with the checkpoint's seconds on --resume); without one, at
    the last of the epochs' steps."""
    from transformer import run
    from transformer.training import CustomSchedule

    with without_test_evaluation():
        stopped = run.train(tiny_config(tiny_tsv, tmp_path / "budget", epochs=2,
                                        time_budget=1e-9, decay=decay), verbose=0, export=False)
        if decay == "linear":  # the same two epochs, averaged after the fit
            full = request.getfixturevalue("averaged_run")[0]
        else:
            full = run.train(tiny_config(tiny_tsv, tmp_path / "epochs", epochs=2, decay=decay),
                             verbose=0, export=False)
    assert stopped.final_step == 1 and stopped.history["learning_rate"] == [0.0]
    config = full.config
    assert config.decay == decay and full.final_step == 10
    schedule = CustomSchedule(16, 10, peak_learning_rate=(16 * 10) ** -0.5, total_steps=10,
                              decay=decay)
    # Each epoch logs the rate of its last update (steps 4 and 9); step 10 would be 0.
    assert full.history["learning_rate"] == pytest.approx(
        [float(schedule(4)), float(schedule(9))], rel=1e-5)
    assert float(schedule(10)) == 0.0


def test_a_checkpoint_without_train_seconds_restores_the_model(tmp_path):
    """Checkpoints written before the training time was kept still resume."""
    from transformer.run.checkpoints import restore_checkpoint

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    old = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    path = old.save(str(tmp_path / "old" / "ckpt"))
    saved = [w.numpy() for w in model.weights]

    model.set_weights([np.zeros_like(w) for w in saved])
    seconds = tf.Variable(0.0, dtype=tf.float64)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                     train_seconds=seconds)
    restore_checkpoint(checkpoint, path)
    for a, b in zip(saved, model.weights, strict=True):
        np.testing.assert_array_equal(a, b.numpy())
    assert float(seconds.numpy()) == 0.0

    seconds.assign(12.5)
    newer = checkpoint.save(str(tmp_path / "new" / "ckpt"))
    seconds.assign(0.0)
    restore_checkpoint(checkpoint, newer)
    assert float(seconds.numpy()) == 12.5


def test_shared_vocabulary_and_fitted_warmup_run_end_to_end(tiny_tsv, tmp_path):
    """One SentencePiece vocabulary, tied embeddings (section 3.4) and a
    warm-up longer than the run: the run rises to the peak at its last step,
    saves, reloads and translates."""
    from transformer import run, rundir
    from transformer.data.tokenizers import load_tokenizers
    from transformer.decoding.translator import Translator

    run_dir = tmp_path / "run"
    config = tiny_config(tiny_tsv, run_dir, epochs=2, shared_vocab=True, warmup_steps=40,
                         decay="inverse_sqrt")
    result = run.train(config, verbose=0, export=True)
    assert result.final_step == 10
    saved = rundir.read_json(run_dir / rundir.CONFIG_FILE)
    assert saved["shared_vocab"] and saved["model"]["tie_embeddings"]
    assert saved["input_vocab_size"] == saved["target_vocab_size"]
    tokenizers = load_tokenizers(run_dir / rundir.TOKENIZERS_DIR)
    assert tokenizers.source is tokenizers.target
    model = keras.saving.load_model(run_dir / "model.keras")
    assert model.decoder.pos_embedding.embedding is model.encoder.pos_embedding.embedding
    # The rate of the last update (step 9 of 10): 9/10 of the paper's peak for 40 steps.
    assert result.history["learning_rate"][-1] == pytest.approx(
        0.9 * (16 * 40) ** -0.5, rel=1e-5)
    source, _, translation = result.examples[0]
    assert Translator.from_run(run_dir)(source, return_attention=False).text == translation
    reloaded = tf.saved_model.load(str(result.export_dir))
    assert reloaded(tf.constant([source])).numpy()[0].decode() == translation


def test_fit_calls_finish_an_interrupted_epoch_then_fit_the_rest():
    from transformer.run.fitting import fit_calls as _fit_calls

    assert _fit_calls(0, 10, 3) == [(0, 3, 10, 0)]  # a new run: one call
    assert _fit_calls(20, 10, 3) == [(2, 3, 10, 20)]  # stopped between epochs
    assert _fit_calls(14, 10, 3) == [(1, 2, 6, 14), (2, 3, 10, 20)]  # mid-epoch
    assert _fit_calls(24, 10, 3) == [(2, 3, 6, 24)]  # mid-way through the last epoch
    assert _fit_calls(30, 10, 3) == []
