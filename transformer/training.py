"""The math of training, section 5 of the paper: optimizer, schedule, masked loss and accuracy.

Section 5.3 of Vaswani et al., 2017 (`make_optimizer`, `CustomSchedule`) and
section 5.4 (label smoothing). Loss and accuracy are averaged over
non-padding target tokens only (docs/design.md, "Math"). The run around them
(configuration, callbacks, evaluation, `train`) is `transformer.run`.
Public Keras and TensorFlow API only (tests/test_public_api_only.py).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from transformer import seams
from transformer._validation import (
    check_choice,
    check_learning_rate,
    check_positive_int,
    check_rate,
)
from transformer.constants import (
    ADAM_BETA_1,
    ADAM_BETA_2,
    ADAM_EPSILON,
    DECAYS,
    DECAYS_TO_ZERO,
    PAD_ID,
)

# A schedule that decays to zero warms up for `warmup_steps` or for this share
# of the run, whichever is shorter: a run shorter than its warm-up still
# reaches the peak, and then cools down (`COOLDOWN_SHARE`).
DECAY_WARMUP_SHARE = 0.8

# The cool-down of `decay="cooldown"`: the last fifth of the run (Hägele et al.,
# 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations").
COOLDOWN_SHARE = 0.2


@keras.saving.register_keras_serializable(package="transformer")
class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The learning-rate schedule of section 5.3 of Vaswani et al., 2017, or
    one that ends at zero with the run.

    `lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`: it rises
    linearly for the first `warmup_steps` steps, peaks at step `warmup_steps`
    with `(d_model * warmup_steps)^-0.5`, and then decays with the inverse
    square root of the step.

    The formula ties the peak to the warm-up, so a short warm-up also means a
    high peak. `peak_learning_rate` keeps the same shape (linear rise, then the
    inverse square root) with a chosen peak instead:
    `lrate = peak * min(step / warmup_steps, (step / warmup_steps)^-0.5)`,
    which is the paper's formula when `peak = (d_model * warmup_steps)^-0.5`.

    A run shorter than the warm-up never reaches the peak: with the paper's
    4000 steps, a 1,700-step run stops at 0.4 of it. `total_steps` fits the
    warm-up into the run instead: it ends at `min(warmup_steps, total_steps)`
    with the same peak, so a short run rises faster and ends at the peak. A
    run with a time budget does not know its number of steps in advance:
    `set_time_progress(p)` (called by the run's clock with the share `p` of
    its budget used) makes the rise reach the peak when the budget runs out,
    or at the end of the warm-up, whichever comes first. With `r = step /
    min(warmup_steps, total_steps)`:
    `lrate = peak * min(max(r, p), r^-0.5)`, which is the paper's formula
    when `p = 0` and `total_steps >= warmup_steps`.

    The inverse square root never reaches zero, so a run stopped by its epochs
    or its budget ends at a rate still high. `decay="linear"` or `"cosine"`
    ends the rate at zero when the run ends instead (budgeted training: Li et
    al., 2020). The run's progress `p` is the larger of `step / total_steps`
    and, with a time budget, the share of the budget used; the warm-up lasts
    `warmup_steps` or `DECAY_WARMUP_SHARE` of the run, whichever is shorter:
    with `w = min(warmup_steps, DECAY_WARMUP_SHARE * total_steps)`,
    `lrate = peak * min(max(step / w, p / DECAY_WARMUP_SHARE), f(p))`, where
    `f(p) = 1 - p` (linear), `(1 + cos(pi * p)) / 2` (cosine) or
    `min(1, (1 - p) / COOLDOWN_SHARE)` (cooldown: at the peak, then a straight
    fall over the run's last `COOLDOWN_SHARE`).

    Keras calls the schedule with the optimizer's `iterations`, which counts the
    updates already applied, so the first update sees step 0 and a learning rate
    of 0, exactly as in the tutorial.

    Args:
        d_model: model width.
        warmup_steps: steps of linear warm-up (4000 in the paper).
        peak_learning_rate: the rate at the end of the warm-up; None for the
            paper's `(d_model * warmup_steps)^-0.5`.
        total_steps: the run's updates; with the inverse square root, a
            shorter run than `warmup_steps` warms up over all of them, and
            None keeps the paper's warm-up whatever the run's length. A
            decay to zero needs it: the rate is zero there.
        decay: one of `DECAYS`: "inverse_sqrt" (the paper's), "linear",
            "cosine" or "cooldown".

    Example:

    >>> schedule = CustomSchedule(d_model=128, warmup_steps=4000)
    >>> round(float(schedule(4000)), 6)
    0.001398
    >>> round(float(CustomSchedule(128, 400, peak_learning_rate=1e-3)(1600)), 6)
    0.0005
    >>> short = CustomSchedule(128, 4000, total_steps=2000)  # the peak at step 2000
    >>> round(float(short(2000)), 6), round(float(short(1000)), 6)
    (0.001398, 0.000699)
    >>> cooldown = CustomSchedule(128, 400, 2e-3, total_steps=1000, decay="cooldown")
    >>> [round(float(cooldown(step)), 6) for step in (200, 400, 800, 900, 1000)]
    [0.001, 0.002, 0.002, 0.001, 0.0]
    """

    def __init__(self, d_model, warmup_steps=4000, peak_learning_rate=None, total_steps=None,
                 decay="inverse_sqrt"):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("warmup_steps", warmup_steps)
        if peak_learning_rate is not None:
            check_learning_rate(peak_learning_rate)
        if total_steps is not None:
            check_positive_int("total_steps", total_steps)
        check_choice("decay", decay, DECAYS)
        if decay in DECAYS_TO_ZERO and total_steps is None:
            raise ValueError(
                f"Received decay={decay!r} without `total_steps`: a decay to zero needs "
                "the run's length. Received: total_steps=None")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.peak_learning_rate = peak_learning_rate
        self.total_steps = total_steps
        self.decay = decay
        self._time_progress = None  # a variable, once a time budget sets it

    @property
    def peak(self) -> float:
        """The rate at the end of the warm-up."""
        if self.peak_learning_rate is not None:
            return float(self.peak_learning_rate)
        return (self.d_model * self.warmup_steps) ** -0.5

    @property
    def rise_steps(self) -> float:
        """The steps of the warm-up: `warmup_steps`, or fewer in a short run."""
        if self.decay in DECAYS_TO_ZERO:
            return min(self.warmup_steps, DECAY_WARMUP_SHARE * self.total_steps)
        return min(self.warmup_steps, self.total_steps or self.warmup_steps)

    def describe(self) -> str:
        """The schedule in words, for a run's log."""
        rise = f"up to {self.peak:.2e} in {self.warmup_steps} steps"
        if self.decay == "inverse_sqrt":
            fitted = " (sooner if the run ends sooner)" if self.total_steps else ""
            return f"{rise}{fitted}, then down as 1/sqrt(step)"
        return (f"{rise} (or {DECAY_WARMUP_SHARE:g} of the run, if sooner), then down to 0 "
                f"({self.decay}) at the run's end: step {self.total_steps}, or its time budget")

    def set_time_progress(self, progress: float) -> None:
        """Ends the warm-up (and a decay) by time too: `progress` is the share
        of the run's time budget already used (clipped to [0, 1])."""
        if self._time_progress is None:
            # Created at first use, under the caller's distribution strategy.
            self._time_progress = tf.Variable(0.0, trainable=False, dtype=tf.float32,
                                              name="time_progress")
        self._time_progress.assign(min(max(float(progress), 0.0), 1.0))

    def __call__(self, step):
        ratio = tf.cast(step, tf.float32) / float(self.rise_steps)  # r
        if self.decay == "inverse_sqrt":
            rise = ratio
            if self._time_progress is not None:
                rise = tf.math.maximum(ratio, self._time_progress)
            # rsqrt(0) is inf, so the min picks the rise (0 at step 0 without a budget).
            return self.peak * tf.math.minimum(rise, tf.math.rsqrt(ratio))
        progress = tf.cast(step, tf.float32) / float(self.total_steps)  # p
        rise = ratio
        if self._time_progress is not None:
            progress = tf.math.maximum(progress, self._time_progress)
            rise = tf.math.maximum(ratio, self._time_progress / DECAY_WARMUP_SHARE)
        progress = tf.clip_by_value(progress, 0.0, 1.0)
        if self.decay == "linear":
            fall = 1.0 - progress
        elif self.decay == "cosine":
            fall = 0.5 * (1.0 + tf.math.cos(math.pi * progress))
        else:
            fall = tf.math.minimum(1.0, (1.0 - progress) / COOLDOWN_SHARE)
        return self.peak * tf.math.minimum(rise, fall)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
                "peak_learning_rate": self.peak_learning_rate,
                "total_steps": self.total_steps, "decay": self.decay}


