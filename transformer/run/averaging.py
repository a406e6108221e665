"""Checkpoint averaging, section 6.1 of Vaswani et al., 2017.

"For the base models, we used a single model obtained by averaging the last 5
checkpoints." Here the checkpoints are the run's own (every
`checkpoint_every` updates and at the end of every epoch).
"""

from __future__ import annotations

import logging

import tensorflow as tf

logger = logging.getLogger(__name__)


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
