"""Speed kernels: the same math as Keras's layers, in fewer TensorFlow ops.

Nothing here changes what the model computes; each function or layer equals
its Keras counterpart (tested in tests/test_fast_ops.py) and only costs less
in a training step (BENCHMARKS.md, "Training speed"):

- `Dropout`: `keras.layers.Dropout` with a random mask that costs half as
  much to draw.
- `LayerNormalization`: `keras.layers.LayerNormalization` with its gradient
  written out.
- `softmax_cross_entropy`: the cross-entropy of every token from its logits
  (`transformer.training.token_losses`), on oneDNN's softmax, with its
  gradient written out.

`transformer.seams` puts them in the place of Keras's layers and of the
training loss's TensorFlow ops.
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
    dropout in a training step. Elements are dropped with probability
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


@keras.saving.register_keras_serializable(package="transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with its gradient written out.

    The same weights (`gamma`, `beta`) and the same math as Keras's layer over
    the last axis, normalized in float32 (as Keras does under mixed precision),
    the result in the layer's compute dtype; the gradient (`_layer_norm`) is 9
    full-size operations where TensorFlow's automatic gradient of the forward
    ops runs about 20. Other axes, `rms_scaling`, and a layer without `center`
    or `scale` use Keras's own call.

    Example:

    >>> layer = LayerNormalization(epsilon=1e-6)
    >>> keras_layer = keras.layers.LayerNormalization(epsilon=1e-6)
    >>> x = tf.random.stateless_normal((2, 3, 8), seed=(0, 1))
    >>> bool(tf.reduce_all(tf.abs(layer(x) - keras_layer(x)) < 1e-5))
    True
    """

    def call(self, inputs):
        last_axis = list(self.axis) in ([-1], [len(inputs.shape) - 1])
        if not (last_axis and self.center and self.scale) or self.rms_scaling:
            return super().call(inputs)
        # Named, so that profiles show the layer norm as such.
        with tf.name_scope("layer_norm"):
            # gamma and beta are float32 even under mixed precision (Keras never
            # autocasts them).
            gamma = tf.convert_to_tensor(self.gamma)  # (d_model,)
            beta = tf.convert_to_tensor(self.beta)  # (d_model,)
            dtype = self.compute_dtype
            z = tf.cast(tf.cast(inputs, dtype), tf.float32)  # (..., d_model)
            return tf.cast(_layer_norm(z, gamma, beta, float(self.epsilon)), dtype)


# The smallest normal float32: a probability below it is taken as it, so a
# token's loss is at most -log(TINY), about 87.3, even where the softmax
# underflows to 0. The gradient is exact either way.
TINY = 1.1754944e-38


def softmax_cross_entropy(label, pred, label_smoothing=0.0):
    """Cross-entropy of every token from its logits: `token_losses`' math on
    one softmax, with its gradient written out.

    With p = softmax(pred) and the smoothed target q = (1 - eps) * one_hot(label)
    + eps / vocab, the loss is -sum_v q_v log p_v = nll + eps * (pred_label -
    mean_v(pred_v)), where nll = -log p_label, and its gradient with respect to
    the logits is p - q. TensorFlow's automatic gradient of `token_losses`
    makes a dense `(..., vocab)` tensor out of the gather's gradient and runs
    the log-sum-exp backwards op by op; here the forward pass is one softmax
    (oneDNN's, one pass over the logits), the picked probabilities and, with
    smoothing, a mean, and the backward pass one product and a scatter of one
    number per token. Padding is not masked here (`masked_loss` does).

    Args:
        label: int targets `(...)`; an id outside `[0, vocab)` raises.
        pred: logits `(..., vocab)`, float32 (other float dtypes are cast).
        label_smoothing: `eps` in [0, 1) (not checked).

    Returns:
        float32 losses `(...)`, each at most -log(`TINY`) (about 87.3).

    Example:

    >>> from transformer.training import token_losses
    >>> pred = tf.random.stateless_normal((2, 3, 7), seed=(0, 1))
    >>> label = tf.constant([[1, 2, 0], [6, 5, 4]])
    >>> bool(tf.reduce_all(tf.abs(softmax_cross_entropy(label, pred, 0.1)
    ...                           - token_losses(label, pred, 0.1)) < 1e-5))
    True
    """
    pred = tf.cast(pred, tf.float32)  # (..., vocab)
    label = tf.cast(label, tf.int32)  # (...)
    eps = float(label_smoothing)

    @tf.custom_gradient
    def losses(pred):
        with tf.name_scope("softmax_cross_entropy"):  # named, for profiles
            probs = tf.nn.softmax(pred)  # (..., vocab)
            rank = len(label.shape)  # the batch dims of the gathers
            picked = tf.gather(probs, label, axis=-1, batch_dims=rank)  # (...)
            loss = -tf.math.log(tf.maximum(picked, TINY))
            if eps:
                picked_logit = tf.gather(pred, label, axis=-1, batch_dims=rank)
                loss += eps * (picked_logit - tf.reduce_mean(pred, axis=-1))

        def grad(dy):
            # d loss / d pred = p - q: every logit's p scaled by its token's
            # gradient, less (1 - eps) at the label and eps / vocab everywhere.
            with tf.name_scope("softmax_cross_entropy_grad"):
                vocab = tf.shape(pred)[-1]
                rows = tf.reshape(probs, [-1, vocab])  # (tokens, vocab)
                dy_rows = tf.reshape(tf.cast(dy, tf.float32), [-1, 1])  # (tokens, 1)
                grads = rows * dy_rows
                if eps:
                    grads -= dy_rows * (eps / tf.cast(vocab, tf.float32))
                at_label = tf.stack(
                    [tf.range(tf.shape(dy_rows)[0]), tf.reshape(label, [-1])], axis=1
                )  # (tokens, 2)
                grads = tf.tensor_scatter_nd_sub(grads, at_label, (1.0 - eps) * dy_rows[:, 0])
                return tf.reshape(grads, tf.shape(pred))

        return loss, grad

    return losses(pred)
