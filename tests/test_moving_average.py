"""The moving average of the weights (`AveragingAdam`) before, at and past its cap.

Step t (the optimizer's `iterations` before the update, 0 first) sets
`average = m * average + (1 - m) * weights` with
`m = min(ema_momentum, (1 + t) / (10 + t))`, and the first step copies the
weights (m = 0). With `ema_momentum = 0.9` the warm-up reaches the cap at
t = 80 ((1 + 80) / (10 + 80) = 0.9); the average is compared with a NumPy
reference computed from the weights after every step.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from transformer.kernels.optimizers import AveragingAdam, use_moving_average

EMA_MOMENTUM = 0.9
CAP_STEP = 80  # (1 + t) / (10 + t) = 0.9
STEPS = 121
# The first steps (the copy, the warm-up), before, at and after the cap.
CHECKED = (0, 1, 2, 5, 40, CAP_STEP - 1, CAP_STEP, CAP_STEP + 1, 100, STEPS - 1)


def _momentum(step: int) -> float:
    """The reference's m at step t."""
    return 0.0 if step == 0 else min(EMA_MOMENTUM, (1 + step) / (10 + step))


def _average_in(model) -> list[np.ndarray]:
    """The average the optimizer keeps, read through `use_moving_average`; the
    model's own weights are put back."""
    weights = [np.array(v) for v in model.trainable_variables]
    use_moving_average(model)
    average = [np.array(v) for v in model.trainable_variables]
    for variable, value in zip(model.trainable_variables, weights, strict=True):
        variable.assign(value)
    return average


def test_the_momentum_reaches_its_cap_at_step_80():
    assert _momentum(CAP_STEP) == EMA_MOMENTUM
    assert _momentum(CAP_STEP - 1) < EMA_MOMENTUM < (1 + CAP_STEP + 1) / (10 + CAP_STEP + 1)


def test_the_moving_average_matches_numpy_before_at_and_past_its_cap():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    optimizer = AveragingAdam(learning_rate=0.05, use_ema=True, ema_momentum=EMA_MOMENTUM)
    model.compile(optimizer=optimizer, loss="mse")
    variables = model.trainable_variables
    rng = np.random.default_rng(0)
    reference, checked = None, []
    for step in range(STEPS):
        assert int(optimizer.iterations) == step
        # Random gradients: the weights wander, so every step's m shows in the average.
        gradients = [tf.constant(rng.normal(size=v.shape), tf.float32) for v in variables]
        optimizer.apply(gradients, variables)
        weights = [np.array(v, np.float64) for v in variables]
        m = _momentum(step)
        reference = weights if reference is None else [
            m * average + (1 - m) * w for average, w in zip(reference, weights, strict=True)]
        if step in CHECKED:
            for got, want in zip(_average_in(model), reference, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"the average after step {step}")
            checked.append(step)
            # The average is not the weights (except after the first step's copy).
            apart = max(float(np.max(np.abs(a - w)))
                        for a, w in zip(reference, weights, strict=True))
            assert (apart == 0) == (step == 0), (step, apart)
    assert checked == list(CHECKED)
