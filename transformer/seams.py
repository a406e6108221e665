"""The kernels' one door: which layers and optimizer the model is built with, and
the run's services that reach into Keras or TensorFlow.

The paper's modules build every layer norm and dropout as
`seams.LayerNormalization(...)` and `seams.Dropout(...)`, looked up here when
a layer is built; `transformer.training.make_optimizer` makes its Adam with
`adam`, and `transformer.training.MaskedLoss` computes the token losses of a
step without XLA with `token_losses`. By default each is a drop-in subclass
of Keras's own from `transformer.kernels`, with the same arguments, weights
and math in fewer operations (tests/test_fast_ops.py, tests/test_training.py,
tests/test_moving_average.py), so the paper's modules read as Keras and as
the paper (`self.layernorm(x + y)`) and import no kernel.

`use_keras_layers()` builds with Keras's own `LayerNormalization` and
`Dropout` instead, for as long as its `with` block lasts (or for good when
called without one); the layers built meanwhile keep their classes.

The run (`transformer.run`, `transformer.cli`) takes the kernels' other
services from here too: the moving average of the weights, the
learning-rate schedule inside an optimizer and the distributed `fit`
workaround. No module outside `transformer.kernels` and this one
imports a kernel (tests/test_public_api_only.py).

The kernels are TensorFlow's: under another Keras backend (JAX, PyTorch) the
layers are built with Keras's own `Dropout` and `LayerNormalization` and
`adam` is Keras's own Adam, so the paper's layers run anywhere; the run's
services, which only training, decoding and export use, then raise
`BackendError` (`require_tensorflow`, the one check and its one message).
"""

from __future__ import annotations

import contextlib

import keras
from keras import ops

# Whether the kernels may serve: they are TensorFlow ops and Keras's TensorFlow
# internals. Keras fixes its backend when it is imported, so this is read once;
# under another backend neither the kernels nor TensorFlow are imported.
KERNELS = keras.backend.backend() == "tensorflow"

if KERNELS:
    import tensorflow as tf

    from transformer.kernels import fast_ops, multiworker, optimizers

__all__ = ["BackendError", "Dropout", "LayerNormalization", "adam",
           "distributed_fit_workaround", "keeps_moving_average", "learning_rate_schedule",
           "length_checked", "matmul_transposed", "require_tensorflow", "swap_moving_average",
           "token_losses", "use_keras_layers", "use_moving_average"]


class BackendError(RuntimeError, ValueError):
    """A TensorFlow-only part of the project was asked for under another Keras
    backend. It is a `ValueError` too, so that the command lines, which report
    a `ValueError` in one line, report it without a traceback."""


def require_tensorflow(what: str) -> None:
    """Raises `BackendError` naming `what` unless Keras runs on TensorFlow: the
    one check of the parts that stay TensorFlow-only (training, decoding,
    export, the data pipeline), with the one message."""
    if not KERNELS:
        raise BackendError(
            f"{what} needs the TensorFlow backend (KERAS_BACKEND=tensorflow); Keras runs on "
            f"{keras.backend.backend()!r}. The layers of transformer.positional, masking, "
            "attention, layers and model run on any backend."
        )


def _refusing(name: str, what: str):
    """The stand-in, under another backend, for a TensorFlow-only service `name`."""
    def refuse(*args, **kwargs):
        require_tensorflow(what)

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Raises `BackendError`: {what} needs the TensorFlow backend."
    return refuse


def _tensorflow_matmul_transposed(a, b):
    return tf.matmul(a, b, transpose_b=True)


def _tensorflow_length_checked(length, limit: int, message: str):
    check = tf.debugging.assert_less_equal(tf.cast(length, tf.int32),
                                           tf.constant(limit, tf.int32), message=message)
    return tf.control_dependencies([check])


def _keras_length_checked(length, limit: int, message: str):
    return contextlib.nullcontext()  # a traced JAX or PyTorch length: nothing to assert with


def _keras_matmul_transposed(a, b):
    return ops.matmul(a, ops.swapaxes(b, -1, -2))


