"""The two reference models of the benchmarks, both on `keras.layers.MultiHeadAttention`.

- `KerasMHATransformer`: this project's architecture and math on Keras' layers,
  the model `bench/train_speed.py keras` races against and
  `bench/tutorial_recipe.py` trains by default;
- `TutorialTransformer`: the TensorFlow tutorial's own layout, which
  `bench/tutorial_recipe.py --model tutorial` trains.

Not part of the library: nothing in `transformer/` imports this file.

## KerasMHATransformer

The model `bench/train_speed.py keras` races against (docs/design.md, "Precision and
speed"). It is written in the Keras-layer style of the current TensorFlow
tutorial ("Neural machine translation with a Transformer and Keras"): every
attention sublayer is a `keras.layers.MultiHeadAttention(num_heads,
key_dim=d_model // num_heads)`, the decoder's self-attention uses
`use_causal_mask=True`, and residual sums go through `keras.layers.Add`.

Where the tutorial and our model differ, the reference follows our model, so
that both compute the same function with the same number of FLOPs ("equal
math"):

- post-norm sublayers `LayerNorm(x + Dropout(sublayer(x)))`, epsilon 1e-6, with
  the dropout on the sublayer output (the tutorial puts no dropout after
  attention and drops the attention weights instead; ours does not drop the
  weights, so Keras's `dropout` is 0 here);
- the same feed-forward network `Dense(dff, relu) -> Dense(d_model)`;
- token embedding times `sqrt(d_model)` plus the paper's interleaved sinusoidal
  encoding, then dropout;
- the same final `Dense(target_vocab_size)`, logits cast to float32;
- masks passed explicitly in Keras's convention (True = may attend), built from
  the token ids (0 = padding) - the opposite of our convention (1 = not
  allowed). `bench/train_speed.py keras` checks at start-up that, given our weights,
  this model's logits equal ours.

## TutorialTransformer

The tutorial's own layout, so that the recipe can be measured the way the tutorial runs
it under the installed Keras:

- `PositionalEmbedding`: `Embedding(mask_zero=True)` times `sqrt(d_model)` plus
  sinusoids laid out as `[sin | cos]` (concatenated halves, not interleaved) for
  2,048 positions; it passes the embedding's padding mask on through
  `compute_mask`;
- each attention sublayer is `LayerNorm(x + MHA(x, ...))` with
  `MultiHeadAttention(num_heads, key_dim=d_model, dropout=dropout_rate)`: the
  dropout is on the attention weights and there is none on the sublayer's
  output; the decoder's self-attention uses `use_causal_mask=True`;
- the feed-forward sublayer is `LayerNorm(x + Dropout(Dense(d_model)(Dense(dff, relu)(x))))`;
- the encoder and the decoder drop out after the positional embedding;
- no mask is passed by hand: every padding mask comes from Keras's implicit
  mask propagation. Keras 3 drops it at the first custom layer that does not
  declare mask support (it warns that the layer "will therefore destroy the
  mask information"), which is what the tutorial's code does when run under
  Keras 3. The loss and the accuracy mask the padding themselves.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from transformer.constants import LAYER_NORM_EPSILON, PAD_ID
from transformer.positional import positional_encoding


class RefPositionalEmbedding(keras.layers.Layer):
    """`Embedding(x) * sqrt(d_model) + PE[:seq_len]`, as the tutorial's `PositionalEmbedding`."""

    def __init__(self, vocab_size, d_model, max_length, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.embedding = keras.layers.Embedding(vocab_size, d_model, dtype=self.dtype_policy)
        self.pos_encoding = positional_encoding(max_length, d_model)  # (max_length, d_model)

    def call(self, x):
        length = tf.shape(x)[1]
        x = self.embedding(x)  # (batch, seq_len, d_model)
        x = x * tf.cast(math.sqrt(self.d_model), x.dtype)
        encoding = tf.constant(self.pos_encoding, dtype=x.dtype)[:length]  # (seq_len, d_model)
        return x + encoding[tf.newaxis]  # (batch, seq_len, d_model)


class RefFeedForward(keras.layers.Layer):
    """`LayerNorm(x + Dropout(Dense(d_model)(Dense(dff, relu)(x))))`: the tutorial's
    `FeedForward`."""

    def __init__(self, d_model, dff, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.seq = keras.Sequential(
            [
                keras.layers.Dense(dff, activation="relu", dtype=policy),
                keras.layers.Dense(d_model, dtype=policy),
                keras.layers.Dropout(dropout_rate, dtype=policy),
            ]
        )
        self.add = keras.layers.Add(dtype=policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype=policy)

    def call(self, x, training=None):
        return self.layer_norm(self.add([x, self.seq(x, training=training)]))


class RefAttention(keras.layers.Layer):
    """`LayerNorm(x + Dropout(MHA(x, context)))` on `keras.layers.MultiHeadAttention`.

    `attention_mask` is in Keras's convention: True where attention IS allowed.
    """

    def __init__(self, d_model, num_heads, dropout_rate, causal=False, key_dim=None, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.causal = causal
        self.mha = keras.layers.MultiHeadAttention(
            num_heads=num_heads, key_dim=key_dim or d_model // num_heads, dtype=policy
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.add = keras.layers.Add(dtype=policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype=policy)

    def call(self, x, context, attention_mask, training=None):
        attn = self.mha(
            query=x,
            value=context,
            key=context,
            attention_mask=attention_mask,
            use_causal_mask=self.causal,
            training=training,
        )  # (batch, seq_len_q, d_model)
        return self.layer_norm(self.add([x, self.dropout(attn, training=training)]))


class RefEncoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, dff, dropout_rate, key_dim=None, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.self_attention = RefAttention(
            d_model, num_heads, dropout_rate, key_dim=key_dim, dtype=policy
        )
        self.ffn = RefFeedForward(d_model, dff, dropout_rate, dtype=policy)

    def call(self, x, mask, training=None):
        x = self.self_attention(x, x, mask, training=training)  # (batch, input_len, d_model)
        return self.ffn(x, training=training)


class RefDecoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, dff, dropout_rate, key_dim=None, **kwargs):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.causal_self_attention = RefAttention(
            d_model, num_heads, dropout_rate, causal=True, key_dim=key_dim, dtype=policy
        )
        self.cross_attention = RefAttention(
            d_model, num_heads, dropout_rate, key_dim=key_dim, dtype=policy
        )
        self.ffn = RefFeedForward(d_model, dff, dropout_rate, dtype=policy)

    def call(self, x, context, self_mask, cross_mask, training=None):
        x = self.causal_self_attention(x, x, self_mask, training=training)
        x = self.cross_attention(x, context, cross_mask, training=training)
        return self.ffn(x, training=training)  # (batch, target_len, d_model)


class KerasMHATransformer(keras.Model):
    """The reference Transformer; `call((context, x), training)` -> float32 logits.

    Same constructor arguments and call contract as `transformer.Transformer`,
    plus `key_dim`: the per-head depth of every attention layer. None (the
    default) is `d_model // num_heads`, the paper's and ours (equal math);
    `key_dim=d_model` is the TensorFlow tutorial's, whose query/key/value
    projections are then `num_heads` times wider (d_model -> num_heads *
    d_model) and whose output projection maps `num_heads * d_model` back to
    `d_model`.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        max_length=2048,
        dropout_rate=0.1,
        key_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.key_dim = key_dim
        self.enc_embedding = RefPositionalEmbedding(
            input_vocab_size, d_model, max_length, dtype=policy
        )
        self.dec_embedding = RefPositionalEmbedding(
            target_vocab_size, d_model, max_length, dtype=policy
        )
        self.enc_dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.dec_dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.enc_layers = [
            RefEncoderLayer(d_model, num_heads, dff, dropout_rate, key_dim=key_dim, dtype=policy)
            for _ in range(num_layers)
        ]
        self.dec_layers = [
            RefDecoderLayer(d_model, num_heads, dff, dropout_rate, key_dim=key_dim, dtype=policy)
            for _ in range(num_layers)
        ]
        self.final_layer = keras.layers.Dense(target_vocab_size, dtype=policy, name="final_layer")

    def call(self, inputs, training=None):
        context_tokens, x_tokens = inputs
        # Keras's convention: True where a key may be attended.
        src_keep = tf.not_equal(context_tokens, PAD_ID)[:, tf.newaxis, :]  # (batch, 1, input_len)
        tgt_keep = tf.not_equal(x_tokens, PAD_ID)[:, tf.newaxis, :]  # (batch, 1, target_len)
        context = self.enc_dropout(self.enc_embedding(context_tokens), training=training)
        for layer in self.enc_layers:
            context = layer(context, src_keep, training=training)  # (batch, input_len, d_model)
        x = self.dec_dropout(self.dec_embedding(x_tokens), training=training)
        for layer in self.dec_layers:
            x = layer(x, context, tgt_keep, src_keep, training=training)
        logits = self.final_layer(x)  # (batch, target_len, target_vocab_size)
        return tf.cast(logits, tf.float32)


def copy_weights_from_ours(ours, ref):
    """Copies a built `transformer.Transformer`'s weights into a built `KerasMHATransformer`.

    Used by the benchmark to check that both models compute the same logits.
    """
    from transformer.keras_interop import copy_weights_to_keras

    def dense(src, dst):
        dst.kernel.assign(src.kernel)
        dst.bias.assign(src.bias)

    def layer_norm(src, dst):
        dst.gamma.assign(src.gamma)
        dst.beta.assign(src.beta)

    def block(src, dst):  # an _AttentionBlock and a RefAttention
        copy_weights_to_keras(src.mha, dst.mha)
        layer_norm(src.layernorm, dst.layer_norm)

    def ffn(src_layer, dst):
        dense(src_layer.ffn.dense1, dst.seq.layers[0])
        dense(src_layer.ffn.dense2, dst.seq.layers[1])
        layer_norm(src_layer.ffn_layernorm, dst.layer_norm)

    ref.enc_embedding.embedding.embeddings.assign(
        ours.encoder.pos_embedding.embedding.embeddings
    )
    ref.dec_embedding.embedding.embeddings.assign(
        ours.decoder.pos_embedding.embedding.embeddings
    )
    for src, dst in zip(ours.encoder.enc_layers, ref.enc_layers, strict=True):
        block(src.self_attention, dst.self_attention)
        ffn(src, dst.ffn)
    for src, dst in zip(ours.decoder.dec_layers, ref.dec_layers, strict=True):
        block(src.causal_self_attention, dst.causal_self_attention)
        block(src.cross_attention, dst.cross_attention)
        ffn(src, dst.ffn)
    dense(ours.final_layer, ref.final_layer)
    return ref


def tutorial_masked_loss(label_smoothing=0.0):
    """The reference's loss: the tutorial's `masked_loss`, at our label smoothing.

    As in the tutorial, a Keras cross-entropy loss object with `reduction=None`
    gives every token's loss, padding (id 0) is multiplied away, and the sum is
    divided by the number of real tokens. The tutorial uses
    `SparseCategoricalCrossentropy` without label smoothing; with smoothing
    (train.py's default 0.1, equal math with ours) Keras's way is
    `CategoricalCrossentropy(label_smoothing=...)` on one-hot labels.
    """
    if label_smoothing:
        loss_object = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=label_smoothing, reduction=None)
    else:
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def masked_loss(label, pred):
        if label_smoothing:
            loss = loss_object(tf.one_hot(tf.cast(label, tf.int32), tf.shape(pred)[-1]), pred)
        else:
            loss = loss_object(label, pred)  # (batch, target_len)
        mask = tf.cast(label != PAD_ID, loss.dtype)
        return tf.reduce_sum(loss * mask) / tf.reduce_sum(mask)

    return masked_loss


# --- The tutorial's own layout ------------------------------------------------------------

TUTORIAL_POSITIONS = 2048  # the tutorial's positional table length


def concatenated_sinusoids(length, depth):
    """The tutorial's table: `[sin(pos / 10000^(2i/d)) | cos(...)]`, shape (length, depth)."""
    half = depth / 2
    positions = np.arange(length)[:, np.newaxis]  # (length, 1)
    rates = 1 / (10000 ** (np.arange(half)[np.newaxis, :] / half))  # (1, depth/2)
    angles = positions * rates  # (length, depth/2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1).astype("float32")


class TutorialPositionalEmbedding(keras.layers.Layer):
    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.embedding = keras.layers.Embedding(vocab_size, d_model, mask_zero=True)
        self.pos_encoding = tf.constant(concatenated_sinusoids(TUTORIAL_POSITIONS, d_model))

    def compute_mask(self, *args, **kwargs):
        return self.embedding.compute_mask(*args, **kwargs)

    def call(self, x):
        length = tf.shape(x)[1]
        x = self.embedding(x)  # (batch, seq, d_model)
        x *= tf.math.sqrt(tf.cast(self.d_model, tf.float32))
        return x + self.pos_encoding[tf.newaxis, :length, :]


class TutorialAttention(keras.layers.Layer):
    """`LayerNorm(x + MHA(query=x, key/value=context))`, no dropout on the output."""

    def __init__(self, num_heads, key_dim, dropout, causal=False, **kwargs):
        super().__init__(**kwargs)
        self.causal = causal
        self.mha = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim,
                                                   dropout=dropout)
        self.layernorm = keras.layers.LayerNormalization()
        self.add = keras.layers.Add()

    def call(self, x, context=None):
        context = x if context is None else context
        attended = self.mha(query=x, value=context, key=context, use_causal_mask=self.causal)
        return self.layernorm(self.add([x, attended]))


class TutorialFeedForward(keras.layers.Layer):
    def __init__(self, d_model, dff, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.seq = keras.Sequential([
            keras.layers.Dense(dff, activation="relu"),
            keras.layers.Dense(d_model),
            keras.layers.Dropout(dropout_rate),
        ])
        self.add = keras.layers.Add()
        self.layer_norm = keras.layers.LayerNormalization()

    def call(self, x):
        return self.layer_norm(self.add([x, self.seq(x)]))


class TutorialEncoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, dff, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.self_attention = TutorialAttention(num_heads, d_model, dropout_rate)
        self.ffn = TutorialFeedForward(d_model, dff, dropout_rate)

    def call(self, x):
        return self.ffn(self.self_attention(x))


class TutorialDecoderLayer(keras.layers.Layer):
    def __init__(self, d_model, num_heads, dff, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.causal_self_attention = TutorialAttention(num_heads, d_model, dropout_rate,
                                                        causal=True)
        self.cross_attention = TutorialAttention(num_heads, d_model, dropout_rate)
        self.ffn = TutorialFeedForward(d_model, dff, dropout_rate)

    def call(self, x, context):
        x = self.causal_self_attention(x)
        x = self.cross_attention(x, context)
        return self.ffn(x)


class TutorialEncoder(keras.layers.Layer):
    def __init__(self, num_layers, d_model, num_heads, dff, vocab_size, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.pos_embedding = TutorialPositionalEmbedding(vocab_size, d_model)
        self.enc_layers = [TutorialEncoderLayer(d_model, num_heads, dff, dropout_rate)
                           for _ in range(num_layers)]
        self.dropout = keras.layers.Dropout(dropout_rate)

    def call(self, x):
        x = self.dropout(self.pos_embedding(x))  # (batch, src, d_model)
        for layer in self.enc_layers:
            x = layer(x)
        return x


class TutorialDecoder(keras.layers.Layer):
    def __init__(self, num_layers, d_model, num_heads, dff, vocab_size, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.pos_embedding = TutorialPositionalEmbedding(vocab_size, d_model)
        self.dropout = keras.layers.Dropout(dropout_rate)
        self.dec_layers = [TutorialDecoderLayer(d_model, num_heads, dff, dropout_rate)
                           for _ in range(num_layers)]

    def call(self, x, context):
        x = self.dropout(self.pos_embedding(x))  # (batch, tgt, d_model)
        for layer in self.dec_layers:
            x = layer(x, context)
        return x


class TutorialTransformer(keras.Model):
    """`Transformer((context, x)) -> logits`, laid out as the tutorial's `Transformer`."""

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 target_vocab_size, dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.encoder = TutorialEncoder(num_layers, d_model, num_heads, dff,
                                        input_vocab_size, dropout_rate)
        self.decoder = TutorialDecoder(num_layers, d_model, num_heads, dff,
                                        target_vocab_size, dropout_rate)
        self.final_layer = keras.layers.Dense(target_vocab_size)

    def call(self, inputs):
        context, x = inputs
        context = self.encoder(context)  # (batch, src, d_model)
        x = self.decoder(x, context)  # (batch, tgt, d_model)
        logits = self.final_layer(x)  # (batch, tgt, target_vocab)
        try:  # as the tutorial: keep Keras from scaling the loss by a leftover mask
            del logits._keras_mask
        except AttributeError:
            pass
        return logits
