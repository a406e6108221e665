"""Attention: section 3.2 of Vaswani et al., 2017.

- `scaled_dot_product_attention` (3.2.1),
- `MultiHeadAttention` (3.2.2), with its own `wq`, `wk`, `wv`, `dense`,
- the three uses of attention in the model (3.2.3, "Applications of Attention
  in our Model"; some outlines, and DESIGN.md, number it 3.2.4) as named layers:
  `EncoderSelfAttention`, `MaskedDecoderSelfAttention`, `EncoderDecoderAttention`
  (the newer tutorial calls them `GlobalSelfAttention`, `CausalSelfAttention`,
  `CrossAttention`; those names are aliases here).

Masks follow the project's single convention: 1 where attention is NOT allowed.
`keras.layers.MultiHeadAttention`'s `attention_mask` is the opposite (1 = may
attend); convert with `1 - mask`.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from transformer._validation import check_positive_int, check_rate
from transformer.constants import LAYER_NORM_EPSILON, MASK_NEGATIVE_FLOAT32
from transformer.masking import create_look_ahead_mask


def mask_value(dtype) -> float:
    """The number added to masked logits, per dtype (DESIGN.md, decision 3).

    -1e9 in float32 and float64. In float16 and bfloat16, -1e9 would overflow to
    -inf (float16) or swamp the logits' precision, so the value is half the most
    negative finite number of the dtype: adding it to any logit of magnitude up
    to that half stays finite, and its softmax weight is exactly 0.
    """
    dtype = tf.as_dtype(dtype)
    if dtype in (tf.float32, tf.float64):
        return MASK_NEGATIVE_FLOAT32
    return float(dtype.min) / 2.0


@keras.saving.register_keras_serializable(package="transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose random mask costs half as much to draw.

    Keras draws one 32-bit uniform number per element; this layer draws 32
    random bits per two elements and compares each 16-bit half with
    `round(rate * 65536)`. Drawing the random numbers was the largest cost of
    dropout in a training step (about 5% of the tutorial-preset step on our
    2-core CPU; see BENCHMARKS.md). Elements are dropped with probability
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


def scaled_dot_product_attention(q, k, v, mask=None):
    """Scaled dot-product attention, section 3.2.1 of Vaswani et al., 2017.

    `Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`

    Args:
        q: queries, shape `(..., seq_len_q, depth)`.
        k: keys, shape `(..., seq_len_k, depth)`.
        v: values, shape `(..., seq_len_k, depth_v)`.
        mask: optional float or bool tensor broadcastable to
            `(..., seq_len_q, seq_len_k)`; **1 (True) where attention is NOT
            allowed** (a padding key or a future position). This is the opposite
            of `keras.layers.MultiHeadAttention`'s `attention_mask`.

    Returns:
        `(output, attention_weights)`: output `(..., seq_len_q, depth_v)` and
        weights `(..., seq_len_q, seq_len_k)`; each row of the weights sums to 1.
        A row whose keys are all masked still gets finite weights that sum to 1,
        never NaN.

    Example (the tutorial's):

    >>> k = tf.constant([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], tf.float32)
    >>> v = tf.constant([[1, 0], [10, 0], [100, 5], [1000, 6]], tf.float32)
    >>> out, w = scaled_dot_product_attention(tf.constant([[0, 10, 0]], tf.float32), k, v)
    >>> w.numpy().round(6), out.numpy().round(6)
    (array([[0., 1., 0., 0.]], dtype=float32), array([[10.,  0.]], dtype=float32))
    """
    q = tf.convert_to_tensor(q)
    k = tf.convert_to_tensor(k, dtype=q.dtype)
    v = tf.convert_to_tensor(v, dtype=q.dtype)
    depth = k.shape[-1]
    if depth is None:
        scale = tf.math.rsqrt(tf.cast(tf.shape(k)[-1], q.dtype))
    else:
        scale = tf.cast(1.0 / math.sqrt(depth), q.dtype)
    # Scaling q before the product equals scaling the logits and touches fewer numbers.
    logits = tf.matmul(q * scale, k, transpose_b=True)  # (..., seq_len_q, seq_len_k)
    if mask is not None:
        mask = tf.cast(mask, logits.dtype)
        logits += mask * tf.cast(mask_value(logits.dtype), logits.dtype)
    attention_weights = tf.nn.softmax(logits, axis=-1)  # (..., seq_len_q, seq_len_k)
    output = tf.matmul(attention_weights, v)  # (..., seq_len_q, depth_v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, section 3.2.2 of Vaswani et al., 2017.

    `MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O` with
    `head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`. The per-head projections are
    stored as one `Dense(d_model)` each (`wq`, `wk`, `wv`) whose output is split
    into `num_heads` heads of depth `d_model // num_heads`; `dense` is `W^O`.

    It computes what `keras.layers.MultiHeadAttention(num_heads,
    key_dim=d_model // num_heads)` computes given the same weights (see
    `copy_weights_from_keras` and `copy_weights_to_keras`), but takes masks in
    this project's convention and returns the attention weights.

    Args:
        d_model: model width; must be divisible by `num_heads`.
        num_heads: number of heads `h`.
        dropout_rate: dropout on the attention weights during training (as Keras's
            `dropout`); the returned weights are taken before dropout.

    Call arguments:
        q: queries `(batch, seq_len_q, d_q)`.
        k: keys `(batch, seq_len_k, d_k)`.
        v: values `(batch, seq_len_k, d_v)`.
        mask: optional, broadcastable to `(batch, num_heads, seq_len_q,
            seq_len_k)`; **1 where attention is NOT allowed**. Keras's
            `attention_mask` is the opposite: convert with `1 - mask`.
        training: whether dropout is active.

    Returns:
        `(output, attention_weights)`: `(batch, seq_len_q, d_model)` and
        `(batch, num_heads, seq_len_q, seq_len_k)`.

    Example:

    >>> mha = MultiHeadAttention(d_model=512, num_heads=8)
    >>> y = tf.random.uniform((1, 60, 512))
    >>> out, w = mha(y, y, y)
    >>> out.shape, w.shape
    (TensorShape([1, 60, 512]), TensorShape([1, 8, 60, 60]))
    """

    def __init__(self, d_model, num_heads, dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        check_rate("dropout_rate", dropout_rate)
        if d_model % num_heads != 0:
            raise ValueError(
                "Received an invalid value for argument `num_heads`, expected a divisor "
                f"of `d_model`. Received: d_model={d_model}, num_heads={num_heads}"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.depth = d_model // num_heads
        policy = self.dtype_policy
        self.wq = keras.layers.Dense(d_model, dtype=policy, name="wq")
        self.wk = keras.layers.Dense(d_model, dtype=policy, name="wk")
        self.wv = keras.layers.Dense(d_model, dtype=policy, name="wv")
        self.dense = keras.layers.Dense(d_model, dtype=policy, name="dense")
        self.dropout = Dropout(dropout_rate, dtype=policy)
        # `mask` is an attention mask, not a Keras padding mask to propagate:
        # accept it quietly and attach no mask to the outputs.
        self.supports_masking = True

    def compute_mask(self, *args, **kwargs):
        return None

    def build(self, q_shape, k_shape=None, v_shape=None):
        k_shape = q_shape if k_shape is None else k_shape
        v_shape = k_shape if v_shape is None else v_shape
        self.wq.build(q_shape)
        self.wk.build(k_shape)
        self.wv.build(v_shape)
        self.dense.build((*tuple(q_shape)[:-1], self.d_model))
        self.built = True

    def split_heads(self, x, batch_size):
        """Splits the last axis into `(num_heads, depth)` and moves heads forward.

        `(batch, seq_len, d_model)` -> `(batch, num_heads, seq_len, depth)`.
        """
        x = tf.reshape(x, (batch_size, -1, self.num_heads, self.depth))
        return tf.transpose(x, perm=[0, 2, 1, 3])  # (batch, num_heads, seq_len, depth)

    def combine_heads(self, x, batch_size):
        """The inverse of `split_heads`: `(batch, heads, seq, depth)` -> `(batch, seq, d_model)`."""
        x = tf.transpose(x, perm=[0, 2, 1, 3])  # (batch, seq_len, num_heads, depth)
        return tf.reshape(x, (batch_size, -1, self.d_model))  # (batch, seq_len, d_model)

    def project_keys_values(self, k, v):
        """Projects and splits keys and values: two `(batch, heads, seq_k, depth)` tensors.

        Incremental decoding calls this once per source sentence (encoder-decoder
        attention) or once per new token (self-attention) and caches the result.
        """
        batch_size = tf.shape(k)[0]
        k = self.split_heads(self.wk(k), batch_size)  # (batch, num_heads, seq_len_k, depth)
        v = self.split_heads(self.wv(v), batch_size)  # (batch, num_heads, seq_len_v, depth)
        return k, v

    def attend(self, q, k_heads, v_heads, mask=None, training=None):
        """Attention of raw queries `q` over already projected `k_heads`, `v_heads`."""
        batch_size = tf.shape(q)[0]
        q = self.split_heads(self.wq(q), batch_size)  # (batch, num_heads, seq_len_q, depth)
        scaled_attention, attention_weights = scaled_dot_product_attention(
            q, k_heads, v_heads, mask
        )  # (batch, num_heads, seq_len_q, depth), (batch, num_heads, seq_len_q, seq_len_k)
        if training and self.dropout_rate > 0:
            # Dropout on the weights that mix the values, as Keras's layer does;
            # the weights returned to the caller are the undropped ones.
            dropped = self.dropout(attention_weights, training=training)
            scaled_attention = tf.matmul(dropped, v_heads)
        concat = self.combine_heads(scaled_attention, batch_size)  # (batch, seq_len_q, d_model)
        return self.dense(concat), attention_weights  # (batch, seq_len_q, d_model)

    def call(self, q, k, v, mask=None, training=None):
        k_heads, v_heads = self.project_keys_values(k, v)
        return self.attend(q, k_heads, v_heads, mask=mask, training=training)

    def compute_output_shape(self, q_shape, k_shape=None, v_shape=None):
        k_shape = q_shape if k_shape is None else k_shape
        out = (*tuple(q_shape)[:-1], self.d_model)
        weights = (q_shape[0], self.num_heads, q_shape[1], k_shape[1])
        return out, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate,
            }
        )
        return config


def _check_pair(ours, theirs):
    if not isinstance(theirs, keras.layers.MultiHeadAttention):
        raise TypeError(
            "Expected a `keras.layers.MultiHeadAttention`. Received: "
            f"{type(theirs).__name__}"
        )
    if theirs.num_heads != ours.num_heads or theirs.key_dim != ours.depth:
        raise ValueError(
            "The two layers have different shapes: ours has num_heads="
            f"{ours.num_heads}, depth={ours.depth}; Keras's has num_heads="
            f"{theirs.num_heads}, key_dim={theirs.key_dim}."
        )
    if theirs.value_dim != theirs.key_dim:
        raise ValueError("Keras's layer must have value_dim == key_dim to match ours.")


def _build_keras_from(ours, theirs):
    if not theirs.built:
        dims = [int(layer.kernel.shape[0]) for layer in (ours.wq, ours.wv, ours.wk)]
        theirs.build((None, None, dims[0]), (None, None, dims[1]), (None, None, dims[2]))


def copy_weights_to_keras(ours, keras_mha):
    """Copies a built `MultiHeadAttention`'s weights into `keras.layers.MultiHeadAttention`.

    Keras stores each input projection as a kernel `(d_in, num_heads, key_dim)`
    and bias `(num_heads, key_dim)`, and the output projection as
    `(num_heads, key_dim, d_model)`; ours are the same numbers reshaped to
    `(d_in, d_model)`, `(d_model,)` and `(d_model, d_model)`. Remember that
    Keras's `attention_mask` is `1 - mask` of ours.

    Args:
        ours: a built `transformer.MultiHeadAttention`.
        keras_mha: `keras.layers.MultiHeadAttention(num_heads, key_dim=d_model //
            num_heads)`; built here if it is not yet.

    Returns:
        `keras_mha`, for chaining.
    """
    _check_pair(ours, keras_mha)
    if not ours.built:
        raise ValueError("Build (or call) our MultiHeadAttention before copying its weights.")
    _build_keras_from(ours, keras_mha)
    h, d = ours.num_heads, ours.depth
    pairs = (
        (ours.wq, keras_mha.query_dense),
        (ours.wk, keras_mha.key_dense),
        (ours.wv, keras_mha.value_dense),
    )
    for dense, einsum in pairs:
        kernel = np.asarray(dense.kernel.numpy())
        einsum.kernel.assign(kernel.reshape(kernel.shape[0], h, d))
        einsum.bias.assign(np.asarray(dense.bias.numpy()).reshape(h, d))
    out = keras_mha.output_dense
    out.kernel.assign(np.asarray(ours.dense.kernel.numpy()).reshape(h, d, -1))
    out.bias.assign(np.asarray(ours.dense.bias.numpy()))
    return keras_mha


def copy_weights_from_keras(keras_mha, ours):
    """Copies a `keras.layers.MultiHeadAttention`'s weights into our `MultiHeadAttention`.

    The inverse of `copy_weights_to_keras`; `keras_mha` must be built (called once).

    Returns:
        `ours`, for chaining.
    """
    _check_pair(ours, keras_mha)
    if not keras_mha.built:
        raise ValueError("Build (or call) the Keras MultiHeadAttention before copying.")
    if not ours.built:
        q_dim = keras_mha.query_dense.kernel.shape[0]
        k_dim = keras_mha.key_dense.kernel.shape[0]
        v_dim = keras_mha.value_dense.kernel.shape[0]
        ours.build((None, None, q_dim), (None, None, k_dim), (None, None, v_dim))
    pairs = (
        (ours.wq, keras_mha.query_dense),
        (ours.wk, keras_mha.key_dense),
        (ours.wv, keras_mha.value_dense),
    )
    for dense, einsum in pairs:
        kernel = np.asarray(einsum.kernel.numpy())
        dense.kernel.assign(kernel.reshape(kernel.shape[0], -1))
        dense.bias.assign(np.asarray(einsum.bias.numpy()).reshape(-1))
    out = keras_mha.output_dense
    kernel = np.asarray(out.kernel.numpy())
    ours.dense.kernel.assign(kernel.reshape(-1, kernel.shape[-1]))
    ours.dense.bias.assign(np.asarray(out.bias.numpy()))
    return ours


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
    if not layer_norm.built:
        layer_norm.build(x.shape)
    dtype = layer_norm.compute_dtype
    # Named, so that profiles show the layer norm as such.
    with tf.name_scope("add_and_layer_norm"):
        # The layer's gamma and beta are float32 even under mixed precision
        # (Keras never autocasts them).
        gamma = tf.convert_to_tensor(layer_norm.gamma)  # (d_model,)
        beta = tf.convert_to_tensor(layer_norm.beta)  # (d_model,)
        return _add_and_normalize(
            tf.cast(x, dtype), tf.cast(y, dtype), gamma, beta, float(layer_norm.epsilon)
        )


class _AttentionBlock(keras.layers.Layer):
    """Multi-head attention wrapped as a post-norm residual sublayer (section 3.1).

    `LayerNorm(x + Dropout(MultiHeadAttention(x, context, context)))`, epsilon 1e-6.
    """

    def __init__(self, d_model, num_heads, dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        policy = self.dtype_policy
        self.mha = MultiHeadAttention(d_model, num_heads, dtype=policy, name="mha")
        self.dropout = Dropout(dropout_rate, dtype=policy)
        self.layernorm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=policy, name="layernorm"
        )

    def _build_block(self, x_shape, context_shape):
        self.mha.build(x_shape, context_shape, context_shape)
        self.layernorm.build(x_shape)
        self.built = True

    def _residual(self, x, attn_output, training):
        return add_and_layer_norm(
            self.layernorm, x, self.dropout(attn_output, training=training)
        )  # (batch, seq_len_q, d_model)

    def compute_output_shape(self, x_shape, *args, **kwargs):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="transformer")
