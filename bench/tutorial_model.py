"""The TensorFlow tutorial's Transformer as the tutorial builds it, for `bench/tutorial_recipe.py`.

`bench/reference_keras_mha.py` is our architecture on `keras.layers.MultiHeadAttention`
(equal math with our model, explicit masks). This file is the tutorial's own
layout instead, so that the recipe can be measured the way the tutorial runs
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

Not part of the library: nothing in `transformer/` imports this file.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

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
