"""The Keras callbacks of a training run: learning-rate logs, NaN stop, checkpoints, summaries."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

logger = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says why and where."""


def optimizer_step(optimizer) -> int:
    """The optimizer's `iterations` (updates applied) as an int, also when the
    variable is mirrored by a distribution strategy."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


def _current_learning_rate(optimizer) -> float:
    """The learning rate of the update just applied (`iterations` has moved past it)."""
    schedule = getattr(optimizer, "_learning_rate", None)
    inner = getattr(optimizer, "inner_optimizer", None)  # LossScaleOptimizer
    if inner is not None:
        schedule = getattr(inner, "_learning_rate", schedule)
    step = max(optimizer_step(optimizer) - 1, 0)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(step))
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateLogger(keras.callbacks.Callback):
    """Adds `learning_rate` to the logs of every batch and epoch, so the progress
    bar, `metrics.csv` and TensorBoard show the schedule."""

    def on_train_batch_end(self, batch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _current_learning_rate(self.model.optimizer)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _current_learning_rate(self.model.optimizer)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training with a `TrainingError` naming the step where the loss
    stopped being finite (Keras' `TerminateOnNaN` names nothing).

    Put it before the checkpoint callback, so the broken weights are never saved.
    """

    def __init__(self, checkpoint_dir=None):
        super().__init__()
        self.checkpoint_dir = checkpoint_dir
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        step = optimizer_step(self.model.optimizer)
        self.model.stop_training = True
        where = f" The last good checkpoint is in {self.checkpoint_dir}." if self.checkpoint_dir else ""
        raise TrainingError(
            f"The loss became {float(loss)} at step {step} (epoch {self._epoch + 1}, batch "
            f"{batch + 1}); training stopped.{where} Try a longer warm-up (--warmup-steps), "
            "float32 precision, or check the data."
        )


class CheckpointSaver(keras.callbacks.Callback):
    """Saves the training state every `every` updates and at the end of every epoch.

    The state is a `tf.train.Checkpoint` of the model and the optimizer (whose
    `iterations` is the schedule's step, from which the epoch follows). A
    checkpoint's data files are written first and its index is renamed into
    place last, and the `checkpoint` file that names the latest one is replaced
    atomically, so a kill at any moment leaves the previous checkpoint usable.

    Args:
        manager: a `tf.train.CheckpointManager`.
        every: save after every `every`-th update (counted over the whole run).
    """

    def __init__(self, manager: tf.train.CheckpointManager, every: int):
        super().__init__()
        self.manager = manager
        self.every = every
        self.last_saved = None

    def _save(self):
        step = optimizer_step(self.model.optimizer)
        if step != self.last_saved:
            self.manager.save(checkpoint_number=step)
            self.last_saved = step

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model.optimizer) % self.every == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        self._save()


class ScalarSummaries(keras.callbacks.Callback):
    """Writes the epoch logs as TensorBoard scalars (`train/` and `validation/`).

    Keras' `TensorBoard` callback needs the `tensorboard` package to write
    anything; this one uses only TensorFlow's summary writer, so training
    needs no extra dependency (viewing the logs does: `pip install tensorboard`,
    then `tensorboard --logdir runs/toy/logs`).

    Args:
        log_dir: the directory of the event files.
    """

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = Path(log_dir)
        self._writers = {}

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(str(self.log_dir / name))
        return self._writers[name]

    def on_epoch_end(self, epoch, logs=None):
        step = optimizer_step(self.model.optimizer)
        for key, value in (logs or {}).items():
            name, tag = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with self._writer(name).as_default():
                tf.summary.write(
                    f"epoch_{tag}", tf.constant(float(value), tf.float32), step=step,
                    metadata=_SCALAR_METADATA,
                )
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


# TensorBoard's scalar plugin reads summaries tagged with this metadata.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR,
).SerializeToString()


class EpochSummary(keras.callbacks.Callback):
    """Logs one line per epoch: step, time, losses, accuracies and learning rate."""

    def __init__(self, epochs: int):
        super().__init__()
        self.epochs = epochs
        self._started = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        parts = [
            f"Epoch {epoch + 1}/{self.epochs}",
            f"step {optimizer_step(self.model.optimizer)}",
            f"{time.perf_counter() - self._started:.0f} s",
        ]
        for key in ("loss", "masked_accuracy", "val_loss", "val_masked_accuracy"):
            if key in logs:
                parts.append(f"{key} {float(logs[key]):.4f}")
        if "learning_rate" in logs:
            parts.append(f"learning_rate {float(logs['learning_rate']):.2e}")
        logger.info(" - ".join(parts))