def make_optimizer(
    d_model: int, warmup_steps: int = 4000, peak_learning_rate: float | None = None,
    total_steps: int | None = None, ema_momentum: float = 0.0, decay: str = "inverse_sqrt",
) -> keras.optimizers.Adam:
    """Adam with the paper's settings (beta_1=0.9, beta_2=0.98, epsilon=1e-9) and
    `CustomSchedule` (section 5.3 of Vaswani et al., 2017; its arguments).

    `ema_momentum` > 0 also keeps a moving average of the weights, updated
    after every step as `average = m * average + (1 - m) * weights`; 0 keeps
    none. The Adam is `transformer.seams.adam`: Keras' Adam with fused updates.

    Example:

    >>> optimizer = make_optimizer(128, 4000)
    >>> optimizer.beta_1, optimizer.beta_2, optimizer.epsilon
    (0.9, 0.98, 1e-09)
    """
    ema_momentum = check_rate("ema_momentum", ema_momentum)
    schedule = CustomSchedule(d_model, warmup_steps, peak_learning_rate, total_steps, decay)
    return seams.adam(schedule, ema_momentum=ema_momentum, beta_1=ADAM_BETA_1,
                      beta_2=ADAM_BETA_2, epsilon=ADAM_EPSILON)


def token_losses(label, pred, label_smoothing):
    """Cross-entropy of every token, `(batch, target_len)`, from logits.

    With log p_v = pred_v - log Z (Z = sum_v exp pred_v) and the smoothed
    target q = (1 - eps) * one_hot(label) + eps / vocab:
    -sum_v q_v log p_v = log Z - (1 - eps) * pred_label - eps * mean_v(pred_v).
    Written on the logits, no `(batch, target_len, vocab)` log-softmax tensor
    is kept for the gradient. Padding is not masked here (`masked_loss` does).

    Args:
        label: int targets `(batch, target_len)`.
        pred: logits `(batch, target_len, vocab_size)`.
        label_smoothing: `eps` in [0, 1) (not checked).

    Returns:
        float32 losses `(batch, target_len)`.
    """
    pred = tf.cast(pred, tf.float32)  # (batch, target_len, vocab)
    label = tf.cast(label, tf.int32)  # (batch, target_len)
    log_z = tf.reduce_logsumexp(pred, axis=-1)  # (batch, target_len)
    nll = log_z - tf.gather(pred, label, axis=-1, batch_dims=2)  # (batch, target_len)
    if not label_smoothing:
        return nll
    uniform = log_z - tf.reduce_mean(pred, axis=-1)  # (batch, target_len): mean_v(-log p_v)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform


