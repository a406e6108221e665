"""A run's checkpoints: what they hold, resuming from the latest, averaging the last.

A checkpoint holds the model, the optimizer (whose `iterations` is the
schedule's step) and `train_seconds`, the training time so far, so that a
resumed run continues its time budget. The checkpoints are written every
`checkpoint_every` updates and at the end of every epoch
(`transformer.run.callbacks.CheckpointSaver`).

Averaging is section 6.1 of Vaswani et al., 2017: "For the base models, we
used a single model obtained by averaging the last 5 checkpoints."
"""

from __future__ import annotations

import logging

import tensorflow as tf

logger = logging.getLogger(__name__)

# Checkpoints kept on disk (more when more are averaged).
MAX_CHECKPOINTS_KEPT = 3


def open_checkpoints(model, directory, average: int = 1, resume_from=None):
    """The checkpoint of `model` and its optimizer, its manager, and the time counter.

    Args:
        model: a compiled Keras model whose optimizer is built.
        directory: where the manager writes `ckpt-<step>` files.
        average: checkpoints that will be averaged; the manager keeps at least
            that many.
        resume_from: a run's checkpoints directory to restore the latest of, or None.

    Returns:
        `(checkpoint, manager, train_seconds)`; `train_seconds` is a float64
        variable of the checkpoint (0 for a new run).
    """
    # Not a model variable: each worker of a distributed run counts its own time.
    train_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="train_seconds")
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=model.optimizer, train_seconds=train_seconds
    )
    manager = tf.train.CheckpointManager(
        checkpoint, str(directory), max_to_keep=max(MAX_CHECKPOINTS_KEPT, average)
    )
    latest = tf.train.latest_checkpoint(str(resume_from)) if resume_from else None
    if latest:
        restore_checkpoint(checkpoint, latest)
    return checkpoint, manager, train_seconds


def restore_checkpoint(checkpoint: tf.train.Checkpoint, path: str) -> None:
    """Restores `path` into `checkpoint`; a checkpoint written before
    `train_seconds` was kept restores the model and the optimizer, and the
    count starts at 0."""
    names = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
    if "train_seconds" not in names:
        checkpoint = tf.train.Checkpoint(model=checkpoint.model, optimizer=checkpoint.optimizer)
    checkpoint.restore(path).assert_existing_objects_matched()


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
