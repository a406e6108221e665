"""Interoperability with `keras.layers.MultiHeadAttention`.

Our `MultiHeadAttention` and Keras's compute the same numbers given the same
weights; these functions move trained weights between the two. Remember that
the masks point opposite ways: Keras's `attention_mask` is `1 - mask` of ours
(`transformer.masking.to_keras_attention_mask`).
"""

from __future__ import annotations

import keras
import numpy as np


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


def _keras_output_width(theirs, query_width):
    """The width of Keras's output: its `output_shape`, or else the query's width."""
    output_shape = theirs.get_config().get("output_shape")
    if output_shape is None:
        return query_width
    return int(output_shape if isinstance(output_shape, int) else output_shape[-1])


def _build_keras_from(ours, theirs):
    if theirs.built:
        width = int(theirs.output_dense.kernel.shape[-1])
    else:
        width = _keras_output_width(theirs, int(ours.wq.kernel.shape[0]))
    if width != ours.d_model:
        # Checked before any weight is copied, so neither layer is left half-copied.
        raise ValueError(
            f"Keras's layer outputs {width} features, ours d_model={ours.d_model}. Keras "
            "sizes its output like the query unless `output_shape` is given: create it "
            f"with `output_shape={ours.d_model}`."
        )
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
    width = int(keras_mha.output_dense.kernel.shape[-1])
    if width != ours.d_model:
        raise ValueError(
            f"Keras's layer outputs {width} features, ours d_model={ours.d_model}."
        )
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