# The loss of a training step, compiled by XLA into a few fused loops over the
# logits (forward and gradient). The logits are the step's largest tensor
# (batch x target_len x target vocabulary); TensorFlow's separate kernels
# read and write it several times; one fused
# function makes the training step faster (measurements in BENCHMARKS.md,
# "Training speed"). XLA compiles once per new logits shape, which a training
# run pays once per distinct padded target length: on batches of many shapes
# (token-budget batches of real text) the compilations cost more than the
# fused loops save, and `MaskedLoss(jit_compile=False)` takes the same math
# from `transformer.seams.token_losses` instead: one softmax with its gradient
# written out (BENCHMARKS.md, "Training speed").
_xla_token_losses = tf.function(token_losses, jit_compile=True, reduce_retracing=True)


def _checked_token_losses(label, pred, label_smoothing, jit_compile=True):
    """`token_losses`, compiled by XLA, after checking that every label indexes
    the logits; with `jit_compile` False, the same math from
    `transformer.seams.token_losses`.

    XLA's gather clamps an out-of-range index where TensorFlow's raises, so a
    target vocabulary larger than the model's would otherwise train silently
    on wrong logits. The check is one pass over the `(batch, target_len)` ids.
    """
    if not jit_compile:
        return seams.token_losses(label, pred, label_smoothing)  # its gather checks
    label = tf.cast(label, tf.int32)  # (batch, target_len)
    message = (
        "Received a target token id outside [0, vocab_size) of the logits: the target "
        "tokenizer's vocabulary does not match the model's target_vocab_size."
    )
    checks = [
        tf.debugging.assert_non_negative(label, message=message),
        tf.debugging.assert_less(label, tf.shape(pred)[-1], message=message),
    ]
    with tf.control_dependencies(checks):
        label = tf.identity(label)
    return _xla_token_losses(label, pred, label_smoothing)  # (batch, target_len)