class EncoderSelfAttention(_AttentionBlock):
    """Encoder self-attention, the first use of attention in section 3.2.3.

    "In a self-attention layer all of the keys, values and queries come from the
    same place, in this case, the output of the previous layer in the encoder."
    Query = key = value = `x`; every position may attend to every non-padding
    position. Returns `(LayerNorm(x + Dropout(attention)), attention_weights)`.

    Call arguments:
        x: `(batch, seq_len, d_model)`.
        padding_mask: optional `(batch, 1, 1, seq_len)`, 1 at padding keys.
        training: whether dropout is active.
    """

    def build(self, x_shape):
        self._build_block(x_shape, x_shape)

    def call(self, x, padding_mask=None, training=None):
        attn, weights = self.mha(x, x, x, mask=padding_mask, training=training)
        return self._residual(x, attn, training), weights


@keras.saving.register_keras_serializable(package="transformer")
class MaskedDecoderSelfAttention(_AttentionBlock):
    """Masked decoder self-attention, the third use of attention in section 3.2.3.

    "Self-attention layers in the decoder allow each position in the decoder to
    attend to all positions in the decoder up to and including that position."
    The look-ahead mask is always applied here (built from the length of `x`);
    `padding_mask` adds target padding on top.

    Call arguments:
        x: `(batch, seq_len, d_model)`, the right-shifted target.
        padding_mask: optional, broadcastable to `(batch, 1, seq_len, seq_len)`,
            1 where a key is padding (or otherwise not allowed).
        training: whether dropout is active.
    """

    def build(self, x_shape):
        self._build_block(x_shape, x_shape)

    def call(self, x, padding_mask=None, training=None):
        mask = create_look_ahead_mask(tf.shape(x)[1])  # (seq_len, seq_len)
        if padding_mask is not None:
            mask = tf.maximum(tf.cast(padding_mask, mask.dtype), mask)
        attn, weights = self.mha(x, x, x, mask=mask, training=training)
        return self._residual(x, attn, training), weights


@keras.saving.register_keras_serializable(package="transformer")
class EncoderDecoderAttention(_AttentionBlock):
    """Encoder-decoder attention, the second use of attention in section 3.2.3.

    "The queries come from the previous decoder layer, and the memory keys and
    values come from the output of the encoder."

    Call arguments:
        x: decoder states `(batch, seq_len_q, d_model)` (queries).
        context: encoder output `(batch, seq_len_k, d_model)` (keys and values).
        padding_mask: optional `(batch, 1, 1, seq_len_k)`, 1 at source padding.
        training: whether dropout is active.
    """

    def build(self, x_shape, context_shape):
        self._build_block(x_shape, context_shape)

    def call(self, x, context, padding_mask=None, training=None):
        attn, weights = self.mha(x, context, context, mask=padding_mask, training=training)
        return self._residual(x, attn, training), weights


# The newer TensorFlow tutorial's names for the same three layers.
GlobalSelfAttention = EncoderSelfAttention
CausalSelfAttention = MaskedDecoderSelfAttention
CrossAttention = EncoderDecoderAttention
