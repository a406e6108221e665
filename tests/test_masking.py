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


def test_create_masks_values_on_a_padded_batch():
    # Source length 5, target length 4, both padded at the end (id 0).
    inp = tf.constant([[4, 5, 6, 0, 0], [7, 0, 0, 0, 0]])
    tar = tf.constant([[2, 6, 7, 0], [2, 8, 0, 0]])
    enc, combined, dec = create_masks(inp, tar)
    source_padding = np.array(
        [[[[0, 0, 0, 1, 1]]], [[[0, 1, 1, 1, 1]]]], dtype=np.float32
    )  # (2, 1, 1, 5): 1 at the source's padding keys
    combined_expected = np.array(
        [
            # Row i may see keys 0..i, never key 3 (padding).
            [[[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1]]],
            # Keys 2 and 3 are padding: no row may see them.
            [[[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]]],
        ],
        dtype=np.float32,
    )  # (2, 1, 4, 4)
    for mask in (enc, combined, dec):
        assert mask.dtype == tf.float32
    np.testing.assert_array_equal(enc.numpy(), source_padding)
    np.testing.assert_array_equal(combined.numpy(), combined_expected)
    # The encoder-decoder mask hides the SOURCE padding (not the target's).
    np.testing.assert_array_equal(dec.numpy(), source_padding)


def test_to_keras_attention_mask_inverts():
    ours = create_look_ahead_mask(2)
    np.testing.assert_array_equal(to_keras_attention_mask(ours).numpy(), [[True, False], [True, True]])
