"""Fused Adam updates and a warmed-up moving average of the weights, Keras' math.

`FusedAdam` is Keras' Adam whose update of each weight is one kernel;
`AveragingAdam` adds the moving average of the weights (`use_ema`) with the
warm-up of `tf.train.ExponentialMovingAverage`. Both override private members
of Keras' optimizer (`_backend_update_step`, `_momentums`, `_velocities`,
`_update_model_variables_moving_average`, ...), written against Keras 3.15;
the paper's optimizer and schedule (section 5.3) are
`transformer.training.make_optimizer` and `CustomSchedule`, which build
these classes through `transformer.seams`. The classes keep their registered
names (`transformer>FusedAdam`, `transformer>AveragingAdam`), so saved
models and checkpoints of earlier versions load and resume.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import ops

__all__ = [
    "AveragingAdam",
    "FusedAdam",
    "keeps_moving_average",
    "learning_rate_schedule",
    "swap_moving_average",
    "use_moving_average",
]


def _fused_updates() -> bool:
    """Whether optimizer updates may run as fused kernels on the variables'
    handles: not under a distribution strategy, whose mirrored variables have
    one copy per device (Keras' element-wise updates are used there)."""
    return not tf.distribute.has_strategy()


@keras.saving.register_keras_serializable(package="transformer")
class FusedAdam(keras.optimizers.Adam):
    """Keras' Adam with each weight's update as one kernel.

    Keras updates a weight in about a dozen element-wise operations, each a
    pass over the weight and its two moments; `tf.raw_ops.ResourceApplyAdam`
    makes one pass with the same formula (the bias-corrected rate
    `lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`, epsilon added to `sqrt(v)`).
    On the small batches of a CPU run the optimizer is a large share of the
    step (BENCHMARKS.md, "Training speed"). Sparse gradients (an untied embedding's), AMSGrad and
    distribution strategies take Keras' own update; the variables and the
    saved state are Keras' Adam's.
    """

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        """All weights' updates of a step; the rate and the moments' bias
        corrections are computed once per step, not once per weight."""
        if self.amsgrad or not _fused_updates():
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        scalars = {}  # by dtype
        step = self.iterations + 1
        for gradient, variable in zip(grads, trainable_variables, strict=True):
            if isinstance(gradient, tf.IndexedSlices):
                super().update_step(gradient, variable, learning_rate)
                continue
            dtype = variable.dtype
            if dtype not in scalars:
                beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
                scalars[dtype] = dict(
                    beta1_power=ops.power(beta_1, ops.cast(step, dtype)),
                    beta2_power=ops.power(beta_2, ops.cast(step, dtype)),
                    lr=ops.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
                    epsilon=ops.cast(self.epsilon, dtype))
            index = self._get_variable_index(variable)
            tf.raw_ops.ResourceApplyAdam(
                var=_handle(variable), m=_handle(self._momentums[index]),
                v=_handle(self._velocities[index]), grad=ops.cast(gradient, dtype),
                **scalars[dtype])


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable."""
    return variable.value.handle if isinstance(variable, keras.Variable) else variable.handle


@keras.saving.register_keras_serializable(package="transformer")
class AveragingAdam(FusedAdam):
    """Adam (`FusedAdam`) that keeps an exponential moving average of the weights (Keras'
    `use_ema`) and puts it into the model only when asked (`use_moving_average`).

    The momentum warms up as in `tf.train.ExponentialMovingAverage` with
    `num_updates`: step t uses min(ema_momentum, (1 + t) / (10 + t)), and the
    first step (t = 0) copies the weights.
    Keras' own average starts from the initial weights with the full momentum,
    so that after T steps they still weigh ema_momentum ** T (0.999 ** 2000 is
    0.14); with the warm-up the average covers about the last tenth of the
    steps until the momentum reaches its cap, whatever the run's length.

    Keras' `fit` ends by replacing the weights with their average. A run that
    calls `fit` more than once (a resumed run: the rest of an epoch, then the
    other epochs) would then train on from the average instead of its own
    weights, and end elsewhere than the uninterrupted run. Here `fit` leaves the
    weights alone; the trainer calls `use_moving_average` once training is over.
    """

    def _update_model_variables_moving_average(self, trainable_variables):
        """average = m * average + (1 - m) * weights, m warmed up (class docstring)."""
        step = ops.cast(self.iterations, "float32")
        momentum = ops.minimum(ops.cast(self.ema_momentum, "float32"),
                               (1.0 + step) / (10.0 + step))
        momentum = ops.where(step > 0, momentum, 0.0)  # the average starts as zeros
        fused, rates = _fused_updates(), {}  # 1 - m, by dtype
        for var, average in zip(trainable_variables, self._model_variables_moving_average,
                                strict=True):
            if average is None:
                continue
            if var.dtype not in rates:
                rates[var.dtype] = ops.cast(1.0 - momentum, var.dtype)
            rate = rates[var.dtype]
            if fused:  # average -= (1 - m) * (average - weights), in one kernel after the difference
                tf.raw_ops.ResourceApplyGradientDescent(
                    var=_handle(average), alpha=rate, delta=average - var)
            else:
                average.assign(average - rate * (average - var))

    def finalize_variable_values(self, var_list):
        """Leaves the weights as they are (see the class docstring)."""


def _averaging_optimizer(model) -> AveragingAdam:
    """The model's `AveragingAdam` (also inside the `LossScaleOptimizer` that
    `mixed_float16` wraps it in); a `ValueError` when it keeps no moving average."""
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    if not (isinstance(optimizer, AveragingAdam) and optimizer.use_ema):
        raise ValueError(
            "Expected a model compiled with `transformer.training.make_optimizer(..., ema_momentum > 0)`, which "
            f"keeps a moving average of the weights. Received: optimizer={optimizer!r}"
        )
    return optimizer


def keeps_moving_average(model) -> bool:
    """Whether the model's optimizer keeps a moving average of its weights."""
    try:
        _averaging_optimizer(model)
    except ValueError:
        return False
    return True


def use_moving_average(model) -> None:
    """Sets the model's trainable weights to the moving average its optimizer kept.

    Raises:
        ValueError: the model's optimizer keeps no moving average.
    """
    optimizer = _averaging_optimizer(model)
    optimizer._overwrite_model_variables_with_average_value(model.trainable_variables)


def swap_moving_average(model) -> None:
    """Exchanges the model's trainable weights and the moving average its
    optimizer keeps; a second call puts both back exactly (assignments copy
    values unchanged), so validation can score the average mid-run without
    changing what training continues from.

    Raises:
        ValueError: the model's optimizer keeps no moving average.
    """
    optimizer = _averaging_optimizer(model)
    for var, average in zip(model.trainable_variables,
                            optimizer._model_variables_moving_average, strict=True):
        if average is None:
            continue
        # A copy: a tensor read from `var` may share its buffer, which the assignment overwrites.
        weights = np.array(ops.convert_to_numpy(var))
        var.assign(average)
        average.assign(weights)


def learning_rate_schedule(optimizer):
    """The `LearningRateSchedule` of a Keras optimizer (also inside a
    `LossScaleOptimizer`), or None when its rate is a plain number.

    Keras keeps the schedule object only in the private `_learning_rate`; its
    public `learning_rate` is the schedule's value at the current step.
    """
    inner = getattr(optimizer, "inner_optimizer", None)  # LossScaleOptimizer
    schedule = getattr(inner if inner is not None else optimizer, "_learning_rate", None)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return schedule
    return None
