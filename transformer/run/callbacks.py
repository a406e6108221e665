"""The Keras callbacks of a training run: learning-rate logs, NaN stop, checkpoints,
summaries, and the best weights by validation.

TensorBoard's event files are written by `keras.callbacks.TensorBoard` (see
`transformer.run.trainer._callbacks`).

The best weights by validation are kept as they come and restored at the end
if asked. Validation scores the weights the run would deliver: with a moving average
of the weights (`--ema-momentum`), `ValidateMovingAverage` swaps the average
in for the validation pass and back afterwards, so `val_loss` is the
average's loss and training continues from its own weights unchanged.

`KeepBest` saves the weights that validation scored whenever `val_loss`
improves (`best.weights.h5`, then `best.json` naming the step, epoch and
loss, both through `transformer.rundir.replace_atomically`), and stops the
run after `patience` epochs without improvement when that is set. Its record survives an interruption:
a resumed run compares against it and counts the patience from its epoch.
With `restore_best_weights`, the trainer ends the run with those weights
(`restore_best`) instead of the last ones; with neither a validation split
nor a record, the last weights stay.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from transformer import rundir
from transformer.seams import keeps_moving_average, learning_rate_schedule, swap_moving_average

logger = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says why and where."""


def optimizer_step(optimizer) -> int:
    """The optimizer's `iterations` (updates applied) as an int, also when the
    variable is mirrored by a distribution strategy."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


def _current_learning_rate(optimizer) -> float:
    """The learning rate of the update just applied (`iterations` has moved past it)."""
    schedule = learning_rate_schedule(optimizer)
    step = max(optimizer_step(optimizer) - 1, 0)
    if schedule is not None:
        return float(schedule(step))
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateLogger(keras.callbacks.Callback):
    """Adds `learning_rate` to the logs of every batch and epoch, so the progress
    bar, `metrics.csv` and the history show the schedule: the rate of the update
    just applied. (`keras.callbacks.TensorBoard` writes the optimizer's own
    `learning_rate` instead, the rate of the next update.)"""

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
        on_save: called with the step after each checkpoint is saved, or None.
    """

    def __init__(self, manager: tf.train.CheckpointManager, every: int, on_save=None):
        super().__init__()
        self.manager = manager
        self.every = every
        self.on_save = on_save
        self.last_saved = None

    def _save(self):
        step = optimizer_step(self.model.optimizer)
        if step != self.last_saved:
            self.manager.save(checkpoint_number=step)
            self.last_saved = step
            if self.on_save is not None:
                self.on_save(step)

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model.optimizer) % self.every == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        self._save()


def format_seconds(seconds: float) -> str:
    """`seconds` as people read a duration: `45 s`, `12 min 5 s`, `1 h 30 min`.

    Example:

    >>> format_seconds(725), format_seconds(5400)
    ('12 min 5 s', '1 h 30 min')
    """
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


