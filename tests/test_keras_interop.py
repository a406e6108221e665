"""Tests of transformer/keras_interop.py beyond the round trips in test_attention.py."""

import keras
import numpy as np
import pytest

from transformer import MultiHeadAttention
from transformer.keras_interop import copy_weights_from_keras, copy_weights_to_keras


def test_query_wider_than_d_model_needs_keras_output_shape():
    keras.utils.set_random_seed(0)
    q = np.random.RandomState(0).randn(2, 3, 5).astype("float32")  # query width 5
    kv = np.random.RandomState(1).randn(2, 4, 6).astype("float32")
    ours = MultiHeadAttention(d_model=8, num_heads=2)
    ours(q, kv, kv)
    plain = keras.layers.MultiHeadAttention(2, key_dim=4)  # would output 5 features
    with pytest.raises(ValueError, match="output_shape=8"):
        copy_weights_to_keras(ours, plain)
    assert not plain.built  # nothing was copied or built before the error
    theirs = copy_weights_to_keras(ours, keras.layers.MultiHeadAttention(
        2, key_dim=4, output_shape=8))
    np.testing.assert_allclose(theirs(q, kv, kv), ours(q, kv, kv)[0], atol=1e-5)


def test_copy_from_keras_rejects_another_output_width():
    theirs = keras.layers.MultiHeadAttention(2, key_dim=4)
    x = np.zeros((1, 3, 5), "float32")
    theirs(x, x)  # outputs 5 features
    with pytest.raises(ValueError, match="outputs 5 features, ours d_model=8"):
        copy_weights_from_keras(theirs, MultiHeadAttention(d_model=8, num_heads=2))
