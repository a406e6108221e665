"""Tests of transformer.run.callbacks: the NaN stop names the step."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from transformer.training import CustomSchedule


def test_stop_on_nan_names_the_step():
    from transformer.run.callbacks import StopOnNaN, TrainingError

    class FakeOptimizer:
        iterations = tf.Variable(42, dtype=tf.int64)

    class FakeModel:
        optimizer = FakeOptimizer()
        stop_training = False

    callback = StopOnNaN("runs/x/checkpoints")
    callback.set_model(FakeModel())
    callback.on_epoch_begin(3)
    callback.on_train_batch_end(4, {"loss": 1.5})  # finite: nothing happens
    with pytest.raises(TrainingError, match=r"nan at step 42 \(epoch 4, batch 5\).*runs/x"):
        callback.on_train_batch_end(5 - 1, {"loss": float("nan")})
    assert callback.model.stop_training


def test_training_clock_tells_the_schedule_how_much_of_the_budget_is_used(monkeypatch):
    from transformer.run import callbacks

    now = [100.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])

    class FakeModel:
        optimizer = type("FakeOptimizer", (), {"iterations": tf.Variable(3, dtype=tf.int64)})()
        stop_training = False

    schedule = CustomSchedule(128, 4000, total_steps=100_000)
    peak = (128 * 4000) ** -0.5
    seconds = tf.Variable(20.0, dtype=tf.float64)  # 20 s trained before a resume
    clock = callbacks.TrainingClock(seconds, budget=100.0, schedule=schedule)
    clock.set_model(FakeModel())
    clock.on_train_begin()
    assert float(schedule(100)) == pytest.approx(0.2 * peak, rel=1e-5)  # 20 of 100 s
    now[0] += 55.0
    clock.on_train_batch_end(0)
    assert float(schedule(100)) == pytest.approx(0.75 * peak, rel=1e-5)
    now[0] += 30.0
    clock.on_train_batch_end(1)
    assert float(schedule(100)) == pytest.approx(peak, rel=1e-5) and clock.model.stop_training
    # Without a budget nothing is told.
    assert callbacks.TrainingClock(seconds, None, schedule).schedule is None


def _event_scalars(log_dir):
    """`{tag: [(step, value), ...]}` of the TensorBoard event files in `log_dir`."""
    scalars = {}
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    assert files, log_dir
    for path in files:
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars", value.tag
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
    return scalars


def test_tiny_run_logs_the_schedules_learning_rate_and_tensorboard_scalars(tiny_run):
    import csv
    from pathlib import Path

    from transformer import rundir

    config = tiny_run.config
    d_model, warmup, steps = config.model.d_model, config.warmup_steps, config.steps_per_epoch
    assert (d_model, warmup, steps, config.epochs) == (32, 100, 75, 2)  # tests/conftest.py
    # Each epoch logs the learning rate of its last update: Keras calls the
    # schedule with the updates already applied, so update 75 (the last of
    # epoch 1) used step 74 and update 150 step 149. Step 74 is in the warm-up
    # (linear), step 149 past it (inverse square root).
    by_hand = [d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5) for s in (74, 149)]
    assert by_hand == pytest.approx(
        [float(CustomSchedule(d_model, warmup)(s)) for s in (74, 149)], rel=1e-6)
    # Not the rate of the step after (75, 150): 1% apart, far beyond float32.
    assert float(CustomSchedule(d_model, warmup)(75)) != pytest.approx(by_hand[0], rel=1e-4)
    history = tiny_run.history
    assert history["learning_rate"] == pytest.approx(by_hand, rel=1e-6)

    run_dir = Path(tiny_run.run_dir)
    with open(run_dir / rundir.METRICS_CSV) as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert set(rows[0]) == {"epoch", *history}
    for key, values in history.items():
        assert [float(row[key]) for row in rows] == pytest.approx(values, rel=1e-6), key

    # TensorBoard (keras.callbacks.TensorBoard, update_freq="epoch"): train/ and
    # validation/ hold one point per epoch, tagged epoch_<metric>, at step = the
    # epoch index (0, 1), as Keras writes them. Its learning rate is the
    # optimizer's own `learning_rate`: the schedule at `iterations`, i.e. the
    # rate of the next update (steps 75 and 150), one step after the logs' value.
    # validation/ also holds Keras's evaluation_<metric>_vs_iterations, written
    # after each validation at the optimizer's step (75, 150).
    train_scalars = _event_scalars(run_dir / rundir.LOGS_DIR / "train")
    valid_scalars = _event_scalars(run_dir / rundir.LOGS_DIR / "validation")
    assert set(train_scalars) == {"epoch_loss", "epoch_masked_accuracy", "epoch_learning_rate"}
    assert set(valid_scalars) == {
        "epoch_loss", "epoch_masked_accuracy",
        "evaluation_loss_vs_iterations", "evaluation_masked_accuracy_vs_iterations",
    }
    for scalars, prefix in ((train_scalars, ""), (valid_scalars, "val_")):
        for tag in ("epoch_loss", "epoch_masked_accuracy"):
            key = prefix + tag.removeprefix("epoch_")
            points = scalars[tag]
            assert [step for step, _ in points] == [0, 1], tag
            assert [value for _, value in points] == pytest.approx(history[key], rel=1e-6), tag
    for metric in ("loss", "masked_accuracy"):
        points = valid_scalars[f"evaluation_{metric}_vs_iterations"]
        assert [step for step, _ in points] == [steps, 2 * steps], metric
        assert [v for _, v in points] == pytest.approx(history["val_" + metric], rel=1e-6)
    next_rates = [d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5) for s in (steps, 2 * steps)]
    rates = train_scalars["epoch_learning_rate"]
    assert [step for step, _ in rates] == [0, 1]
    assert [v for _, v in rates] == pytest.approx(next_rates, rel=1e-6)


def test_tensorboard_reads_the_runs_scalars(tiny_run):
    """The `tensorboard` package (a dependency) imports, and its EventAccumulator,
    what `tensorboard --logdir <run>/logs` uses, reads the run's epoch scalars."""
    from pathlib import Path

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from transformer import rundir

    history = tiny_run.history
    for split, prefix in (("train", ""), ("validation", "val_")):
        events = EventAccumulator(str(Path(tiny_run.run_dir) / rundir.LOGS_DIR / split))
        events.Reload()
        tags = events.Tags()["tensors"]  # TF2 summaries are tensors; TensorBoard shows scalars
        assert "epoch_loss" in tags, tags
        values = [float(tf.make_ndarray(event.tensor_proto))
                  for event in events.Tensors("epoch_loss")]
        assert values == pytest.approx(history[prefix + "loss"], rel=1e-6)


