"""Tests of transformer.run.callbacks: the NaN stop names the step."""

from __future__ import annotations

import pytest
import tensorflow as tf


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
