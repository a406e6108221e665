"""A workaround that lets Keras 3.15's `model.fit` run under the mirrored strategies."""

from __future__ import annotations

import contextlib
import functools

import tensorflow as tf

from transformer.data.batching import batches_from_tokens


@contextlib.contextmanager
def distributed_fit_workaround(model, strategy, tokenized):
    """Lets `model.fit` run under `MirroredStrategy` and `MultiWorkerMirroredStrategy`
    (Keras 3.15).

    Keras' TensorFlow trainer trips over these strategies, and both trips are
    side-stepped here, for the duration of a `fit` call only:

    - Before the first step it reduces the first distributed batch with
      `strategy.reduce` to learn the input shapes. That sums the replicas'
      parts of the batch, which fails when they hold different numbers of
      pairs (a token-budget batch of an odd number of pairs, or of one), and
      under the multi-worker strategy for any nested `(x, y)` batch. The
      shapes only serve to build the metrics and the loss, so they are built
      from a local batch instead.
    - Under the multi-worker strategy, after every step it averages the
      metrics over the replicas with `strategy.reduce("MEAN", value, axis=0)`,
      which fails on scalars. The train and test steps return them as
      vectors of one value instead.

    One device is left alone.

    Args:
        model: the compiled `Transformer`.
        strategy: the run's `tf.distribute.Strategy`.
        tokenized: the training pairs' `TokenizedPairs`, for the local batch.
    """
    if strategy.num_replicas_in_sync == 1:
        yield
        return
    sample = next(iter(batches_from_tokens(tokenized, 2, shuffle=False)))
    model._maybe_symbolic_build = functools.partial(_build_from_local_batch, model, strategy, sample)
    vector_logs = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if vector_logs:
        model_class = type(model)
        model.train_step = functools.partial(_vector_logs_step, model_class.train_step, model)
        model.test_step = functools.partial(_vector_logs_step, model_class.test_step, model)
    try:
        yield
    finally:
        del model._maybe_symbolic_build
        if vector_logs:
            del model.train_step, model.test_step


def _build_from_local_batch(model, strategy, sample, iterator=None, data_batch=None):
    """`model._maybe_symbolic_build`, from a local batch rather than a reduced one."""
    with strategy.scope():
        model._symbolic_build(data_batch=sample if data_batch is None else data_batch)


def _vector_logs_step(step, model, data):
    """`step(model, data)` (the class' train or test step) with scalar logs as vectors of one."""
    logs = step(model, data)
    return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, logs)
