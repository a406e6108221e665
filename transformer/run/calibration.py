"""The speed measurement of the size rule (`transformer.run.sizing`): real
training steps of two sizes at the run's batch shape and precision, before
training starts, give this machine's `Speed`."""

from __future__ import annotations

import logging
import time

import keras
import numpy as np

from transformer.model import build_model
from transformer.model_config import TransformerConfig
from transformer.run.sizing import Speed, candidate_model, token_cost
from transformer.training import MaskedLoss

logger = logging.getLogger(__name__)

# The two sizes timed (the others' speeds are interpolated or extrapolated).
CALIBRATION_PRESETS = ("tutorial", "medium")
# Timed steps of each, after `CALIBRATION_WARMUP` untimed ones (the first traces
# the step).
CALIBRATION_STEPS = 6
CALIBRATION_WARMUP = 2


def step_seconds(model: TransformerConfig, vocab_size: int, pairs: int, length: int,
                 steps: int | None = None, seed: int = 0) -> float:
    """The mean time of `steps` (default `CALIBRATION_STEPS`) training steps (after
    `CALIBRATION_WARMUP` untimed ones) of `model` on random batches of `pairs` pairs of `length` tokens, in
    the global dtype policy. Imports TensorFlow."""
    steps = steps or CALIBRATION_STEPS
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, (pairs, length))
    target = rng.integers(4, vocab_size, (pairs, length + 1))
    built = build_model(model, vocab_size, vocab_size)
    built.compile(optimizer=keras.optimizers.Adam(1e-4), loss=MaskedLoss())
    inputs, labels = (source, target[:, :-1]), target[:, 1:]
    for _ in range(CALIBRATION_WARMUP):
        built.train_on_batch(inputs, labels)
    started = time.perf_counter()
    for _ in range(steps):
        built.train_on_batch(inputs, labels)
    return (time.perf_counter() - started) / steps


def calibrate(config, vocab_size: int, mean_tokens: float) -> Speed:
    """Times `CALIBRATION_STEPS` training steps of each of `CALIBRATION_PRESETS`
    at the run's batch shape and precision (random tokens; the run's RNG is
    seeded again before its own model is built) and returns the `Speed` through
    them. About ten seconds on one CPU core, before training starts."""
    logger.info("Measuring this machine's training speed for the size rule (%s, a few "
                "steps each).", " and ".join(CALIBRATION_PRESETS))
    keras.mixed_precision.set_global_policy(config.precision)
    length = max(2, round(mean_tokens))
    pairs = max(1, (config.batch_tokens or config.batch_size * length) // length)
    points = []
    for preset in CALIBRATION_PRESETS:
        model = candidate_model(preset, config.model)
        seconds = step_seconds(model, vocab_size, pairs, length, seed=config.seed)
        points.append((token_cost(model, vocab_size, mean_tokens), seconds))
    keras.backend.clear_session()  # the trainer sets its seed and precision again
    return Speed.from_two(points, pairs * length)
