"""Attention: section 3.2 of Vaswani et al., 2017.

- `scaled_dot_product_attention` (3.2.1),
- `MultiHeadAttention` (3.2.2), with its own `wq`, `wk`, `wv`, `dense`,
- the three uses of attention in the model (3.2.3, "Applications of Attention
  in our Model"; some study outlines number it 3.2.4) as named layers, in the
  paper's order: `EncoderDecoderAttention`, `EncoderSelfAttention`,
  `MaskedDecoderSelfAttention`
  (the newer tutorial calls them `GlobalSelfAttention`, `CausalSelfAttention`,
  `CrossAttention`; those names are aliases here).

Masks follow the project's single convention: 1 where attention is NOT allowed.
`keras.layers.MultiHeadAttention`'s `attention_mask` is the opposite (1 = may
attend); convert with `1 - mask`.

Incremental decoding runs through these same layers: `MultiHeadAttention`
takes a `cache` of projected keys and values and returns it updated, and the
blocks pass it through (see `MultiHeadAttention.call`). The blocks' layer
norms and dropouts are Keras layers from `transformer.seams`, and the weight
converters to and from Keras's layer are in `transformer.keras_interop`.
"""

from __future__ import annotations

import math
import warnings

import keras
import ml_dtypes
import numpy as np
from keras import ops

from transformer import seams
from transformer._validation import check_heads_divide, check_positive_int, check_rate
from transformer.constants import LAYER_NORM_EPSILON, MASK_NEGATIVE_FLOAT32
from transformer.masking import create_look_ahead_mask


def mask_value(dtype) -> float:
    """The number added to masked logits, per dtype (docs/design.md, "Masks").

    -1e9 in float32 and float64. In float16 and bfloat16, -1e9 would overflow to
    -inf (float16) or swamp the logits' precision, so the value is half the most
    negative finite number of the dtype: adding it to any logit of magnitude up
    to that half stays finite, and its softmax weight is exactly 0.
    """
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype in ("float32", "float64"):
        return MASK_NEGATIVE_FLOAT32
    if dtype == "bfloat16":
        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).min) / 2.0
    return float(np.finfo(dtype).min) / 2.0


