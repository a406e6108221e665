"""A run's checkpoints: what they hold, resuming from the latest, averaging the weights;
and the weights a run adapting another starts from (`load_parent_weights`).

A checkpoint holds the model, the optimizer (whose `iterations` is the
schedule's step), `train_seconds`, the training time so far, so that a
resumed run continues its time budget, and `random_states`, the states of the
model's seed generators (its dropout layers'), so that a resumed run draws the
dropout masks the uninterrupted run would have drawn. The checkpoints are
written every `checkpoint_every` updates and at the end of every epoch
(`transformer.run.callbacks.CheckpointSaver`).

Averaging is section 6.1 of Vaswani et al., 2017: "For the base models, we
used a single model obtained by averaging the last 5 checkpoints."
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import keras
import tensorflow as tf

from transformer import rundir
from transformer.rundir import RunDirError
from transformer.seams import use_moving_average

logger = logging.getLogger(__name__)

# Checkpoints kept on disk (more when more are averaged).
MAX_CHECKPOINTS_KEPT = 3

# Parts of a checkpoint that older versions did not write: a checkpoint
# without them restores the rest (the time count starts at 0, the dropout
# seeds where a new run's start).
_OPTIONAL_PARTS = ("train_seconds", "random_states")

_INDEX = re.compile(r"^ckpt-(\d+)\.index$")


class CheckpointError(RunDirError):
    """A checkpoint cannot be restored into the run's model; the message names it."""


def random_states(model) -> list:
    """The model's seed generator states: `model.variables` that are not weights."""
    weights = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def latest_checkpoint(directory) -> str | None:
    """The checkpoint to resume from in `directory`, or None if it holds none.

    The one its `checkpoint` state file names; without a readable state file,
    the highest-numbered `ckpt-<step>` whose index was written (the index is
    written last), with a warning.
    """
    directory = Path(directory)
    latest = tf.train.latest_checkpoint(str(directory))
    if latest or not directory.is_dir():
        return latest
    steps = [int(m.group(1)) for m in map(_INDEX.match, (p.name for p in directory.iterdir())) if m]
    if not steps:
        return None
    path = str(directory / f"ckpt-{max(steps)}")
    logger.warning("%s has no readable `checkpoint` state file; resuming from %s, the "
                   "latest checkpoint on disk.", directory, path)
    return path


def resume_checkpoint(run_dir) -> str | None:
    """The checkpoint a resumed run continues from, or None to start it anew.

    None only when the run stopped before its first checkpoint (this is logged):
    nothing in `run_dir` shows that it trained (`transformer.rundir.training_trace`).

    Raises:
        transformer.rundir.RunDirError: the run trained, but its checkpoints
            directory holds no checkpoint to continue from.
    """
    run_dir = Path(run_dir)
    directory = run_dir / rundir.CHECKPOINTS_DIR
    latest = latest_checkpoint(directory)
    if latest:
        return latest
    trace = rundir.training_trace(run_dir)
    if trace:
        raise rundir.RunDirError(
            f"Cannot resume {str(run_dir)!r}: {str(directory)!r} holds no checkpoint to "
            f"continue from (deleted, or its `checkpoint` file unreadable), yet the run "
            f"trained ({trace}). Restore the checkpoints, or start a new run in another "
            "--output-dir."
        )
    logger.warning("%s stopped before its first checkpoint: there is nothing to continue; "
                   "starting the run anew.", run_dir)
    return None