class TrainingClock(keras.callbacks.Callback):
    """Counts the run's training seconds and stops training at a time budget.

    The count is kept in `seconds`, a variable of the run's checkpoint, so a
    resumed run continues it; it includes each epoch's validation. With a
    `budget`, training stops after the first step at or past it (Keras still
    ends the epoch: validation, logs, checkpoint). Put it before the
    checkpoint saver, so that every checkpoint holds the time up to its step.

    With a budget and a `CustomSchedule`, it tells the schedule after every
    step which share of the budget is used, so that a warm-up longer than
    the run reaches its peak when the budget runs out.

    Args:
        seconds: a float64 `tf.Variable`, the seconds already trained.
        budget: the most seconds of training, or None for no limit.
        schedule: the `CustomSchedule` to keep informed, or None.
        agree: for the workers of a multi-worker run, the function that turns
            this worker's seconds into the seconds all of them count
            (`transformer.run.distribute.chief_clock`), so that they stop
            after the same step and schedule alike; None for one process.
    """

    def __init__(self, seconds: tf.Variable, budget: float | None = None, schedule=None,
                 agree=None):
        super().__init__()
        self.seconds = seconds
        self.budget = budget
        self.schedule = schedule if budget is not None else None
        self.agree = agree
        self._base = 0.0
        self._started = 0.0

    @property
    def exhausted(self) -> bool:
        """Whether the budget is used up (never without a budget)."""
        return self.budget is not None and float(self.seconds.numpy()) >= self.budget

    def _update(self) -> float:
        elapsed = self._base + time.perf_counter() - self._started
        if self.agree is not None:
            elapsed = self.agree(elapsed)
        self.seconds.assign(elapsed)
        if self.schedule is not None:
            self.schedule.set_time_progress(elapsed / self.budget)
        return elapsed

    def on_train_begin(self, logs=None):
        self._base = float(self.seconds.numpy())
        self._started = time.perf_counter()
        self._update()

    def on_train_batch_end(self, batch, logs=None):
        self._stop_at_budget(self._update(), "training stops after this epoch's validation")

    def on_epoch_end(self, epoch, logs=None):
        # The budget may run out during the validation, after the epoch's last step.
        self._stop_at_budget(self._update(), "training stops here, its epoch's validation "
                             "used the rest of it")

    def epochs_done(self, epochs: int) -> None:
        """Says so when the run's `epochs` end it before its budget: the rest of the
        budget is not used (without --epochs, the recipe's cap)."""
        if self.budget is not None and not self.exhausted:
            logger.info("All %d epochs trained in %s of the %s time budget; the rest is not "
                        "used (more --epochs would use it).", epochs,
                        format_seconds(float(self.seconds.numpy())), format_seconds(self.budget))

    def _stop_at_budget(self, elapsed: float, what: str) -> None:
        """Stops training, saying so once, when `elapsed` reaches the budget."""
        if self.budget is not None and elapsed >= self.budget and not self.model.stop_training:
            self.model.stop_training = True
            logger.info("Time budget of %s reached at step %d: %s.", format_seconds(self.budget),
                        optimizer_step(self.model.optimizer), what)


class EpochSummary(keras.callbacks.Callback):
    """Logs one line per epoch: step, time, losses, accuracies and learning rate,
    and with a time budget (`clock`), how much of it is used."""

    def __init__(self, epochs: int, clock: TrainingClock | None = None):
        super().__init__()
        self.epochs = epochs
        self.clock = clock
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
        if self.clock is not None and self.clock.budget is not None:
            parts.append(f"{format_seconds(float(self.clock.seconds.numpy()))} of the "
                         f"{format_seconds(self.clock.budget)} budget")
        logger.info(" - ".join(parts))



def target_tokens_per_step(tokens, steps_per_pass: int) -> float:
    """The real target tokens (labels) a step trains on, on average over a pass
    of `steps_per_pass` steps over `tokens` (a `TokenizedPairs`)."""
    labels = tokens.target.lengths[: len(tokens)] - 1
    return float(labels.sum()) / steps_per_pass


class ProgressLog(keras.callbacks.Callback):
    """Logs the first step (and how long after the run's start it came), then
    a line about every `every` seconds: the step, its epoch, steps and target
    tokens a second since the last line, and the loss. An epoch over a corpus
    of millions of pairs lasts hours; without a progress bar (no terminal)
    these lines are the run's news between epoch summaries.

    Args:
        started: `time.perf_counter()` when the run started.
        steps_per_epoch: steps of an epoch, to name the epoch and batch.
        tokens_per_step: the real target tokens of a step, on average over a
            pass (`target_tokens_per_step`), for the tokens a second; None to
            leave them out.
        every: seconds between lines.
    """

    def __init__(self, started: float, steps_per_epoch: int,
                 tokens_per_step: float | None = None, every: float = 60.0):
        super().__init__()
        self.started = started
        self.steps_per_epoch = steps_per_epoch
        self.tokens_per_step = tokens_per_step
        self.every = every
        self._first = True
        self._last = (0.0, 0)

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        step = optimizer_step(self.model.optimizer)
        if self._first:
            self._first = False
            self._last = (now, step)
            logger.info("First step (step %d) done %.1f s after the run started.", step,
                        now - self.started)
            return
        if now - self._last[0] < self.every:
            return
        then, then_step = self._last
        self._last = (now, step)
        epoch, in_epoch = divmod(step - 1, self.steps_per_epoch)
        loss = (logs or {}).get("loss")
        rate = (step - then_step) / (now - then)
        tokens = (f" ({rate * self.tokens_per_step:,.0f} target tokens a second)"
                  if self.tokens_per_step else "")
        logger.info("Step %d (epoch %d, batch %d/%d): %.2f steps a second%s%s.", step, epoch + 1,
                    in_epoch + 1, self.steps_per_epoch, rate, tokens,
                    f", loss {float(np.asarray(loss).reshape(-1)[0]):.4f}"
                    if loss is not None else "")

