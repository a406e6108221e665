"""Positional encoding and the positional embedding (section 3.5 of Vaswani et al., 2017).

The encoding is the paper's, with sines and cosines interleaved::

    PE[pos, 2i]   = sin(pos / 10000^(2i / depth))
    PE[pos, 2i+1] = cos(pos / 10000^(2i / depth))
"""

from __future__ import annotations

import contextlib
import math

import keras
import numpy as np
from keras import ops

from transformer import seams
from transformer._validation import check_positive_int
from transformer.constants import DEFAULT_MAX_LENGTH


def positional_encoding(length: int, depth: int) -> np.ndarray:
    """Returns the paper's sinusoidal positional encoding (section 3.5).

    Even columns hold sines and odd columns cosines of the same frequency, as in
    the paper and the from-scratch tutorial (not the concatenated layout of the
    newer tutorial).

    Args:
        length: number of positions, a positive integer.
        depth: encoding width (usually `d_model`), a positive integer.

    Returns:
        A float32 numpy array of shape `(length, depth)`.

    Example:

    >>> pe = positional_encoding(50, 512)
    >>> pe.shape
    (50, 512)
    >>> float(pe[0, 0]), float(pe[0, 1])   # sin(0), cos(0)
    (0.0, 1.0)
    """
    check_positive_int("length", length)
    check_positive_int("depth", depth)
    positions = np.arange(length, dtype=np.float64)[:, np.newaxis]  # (length, 1)
    dims = np.arange(depth)[np.newaxis, :]  # (1, depth)
    # Both members of a sin/cos pair share the frequency of their even index 2i.
    angle_rates = 1.0 / np.power(10000.0, (2 * (dims // 2)) / np.float64(depth))
    angles = positions * angle_rates  # (length, depth)
    encoding = np.empty_like(angles)
    encoding[:, 0::2] = np.sin(angles[:, 0::2])
    encoding[:, 1::2] = np.cos(angles[:, 1::2])
    return encoding.astype(np.float32)


@keras.saving.register_keras_serializable(package="transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding scaled by `sqrt(d_model)` plus the positional encoding.

    Section 3.4 ("we multiply those weights by sqrt(d_model)") and section 3.5 of
    Vaswani et al., 2017. Dropout is applied by the `Encoder` and `Decoder` after
    this layer, as the paper does.

    Args:
        vocab_size: size of the token vocabulary.
        d_model: embedding width.
        max_length: the longest sequence this layer accepts; the encoding table
            has this many rows.
        embedding: an existing `keras.layers.Embedding` of `vocab_size` x
            `d_model` to use instead of a new one, so that two layers share one
            weight matrix (section 3.4; `Transformer(tie_embeddings=True)`
            passes the encoder's). Not part of `get_config`: the layer that
            shares it rebuilds the sharing.

    Call arguments:
        x: int tokens of shape `(batch, seq_len)`.
        start_position: position of `x[:, 0]` (default 0). Incremental decoding
            feeds one token at a time and passes its position here.

    Returns:
        A tensor of shape `(batch, seq_len, d_model)`.

    Raises:
        ValueError: when `seq_len` (plus `start_position`) exceeds `max_length`,
            naming both lengths.

    Example:

    >>> layer = PositionalEmbedding(vocab_size=100, d_model=16, max_length=32)
    >>> tuple(layer(np.array([[5, 6, 7]])).shape)
    (1, 3, 16)
    """

    def __init__(self, vocab_size, d_model, max_length=DEFAULT_MAX_LENGTH, embedding=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_positive_int("max_length", max_length)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        if embedding is None:
            embedding = keras.layers.Embedding(
                vocab_size, d_model, dtype=self.dtype_policy, name="embedding"
            )
        elif (embedding.input_dim, embedding.output_dim) != (vocab_size, d_model):
            raise ValueError(
                "Received an `embedding` of the wrong size, expected "
                f"({vocab_size}, {d_model}) = (vocab_size, d_model). Received: "
                f"({embedding.input_dim}, {embedding.output_dim})"
            )
        self.embedding = embedding
        self.pos_encoding = positional_encoding(max_length, d_model)  # (max_length, d_model)
        self._scale = math.sqrt(d_model)

    def build(self, input_shape):
        if not self.embedding.built:  # a shared one may be built already
            self.embedding.build(input_shape)
        self.built = True

    def _check_length(self, seq_len, start_position):
        """The length check: a `ValueError` now when both numbers are Python
        ints (always, under JAX and PyTorch), else a TensorFlow assertion to
        run before the slice (a TensorFlow graph of unknown length)."""
        static_len = seq_len if isinstance(seq_len, int) else None
        static_start = start_position if isinstance(start_position, int) else None
        if static_len is not None and static_start is not None:
            if static_start + static_len > self.max_length:
                raise ValueError(
                    f"Received an input of length {static_start + static_len}, longer than "
                    f"`max_length`={self.max_length} of the positional embedding. Trim the "
                    "input or build the model with a larger `max_length`."
                )
            return contextlib.nullcontext()
        return seams.length_checked(
            ops.cast(start_position, "int32") + ops.cast(seq_len, "int32"), self.max_length,
            f"Received an input longer than `max_length`={self.max_length} of the positional "
            "embedding")

    def call(self, x, start_position=0):
        seq_len = ops.shape(x)[1]  # an int, or under TensorFlow a tensor when unknown
        # Everything waits for the length check, so a too-long input fails with
        # its message rather than with the slice's own error.
        with self._check_length(seq_len, start_position):
            x = self.embedding(x)  # (batch, seq_len, d_model)
            dtype = keras.backend.standardize_dtype(x.dtype)
            x = x * ops.cast(self._scale, dtype)
            encoding = ops.convert_to_tensor(self.pos_encoding, dtype=dtype)
            if isinstance(start_position, int) and isinstance(seq_len, int):
                encoding = encoding[start_position : start_position + seq_len]
            else:
                encoding = ops.slice(encoding, [start_position, 0], [seq_len, self.d_model])
            return x + encoding[None, :, :]  # (batch, seq_len, d_model)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"vocab_size": self.vocab_size, "d_model": self.d_model, "max_length": self.max_length}
        )
        return config
