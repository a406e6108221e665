"""The position-wise feed-forward network and the encoder and decoder layers.

Sections 3.1 and 3.3 of Vaswani et al., 2017. Every sublayer is post-norm, the
paper's `LayerNorm(x + Dropout(sublayer(x)))` with epsilon 1e-6, or, with
`normalize_first=True`, pre-norm: `x + Dropout(sublayer(LayerNorm(x)))`
(Xiong et al., 2020, "On Layer Normalization in the Transformer
Architecture"), which learns faster in short runs on real text
(BENCHMARKS.md, "Tried and not adopted").
"""

from __future__ import annotations

import keras
from keras import ops

from transformer import seams
from transformer._validation import check_positive_int
from transformer.attention import (
    EncoderDecoderAttention,
    EncoderSelfAttention,
    MaskedDecoderSelfAttention,
    ResidualBlock,
    sublayer_input,
    sublayer_output,
)
from transformer.constants import LAYER_NORM_EPSILON


@keras.saving.register_keras_serializable(package="transformer")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network, section 3.3 of Vaswani et al., 2017.

    `FFN(x) = max(0, x W1 + b1) W2 + b2`, inner width `dff`. The residual
    connection and layer norm around it belong to `EncoderLayer`/`DecoderLayer`.

    Args:
        d_model: input and output width.
        dff: inner width.

    Call arguments:
        x: `(batch, seq_len, d_model)`.

    Returns:
        `(batch, seq_len, d_model)`.
    """

    def __init__(self, d_model, dff, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("d_model", d_model)
        check_positive_int("dff", dff)
        self.d_model = d_model
        self.dff = dff
        policy = self.dtype_policy
        self.dense1 = keras.layers.Dense(dff, activation="relu", dtype=policy, name="dense1")
        self.dense2 = keras.layers.Dense(d_model, dtype=policy, name="dense2")

    def build(self, input_shape):
        self.dense1.build(input_shape)
        self.dense2.build((*tuple(input_shape)[:-1], self.dff))
        self.built = True

    def call(self, x):
        x = self.dense1(x)  # (batch, seq_len, dff)
        return self.dense2(x)  # (batch, seq_len, d_model)

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape)[:-1], self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update({"d_model": self.d_model, "dff": self.dff})
        return config


class _LayerBase(ResidualBlock):
    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, normalize_first=False,
                 **kwargs):
        super().__init__(d_model, num_heads, dropout_rate, normalize_first, **kwargs)
        check_positive_int("dff", dff)
        self.dff = dff
        policy = self.dtype_policy
        self.ffn = FeedForward(d_model, dff, dtype=policy, name="ffn")
        self.ffn_dropout = seams.Dropout(dropout_rate, dtype=policy)
        self.ffn_layernorm = seams.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=policy, name="ffn_layernorm"
        )

    def _build_ffn(self, x_shape):
        self.ffn.build(x_shape)
        self.ffn_layernorm.build(x_shape)

    def _ffn_block(self, x, training):
        h = sublayer_input(self.ffn_layernorm, x, self.normalize_first)
        return sublayer_output(
            self.ffn_layernorm, x, self.ffn_dropout(self.ffn(h), training=training),
            self.normalize_first,
        )  # (batch, seq_len, d_model)

    def get_config(self):
        return {**super().get_config(), "dff": self.dff}


@keras.saving.register_keras_serializable(package="transformer")
class EncoderLayer(_LayerBase):
    """One encoder layer, section 3.1: self-attention, then the feed-forward network.

    Args:
        d_model, num_heads, dff, dropout_rate: as in the paper.
        normalize_first: pre-norm sublayers instead of the paper's post-norm.

    Call arguments:
        x: `(batch, seq_len, d_model)`.
        padding_mask: optional `(batch, 1, 1, seq_len)`, 1 at padding keys
            (not allowed).
        training: whether dropout is active.

    Returns:
        `(output, attention_weights)`: `(batch, seq_len, d_model)` and
        `(batch, num_heads, seq_len, seq_len)`.

    Example:

    >>> layer = EncoderLayer(d_model=16, num_heads=2, dff=32)
    >>> out, weights = layer(ops.ones((1, 5, 16)))
    >>> tuple(out.shape), tuple(weights.shape)
    ((1, 5, 16), (1, 2, 5, 5))
    """

    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, normalize_first=False,
                 **kwargs):
        super().__init__(d_model, num_heads, dff, dropout_rate, normalize_first, **kwargs)
        self.self_attention = EncoderSelfAttention(
            d_model, num_heads, dropout_rate, self.normalize_first, dtype=self.dtype_policy,
            name="self_attention",
        )

    def build(self, x_shape):
        self.self_attention.build(x_shape)
        self._build_ffn(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=None):
        x, weights = self.self_attention(x, padding_mask=padding_mask, training=training)
        return self._ffn_block(x, training), weights  # (batch, seq_len, d_model)


@keras.saving.register_keras_serializable(package="transformer")
class DecoderLayer(_LayerBase):
    """One decoder layer, section 3.1: masked self-attention, encoder-decoder
    attention, then the feed-forward network.

    Call arguments:
        x: `(batch, target_len, d_model)`, the embedded right-shifted target.
        context: encoder output `(batch, input_len, d_model)`.
        look_ahead_mask: optional extra self-attention mask broadcastable to
            `(batch, 1, target_len, target_len)` (e.g. target padding); the
            look-ahead (future) mask is always applied. 1 = not allowed.
        padding_mask: optional `(batch, 1, 1, input_len)`, 1 at source padding.
        training: whether dropout is active.
        cache: optional, for incremental decoding: a dict with `"self"`, the
            masked self-attention's keys and values of the earlier positions,
            and `"cross"`, the encoder output's projected keys and values (see
            `MaskedDecoderSelfAttention` and `EncoderDecoderAttention`). `x` is
            then the newest position only, `(batch, d_model)`, `context` is
            not used, and `look_ahead_mask` is the target-padding mask over the
            cached positions and the new one.

    Returns:
        `(output, block1_weights, block2_weights)`: `(batch, target_len, d_model)`,
        the masked self-attention weights `(batch, heads, target_len,
        target_len)` and the encoder-decoder weights `(batch, heads, target_len,
        input_len)`; with a cache, `(output, block1_weights, block2_weights,
        cache)` with the cache updated.

    Example (a target of 3 tokens reading a source of 5):

    >>> layer = DecoderLayer(d_model=16, num_heads=2, dff=32)
    >>> out, block1, block2 = layer(ops.ones((1, 3, 16)), ops.ones((1, 5, 16)))
    >>> tuple(out.shape), tuple(block1.shape), tuple(block2.shape)
    ((1, 3, 16), (1, 2, 3, 3), (1, 2, 3, 5))
    """

    def __init__(self, d_model, num_heads, dff, dropout_rate=0.1, normalize_first=False,
                 **kwargs):
        super().__init__(d_model, num_heads, dff, dropout_rate, normalize_first, **kwargs)
        policy = self.dtype_policy
        self.causal_self_attention = MaskedDecoderSelfAttention(
            d_model, num_heads, dropout_rate, self.normalize_first, dtype=policy,
            name="causal_self_attention",
        )
        self.cross_attention = EncoderDecoderAttention(
            d_model, num_heads, dropout_rate, self.normalize_first, dtype=policy,
            name="cross_attention",
        )

    def build(self, x_shape, context_shape):
        self.causal_self_attention.build(x_shape)
        self.cross_attention.build(x_shape, context_shape)
        self._build_ffn(x_shape)
        self.built = True

    def call(
        self, x, context=None, look_ahead_mask=None, padding_mask=None, training=None, cache=None
    ):
        if cache is not None:
            return self._call_cached(x, look_ahead_mask, padding_mask, training, cache)
        x, block1 = self.causal_self_attention(
            x, padding_mask=look_ahead_mask, training=training
        )  # (batch, target_len, d_model)
        x, block2 = self.cross_attention(
            x, context, padding_mask=padding_mask, training=training
        )  # (batch, target_len, d_model)
        return self._ffn_block(x, training), block1, block2

    def _call_cached(self, x, look_ahead_mask, padding_mask, training, cache):
        """The same three sublayers for one new position, with its caches."""
        x, block1, self_cache = self.causal_self_attention(
            x, padding_mask=look_ahead_mask, training=training, cache=cache["self"]
        )  # (batch, d_model)
        x, block2, cross_cache = self.cross_attention(
            x, padding_mask=padding_mask, training=training, cache=cache["cross"]
        )  # (batch, d_model)
        cache = {"self": self_cache, "cross": cross_cache}
        return self._ffn_block(x, training), block1, block2, cache

    def initial_cache(self, context):
        """The cache before the first token: no self-attention positions yet, and
        the encoder output `context` projected once for encoder-decoder attention."""
        batch_size = ops.shape(context)[0]
        return {
            "self": self.causal_self_attention.mha.empty_cache(batch_size),
            "cross": self.cross_attention.mha.project_keys_values(context, context),
        }