if KERNELS:
    # The layer classes the paper's modules build, looked up when a layer is built.
    Dropout, LayerNormalization = fast_ops.Dropout, fast_ops.LayerNormalization
    # `a @ b^T` over the last two axes (attention's logits, the tied output
    # projection) as one product that reads `b` transposed: `keras.ops.matmul(a,
    # keras.ops.swapaxes(b, -1, -2))` adds a transpose that TensorFlow's graph
    # optimizer leaves in place, with its gradient (in a float32 benchmark of
    # attention's logits and their gradient on a 2-core Xeon, a tenth longer).
    matmul_transposed = _tensorflow_matmul_transposed
    # A context whose ops run after a graph's check that `length <= limit`
    # (a length known only when the graph runs), failing with `message`.
    length_checked = _tensorflow_length_checked
    # `transformer.training.token_losses`' math with its gradient written out.
    token_losses = fast_ops.softmax_cross_entropy
    # The run's services (transformer.run).
    keeps_moving_average = optimizers.keeps_moving_average
    learning_rate_schedule = optimizers.learning_rate_schedule
    distributed_fit_workaround = multiworker.distributed_fit_workaround
    swap_moving_average = optimizers.swap_moving_average
    use_moving_average = optimizers.use_moving_average
else:
    Dropout, LayerNormalization = keras.layers.Dropout, keras.layers.LayerNormalization
    matmul_transposed = _keras_matmul_transposed
    length_checked = _keras_length_checked
    token_losses = _refusing("token_losses", "transformer.training")
    keeps_moving_average = _refusing("keeps_moving_average", "transformer.run")
    learning_rate_schedule = _refusing("learning_rate_schedule", "transformer.run")
    distributed_fit_workaround = _refusing("distributed_fit_workaround", "transformer.run")
    swap_moving_average = _refusing("swap_moving_average", "transformer.run")
    use_moving_average = _refusing("use_moving_average", "transformer.run")


class _Choice(contextlib.AbstractContextManager):
    """Restores the layer classes chosen before `use_keras_layers` on leaving its block."""

    def __init__(self, previous):
        self.previous = previous

    def __exit__(self, *exc_info):
        global Dropout, LayerNormalization
        Dropout, LayerNormalization = self.previous
        return False


def use_keras_layers(enabled: bool = True) -> _Choice:
    """Builds the layers that follow with Keras's own `Dropout` and
    `LayerNormalization` (`enabled=False`: with the kernels' again, under the
    TensorFlow backend; other backends always build with Keras's own).

    Example:

    >>> import keras
    >>> from transformer import EncoderLayer, seams
    >>> with seams.use_keras_layers():
    ...     layer = EncoderLayer(d_model=8, num_heads=2, dff=16)
    >>> type(layer.ffn_layernorm) is keras.layers.LayerNormalization
    True
    >>> seams.LayerNormalization is keras.layers.LayerNormalization  # the kernel's again
    False
    """
    global Dropout, LayerNormalization
    previous = (Dropout, LayerNormalization)
    if enabled or not KERNELS:
        Dropout, LayerNormalization = keras.layers.Dropout, keras.layers.LayerNormalization
    else:
        Dropout, LayerNormalization = fast_ops.Dropout, fast_ops.LayerNormalization
    return _Choice(previous)


def adam(learning_rate, *, ema_momentum: float = 0.0, **settings):
    """Keras' Adam with fused updates (`FusedAdam`); with `ema_momentum` > 0 it
    also keeps a warmed-up moving average of the weights (`AveragingAdam`),
    which the run puts into the model when training ends. Under another
    backend, Keras's own Adam (its moving average without the warm-up)."""
    if not KERNELS:
        if ema_momentum:
            settings.update(use_ema=True, ema_momentum=ema_momentum)
        return keras.optimizers.Adam(learning_rate, **settings)
    if ema_momentum:
        return optimizers.AveragingAdam(learning_rate, use_ema=True, ema_momentum=ema_momentum,
                                        **settings)
    return optimizers.FusedAdam(learning_rate, **settings)
