"""Attention masks. One convention, everywhere: 1 marks a position that may NOT be attended.

A mask holds 1 where attention is not allowed (a padding key or a future
position) and 0 where it is, and broadcasts to `(batch, heads, seq_q, seq_k)`.
`scaled_dot_product_attention` adds `mask * big_negative` to the logits.

This is the OPPOSITE of `keras.layers.MultiHeadAttention`'s `attention_mask`
(where 1 / True means "may attend"). To pass one of our masks to Keras, use
`1 - mask` (see `to_keras_attention_mask`).
"""

from __future__ import annotations

from keras import ops

from transformer.constants import PAD_ID


def create_padding_mask(seq):
    """Masks the padding tokens (id 0) of a batch of token ids.

    Args:
        seq: int tokens of shape `(batch, seq_len)`.

    Returns:
        float32 tensor of shape `(batch, 1, 1, seq_len)`: 1 where `seq == 0`
        (a padding key, not allowed), 0 elsewhere. It broadcasts over heads and
        query positions.

    Example:

    >>> import numpy as np
    >>> mask = create_padding_mask(np.array([[7, 6, 0, 0, 1]]))
    >>> tuple(mask.shape)  # (batch, 1, 1, seq_len): the same for every head and query
    (1, 1, 1, 5)
    >>> ops.convert_to_numpy(mask[0, 0, 0])
    array([0., 0., 1., 1., 0.], dtype=float32)
    """
    mask = ops.cast(ops.equal(seq, PAD_ID), "float32")  # (batch, seq_len)
    return mask[:, None, None, :]  # (batch, 1, 1, seq_len)


def create_look_ahead_mask(size):
    """Masks the future: position i may not attend to any position j > i.

    Args:
        size: sequence length (an int or a scalar tensor).

    Returns:
        float32 tensor of shape `(size, size)` with 1 strictly above the diagonal.

    Example:

    >>> ops.convert_to_numpy(create_look_ahead_mask(3))
    array([[0., 1., 1.],
           [0., 0., 1.],
           [0., 0., 0.]], dtype=float32)
    """
    ones = ops.ones((size, size), dtype="float32")
    return 1.0 - ops.tril(ones)  # (size, size)


def create_decoder_mask(tar):
    """The decoder's self-attention mask: look-ahead combined with target padding.

    Args:
        tar: int target tokens of shape `(batch, tar_len)`.

    Returns:
        float32 tensor of shape `(batch, 1, tar_len, tar_len)`; 1 where the key is
        in the future or is padding.

    Example (`[START] the [END] [PAD]`: no query sees the padding):

    >>> import numpy as np
    >>> ops.convert_to_numpy(create_decoder_mask(np.array([[2, 7, 3, 0]]))[0, 0])
    array([[0., 1., 1., 1.],
           [0., 0., 1., 1.],
           [0., 0., 0., 1.],
           [0., 0., 0., 1.]], dtype=float32)
    """
    tar = ops.convert_to_tensor(tar)
    look_ahead = create_look_ahead_mask(ops.shape(tar)[1])  # (tar_len, tar_len)
    padding = create_padding_mask(tar)  # (batch, 1, 1, tar_len)
    return ops.maximum(padding, look_ahead)  # (batch, 1, tar_len, tar_len)


def create_masks(inp, tar):
    """All three masks of the model, as in the tutorial.

    Args:
        inp: int source tokens `(batch, inp_len)`.
        tar: int target tokens fed to the decoder `(batch, tar_len)`.

    Returns:
        `(enc_padding_mask, combined_mask, dec_padding_mask)`:
        the encoder self-attention mask `(batch, 1, 1, inp_len)`, the decoder
        self-attention mask `(batch, 1, tar_len, tar_len)` and the
        encoder-decoder attention mask `(batch, 1, 1, inp_len)` (source padding).

    Example:

    >>> import numpy as np
    >>> masks = create_masks(np.array([[5, 6, 7, 0, 0]]), np.array([[2, 8, 9]]))
    >>> [tuple(mask.shape) for mask in masks]
    [(1, 1, 1, 5), (1, 1, 3, 3), (1, 1, 1, 5)]
    """
    enc_padding_mask = create_padding_mask(inp)
    combined_mask = create_decoder_mask(tar)
    dec_padding_mask = create_padding_mask(inp)
    return enc_padding_mask, combined_mask, dec_padding_mask


def to_keras_attention_mask(mask):
    """Converts one of our masks (1 = not allowed) to Keras's (True = may attend).

    `keras.layers.MultiHeadAttention(attention_mask=...)` uses the opposite
    convention; passing our mask unconverted lets every query attend to exactly
    the padding and future positions, the best-known bug of the tutorial's users.
    """
    return ops.equal(mask, 0)
