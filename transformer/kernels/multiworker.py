"""A workaround that lets Keras 3.15's `model.fit` run under `MultiWorkerMirroredStrategy`."""

from __future__ import annotations

import contextlib
import functools

import tensorflow as tf

from transformer.data.batching import batches_from_tokens


@contextlib.contextmanager
def multi_worker_fit_workaround(model, strategy, tokenized):
    """Lets `model.fit` run under `MultiWorkerMirroredStrategy` (Keras 3.15).

    Keras' TensorFlow trainer trips over this strategy twice, and both are
    side-stepped here, for the duration of a `fit` call only:

    - Before the first step it reduces the first distributed batch with
      `strategy.reduce` to learn the input shapes, which this strategy cannot
      do for a nested `(x, y)` batch. The shapes only serve to build the
      metrics and the loss, so they are built from a local batch instead.
    - After every step it averages the metrics over the replicas with
      `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars. The
      train and test steps return them as vectors of one value instead.

    Other strategies are left alone.

    Args:
        model: the compiled `Transformer`.
        strategy: the run's `tf.distribute.Strategy`.
        tokenized: the training pairs' `TokenizedPairs`, for the local batch.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        yield
        return
    sample = next(iter(batches_from_tokens(tokenized, 2, shuffle=False)))
    model_class = type(model)
    model._maybe_symbolic_build = functools.partial(_build_from_local_batch, model, strategy, sample)
    model.train_step = functools.partial(_vector_logs_step, model_class.train_step, model)
    model.test_step = functools.partial(_vector_logs_step, model_class.test_step, model)
    try:
        yield
    finally:
        del model._maybe_symbolic_build, model.train_step, model.test_step


def _build_from_local_batch(model, strategy, sample, iterator=None, data_batch=None):
    """`model._maybe_symbolic_build`, from a local batch rather than a reduced one."""
    with strategy.scope():
        model._symbolic_build(data_batch=sample if data_batch is None else data_batch)


def _vector_logs_step(step, model, data):
    """`step(model, data)` (the class' train or test step) with scalar logs as vectors of one."""
    logs = step(model, data)
    return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, logs)
