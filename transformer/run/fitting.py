"""`model.fit` over a run's epochs: which calls, on which stream of batches.

A run fits in one call per range of epochs (`fit_calls`): an interrupted
epoch is finished first, so every epoch ends at a multiple of its steps.
Each call reads one seeded stream of token-budget or fixed-size batches from
its start step (`train_stream`); `Fitter` makes the calls and gathers their
history.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from transformer.data.batching import (
    TokenizedPairs,
    budget_batches_from_tokens,
    fixed_batches_from_tokens,
)
from transformer.seams import distributed_fit_workaround

__all__ = ["Fitter", "create_metric_variables", "fit_calls", "sharding_options", "train_stream"]


def fit_calls(step: int, steps_per_epoch: int, epochs: int, first_alone=False) -> list:
    """The `fit` calls from `step` on, as `(first_epoch, last_epoch, steps, start_step)`:
    the rest of an interrupted epoch (or with `first_alone`, of the first) first,
    then the remaining epochs.

    >>> fit_calls(0, 10, 3)
    [(0, 3, 10, 0)]
    >>> fit_calls(14, 10, 3)
    [(1, 2, 6, 14), (2, 3, 10, 20)]
    >>> fit_calls(0, 10, 3, first_alone=True)
    [(0, 1, 10, 0), (1, 3, 10, 10)]
    """
    epoch, offset = divmod(step, steps_per_epoch)
    calls = []
    if offset or (first_alone and epoch == 0):
        calls.append((epoch, epoch + 1, steps_per_epoch - offset, step))
        epoch, step = epoch + 1, (epoch + 1) * steps_per_epoch
    if epoch < epochs:
        calls.append((epoch, epochs, steps_per_epoch, step))
    return calls


def sharding_options() -> tf.data.Options:
    """Each worker of a multi-worker run reads its share of every batch."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options


def train_stream(tokens: TokenizedPairs, batch_tokens: int, batch_size: int, seed: int,
                 start_step: int) -> tf.data.Dataset:
    """One seeded stream of shuffled passes over the training pairs, in batches of
    at most `batch_tokens` tokens (or with 0, of `batch_size` pairs); resuming
    skips what was seen.

    Pass `p`'s order is a function of `(seed, p)` for both kinds of batches, so
    the stream is the same however often it is built or iterated.
    """
    if batch_tokens:
        stream = budget_batches_from_tokens(tokens, batch_tokens, seed, start_step=start_step)
    else:
        stream = fixed_batches_from_tokens(tokens, batch_size, seed, start_step=start_step)
    return stream.with_options(sharding_options())


def create_metric_variables(model, batches: tf.data.Dataset) -> None:
    """Creates the compiled metrics' variables before `fit` traces its step.

    Keras creates them while it traces the first training step, and a
    `tf.function` that creates variables is traced twice, which delays the
    first step by a whole extra trace. Evaluating one batch creates them
    first (and traces the evaluation step, which validation traces anyway).
    """
    model.evaluate(batches.take(1), steps=1, verbose=0)


class Fitter:
    """Calls `model.fit` for a range of epochs and gathers the history of the calls."""

    def __init__(self, strategy: tf.distribute.Strategy, chief: bool, config, valid_batches,
                 model, callbacks, verbose):
        self.strategy = strategy
        self.batches = (config.batch_tokens, config.batch_size, config.seed)
        self.model = model
        if verbose == "auto":  # a progress bar on a terminal only
            verbose = int(hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
        self.fit_args = dict(
            validation_data=valid_batches,
            callbacks=callbacks,
            verbose=int(verbose) if chief else 0,
        )
        self.history: dict[str, list[float]] = {}
        self._metric_variables_created = False

    def fit(self, tokens: TokenizedPairs, first_epoch: int, last_epoch: int, steps: int,
            start_step: int) -> None:
        """Epochs `first_epoch` to `last_epoch` (excluded) of `steps` steps over
        `tokens`' stream, from `start_step`."""
        stream = train_stream(tokens, *self.batches, start_step)
        with distributed_fit_workaround(self.model, self.strategy, tokens):
            if not self._metric_variables_created:  # once, even when a resume fits twice
                create_metric_variables(self.model, stream)
                self._metric_variables_created = True
            fitted = self.model.fit(
                stream,
                initial_epoch=first_epoch,
                epochs=last_epoch,
                steps_per_epoch=steps,
                shuffle=False,  # the stream is shuffled, seeded, by batches_from_tokens
                **self.fit_args,
            )
        for key, values in fitted.history.items():
            self.history.setdefault(key, []).extend(float(v) for v in values)
