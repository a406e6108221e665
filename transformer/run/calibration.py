"""The speed measurement of the size rule (`transformer.run.sizing`): real
training steps of one size at the run's batch shape and precision, before
training starts. The rule measures only the sizes its choice needs."""

from __future__ import annotations

import logging
import time

import keras
import numpy as np

from transformer.model import build_model
from transformer.model_config import TransformerConfig
from transformer.run.sizing import candidate_model
from transformer.training import MaskedLoss

logger = logging.getLogger(__name__)

# Timed steps of each, after `CALIBRATION_WARMUP` untimed ones (the first traces
# the step).
CALIBRATION_STEPS = 6
CALIBRATION_WARMUP = 2


def random_batch(vocab_size: int, pairs: int, length: int, seed: int = 0):
    """`((source, decoder input), labels)`: `pairs` pairs of `length` random
    token ids (no padding), a training batch of a given shape."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, (pairs, length))
    target = rng.integers(4, vocab_size, (pairs, length + 1))
    return (source, target[:, :-1]), target[:, 1:]


def step_seconds(model: TransformerConfig, vocab_size: int, pairs: int, length: int,
                 steps: int | None = None, seed: int = 0) -> float:
    """The mean time of `steps` (default `CALIBRATION_STEPS`) training steps (after
    `CALIBRATION_WARMUP` untimed ones) of `model` on random batches of `pairs` pairs of `length` tokens, in
    the global dtype policy. Imports TensorFlow."""
    steps = steps or CALIBRATION_STEPS
    built = build_model(model, vocab_size, vocab_size)
    built.compile(optimizer=keras.optimizers.Adam(1e-4), loss=MaskedLoss())
    inputs, labels = random_batch(vocab_size, pairs, length, seed)
    for _ in range(CALIBRATION_WARMUP):
        built.train_on_batch(inputs, labels)
    started = time.perf_counter()
    for _ in range(steps):
        built.train_on_batch(inputs, labels)
    return (time.perf_counter() - started) / steps


def measure_step(config, preset: str, vocab_size: int, mean_tokens: float) -> float:
    """The mean seconds of a training step of `preset`'s sizes (with the run's
    other model settings) at the run's batch shape and precision, on random
    tokens; the run's RNG is seeded again before its own model is built. Its
    first step traces the model, which costs most of the time (about 20 to 40
    seconds on one CPU core)."""
    logger.info("Measuring this machine's training speed of %s for the size rule.", preset)
    keras.mixed_precision.set_global_policy(config.precision)
    length = max(2, round(mean_tokens))
    pairs = max(1, (config.batch_tokens or config.batch_size * length) // length)
    seconds = step_seconds(candidate_model(preset, config.model), vocab_size, pairs, length,
                           seed=config.seed)
    keras.backend.clear_session()  # the trainer sets its seed and precision again
    return seconds
