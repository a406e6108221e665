"""Older behaviours a one-line slip would break silently, pinned (issue 66):
the moving average of the weights where the kernels are not used (JAX and
PyTorch build Keras's own Adam), and a worker's clock at a time budget.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_without_the_kernels_the_optimizer_still_keeps_the_moving_average(monkeypatch):
    """Under JAX and PyTorch `seams.adam` is Keras's own Adam: with a momentum
    it keeps Keras's moving average (`use_ema`), which the run then delivers."""
    import keras

    from transformer import seams
    from transformer.training import make_optimizer

    monkeypatch.setattr(seams, "KERNELS", False)
    kept = make_optimizer(16, 100, ema_momentum=0.99)
    assert type(kept) is keras.optimizers.Adam
    assert kept.use_ema and kept.ema_momentum == pytest.approx(0.99)
    assert not make_optimizer(16, 100).use_ema
    # Three steps: the average lags behind the weights.
    variable = keras.Variable(np.ones(3, np.float32))
    kept.build([variable])
    for _ in range(3):
        kept.apply([np.ones(3, np.float32)], [variable])
    average = np.array(kept._model_variables_moving_average[0])
    assert np.all(average > np.array(variable) + 1e-4)


def test_a_workers_clock_counts_the_seconds_the_workers_agree_on():
    """A worker whose own seconds are few stops when the chief's reach the
    budget, and gives the schedule the chief's progress."""
    import types

    import tensorflow as tf

    from transformer.run.callbacks import TrainingClock

    progress = []
    schedule = types.SimpleNamespace(set_time_progress=progress.append)
    chief_seconds = [0.0]
    clock = TrainingClock(tf.Variable(0.0, dtype=tf.float64), budget=10.0, schedule=schedule,
                          agree=lambda own: chief_seconds[0])
    model = types.SimpleNamespace(stop_training=False, optimizer=types.SimpleNamespace(
        iterations=tf.Variable(3, dtype=tf.int64)))
    clock.set_model(model)
    clock.on_train_begin()
    clock.on_train_batch_end(0)
    assert not model.stop_training and not clock.exhausted
    chief_seconds[0] = 6.0
    clock.on_train_batch_end(1)
    assert progress[-1] == pytest.approx(0.6) and float(clock.seconds.numpy()) == 6.0
    assert not model.stop_training
    chief_seconds[0] = 10.0
    clock.on_train_batch_end(2)
    assert model.stop_training and clock.exhausted