def _softmax(logits):
    """`keras.ops.softmax` over the keys. One key (the first step of cached
    decoding) is a softmax over one number, rightly 1: Keras' warning that it
    is likely a mistake is silenced there."""
    if logits.shape[-1] != 1:
        return ops.softmax(logits, axis=-1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using a softmax over axis",
                                category=UserWarning)
        return ops.softmax(logits, axis=-1)


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

    >>> k = np.array([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], "float32")
    >>> v = np.array([[1, 0], [10, 0], [100, 5], [1000, 6]], "float32")
    >>> out, w = scaled_dot_product_attention(np.array([[0, 10, 0]], "float32"), k, v)
    >>> ops.convert_to_numpy(w).round(6), ops.convert_to_numpy(out).round(6)
    (array([[0., 1., 0., 0.]], dtype=float32), array([[10.,  0.]], dtype=float32))

    A query that matches the last two keys equally averages their values; with
    the last key masked (1 = may not attend), it takes the third key's alone:

    >>> q = np.array([[0, 0, 10]], "float32")
    >>> ops.convert_to_numpy(scaled_dot_product_attention(q, k, v)[0]).round(6)
    array([[550. ,   5.5]], dtype=float32)
    >>> out, w = scaled_dot_product_attention(q, k, v, mask=np.array([[0., 0., 0., 1.]]))
    >>> ops.convert_to_numpy(w).round(6), ops.convert_to_numpy(out).round(6)
    (array([[0., 0., 1., 0.]], dtype=float32), array([[100.,   5.]], dtype=float32))

    With a batch and heads, the leading axes come along:

    >>> q, k, v = ops.ones((2, 8, 3, 16)), ops.ones((2, 8, 5, 16)), ops.ones((2, 8, 5, 32))
    >>> out, w = scaled_dot_product_attention(q, k, v)
    >>> tuple(out.shape), tuple(w.shape)  # (batch, heads, seq_q, depth_v), (..., seq_q, seq_k)
    ((2, 8, 3, 32), (2, 8, 3, 5))
    """
    q = ops.convert_to_tensor(q)
    dtype = keras.backend.standardize_dtype(q.dtype)
    k = ops.convert_to_tensor(k, dtype=dtype)
    v = ops.convert_to_tensor(v, dtype=dtype)
    depth = ops.shape(k)[-1]  # an int, or under TensorFlow a tensor when unknown
    if isinstance(depth, int):
        scale = ops.cast(1.0 / math.sqrt(depth), dtype)
    else:
        scale = ops.rsqrt(ops.cast(depth, dtype))
    # Scaling q before the product equals scaling the logits and touches fewer numbers.
    logits = seams.matmul_transposed(q * scale, k)  # (..., seq_len_q, seq_len_k)
    if mask is not None:
        mask = ops.cast(mask, dtype)
        logits += mask * ops.cast(mask_value(dtype), dtype)
    attention_weights = _softmax(logits)  # (..., seq_len_q, seq_len_k)
    output = ops.matmul(attention_weights, v)  # (..., seq_len_q, depth_v)
    return output, attention_weights


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, section 3.2.2 of Vaswani et al., 2017.

    `MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O` with
    `head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`. The per-head projections are
    stored as one `Dense(d_model)` each (`wq`, `wk`, `wv`) whose output is split
    into `num_heads` heads of depth `d_model // num_heads`; `dense` is `W^O`.

    It computes what `keras.layers.MultiHeadAttention(num_heads,
    key_dim=d_model // num_heads, output_shape=d_model)` computes given the
    same weights (see `transformer.keras_interop`; Keras's `output_shape` may
    be left out when the query width is `d_model`), but takes masks in this
    project's convention and returns the attention weights.

    Args:
        d_model: model width; must be divisible by `num_heads`.
        num_heads: number of heads `h`.
        dropout_rate: dropout on the attention weights during training (as Keras's
            `dropout`); the returned weights are taken before dropout.

    Call arguments:
        q: queries `(batch, seq_len_q, d_q)`, or `(batch, d_q)` for a single
            query position (incremental decoding; the output is then
            `(batch, d_model)`).
        k: keys `(batch, seq_len_k, d_k)`; with a `cache`, the new positions'
            keys to append, or None to attend over the cache as it is.
        v: values `(batch, seq_len_k, d_v)`; like `k`.
        mask: optional, broadcastable to `(batch, num_heads, seq_len_q,
            seq_len_k)`; **1 where attention is NOT allowed**. Keras's
            `attention_mask` is the opposite: convert with `1 - mask`.
        training: whether dropout is active.
        cache: optional `(k_heads, v_heads)` of already projected keys and
            values, each `(batch, num_heads, seq_len_cached, depth)`. The
            projections of `k` and `v` (when given) are appended to it along
            the sequence axis, and attention runs over the whole cache. Masked
            decoder self-attention starts from an empty cache and appends one
            position per step; encoder-decoder attention fills it once with
            `project_keys_values(context, context)` and then passes `k=v=None`.

    Returns:
        `(output, attention_weights)`: `(batch, seq_len_q, d_model)` and
        `(batch, num_heads, seq_len_q, seq_len_k)`; with a `cache`,
        `(output, attention_weights, cache)` with the updated cache.

    Example:

    >>> mha = MultiHeadAttention(d_model=512, num_heads=8)
    >>> y = np.random.default_rng(0).uniform(size=(1, 60, 512)).astype("float32")
    >>> out, w = mha(y, y, y)
    >>> tuple(out.shape), tuple(w.shape)  # (batch, seq_q, d_model), (batch, heads, seq_q, seq_k)
    ((1, 60, 512), (1, 8, 60, 60))

    With the look-ahead mask, position 0 attends only to itself, in every head:

    >>> out, w = mha(y, y, y, mask=create_look_ahead_mask(60))
    >>> ops.convert_to_numpy(w[0, :, 0, :2]).round(6)  # (heads, the first two keys)
    array([[1., 0.],
           [1., 0.],
           [1., 0.],
           [1., 0.],
           [1., 0.],
           [1., 0.],
           [1., 0.],
           [1., 0.]], dtype=float32)
    """

    def __init__(self, d_model, num_heads, dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        check_rate("dropout_rate", dropout_rate)
        check_heads_divide(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.depth = d_model // num_heads
        policy = self.dtype_policy
        self.wq = keras.layers.Dense(d_model, dtype=policy, name="wq")
        self.wk = keras.layers.Dense(d_model, dtype=policy, name="wk")
        self.wv = keras.layers.Dense(d_model, dtype=policy, name="wv")
        self.dense = keras.layers.Dense(d_model, dtype=policy, name="dense")
        self.dropout = seams.Dropout(dropout_rate, dtype=policy)
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
        x = ops.reshape(x, (batch_size, -1, self.num_heads, self.depth))
        return ops.transpose(x, (0, 2, 1, 3))  # (batch, num_heads, seq_len, depth)

    def combine_heads(self, x, batch_size):
        """The inverse of `split_heads`: `(batch, heads, seq, depth)` -> `(batch, seq, d_model)`."""
        x = ops.transpose(x, (0, 2, 1, 3))  # (batch, seq_len, num_heads, depth)
        return ops.reshape(x, (batch_size, -1, self.d_model))  # (batch, seq_len, d_model)

    def project_keys_values(self, k, v):
        """Projects and splits keys and values: two `(batch, heads, seq_k, depth)` tensors.

        `k` and `v` are `(batch, seq_k, d)`, or `(batch, d)` for one position.
        Incremental decoding calls this once per source sentence to fill the
        encoder-decoder attention's cache; `call` calls it for each new token
        of masked self-attention.
        """
        batch_size = ops.shape(k)[0]
        k = self.split_heads(self.wk(k), batch_size)  # (batch, num_heads, seq_len_k, depth)
        v = self.split_heads(self.wv(v), batch_size)  # (batch, num_heads, seq_len_v, depth)
        return k, v

    def attend(self, q, k_heads, v_heads, mask=None, training=None):
        """Attention of raw queries `q` over already projected `k_heads`, `v_heads`."""
        batch_size = ops.shape(q)[0]
        one_position = len(q.shape) == 2  # (batch, d_q): a single query position
        q = self.split_heads(self.wq(q), batch_size)  # (batch, num_heads, seq_len_q, depth)
        scaled_attention, attention_weights = scaled_dot_product_attention(
            q, k_heads, v_heads, mask
        )  # (batch, num_heads, seq_len_q, depth), (batch, num_heads, seq_len_q, seq_len_k)
        if training and self.dropout_rate > 0:
            # Dropout on the weights that mix the values, as Keras's layer does;
            # the weights returned to the caller are the undropped ones.
            dropped = self.dropout(attention_weights, training=training)
            scaled_attention = ops.matmul(dropped, v_heads)
        if one_position:  # keep it 2-D: the output projection is one matrix product
            concat = ops.reshape(scaled_attention, (batch_size, self.d_model))  # (batch, d_model)
        else:
            concat = self.combine_heads(scaled_attention, batch_size)  # (batch, seq_q, d_model)
        return self.dense(concat), attention_weights  # (batch, seq_len_q, d_model)

    def call(self, q, k=None, v=None, mask=None, training=None, cache=None):
        if cache is None:
            k = q if k is None else k
            k_heads, v_heads = self.project_keys_values(k, k if v is None else v)
            return self.attend(q, k_heads, v_heads, mask=mask, training=training)
        k_heads, v_heads = cache  # (batch, num_heads, seq_len_cached, depth) each
        if k is not None:
            new_k, new_v = self.project_keys_values(k, k if v is None else v)
            k_heads = ops.concatenate([k_heads, new_k], axis=2)  # (batch, heads, seq_k, depth)
            v_heads = ops.concatenate([v_heads, new_v], axis=2)  # (batch, heads, seq_k, depth)
        output, attention_weights = self.attend(q, k_heads, v_heads, mask=mask, training=training)
        return output, attention_weights, (k_heads, v_heads)

    def empty_cache(self, batch_size):
        """A cache with no positions: `(k_heads, v_heads)`, each `(batch, heads, 0, depth)`."""
        empty = ops.zeros((batch_size, self.num_heads, 0, self.depth), dtype=self.compute_dtype)
        return empty, empty

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


def sublayer_input(layernorm, x, normalize_first):
    """What a residual sublayer computes on: `x` (post-norm, the paper's), or
    `LayerNorm(x)` (pre-norm, `normalize_first`)."""
    return layernorm(x) if normalize_first else x


def sublayer_output(layernorm, x, y, normalize_first):
    """The residual connection around a sublayer whose output (after dropout) is
    `y`: `LayerNorm(x + y)` (post-norm, section 3.1), or `x + y` (pre-norm)."""
    y = ops.cast(y, keras.backend.standardize_dtype(x.dtype))
    return x + y if normalize_first else layernorm(x + y)


class ResidualBlock(keras.layers.Layer):
    """The base of every layer built of residual sublayers (section 3.1): the
    attention blocks here and `transformer.layers.EncoderLayer` and
    `DecoderLayer`. It checks and keeps `d_model`, `num_heads`, `dropout_rate`
    and `normalize_first` (see `sublayer_input` and `sublayer_output`), writes
    them in `get_config`, and its output has its input's shape.
    """

    def __init__(self, d_model, num_heads, dropout_rate=0.1, normalize_first=False, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        check_rate("dropout_rate", dropout_rate)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.normalize_first = bool(normalize_first)

    def compute_output_shape(self, x_shape, *args, **kwargs):
        return x_shape

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate, "normalize_first": self.normalize_first}


class _AttentionBlock(ResidualBlock):
    """Multi-head attention wrapped as a residual sublayer (section 3.1).

    Post-norm, the paper's: `LayerNorm(x + Dropout(MultiHeadAttention(x, context,
    context)))`, epsilon 1e-6. With `normalize_first` (pre-norm, Xiong et al.,
    2020): `x + Dropout(MultiHeadAttention(LayerNorm(x), context, context))`,
    where `context` is already normalized (the encoder's output).
    """

    def __init__(self, d_model, num_heads, dropout_rate=0.1, normalize_first=False, **kwargs):
        super().__init__(d_model, num_heads, dropout_rate, normalize_first, **kwargs)
        policy = self.dtype_policy
        self.mha = MultiHeadAttention(d_model, num_heads, dtype=policy, name="mha")
        self.dropout = seams.Dropout(dropout_rate, dtype=policy)
        self.layernorm = seams.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=policy, name="layernorm"
        )

    def _build_block(self, x_shape, context_shape):
        self.mha.build(x_shape, context_shape, context_shape)
        self.layernorm.build(x_shape)
        self.built = True

    def _input(self, x):
        return sublayer_input(self.layernorm, x, self.normalize_first)

    def _residual(self, x, attn_output, training):
        return sublayer_output(
            self.layernorm, x, self.dropout(attn_output, training=training), self.normalize_first
        )  # (batch, seq_len_q, d_model)


@keras.saving.register_keras_serializable(package="transformer")
class EncoderSelfAttention(_AttentionBlock):
    """Encoder self-attention, the second use of attention in section 3.2.3.

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
        h = self._input(x)  # (batch, seq_len, d_model)
        attn, weights = self.mha(h, h, h, mask=padding_mask, training=training)
        return self._residual(x, attn, training), weights


@keras.saving.register_keras_serializable(package="transformer")
class MaskedDecoderSelfAttention(_AttentionBlock):
    """Masked decoder self-attention, the third use of attention in section 3.2.3.

    "Self-attention layers in the decoder allow each position in the decoder to
    attend to all positions in the decoder up to and including that position."
    The look-ahead mask is always applied here (built from the length of `x`);
    `padding_mask` adds target padding on top.

    In incremental decoding (`cache` given), `x` is the newest position only,
    `(batch, d_model)`, and the cache holds the keys and values of every
    earlier position: the future does not exist yet, so no look-ahead mask is
    needed, and `padding_mask` covers the cached positions and the new one.

    Call arguments:
        x: `(batch, seq_len, d_model)`, the right-shifted target.
        padding_mask: optional, broadcastable to `(batch, 1, seq_len, seq_len)`,
            1 where a key is padding (or otherwise not allowed).
        training: whether dropout is active.
        cache: optional `(k_heads, v_heads)` of the earlier positions (see
            `MultiHeadAttention`); the new position's are appended.

    Returns:
        `(output, attention_weights)`, or `(output, attention_weights, cache)`
        with a cache.
    """

    def build(self, x_shape):
        self._build_block(x_shape, x_shape)

    def call(self, x, padding_mask=None, training=None, cache=None):
        if cache is not None:
            h = self._input(x)  # (batch, d_model)
            attn, weights, cache = self.mha(
                h, h, h, mask=padding_mask, training=training, cache=cache
            )  # (batch, d_model), (batch, heads, 1, seq_len)
            return self._residual(x, attn, training), weights, cache
        mask = create_look_ahead_mask(ops.shape(x)[1])  # (seq_len, seq_len)
        if padding_mask is not None:
            mask = ops.maximum(ops.cast(padding_mask, "float32"), mask)
        h = self._input(x)  # (batch, seq_len, d_model)
        attn, weights = self.mha(h, h, h, mask=mask, training=training)
        return self._residual(x, attn, training), weights


@keras.saving.register_keras_serializable(package="transformer")
class EncoderDecoderAttention(_AttentionBlock):
    """Encoder-decoder attention, the first use of attention in section 3.2.3.

    "The queries come from the previous decoder layer, and the memory keys and
    values come from the output of the encoder."

    Call arguments:
        x: decoder states `(batch, seq_len_q, d_model)` (queries).
        context: encoder output `(batch, seq_len_k, d_model)` (keys and values).
        padding_mask: optional `(batch, 1, 1, seq_len_k)`, 1 at source padding.
        training: whether dropout is active.
        cache: optional `(k_heads, v_heads)`, the encoder output already
            projected by `self.mha.project_keys_values(context, context)`;
            `context` is then ignored (pass None) and the cache is returned
            unchanged. Incremental decoding projects the encoder output once
            per sentence this way.

    Returns:
        `(output, attention_weights)`, or `(output, attention_weights, cache)`
        with a cache.
    """

    def build(self, x_shape, context_shape):
        self._build_block(x_shape, context_shape)

    def call(self, x, context=None, padding_mask=None, training=None, cache=None):
        if cache is not None:
            attn, weights, cache = self.mha(
                self._input(x), None, None, mask=padding_mask, training=training, cache=cache
            )  # (batch, d_model), (batch, heads, 1, seq_len_k)
            return self._residual(x, attn, training), weights, cache
        attn, weights = self.mha(
            self._input(x), context, context, mask=padding_mask, training=training
        )
        return self._residual(x, attn, training), weights


# The newer TensorFlow tutorial's names for the same three layers.
GlobalSelfAttention = EncoderSelfAttention
CausalSelfAttention = MaskedDecoderSelfAttention
CrossAttention = EncoderDecoderAttention