def masked_loss(label, pred, label_smoothing=0.0):
    """Cross-entropy averaged over the non-padding target tokens.

    Padding (`label == 0`) contributes nothing, neither to the sum nor to the
    count. With `label_smoothing = eps` (section 5.4 of Vaswani et al., 2017;
    the paper uses 0.1) the target distribution is
    `(1 - eps) * one_hot(label) + eps / vocab_size`, as in
    `keras.losses.CategoricalCrossentropy(label_smoothing=eps)`.

    Args:
        label: int targets `(batch, target_len)`; 0 is padding.
        pred: logits `(batch, target_len, vocab_size)`.
        label_smoothing: `eps` in [0, 1).

    Returns:
        A float32 scalar; 0 when every token is padding.

    Example:

    >>> label = tf.constant([[1, 0]])
    >>> pred = tf.constant([[[0.0, 0.0], [5.0, -5.0]]])
    >>> round(float(masked_loss(label, pred)), 4)  # ln 2; the padding is ignored
    0.6931
    """
    label_smoothing = check_rate("label_smoothing", label_smoothing)
    loss = _checked_token_losses(label, pred, label_smoothing)  # (batch, target_len)
    mask = tf.cast(tf.not_equal(tf.cast(label, tf.int32), PAD_ID), loss.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(loss * mask), tf.reduce_sum(mask))


keras.saving.register_keras_serializable(package="transformer", name="masked_loss")(masked_loss)


@keras.saving.register_keras_serializable(package="transformer")
class MaskedLoss(keras.losses.Loss):
    """`masked_loss` as a `keras.losses.Loss`, with its label smoothing stored.

    Use it rather than the plain function with a `tf.distribute` strategy:
    Keras scales a loss by the number of replicas only when it reduces the
    loss itself, which it does for this class.

    Args:
        label_smoothing: `eps` in [0, 1); 0.1 in the paper (section 5.4).
        jit_compile: compute the token losses with XLA (faster on batches of
            a few shapes, slower when every batch has a new shape).

    Example:

    >>> loss = MaskedLoss(label_smoothing=0.1)
    >>> model.compile(optimizer, loss=loss, metrics=[masked_accuracy])  # doctest: +SKIP
    """

    def __init__(self, label_smoothing=0.0, name="masked_loss", jit_compile=True, **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        self.label_smoothing = check_rate("label_smoothing", label_smoothing)
        self.jit_compile = bool(jit_compile)

    def call(self, y_true, y_pred):
        # Keras sums what `call` returns and divides by its size (and, under a
        # tf.distribute strategy, by the number of replicas: it leaves a scalar
        # alone, so the plain `masked_loss` would count every replica's loss in
        # full). Weighting each real token by size / real tokens turns that
        # reduction into the mean over the real tokens.
        label = tf.cast(y_true, tf.int32)  # (batch, target_len)
        loss = _checked_token_losses(
            label, y_pred, self.label_smoothing, self.jit_compile
        )  # (batch, target_len)
        mask = tf.cast(tf.not_equal(label, PAD_ID), loss.dtype)
        size = tf.cast(tf.size(mask), loss.dtype)
        return loss * mask * tf.math.divide_no_nan(size, _real_tokens_per_replica(mask))

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing,
                "jit_compile": self.jit_compile}


def _real_tokens_per_replica(mask):
    """The real tokens of the whole global batch, divided by the replica count.

    On one device, the batch's own count. Under a `tf.distribute` strategy,
    Keras divides each replica's loss by the number of replicas and sums the
    gradients; dividing each replica's token-loss sum by this average count
    (rather than by its own count) makes that the mean over every real token
    of the global batch, as on one device, also when the replicas hold
    different numbers of real tokens.
    """
    count = tf.reduce_sum(mask)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return count
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return total / tf.cast(context.num_replicas_in_sync, count.dtype)


def masked_accuracy(label, pred):
    """Share of non-padding target tokens whose arg-max prediction is the label.

    Args:
        label: int targets `(batch, target_len)`; 0 is padding.
        pred: logits `(batch, target_len, vocab_size)`.

    Returns:
        A float32 scalar in [0, 1].

    Example:

    >>> label = tf.constant([[1, 2, 0]])
    >>> pred = tf.one_hot([[1, 0, 1]], 3)
    >>> float(masked_accuracy(label, pred))  # 1 of 2 real tokens; padding ignored
    0.5
    """
    label = tf.cast(label, tf.int32)  # (batch, target_len)
    guess = tf.argmax(pred, axis=-1, output_type=tf.int32)  # (batch, target_len)
    match = tf.cast(tf.equal(label, guess), tf.float32)
    mask = tf.cast(tf.not_equal(label, PAD_ID), tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(match * mask), tf.reduce_sum(mask))


keras.saving.register_keras_serializable(package="transformer", name="masked_accuracy")(
    masked_accuracy
)
