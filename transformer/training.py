"""Training: the learning-rate schedule, the masked loss and accuracy, and the fit wiring.

Section 5.3 of Vaswani et al., 2017 (optimizer and schedule) and section 5.4
(label smoothing). Loss and accuracy are averaged over non-padding target
tokens only (DESIGN.md, decision 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from transformer._validation import check_positive_int
from transformer.constants import ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON, PAD_ID
from transformer.data.loading import DATASETS
from transformer.model import TransformerConfig

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------
# Schedule, loss and metric
# --------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="transformer")
class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The learning-rate schedule of section 5.3 of Vaswani et al., 2017.

    `lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`: it rises
    linearly for the first `warmup_steps` steps, peaks at step `warmup_steps`
    with `(d_model * warmup_steps)^-0.5`, and then decays with the inverse
    square root of the step.

    Keras calls the schedule with the optimizer's `iterations`, which counts the
    updates already applied, so the first update sees step 0 and a learning rate
    of 0, exactly as in the tutorial.

    Args:
        d_model: model width.
        warmup_steps: steps of linear warm-up (4000 in the paper).

    Example:

    >>> schedule = CustomSchedule(d_model=128, warmup_steps=4000)
    >>> round(float(schedule(4000)), 6)
    0.000699
    """

    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("warmup_steps", warmup_steps)
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        arg1 = tf.math.rsqrt(step)  # inf at step 0; the min below picks arg2 = 0
        arg2 = step * (float(self.warmup_steps) ** -1.5)
        return tf.math.rsqrt(tf.cast(self.d_model, tf.float32)) * tf.math.minimum(arg1, arg2)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps}


def make_optimizer(d_model: int, warmup_steps: int = 4000) -> keras.optimizers.Adam:
    """Adam with the paper's settings (beta_1=0.9, beta_2=0.98, epsilon=1e-9) and
    `CustomSchedule` (section 5.3 of Vaswani et al., 2017)."""
    return keras.optimizers.Adam(
        CustomSchedule(d_model, warmup_steps),
        beta_1=ADAM_BETA_1,
        beta_2=ADAM_BETA_2,
        epsilon=ADAM_EPSILON,
    )


def _check_label_smoothing(label_smoothing) -> float:
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not (
        0 <= label_smoothing < 1
    ):
        raise ValueError(
            "Received an invalid value for argument `label_smoothing`, expected a float "
            f"in [0, 1). Received: label_smoothing={label_smoothing!r}"
        )
    return float(label_smoothing)


def _token_losses(label, pred, label_smoothing):
    """Cross-entropy of every token, `(batch, target_len)`, from logits.

    With log p_v = pred_v - log Z (Z = sum_v exp pred_v) and the smoothed
    target q = (1 - eps) * one_hot(label) + eps / vocab:
    -sum_v q_v log p_v = log Z - (1 - eps) * pred_label - eps * mean_v(pred_v).
    Written on the logits, no `(batch, target_len, vocab)` log-softmax tensor
    is kept for the gradient.
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
# (batch x target_len x target vocabulary: 115 MB for the tutorial preset);
# TensorFlow's separate kernels read and write it about ten times, so this one
# function made the tutorial-preset step 1.15x faster on our 2-core CPU
# (BENCHMARKS.md). XLA compiles once per new logits shape (~0.4 s here), which
# a training run pays once per distinct padded target length.
_xla_token_losses = tf.function(_token_losses, jit_compile=True, reduce_retracing=True)


def _checked_token_losses(label, pred, label_smoothing):
    """`_xla_token_losses` after checking that every label indexes the logits.

    XLA's gather clamps an out-of-range index where TensorFlow's raises, so a
    target vocabulary larger than the model's would otherwise train silently
    on wrong logits. The check is one pass over the `(batch, target_len)` ids.
    """
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
    label_smoothing = _check_label_smoothing(label_smoothing)
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

    Example:

    >>> loss = MaskedLoss(label_smoothing=0.1)
    >>> model.compile(optimizer, loss=loss, metrics=[masked_accuracy])  # doctest: +SKIP
    """

    def __init__(self, label_smoothing=0.0, name="masked_loss", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        self.label_smoothing = _check_label_smoothing(label_smoothing)

    def call(self, y_true, y_pred):
        # Keras sums what `call` returns and divides by its size (and, under a
        # tf.distribute strategy, by the number of replicas: it leaves a scalar
        # alone, so the plain `masked_loss` would count every replica's loss in
        # full). Weighting each real token by size / real tokens turns that
        # reduction into the mean over the real tokens.
        label = tf.cast(y_true, tf.int32)  # (batch, target_len)
        loss = _checked_token_losses(label, y_pred, self.label_smoothing)  # (batch, target_len)
        mask = tf.cast(tf.not_equal(label, PAD_ID), loss.dtype)
        size = tf.cast(tf.size(mask), loss.dtype)
        return loss * mask * tf.math.divide_no_nan(size, _real_tokens_per_replica(mask))

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing}


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


# --------------------------------------------------------------------------
# Precision
# --------------------------------------------------------------------------

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
_AMX_BF16 = "amx_bf16"


