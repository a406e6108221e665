"""Speed kernels: the same math as Keras's layers, in fewer TensorFlow ops.

Nothing here changes what the model computes; each function or layer equals
its Keras counterpart (tested in tests/test_fast_ops.py) and only costs less
in a training step (measured in bench/TRAIN_SPEED.md):

- `Dropout`: `keras.layers.Dropout` with a random mask that costs half as
  much to draw.
- `add_and_layer_norm`: the residual connection and layer norm of section
  3.1 with its gradient written out; `normalize`, the same layer norm alone,
  for pre-norm sublayers.
"""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose random mask costs half as much to draw.

    Keras draws one 32-bit uniform number per element; this layer draws 32
    random bits per two elements and compares each 16-bit half with
    `round(rate * 65536)`. Drawing the random numbers was the largest cost of
    dropout in a training step (measurements in bench/TRAIN_SPEED.md). Elements are dropped with probability
    `round(rate * 65536) / 65536` (for `rate = 0.1`: 0.1000061) and the kept
    ones are multiplied by the inverse of that keep probability (rounded to
    the compute dtype, as Keras does), so the expected output equals the
    input, as with Keras's layer. The input is multiplied by a mask of 0 and
    1 / keep: a dropped element that is inf or NaN gives NaN, where Keras's
    select gives 0 (this matters only for overflows under `mixed_float16`,
    and the NaN-loss stop of `train` then names the step). Everything else
    (`noise_shape`, `seed`, the seed generator, saving) is Keras's; rates
    within 1/131072 of 0 or 1 use Keras's own draw.

    Example:

    >>> layer = Dropout(0.1, seed=0)
    >>> y = layer(tf.ones((1000, 64)), training=True)
    >>> abs(float(tf.reduce_mean(tf.cast(y == 0, tf.float32))) - 0.1) < 0.01
    True
    """

    _LEVELS = 1 << 16  # values of a 16-bit half

    def call(self, inputs, training=False):
        threshold = round(self.rate * self._LEVELS)
        if not training or self.noise_shape is not None or not 0 < threshold < self._LEVELS:
            # Keras's own draw: no noise to draw, a noise shape, or a rate within
            # 1/131072 of 0 or 1, which 16 bits cannot resolve.
            return super().call(inputs, training=training)
        inputs = tf.convert_to_tensor(inputs)
        scale = self._LEVELS / (self._LEVELS - threshold)  # 1 / keep probability
        # Keras's seed state is int64; the stateless TensorFlow ops take int32.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2**31 - 2), tf.int32)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform(
            ((size + 1) // 2,), seed, minval=None, maxval=None, dtype=tf.uint32
        )  # full-range random 32-bit integers, one per two elements
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), (-1,))[:size]  # (size,)
        keep = tf.reshape(halves >= threshold, tf.shape(inputs))
        # A mask of 0 and 1 / keep probability, then one product: its gradient
        # is a single product with the same mask.
        mask = tf.where(keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))
        return inputs * mask



def _add_and_normalize(x, y, gamma, beta, epsilon):
    """`LayerNorm(x + y)` over the last axis, the math of `keras.layers.LayerNormalization`.

    The sum is taken in the inputs' dtype and normalized in float32 (as Keras
    does under mixed precision); the result has the inputs' dtype.
    """
    z = tf.cast(x + y, tf.float32)  # (..., d_model)
    return tf.cast(_layer_norm(z, gamma, beta, epsilon), x.dtype)  # (..., d_model)


def _layer_norm(z, gamma, beta, epsilon):
    """`gamma * (z - mean) / sqrt(var + epsilon) + beta` over the last axis, float32.

    Its gradient is written out: with `g = dy * gamma` and `z_hat` the
    normalized input, `dz = (g - mean(g) - z_hat * mean(g * z_hat)) / std`,
    `dgamma = sum(dy * z_hat)`, `dbeta = sum(dy)`. That is 9 full-size
    operations where TensorFlow's automatic gradient of the forward ops runs
    about 20; the layer norm's share of a training step fell by a fifth.
    """

    @tf.custom_gradient
    def layer_norm(z, gamma, beta):
        mean = tf.reduce_mean(z, axis=-1, keepdims=True)  # (..., 1)
        centered = z - mean
        variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)  # (..., 1)
        inv_std = tf.math.rsqrt(variance + epsilon)  # (..., 1)
        z_hat = centered * inv_std  # (..., d_model)

        def grad(dy):
            with tf.name_scope("layer_norm_grad"):  # named, for profiles
                g = dy * gamma  # (..., d_model)
                dz = inv_std * (
                    g
                    - tf.reduce_mean(g, axis=-1, keepdims=True)
                    - z_hat * tf.reduce_mean(g * z_hat, axis=-1, keepdims=True)
                )
                leading = tf.range(tf.rank(dy) - 1)  # every axis but the last
                dgamma = tf.reduce_sum(dy * z_hat, axis=leading)  # (d_model,)
                return dz, dgamma, tf.reduce_sum(dy, axis=leading)

        return z_hat * gamma + beta, grad

    return layer_norm(z, gamma, beta)


def add_and_layer_norm(layer_norm, x, y):
    """`layer_norm(x + y)`: the residual connection and layer norm of section 3.1.

    Computes what `layer_norm(x + y)` computes, with `layer_norm`'s own `gamma`,
    `beta` and `epsilon`, in fewer TensorFlow ops than calling the layer: with
    its gradient (written out in `_layer_norm`), 24 ops instead of 46, of which
    7 instead of 11 multiplications (constants, reads and identities not
    counted). The layer keeps its weights, so saved models are unchanged.

    Args:
        layer_norm: a `keras.layers.LayerNormalization` over the last axis, with
            `center` and `scale` on.
        x: the sublayer's input `(..., d_model)`.
        y: the sublayer's output after dropout, same shape.

    Returns:
        `(..., d_model)` in `layer_norm`'s compute dtype.
    """
    return _apply_layer_norm(layer_norm, x, y, "add_and_layer_norm")


def normalize(layer_norm, x):
    """`layer_norm(x)` in the fewer ops of `add_and_layer_norm`: the layer norm of
    a pre-norm sublayer (`x + sublayer(layer_norm(x))`).

    Args:
        layer_norm: a `keras.layers.LayerNormalization` over the last axis, with
            `center` and `scale` on.
        x: `(..., d_model)`.

    Returns:
        `(..., d_model)` in `layer_norm`'s compute dtype.
    """
    return _apply_layer_norm(layer_norm, x, None, "normalize")


def _apply_layer_norm(layer_norm, x, y, name):
    if not layer_norm.built:
        layer_norm.build(x.shape)
    dtype = layer_norm.compute_dtype
    # Named, so that profiles show the layer norm as such.
    with tf.name_scope(name):
        # The layer's gamma and beta are float32 even under mixed precision
        # (Keras never autocasts them).
        gamma = tf.convert_to_tensor(layer_norm.gamma)  # (d_model,)
        beta = tf.convert_to_tensor(layer_norm.beta)  # (d_model,)
        x = tf.cast(x, dtype)
        if y is None:
            z = tf.cast(x, tf.float32)
            return tf.cast(_layer_norm(z, gamma, beta, float(layer_norm.epsilon)), dtype)
        return _add_and_normalize(x, tf.cast(y, dtype), gamma, beta, float(layer_norm.epsilon))
