"""The run's best weights by validation: kept as they come, restored at the end if asked.

Validation scores the weights the run would deliver: with a moving average
of the weights (`--ema-momentum`), `ValidateMovingAverage` swaps the average
in for the validation pass and back afterwards, so `val_loss` is the
average's loss and training continues from its own weights unchanged.

`KeepBest` saves the weights that validation scored whenever `val_loss`
improves (`best.weights.h5`, then `best.json` naming the step, epoch and
loss, both through `transformer.rundir.replace_atomically`), and stops the run after `patience` epochs
without improvement when that is set. Its record survives an interruption:
a resumed run compares against it and counts the patience from its epoch.
With `restore_best_weights`, the trainer ends the run with those weights
(`restore_best`) instead of the last ones; with neither a validation split
nor a record, the last weights stay.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import keras

from transformer import rundir
from transformer.run.callbacks import optimizer_step
from transformer.seams import keeps_moving_average, swap_moving_average

logger = logging.getLogger(__name__)

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