def cpu_flags(cpuinfo_path="/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of `/proc/cpuinfo` (empty where there is none, e.g. macOS)."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def default_precision(flags: set[str] | None = None) -> str:
    """The precision `train.py` uses unless told: the one decision, in one place.

    `mixed_bfloat16` when the CPU has AMX tiles for bfloat16 (the `amx_bf16`
    flag of `/proc/cpuinfo`), else `float32`. bfloat16 keeps float32's exponent
    range, so it needs no loss scaling; variables stay float32.

    AVX-512 BF16 alone (`avx512_bf16`, without AMX) is not enough: on such a
    2-core Xeon, a training step in `mixed_bfloat16` took as long as in float32
    for the `toy` model and 1.7x as long for the `tutorial` model (the casts
    and the element-wise ops in bfloat16 cost more than the faster matrix
    products save), with the same quality.

    Args:
        flags: CPU flags to decide from; read from `/proc/cpuinfo` by default.

    Returns:
        `"mixed_bfloat16"` or `"float32"`.
    """
    flags = cpu_flags() if flags is None else flags
    return "mixed_bfloat16" if _AMX_BF16 in flags else "float32"


def explain_default_precision(flags: set[str] | None = None) -> str:
    """A few words saying what `default_precision` picks on this machine, and why."""
    flags = cpu_flags() if flags is None else flags
    if _AMX_BF16 in flags:
        return "mixed_bfloat16 here, as this CPU has AMX bfloat16 (amx_bf16)"
    if "avx512_bf16" in flags:
        return "float32 here: this CPU has avx512_bf16 but no AMX, and bfloat16 trains no faster"
    return "float32 here: this CPU has no native bfloat16"


# --------------------------------------------------------------------------
# The run's configuration: what config.json holds
# --------------------------------------------------------------------------

DEFAULT_RUNS_DIR = "runs"

# Fields that may change when a run is resumed; every other one is fixed by the
# run's config.json (changing the model, the data or the batches would make the
# checkpoint meaningless or the data order different).
RESUMABLE_FIELDS = frozenset(
    {
        "epochs",
        "checkpoint_every",
        "strategy",
        "cpu_devices",
        "jit_compile",
        "eval_batch_size",
        "num_examples",
        "output_dir",
        "download",
        "tfds_data_dir",
    }
)


# The defaults that depend on the data, in one place. The toy corpus is small
# and regular: the `toy` model learns it in four passes (1252 steps of 64
# pairs) with a short warm-up; three passes gave 96.4-98.8% exact match on its
# test split over seeds 0-2, four leave a margin above 95%. Real corpora get
# the tutorial's model and the paper's 4000 warm-up steps.
TOY_DEFAULTS = {"preset": "toy", "epochs": 4, "warmup_steps": 400}
CORPUS_DEFAULTS = {"preset": "tutorial", "epochs": 20, "warmup_steps": 4000}


def dataset_defaults(dataset: str = "toy", data=None) -> dict[str, Any]:
    """`preset`, `epochs` and `warmup_steps` for a dataset when not given.

    Example:

    >>> dataset_defaults("toy")
    {'preset': 'toy', 'epochs': 4, 'warmup_steps': 400}
    """
    return dict(TOY_DEFAULTS if data is None and dataset == "toy" else CORPUS_DEFAULTS)


@dataclasses.dataclass
class RunConfig:
    """Everything that defines a training run; `config.json` holds `to_dict()`.

    Data:
        dataset: `"toy"` (generated, offline) or `"ted_hrlr_translate/pt_to_en"`
            (TFDS); ignored when `data` is given.
        data, valid, test: tab-separated files of sentence pairs. Without
            `valid`/`test`, validation and test pairs are split off `data`.
        source_column, target_column: the TSV columns (from 0).
        skip_bad_lines: skip malformed TSV lines instead of stopping.
        download: let TFDS download a dataset that is not on disk yet.
        tfds_data_dir: TFDS' data directory (its default when None).
        max_tokens: longest source in tokens (longer pairs are trimmed, keeping
            `[END]`); None means the model's `max_length`.
        vocab_size: the largest subword vocabulary per language.
        lower_case: lower-case text and strip accents before tokenizing.

    Model:
        preset: a name of `transformer.model.PRESETS`; by default `toy` for
            the toy corpus and `tutorial` for real data (`dataset_defaults`).
        model: a `TransformerConfig`; the preset's when None.

    Training:
        batch_size: global batch size (split across replicas).
        epochs: epochs to train (default: `dataset_defaults`).
        steps_per_epoch: updates per epoch; None means one pass over the
            training pairs. `config.json` stores the resolved number.
        warmup_steps: `CustomSchedule`'s warm-up (default: `dataset_defaults`).
        label_smoothing: `eps` of section 5.4 (0.1 in the paper).
        seed: fixes the corpus, the tokenizers, the initial weights and the
            data order.
        checkpoint_every: save the training state every this many updates (and
            at the end of every epoch).

    Performance and scale:
        precision: a Keras dtype policy, one of `PRECISIONS`.
        jit_compile: compile the train step with XLA (recompiles for every new
            batch shape).
        strategy: one of `transformer.distribute.STRATEGIES`.
        cpu_devices: split the CPU into this many logical devices.

    Evaluation:
        eval_batch_size: sentences per batch when translating the test split.
        num_examples: example translations kept in the result.

    Example:

    >>> config = RunConfig(output_dir="runs/tiny", preset="toy", epochs=1)
    >>> RunConfig.from_dict(config.to_dict()) == config
    True
    """

    output_dir: str | None = None
    # Data.
    dataset: str = "toy"
    data: str | None = None
    valid: str | None = None
    test: str | None = None
    source_column: int = 0
    target_column: int = 1
    skip_bad_lines: bool = False
    download: bool = False
    tfds_data_dir: str | None = None
    max_tokens: int | None = None
    vocab_size: int = 8000
    lower_case: bool = True
    # Model.
    preset: str | None = None
    model: TransformerConfig | None = None
    # Training.
    batch_size: int = 64
    epochs: int | None = None
    steps_per_epoch: int | None = None
    warmup_steps: int | None = None
    label_smoothing: float = 0.1
    seed: int = 0
    checkpoint_every: int = 200
    # Performance and scale.
    precision: str = "float32"
    jit_compile: bool = False
    strategy: str = "default"
    cpu_devices: int | None = None
    # Evaluation.
    eval_batch_size: int = 128
    num_examples: int = 5

    def __post_init__(self):
        for name, value in dataset_defaults(self.dataset, self.data).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.model is None:
            self.model = TransformerConfig.from_preset(self.preset)
        elif isinstance(self.model, dict):
            self.model = TransformerConfig.from_dict(self.model)
        self.validate()

    def validate(self) -> None:
        """Raises a Keras-style `ValueError` naming the first invalid field."""
        from transformer.distribute import STRATEGIES
        from transformer.model import PRESETS

        def choice(name, options):
            value = getattr(self, name)
            if value not in options:
                raise ValueError(
                    f"Received an invalid value for argument `{name}`, expected one of "
                    f"{list(options)}. Received: {name}={value!r}"
                )

        def positive(name, allow_none=False):
            value = getattr(self, name)
            if value is None and allow_none:
                return
            check_positive_int(name, value)

        def non_negative(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"Received an invalid value for argument `{name}`, expected a "
                    f"non-negative integer. Received: {name}={value!r}"
                )

        if self.data is None:
            choice("dataset", DATASETS)
        choice("preset", list(PRESETS))
        choice("precision", PRECISIONS)
        choice("strategy", STRATEGIES)
        for name in ("batch_size", "epochs", "warmup_steps", "vocab_size", "checkpoint_every",
                     "eval_batch_size"):
            positive(name)
        for name in ("steps_per_epoch", "cpu_devices"):
            positive(name, allow_none=True)
        for name in ("source_column", "target_column", "num_examples", "seed"):
            non_negative(name)
        _check_label_smoothing(self.label_smoothing)
        if self.source_column == self.target_column:
            raise ValueError(
                "Received the same column for source and target. Received: "
                f"source_column={self.source_column}, target_column={self.target_column}"
            )
        if self.max_tokens is not None:
            if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or (
                self.max_tokens < 2
            ):
                raise ValueError(
                    "Received an invalid value for argument `max_tokens`, expected an "
                    "integer of at least 2 (room for [START] and [END]). Received: "
                    f"max_tokens={self.max_tokens!r}"
                )
            if self.max_tokens > self.model.max_length:
                raise ValueError(
                    "Received an invalid value for argument `max_tokens`, expected at most "
                    f"the model's max_length={self.model.max_length} (the rows of its "
                    f"positional encoding). Received: max_tokens={self.max_tokens}"
                )
        if (self.valid or self.test) and not self.data:
            raise ValueError(
                "Received `valid` or `test` files without `data`: they only go with a "
                "training file (--data FILE.tsv)."
            )

    # -- derived values ----------------------------------------------------

    @property
    def resolved_max_tokens(self) -> int:
        """`max_tokens`, or the model's `max_length` when it is None."""
        return self.max_tokens if self.max_tokens is not None else self.model.max_length

    @property
    def name(self) -> str:
        """A short name for the run: the data file's stem, or the dataset's name."""
        if self.data:
            return Path(self.data).stem or "data"
        return self.dataset.replace("/", "_").replace("_translate", "")

    @property
    def run_dir(self) -> Path:
        """`output_dir`, or `runs/<name>` by default."""
        return Path(self.output_dir) if self.output_dir else Path(DEFAULT_RUNS_DIR) / self.name

    # -- serialization -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["model"] = self.model.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        # Information written next to the settings (vocabulary sizes, ...).
        data = {key: value for key, value in data.items() if key not in _DERIVED_KEYS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Unknown RunConfig fields: {unknown}")
        return cls(**data)

    @classmethod
    def load(cls, run_dir) -> RunConfig:
        """The config of a run directory (its `config.json`)."""
        from transformer import rundir

        path = Path(run_dir) / rundir.CONFIG_FILE
        try:
            return cls.from_dict(rundir.read_json(path))
        except (TypeError, ValueError) as err:
            if isinstance(err, rundir.RunDirError):
                raise
            raise rundir.RunDirError(f"{str(path)!r} is not a valid run config: {err}") from err

    def replace(self, **changes) -> RunConfig:
        """A copy with `changes`; model fields (`num_layers`, `d_model`, ...) go to the model."""
        model_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        model_changes = {k: changes.pop(k) for k in list(changes) if k in model_fields}
        model = dataclasses.replace(self.model, **model_changes) if model_changes else self.model
        return dataclasses.replace(self, model=model, **changes)

    def for_resume(self, **changes) -> RunConfig:
        """This (saved) config with the changes a resumed run may make.

        Args:
            **changes: new values; those equal to the saved ones are ignored, and
                only `RESUMABLE_FIELDS` may differ.

        Raises:
            ValueError: naming a field that cannot change, with both values.
        """
        current = self.to_dict()
        flat = {**current, **current["model"]}
        for key, value in changes.items():
            if key not in flat:
                raise ValueError(f"Unknown RunConfig field: {key!r}")
            if key not in RESUMABLE_FIELDS and value != flat[key]:
                raise ValueError(
                    f"Cannot change `{key}` when resuming: the run was started with "
                    f"{key}={flat[key]!r}, received {key}={value!r}. Drop the option, or "
                    "start a new run in another output directory."
                )
        return self.replace(**{k: v for k, v in changes.items() if k in RESUMABLE_FIELDS})


# Keys of config.json that are facts about the run rather than settings.
_DERIVED_KEYS = frozenset({"input_vocab_size", "target_vocab_size", "format_version"})


# --------------------------------------------------------------------------
# Callbacks
# --------------------------------------------------------------------------


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says why and where."""


def optimizer_step(optimizer) -> int:
    """The optimizer's `iterations` (updates applied) as an int, also when the
    variable is mirrored by a distribution strategy."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


def _current_learning_rate(optimizer) -> float:
    """The learning rate of the update just applied (`iterations` has moved past it)."""
    schedule = getattr(optimizer, "_learning_rate", None)
    inner = getattr(optimizer, "inner_optimizer", None)  # LossScaleOptimizer
    if inner is not None:
        schedule = getattr(inner, "_learning_rate", schedule)
    step = max(optimizer_step(optimizer) - 1, 0)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(step))
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateLogger(keras.callbacks.Callback):
    """Adds `learning_rate` to the logs of every batch and epoch, so the progress
    bar, `metrics.csv` and TensorBoard show the schedule."""

    def on_train_batch_end(self, batch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _current_learning_rate(self.model.optimizer)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _current_learning_rate(self.model.optimizer)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training with a `TrainingError` naming the step where the loss
    stopped being finite (Keras' `TerminateOnNaN` names nothing).

    Put it before the checkpoint callback, so the broken weights are never saved.
    """

    def __init__(self, checkpoint_dir=None):
        super().__init__()
        self.checkpoint_dir = checkpoint_dir
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        step = optimizer_step(self.model.optimizer)
        self.model.stop_training = True
        where = f" The last good checkpoint is in {self.checkpoint_dir}." if self.checkpoint_dir else ""
        raise TrainingError(
            f"The loss became {float(loss)} at step {step} (epoch {self._epoch + 1}, batch "
            f"{batch + 1}); training stopped.{where} Try a longer warm-up (--warmup-steps), "
            "float32 precision, or check the data."
        )


class CheckpointSaver(keras.callbacks.Callback):
    """Saves the training state every `every` updates and at the end of every epoch.

    The state is a `tf.train.Checkpoint` of the model and the optimizer (whose
    `iterations` is the schedule's step, from which the epoch follows). A
    checkpoint's data files are written first and its index is renamed into
    place last, and the `checkpoint` file that names the latest one is replaced
    atomically, so a kill at any moment leaves the previous checkpoint usable.

    Args:
        manager: a `tf.train.CheckpointManager`.
        every: save after every `every`-th update (counted over the whole run).
    """

    def __init__(self, manager: tf.train.CheckpointManager, every: int):
        super().__init__()
        self.manager = manager
        self.every = every
        self.last_saved = None

    def _save(self):
        step = optimizer_step(self.model.optimizer)
        if step != self.last_saved:
            self.manager.save(checkpoint_number=step)
            self.last_saved = step

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model.optimizer) % self.every == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        self._save()


class ScalarSummaries(keras.callbacks.Callback):
    """Writes the epoch logs as TensorBoard scalars (`train/` and `validation/`).

    Keras' `TensorBoard` callback needs the `tensorboard` package to write
    anything; this one uses only TensorFlow's summary writer, so training
    needs no extra dependency (viewing the logs does: `pip install tensorboard`,
    then `tensorboard --logdir runs/toy/logs`).

    Args:
        log_dir: the directory of the event files.
    """

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = Path(log_dir)
        self._writers = {}

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(str(self.log_dir / name))
        return self._writers[name]

    def on_epoch_end(self, epoch, logs=None):
        step = optimizer_step(self.model.optimizer)
        for key, value in (logs or {}).items():
            name, tag = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with self._writer(name).as_default():
                tf.summary.write(
                    f"epoch_{tag}", tf.constant(float(value), tf.float32), step=step,
                    metadata=_SCALAR_METADATA,
                )
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


# TensorBoard's scalar plugin reads summaries tagged with this metadata.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR,
).SerializeToString()


class EpochSummary(keras.callbacks.Callback):
    """Logs one line per epoch: step, time, losses, accuracies and learning rate."""

    def __init__(self, epochs: int):
        super().__init__()
        self.epochs = epochs
        self._started = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        parts = [
            f"Epoch {epoch + 1}/{self.epochs}",
            f"step {optimizer_step(self.model.optimizer)}",
            f"{time.perf_counter() - self._started:.0f} s",
        ]
        for key in ("loss", "masked_accuracy", "val_loss", "val_masked_accuracy"):
            if key in logs:
                parts.append(f"{key} {float(logs[key]):.4f}")
        if "learning_rate" in logs:
            parts.append(f"learning_rate {float(logs['learning_rate']):.2e}")
        logger.info(" - ".join(parts))


# --------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------


def normalize_text(text: str, lower_case: bool = True) -> str:
    """The form in which translations and references are compared.

    The tokenizers' `detokenize` gives lower-cased, accent-free text with
    punctuation split off ("the boy ' s book"), so the references are brought
    to the same form: lower-cased and accents stripped (when the tokenizers
    lower-case), every punctuation mark a word of its own, single spaces.

    Example:

    >>> normalize_text("The boy's  Café.")
    "the boy ' s cafe ."
    """
    if lower_case:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    return " ".join(_WORDS_AND_PUNCTUATION.findall(text))


_WORDS_AND_PUNCTUATION = re.compile(r"\w+|[^\w\s]")


def translate_all(model, tokenizers, sentences, batch_size=128, max_length=64) -> list[str]:
    """Translates sentences greedily with `transformer.translate.Translator` (cached
    decoding), in batches of sentences of similar length.

    Args:
        model: a `Transformer`.
        tokenizers: with `.source` and `.target`.
        sentences: the source sentences.
        batch_size: sentences per batch.
        max_length: the most output tokens, `[END]` included.

    Returns:
        The translations, in the order of `sentences`.
    """
    from transformer.translate import Translator

    translator = Translator(tokenizers, model, max_length=max_length)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i].split()))
    texts = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        results = translator([sentences[i] for i in indices], return_attention=False)
        for index, result in zip(indices, results, strict=True):
            texts[index] = result.text
    return texts


@dataclasses.dataclass
class Evaluation:
    """The quality of a model on sentence pairs.

    Attributes:
        masked_accuracy: share of non-padding target tokens predicted right
            with teacher forcing (over all tokens, not averaged per batch).
        loss: masked cross-entropy with teacher forcing (no label smoothing).
        exact_match: share of sentences whose greedy translation equals the
            reference, both in `normalize_text` form.
        bleu: sacrebleu's corpus BLEU of the greedy translations, on the
            `normalize_text` forms.
        bleu_signature: sacrebleu's signature of that score.
        num_sentences: how many pairs were evaluated.
        translations: the greedy translations, in the order of the pairs.
    """

    masked_accuracy: float
    loss: float
    exact_match: float
    bleu: float
    bleu_signature: str
    num_sentences: int
    translations: list[str] = dataclasses.field(repr=False, default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("translations")
        data["bleu_text"] = "normalized: lower-cased, accents stripped, punctuation split"
        return data


def evaluate(model, tokenizers, pairs, *, batch_size=128, max_tokens=None, lower_case=True):
    """Masked token accuracy, sentence exact match and corpus BLEU on `pairs`.

    Args:
        model: a `Transformer`.
        tokenizers: with `.source` and `.target`.
        pairs: `(source, reference)` string pairs.
        batch_size: sentences per batch.
        max_tokens: longest source and output in tokens; the model's
            `max_length` by default.
        lower_case: whether the tokenizers lower-case (references are
            normalized the same way).

    Returns:
        An `Evaluation`.

    Example:

    ```python
    result = evaluate(model, tokenizers, corpus.test)
    result.exact_match, result.bleu, result.bleu_signature
    ```
    """
    import sacrebleu

    from transformer.data.batching import batches_from_tokens, tokenize_pairs

    if not pairs:
        raise ValueError("Cannot evaluate on an empty list of sentence pairs.")
    max_tokens = max_tokens or int(model.max_length)
    tokenized = tokenize_pairs(list(pairs), tokenizers, max_tokens)

    correct = total = loss_sum = 0.0
    for (context, x), labels in batches_from_tokens(tokenized, batch_size, shuffle=False):
        logits = model((context, x), training=False)  # (batch, target_len, vocab)
        mask = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        guess = tf.argmax(logits, axis=-1, output_type=tf.int64)
        correct += float(tf.reduce_sum(tf.cast(tf.equal(guess, labels), tf.float32) * mask))
        loss_sum += float(tf.reduce_sum(_token_losses(labels, logits, 0.0) * mask))
        total += float(tf.reduce_sum(mask))

    translations = translate_all(
        model, tokenizers, [source for source, _ in pairs], batch_size, max_length=max_tokens
    )
    hypotheses = [normalize_text(text, lower_case) for text in translations]
    references = [normalize_text(reference, lower_case) for _, reference in pairs]
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(pairs)
    bleu = sacrebleu.BLEU()
    score = bleu.corpus_score(hypotheses, [references])
    return Evaluation(
        masked_accuracy=correct / max(total, 1.0),
        loss=loss_sum / max(total, 1.0),
        exact_match=exact,
        bleu=float(score.score),
        bleu_signature=str(bleu.get_signature()),
        num_sentences=len(pairs),
        translations=translations,
    )


# --------------------------------------------------------------------------
# The fit wiring
# --------------------------------------------------------------------------

CONFIG_FORMAT_VERSION = 1
MAX_CHECKPOINTS_KEPT = 3


@dataclasses.dataclass
class TrainResult:
    """What `train` did.

    Attributes:
        run_dir: the run directory (written by the chief only).
        config: the run's configuration, `steps_per_epoch` resolved.
        history: per-epoch logs of this process' `fit` calls (loss,
            masked_accuracy, val_*, learning_rate).
        evaluation: the test-split `Evaluation` (None on non-chief workers or
            without test pairs).
        examples: `(source, reference, translation)` for the first test pairs.
        initial_step: the step training started (or resumed) from.
        final_step: the optimizer's step at the end.
        is_chief: whether this process wrote the run directory.
        weights_sha256: a fingerprint of the final weights (equal on every
            worker of a multi-worker run).
        export_dir: the exported translator, if it was written.
    """

    run_dir: Path
    config: RunConfig
    history: dict[str, list[float]]
    evaluation: Evaluation | None
    examples: list[tuple[str, str, str]]
    initial_step: int
    final_step: int
    is_chief: bool
    weights_sha256: str
    export_dir: Path | None = None


def weights_fingerprint(model) -> str:
    """SHA-256 of all of a model's weights, in order (equal weights, equal digest)."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes())
    return digest.hexdigest()


def _run_files(run_dir: Path) -> list[str]:
    return sorted(entry.name for entry in run_dir.iterdir()) if run_dir.is_dir() else []


def _prepare_run_dir(config: RunConfig, resume: bool, chief: bool) -> RunConfig | None:
    """Checks the output directory; returns the saved config when resuming one."""
    from transformer import rundir

    run_dir = config.run_dir
    if run_dir.exists() and not run_dir.is_dir():
        raise rundir.RunDirError(f"Output directory {str(run_dir)!r} exists and is not a directory.")
    files = _run_files(run_dir)
    has_config = (run_dir / rundir.CONFIG_FILE).is_file()
    if not resume:
        if files and chief:
            listing = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
            raise rundir.RunDirError(
                f"Output directory {str(run_dir)!r} is not empty (it holds {listing}). "
                "Continue that run with --resume, or choose another --output-dir."
            )
        return None
    if has_config:
        return RunConfig.load(run_dir)
    ours = {
        rundir.TOKENIZERS_DIR, rundir.CHECKPOINTS_DIR, rundir.LOGS_DIR, rundir.METRICS_CSV,
    }
    strangers = [name for name in files if name not in ours]
    if strangers:
        raise rundir.RunDirError(
            f"Cannot resume from {str(run_dir)!r}: it has no {rundir.CONFIG_FILE}, so it is "
            f"not a training run (it holds {', '.join(strangers[:4])})."
        )
    if not chief:
        raise rundir.RunDirError(
            f"Cannot resume: this worker cannot read {str(run_dir / rundir.CONFIG_FILE)!r}. "
            "A multi-worker run resumes only when every worker sees the chief's output "
            "directory (a shared filesystem at the same path)."
        )
    if files:
        logger.info("Nothing to resume in %s (the run stopped before it began); starting anew.",
                    run_dir)
    return None


def _check_resume(config: RunConfig, saved: RunConfig) -> RunConfig:
    """The saved config with the allowed changes of `config`; raises on the others."""
    changes = config.to_dict()
    changes.update(changes.pop("model"))
    if config.steps_per_epoch is None:
        changes.pop("steps_per_epoch")
    return saved.for_resume(**changes)


def _save_tokenizers(tokenizers, directory: Path) -> None:
    # No rename dance is needed: config.json is written after the tokenizers,
    # and a directory without config.json is started anew on --resume.
    from transformer.data import save_tokenizers

    shutil.rmtree(directory, ignore_errors=True)
    save_tokenizers(tokenizers, directory)


def _save_model_atomic(model, path: Path) -> None:
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)  # Keras wants the .keras suffix
    model.save(tmp)
    os.replace(tmp, path)


def _truncate_metrics_csv(path: Path, first_epoch: int) -> None:
    """Drops the rows of epochs >= `first_epoch` (0-based), which will be written again."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if not lines:
        return
    kept = [lines[0]]
    for line in lines[1:]:
        epoch = line.split(",", 1)[0]
        if epoch.isdigit() and int(epoch) < first_epoch:
            kept.append(line)
    if len(kept) != len(lines):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, path)


def _resolve_verbose(verbose) -> int:
    if verbose == "auto":
        return 1 if hasattr(sys.stdout, "isatty") and sys.stdout.isatty() else 0
    return int(verbose)


@contextlib.contextmanager
def _multi_worker_fit_workaround(model, strategy, tokenized):
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
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        yield
        return
    from transformer.data.batching import batches_from_tokens

    sample = next(iter(batches_from_tokens(tokenized, 2, shuffle=False)))
    model_class = type(model)

    def build_from_local_batch(iterator=None, data_batch=None):
        with strategy.scope():
            model._symbolic_build(data_batch=sample if data_batch is None else data_batch)

    def as_vectors(logs):
        return tf.nest.map_structure(
            lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, logs
        )

    model._maybe_symbolic_build = build_from_local_batch
    model.train_step = lambda data: as_vectors(model_class.train_step(model, data))
    model.test_step = lambda data: as_vectors(model_class.test_step(model, data))
    try:
        yield
    finally:
        del model._maybe_symbolic_build, model.train_step, model.test_step


def train(config: RunConfig, resume: bool = False, verbose="auto", export=True) -> TrainResult:
    """Trains a translator as `train.py` does: data, tokenizers, model, fit,
    checkpoints, evaluation and the run directory.

    1. Creates the distribution strategy (first, as `tf.distribute` requires).
    2. Loads the corpus and builds the tokenizers (or reloads them to resume).
    3. Writes `tokenizers/` and `config.json`, then trains with `model.fit`:
       Adam and `CustomSchedule` (section 5.3), `MaskedLoss` with label
       smoothing (section 5.4), `masked_accuracy`, checkpoints every
       `checkpoint_every` updates and every epoch, `metrics.csv` and
       TensorBoard `logs/`.
    4. Saves `model.keras`, evaluates on the test split (`metrics.json`) and
       exports the translator (`export/`) when `transformer.translate` can.

    Resuming (`resume=True`) restores the weights, the optimizer state and its
    step (hence the learning rate) from the latest checkpoint, and continues in
    the epoch and at the batch where that checkpoint was taken. The training
    pairs are a fixed, seeded stream of shuffled passes, so the resumed run sees
    exactly the batches the uninterrupted run would have seen. Dropout masks
    differ, as their random state is not checkpointed.

    Args:
        config: the run's `RunConfig`. To resume, the saved one with the
            changes allowed by `RunConfig.for_resume` (other changes raise).
        resume: continue the run in `config.run_dir`. Without it, a non-empty
            `run_dir` is refused.
        verbose: Keras' progress display: `"auto"` (a progress bar on a
            terminal, else only the one-line epoch summaries), 0, 1 or 2.
        export: also export the translator to `export/`
            (`transformer.translate.export_translator`).

    Returns:
        A `TrainResult`.

    Raises:
        transformer.rundir.RunDirError: the output directory is not usable.
        transformer.data.DataError: the data cannot be read.
        TrainingError: the loss became NaN (the message names the step).
        ValueError: an invalid setting.

    Example:

    ```python
    result = train(RunConfig(output_dir="runs/toy"))
    result.evaluation.exact_match, result.evaluation.bleu
    ```
    """
    from transformer import rundir
    from transformer.data import build_tokenizers, load_corpus, load_tokenizers
    from transformer.data.batching import batches_from_tokens, tokenize_pairs
    from transformer.distribute import is_chief, make_strategy, worker_name

    started = time.perf_counter()
    strategy = make_strategy(config.strategy, config.cpu_devices)
    chief = is_chief(strategy)
    saved = _prepare_run_dir(config, resume, chief)
    if saved is not None:
        config = _check_resume(config, saved)
    run_dir = config.run_dir
    write_dir = run_dir if chief else Path(tempfile.mkdtemp(prefix="transformer-worker-"))
    if not chief:
        logger.info("%s writes its copies to %s (deleted at the end).",
                    worker_name(strategy).capitalize(), write_dir)
    previous_policy = keras.mixed_precision.global_policy()
    try:
        keras.mixed_precision.set_global_policy(config.precision)
        keras.utils.set_random_seed(config.seed)

        # Data and tokenizers.
        corpus = load_corpus(
            dataset=config.dataset,
            data=config.data,
            valid=config.valid,
            test=config.test,
            source_column=config.source_column,
            target_column=config.target_column,
            skip_bad_lines=config.skip_bad_lines,
            seed=config.seed,
            data_dir=config.tfds_data_dir,
            download=config.download,
        )
        logger.info("Corpus %s: %d training, %d validation, %d test pairs.", corpus.name,
                    len(corpus.train), len(corpus.valid), len(corpus.test))
        write_dir.mkdir(parents=True, exist_ok=True)  # only once the data is readable
        tokenizers_dir = run_dir / rundir.TOKENIZERS_DIR
        if saved is not None and tokenizers_dir.is_dir():
            tokenizers = load_tokenizers(tokenizers_dir)
        else:
            tokenizers = build_tokenizers(corpus.train, config.vocab_size, config.lower_case)
            if chief:
                _save_tokenizers(tokenizers, tokenizers_dir)
        input_vocab_size = int(tokenizers.source.get_vocab_size())
        target_vocab_size = int(tokenizers.target.get_vocab_size())

        max_tokens = config.resolved_max_tokens
        train_tokens = tokenize_pairs(corpus.train, tokenizers, max_tokens)
        steps_per_epoch = config.steps_per_epoch or math.ceil(len(train_tokens) / config.batch_size)
        config = dataclasses.replace(config, steps_per_epoch=steps_per_epoch)
        if chief:
            record = config.to_dict()
            record.update(
                input_vocab_size=input_vocab_size,
                target_vocab_size=target_vocab_size,
                format_version=CONFIG_FORMAT_VERSION,
            )
            rundir.write_json_atomic(run_dir / rundir.CONFIG_FILE, record)

        shard = tf.data.Options()
        shard.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA

        def train_stream(start_step):
            # One seeded stream of shuffled passes; resuming skips what was seen.
            stream = batches_from_tokens(train_tokens, config.batch_size, True, config.seed)
            stream = stream.repeat()
            if start_step:
                stream = stream.skip(start_step)
            return stream.with_options(shard)

        valid_ds = None
        if corpus.valid:
            valid_tokens = tokenize_pairs(corpus.valid, tokenizers, max_tokens)
            valid_ds = batches_from_tokens(valid_tokens, config.batch_size, shuffle=False)
            valid_ds = valid_ds.with_options(shard)

        # Model, optimizer and training state.
        with strategy.scope():
            keras.utils.set_random_seed(config.seed)
            model = config.model.build_model(input_vocab_size, target_vocab_size)
            model.compile(
                optimizer=make_optimizer(config.model.d_model, config.warmup_steps),
                loss=MaskedLoss(config.label_smoothing),
                metrics=[masked_accuracy],
                jit_compile=config.jit_compile,
            )
            model.optimizer.build(model.trainable_variables)
            checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        manager = tf.train.CheckpointManager(
            checkpoint, str(write_dir / rundir.CHECKPOINTS_DIR), max_to_keep=MAX_CHECKPOINTS_KEPT
        )
        if saved is not None:
            latest = tf.train.latest_checkpoint(str(run_dir / rundir.CHECKPOINTS_DIR))
            if latest:
                checkpoint.restore(latest).assert_existing_objects_matched()
        initial_step = optimizer_step(model.optimizer)
        total_steps = config.epochs * steps_per_epoch
        logger.info(
            "Model: %s, %s parameters, %s precision; %d steps per epoch of %d pairs.",
            ", ".join(f"{k}={v}" for k, v in config.model.to_dict().items()),
            f"{model.count_params():,}",
            config.precision,
            steps_per_epoch,
            config.batch_size,
        )
        if saved is not None and initial_step < total_steps:
            epoch, batch = divmod(initial_step, steps_per_epoch)
            logger.info("Resuming %s at step %d (epoch %d, batch %d).", run_dir, initial_step,
                        epoch + 1, batch)

        # Fit.
        callbacks = [LearningRateLogger(), StopOnNaN(run_dir / rundir.CHECKPOINTS_DIR)]
        if chief:
            metrics_csv = run_dir / rundir.METRICS_CSV
            _truncate_metrics_csv(metrics_csv, initial_step // steps_per_epoch)
            callbacks.append(keras.callbacks.CSVLogger(str(metrics_csv), append=True))
        callbacks.append(CheckpointSaver(manager, config.checkpoint_every))
        # The progress bar (when shown) finishes its line before the summary.
        callbacks.append(keras.callbacks.ProgbarLogger())
        callbacks.append(EpochSummary(config.epochs))
        if chief:
            callbacks.append(ScalarSummaries(run_dir / rundir.LOGS_DIR))
        fit_args = dict(
            validation_data=valid_ds,
            callbacks=callbacks,
            verbose=_resolve_verbose(verbose) if chief else 0,
        )
        history: dict[str, list[float]] = {}

        def fit(first_epoch, last_epoch, steps, start_step):
            with _multi_worker_fit_workaround(model, strategy, train_tokens):
                fitted = model.fit(
                    train_stream(start_step),
                    initial_epoch=first_epoch,
                    epochs=last_epoch,
                    steps_per_epoch=steps,
                    shuffle=False,  # the stream is shuffled, seeded, by batches_from_tokens
                    **fit_args,
                )
            for key, values in fitted.history.items():
                history.setdefault(key, []).extend(float(v) for v in values)

        train_started = time.perf_counter()
        step = initial_step
        if step >= total_steps:
            logger.info("%s has already trained all %d epochs (%d steps); evaluating it.",
                        run_dir, config.epochs, total_steps)
        else:
            epoch, offset = divmod(step, steps_per_epoch)
            if offset:  # finish the interrupted epoch first
                fit(epoch, epoch + 1, steps_per_epoch - offset, step)
                epoch, step = epoch + 1, (epoch + 1) * steps_per_epoch
            if epoch < config.epochs:
                fit(epoch, config.epochs, steps_per_epoch, step)
        final_step = optimizer_step(model.optimizer)
        if final_step > initial_step:
            logger.info("Trained %d steps in %.0f s.", final_step - initial_step,
                        time.perf_counter() - train_started)
        fingerprint = weights_fingerprint(model)
        logger.info("Weights after step %d: sha256 %s", final_step, fingerprint)
        _save_model_atomic(model, write_dir / rundir.MODEL_FILE)

        evaluation, examples, export_dir = None, [], None
        if chief:
            if corpus.test:
                eval_started = time.perf_counter()
                evaluation = evaluate(
                    model,
                    tokenizers,
                    corpus.test,
                    batch_size=config.eval_batch_size,
                    max_tokens=max_tokens,
                    lower_case=config.lower_case,
                )
                logger.info("Evaluated %d test pairs in %.0f s.", len(corpus.test),
                            time.perf_counter() - eval_started)
                examples = [
                    (source, reference, translation)
                    for (source, reference), translation in zip(
                        corpus.test[: config.num_examples],
                        evaluation.translations[: config.num_examples],
                        strict=True,
                    )
                ]
            else:
                logger.warning("The corpus has no test pairs: skipping the evaluation.")
            metrics = {
                "test": evaluation.to_dict() if evaluation else None,
                "final_step": final_step,
                "epochs": config.epochs,
                "weights_sha256": fingerprint,
                # This session's time (metrics.csv has every epoch's logs).
                "seconds": round(time.perf_counter() - started, 1),
            }
            rundir.write_json_atomic(run_dir / rundir.METRICS_JSON, metrics)
            if export:
                from transformer.translate import export_translator

                try:
                    export_dir = Path(export_translator(run_dir))
                except Exception as err:  # noqa: BLE001 - the run is complete without it
                    logger.warning("Could not export the translator: %s", err)
        return TrainResult(
            run_dir=run_dir,
            config=config,
            history=history,
            evaluation=evaluation,
            examples=examples,
            initial_step=initial_step,
            final_step=final_step,
            is_chief=chief,
            weights_sha256=fingerprint,
            export_dir=export_dir,
        )
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
        if not chief:
            shutil.rmtree(write_dir, ignore_errors=True)