# --------------------------------------------------------------------------
# The best weights by validation
# --------------------------------------------------------------------------


BEST_WEIGHTS = "best.weights.h5"
BEST_RECORD = "best.json"
MONITOR = "val_loss"


class ValidateMovingAverage(keras.callbacks.Callback):
    """Validation inside `fit` scores the moving average of the weights, when
    the optimizer keeps one (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self._swapped = False

    def on_test_begin(self, logs=None):
        if keeps_moving_average(self.model):
            swap_moving_average(self.model)
            self._swapped = True

    def on_test_end(self, logs=None):
        if self._swapped:
            swap_moving_average(self.model)
            self._swapped = False


def read_best(run_dir) -> dict | None:
    """The record of the best weights of `run_dir` (`best.json`), or None."""
    path = Path(run_dir) / BEST_RECORD
    if not path.is_file():
        return None
    return rundir.read_json(path)


class KeepBest(keras.callbacks.Callback):
    """Saves the validated weights when `val_loss` improves; stops after
    `patience` epochs without improvement (0: never).

    Put it after `ValidateMovingAverage` (so the weights it saves are those
    validation scored, swapped in again while it saves) and after the
    checkpoint saver.

    Args:
        write_dir: where this process writes (`best.weights.h5`, `best.json`);
            None on a worker that writes nothing.
        patience: epochs without a better `val_loss` before training stops.
        record: the record of an earlier session of the run (`read_best`).
    """

    def __init__(self, write_dir, patience: int = 0, record: dict | None = None):
        super().__init__()
        self.write_dir = Path(write_dir) if write_dir is not None else None
        self.patience = patience
        self.best = dict(record) if record else None

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(MONITOR)
        if value is None or not math.isfinite(float(value)):
            return
        value = float(value)
        if self.best is None or value < self.best[MONITOR]:
            self.best = {MONITOR: value, "epoch": epoch + 1,
                         "step": optimizer_step(self.model.optimizer)}
            self._save()
            logger.info("Best %s so far, %.4f after epoch %d: its weights are kept in %s.",
                        MONITOR, value, epoch + 1, BEST_WEIGHTS)
        elif self.patience and epoch + 1 - self.best["epoch"] >= self.patience:
            self.model.stop_training = True
            logger.info("No better %s for %d epochs (best %.4f after epoch %d): stopping "
                        "early.", MONITOR, epoch + 1 - self.best["epoch"],
                        self.best[MONITOR], self.best["epoch"])

    def _save(self) -> None:
        if self.write_dir is None:
            return
        averaged = keeps_moving_average(self.model)
        if averaged:
            swap_moving_average(self.model)  # the weights that validation scored
        try:
            rundir.replace_atomically(self.write_dir / BEST_WEIGHTS, self.model.save_weights)
        finally:
            if averaged:
                swap_moving_average(self.model)
        rundir.write_json_atomic(self.write_dir / BEST_RECORD,
                                 {**self.best, "moving_average": averaged})


def restore_best(model, run_dir) -> dict | None:
    """Sets `model`'s weights to the best validated ones of `run_dir` and
    returns their record; None (weights unchanged) when the run kept none."""
    record = read_best(run_dir)
    path = Path(run_dir) / BEST_WEIGHTS
    if record is None or not path.is_file():
        logger.warning("No best weights were kept (no validation pairs, or no validation "
                       "yet): the run ends with its last weights.")
        return None
    model.load_weights(path)
    logger.info("The trained model is the best by %s: %.4f, after epoch %d (step %d).",
                MONITOR, record[MONITOR], record["epoch"], record["step"])
    return record