def test_progress_log_names_the_first_step_then_a_line_a_minute(monkeypatch, caplog):
    import logging

    from transformer.run import callbacks

    now = [10.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    step = tf.Variable(1, dtype=tf.int64)

    class FakeModel:
        optimizer = type("FakeOptimizer", (), {"iterations": step})()

    progress = callbacks.ProgressLog(started=2.5, steps_per_epoch=100, tokens_per_step=512.5,
                                     every=60.0)
    progress.set_model(FakeModel())
    with caplog.at_level(logging.INFO, logger="transformer.run.callbacks"):
        progress.on_train_batch_end(0, {"loss": 5.0})
        for _ in range(30):  # 30 steps in 30 s: no line before a minute is over
            now[0] += 1.0
            step.assign_add(1)
            progress.on_train_batch_end(0, {"loss": 4.0})
        assert caplog.messages == ["First step (step 1) done 7.5 s after the run started."]
        now[0] += 30.0
        step.assign(121)
        # A multi-worker run's logs hold vectors of one value.
        progress.on_train_batch_end(0, {"loss": np.array([3.25])})
    assert caplog.messages[1] == ("Step 121 (epoch 2, batch 21/100): 2.00 steps a second "
                                  "(1,025 target tokens a second), loss 3.2500.")


def test_target_tokens_per_step_counts_the_labels_of_the_first_split():
    from transformer.data.batching import TokenizedPairs
    from transformer.run.callbacks import target_tokens_per_step

    # Targets of 4 and 6 ids hold 3 and 5 labels; the second variant is not read.
    tokens = TokenizedPairs(context=tf.ragged.constant([[2, 3], [2, 3], [2, 3], [2, 3]]),
                            target=tf.ragged.constant([[2, 5, 6, 3], [2, 5, 6, 7, 8, 3],
                                                       [2, 3], [2, 3]]),
                            max_tokens=8, variants=2)
    assert target_tokens_per_step(tokens, steps_per_pass=4) == 2.0


def test_training_clock_stops_when_the_validation_uses_the_rest_of_the_budget(monkeypatch, caplog):
    # A budget crossed by an epoch's validation, after its last step, stops
    # training and says so; a run split into several fits (subword sampling's
    # first epoch alone) would otherwise end without a word.
    import logging

    from transformer.run import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])

    class FakeModel:
        optimizer = type("FakeOptimizer", (), {"iterations": tf.Variable(5, dtype=tf.int64)})()
        stop_training = False

    clock = callbacks.TrainingClock(tf.Variable(0.0, dtype=tf.float64), budget=6.0)
    clock.set_model(FakeModel())
    clock.on_train_begin()
    now[0] = 5.0
    clock.on_train_batch_end(4)
    assert not clock.model.stop_training
    now[0] = 6.5  # the validation ran past the budget
    with caplog.at_level(logging.INFO, logger=callbacks.logger.name):
        clock.on_epoch_end(0)
        clock.on_epoch_end(0)  # said once
    assert clock.model.stop_training and clock.exhausted
    said = [r.getMessage() for r in caplog.records if "Time budget" in r.getMessage()]
    assert said == ["Time budget of 6 s reached at step 5: training stops here, its epoch's "
                    "validation used the rest of it."]


def test_training_clock_says_when_the_epochs_end_the_run_before_its_budget(monkeypatch, caplog):
    import logging

    from transformer.run import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    said = []
    for budget, spent in ((2700.0, 1130.0), (2700.0, 2700.0), (None, 1130.0)):
        clock = callbacks.TrainingClock(tf.Variable(0.0, dtype=tf.float64), budget=budget)
        now[0] = 0.0
        clock.on_train_begin()
        now[0] = spent
        clock._update()
        with caplog.at_level(logging.INFO, logger=callbacks.logger.name):
            caplog.clear()
            clock.epochs_done(20)
        said.append([r.getMessage() for r in caplog.records])
    assert said == [["All 20 epochs trained in 18 min 50 s of the 45 min time budget; the "
                     "rest is not used (more --epochs would use it)."], [], []]
