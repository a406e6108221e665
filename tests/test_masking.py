import numpy as np
import tensorflow as tf

from transformer import (
    create_decoder_mask,
    create_look_ahead_mask,
    create_masks,
    create_padding_mask,
    to_keras_attention_mask,
)


def test_padding_mask_tutorial_example():
    x = tf.constant([[7, 6, 0, 0, 1], [1, 2, 3, 0, 0], [0, 0, 0, 4, 5]])
    mask = create_padding_mask(x)
    assert mask.shape == (3, 1, 1, 5)
    np.testing.assert_array_equal(
        mask.numpy(),
        [[[[0, 0, 1, 1, 0]]], [[[0, 0, 0, 1, 1]]], [[[1, 1, 1, 0, 0]]]],
    )


def test_look_ahead_mask_tutorial_example():
    np.testing.assert_array_equal(
        create_look_ahead_mask(3).numpy(), [[0, 1, 1], [0, 0, 1], [0, 0, 0]]
    )


def test_decoder_mask_combines_future_and_padding():
    tar = tf.constant([[2, 5, 0]])
    mask = create_decoder_mask(tar).numpy()
    assert mask.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(mask[0, 0], [[0, 1, 1], [0, 0, 1], [0, 0, 1]])


def test_create_masks_shapes():
    enc, combined, dec = create_masks(tf.constant([[4, 5, 0, 0]]), tf.constant([[2, 6, 7]]))
    assert enc.shape == (1, 1, 1, 4)
    assert combined.shape == (1, 1, 3, 3)
    assert dec.shape == (1, 1, 1, 4)


def test_to_keras_attention_mask_inverts():
    ours = create_look_ahead_mask(2)
    np.testing.assert_array_equal(to_keras_attention_mask(ours).numpy(), [[True, False], [True, True]])