def open_checkpoints(model, directory, average: int = 1, resume_from=None):
    """The checkpoint of `model` and its optimizer, its manager, and the time counter.

    Args:
        model: a compiled Keras model whose optimizer is built.
        directory: where the manager writes `ckpt-<step>` files.
        average: checkpoints that will be averaged; the manager keeps at least
            that many.
        resume_from: a checkpoint (a `ckpt-<step>` path, see
            `latest_checkpoint`) to restore, or None.

    Returns:
        `(checkpoint, manager, train_seconds)`; `train_seconds` is a float64
        variable of the checkpoint (0 for a new run).

    Raises:
        CheckpointError: `resume_from` does not match the model.
    """
    # Not a model variable: each worker of a distributed run counts its own time.
    train_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="train_seconds")
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=model.optimizer, train_seconds=train_seconds,
        random_states=random_states(model),
    )
    manager = tf.train.CheckpointManager(
        checkpoint, str(directory), max_to_keep=max(MAX_CHECKPOINTS_KEPT, average)
    )
    if resume_from:
        restore_checkpoint(checkpoint, str(resume_from))
    return checkpoint, manager, train_seconds


def restore_checkpoint(checkpoint: tf.train.Checkpoint, path: str) -> None:
    """Restores `path` into `checkpoint`.

    A checkpoint written before `train_seconds` or `random_states` were kept
    restores the model and the optimizer (the count starts at 0, the seeds
    keep their initial states).

    Raises:
        CheckpointError: `path` cannot be read, or its variables do not match
            the model and the optimizer (another model, or another version of
            the code); one line naming the checkpoint.
    """
    try:
        names = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
        parts = {name: getattr(checkpoint, name) for name in ("model", "optimizer")}
        parts.update({name: getattr(checkpoint, name) for name in _OPTIONAL_PARTS
                      if name in names and hasattr(checkpoint, name)})
        status = tf.train.Checkpoint(**parts).restore(path)
        status.expect_partial()  # values of the checkpoint itself (its save counter)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as err:
        detail = " ".join(str(err).split())
        detail = detail if len(detail) <= 300 else detail[:297] + "..."
        raise CheckpointError(
            f"Checkpoint {path!r} does not match this run's model and optimizer, or cannot "
            f"be read ({detail}). Was the model or the code changed? Start a new run in "
            "another output directory."
        ) from None


def load_parent_weights(model, init_from) -> None:
    """Sets `model`'s weights to those the run `init_from` delivered (its
    `model.keras`): where a new run adapting it starts (`transformer.run.adapt`)."""
    parent = keras.saving.load_model(Path(init_from) / rundir.MODEL_FILE, compile=False)
    model.set_weights(parent.get_weights())


def average_last_checkpoints(
    checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager, count: int
) -> int:
    """Sets the model's weights to the mean of the last `count` checkpoints.

    Each checkpoint is restored in turn, the latest last, so the optimizer
    keeps the final state and a resumed run continues from the final weights
    (the checkpoint files are not changed).

    Args:
        checkpoint: the `tf.train.Checkpoint` with a `model` (and an optimizer).
        manager: its `tf.train.CheckpointManager`; the latest checkpoint is
            the final step's.
        count: checkpoints to average; 1 (or fewer than 2 kept) changes nothing.

    Returns:
        How many checkpoints were averaged (0 when nothing changed).
    """
    paths = manager.checkpoints[-count:]
    if count <= 1 or len(paths) < 2:
        return 0
    model = checkpoint.model
    total = None
    for path in paths:
        checkpoint.restore(path).expect_partial()
        weights = model.get_weights()
        total = weights if total is None else [t + w for t, w in zip(total, weights, strict=True)]
    model.set_weights([t / len(paths) for t in total])
    steps = ", ".join(path.rsplit("-", 1)[-1] for path in paths)
    logger.info("Averaged the weights of the last %d checkpoints (steps %s).", len(paths), steps)
    return len(paths)


def average_weights(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager,
                    count: int, ema_momentum: float) -> None:
    """The trained model's weights: the mean of the last `count` checkpoints
    (`average_last_checkpoints`), or, with `ema_momentum` > 0, the moving
    average the optimizer kept (`transformer.kernels.optimizers.AveragingAdam`); the
    run's config allows only one of them."""
    average_last_checkpoints(checkpoint, manager, count)
    if ema_momentum:
        use_moving_average(checkpoint.model)
        logger.info("The trained model is the moving average of the weights (momentum %g).",
                    ema_momentum)
