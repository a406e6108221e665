import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_checks import D_MODEL, MAX_LENGTH, TARGET_TOKENS, VOCAB, check_layer

from transformer import PositionalEmbedding, positional_encoding


def test_positional_encoding_matches_paper_formula_in_float64():
    length, depth = 50, 16
    pe = positional_encoding(length, depth)
    assert pe.shape == (length, depth) and pe.dtype == np.float32
    for pos in (0, 1, 7, 49):
        for i in range(depth // 2):
            angle = pos / 10000 ** (2 * i / depth)
            assert pe[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)


def test_positional_encoding_first_row_is_sin0_cos0_interleaved():
    pe = positional_encoding(3, 6)
    np.testing.assert_array_equal(pe[0], [0, 1, 0, 1, 0, 1])


def test_positional_encoding_odd_depth():
    pe = positional_encoding(4, 5)
    assert pe.shape == (4, 5)
    assert pe[2, 4] == pytest.approx(np.sin(2 / 10000 ** (4 / 5)), abs=1e-6)


@pytest.mark.parametrize("length,depth", [(0, 4), (4, 0), (-1, 4), (2.5, 4)])
def test_positional_encoding_rejects_bad_sizes(length, depth):
    with pytest.raises(ValueError, match="expected a positive integer"):
        positional_encoding(length, depth)


def test_positional_embedding_scales_and_adds_encoding():
    keras.utils.set_random_seed(1)
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10)
    tokens = np.array([[3, 4, 5], [0, 1, 2]])
    out = layer(tokens).numpy()
    table = layer.embedding.embeddings.numpy()
    expected = table[tokens] * np.sqrt(8) + positional_encoding(10, 8)[:3]
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_positional_embedding_start_position_offsets_the_encoding():
    keras.utils.set_random_seed(1)
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=10)
    full = layer(np.array([[3, 4, 5]])).numpy()
    last = layer(np.array([[5]]), start_position=2).numpy()
    np.testing.assert_allclose(last[0, 0], full[0, 2], rtol=1e-6)
    step = tf.function(lambda t, p: layer(t, start_position=p))
    np.testing.assert_allclose(step(tf.constant([[5]]), tf.constant(2))[0, 0], full[0, 2], rtol=1e-6)


def test_positional_embedding_too_long_input_names_both_lengths():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=4)
    with pytest.raises(ValueError, match=r"length 6.*`max_length`=4"):
        layer(np.ones((1, 6), dtype="int32"))


def test_positional_embedding_too_long_input_in_graph_mode_is_clear():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=4)
    fn = tf.function(layer, input_signature=[tf.TensorSpec((None, None), tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than `max_length`=4"):
        fn(tf.ones((1, 6), tf.int32))


def test_positional_embedding_passes_the_layer_checks():
    """Config round trip and saving (tests/layer_checks.py); no dropout of its own
    (the `Encoder` and `Decoder` drop out after it)."""
    layer = check_layer(lambda: PositionalEmbedding(VOCAB, D_MODEL, MAX_LENGTH, name="pe"),
                        (TARGET_TOKENS,), dropout=False, not_in_config=("embedding",))
    assert (layer.vocab_size, layer.d_model, layer.max_length) == (VOCAB, D_MODEL, MAX_LENGTH)
