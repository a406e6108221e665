import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_checks import (
    D_MODEL,
    DFF,
    NUM_HEADS,
    SOURCE_PADDING,
    SOURCE_STATES,
    TARGET_LEN,
    TARGET_PADDING,
    TARGET_STATES,
    check_layer,
)

from transformer import DecoderLayer, EncoderLayer, FeedForward, create_padding_mask


def test_feed_forward_is_relu_mlp():
    keras.utils.set_random_seed(0)
    ffn = FeedForward(d_model=8, dff=32)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    out = ffn(x).numpy()
    h = np.maximum(0, x @ ffn.dense1.kernel.numpy() + ffn.dense1.bias.numpy())
    ref = h @ ffn.dense2.kernel.numpy() + ffn.dense2.bias.numpy()
    np.testing.assert_allclose(out, ref, atol=1e-5)
    assert ffn.dense1.kernel.shape == (8, 32) and ffn.dense2.kernel.shape == (32, 8)


def test_encoder_layer_shapes_and_post_norm():
    keras.utils.set_random_seed(0)
    layer = EncoderLayer(d_model=16, num_heads=4, dff=32)
    x = tf.random.uniform((2, 7, 16))
    mask = create_padding_mask(tf.constant([[1] * 7, [1] * 5 + [0] * 2]))
    out, w = layer(x, padding_mask=mask)
    assert out.shape == (2, 7, 16) and w.shape == (2, 4, 7, 7)
    np.testing.assert_allclose(out.numpy().mean(-1), 0, atol=1e-5)
    np.testing.assert_array_equal(w.numpy()[1, :, :, 5:], 0)


def test_decoder_layer_shapes_with_different_lengths():
    keras.utils.set_random_seed(0)
    layer = DecoderLayer(d_model=16, num_heads=2, dff=32)
    x = tf.random.uniform((3, 4, 16))
    ctx = tf.random.uniform((3, 9, 16))
    out, block1, block2 = layer(x, ctx)
    assert out.shape == (3, 4, 16)
    assert block1.shape == (3, 2, 4, 4)
    assert block2.shape == (3, 2, 4, 9)
    np.testing.assert_array_equal(np.triu(block1.numpy()[0, 0], k=1), 0)


def test_feed_forward_passes_the_layer_checks():
    """Config round trip and saving (tests/layer_checks.py); no dropout of its own
    (the encoder and decoder layers drop out after it)."""
    check_layer(lambda: FeedForward(D_MODEL, DFF, name="ffn"), (TARGET_STATES,), dropout=False)


def _decoder_layer_steps(layer):
    cache, outputs = layer.initial_cache(SOURCE_STATES), []
    for t in range(TARGET_LEN):
        out, _, _, cache = layer(TARGET_STATES[:, t], look_ahead_mask=TARGET_PADDING[..., :t + 1],
                                 padding_mask=SOURCE_PADDING, training=False, cache=cache)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize(
    "cls,args,kwargs,cached_steps",
    [
        (EncoderLayer, (TARGET_STATES,), {"padding_mask": TARGET_PADDING}, None),
        (DecoderLayer, (TARGET_STATES, SOURCE_STATES),
         {"look_ahead_mask": TARGET_PADDING, "padding_mask": SOURCE_PADDING},
         _decoder_layer_steps),
    ],
    ids=["encoder_layer", "decoder_layer"],
)
def test_layers_pass_the_layer_checks(cls, args, kwargs, cached_steps):
    """Post-norm and pre-norm: config round trip, saving, dropout only in
    training and, for the decoder layer, the cached steps (tests/layer_checks.py)."""
    for normalize_first in (False, True):
        layer = check_layer(
            functools.partial(cls, D_MODEL, NUM_HEADS, DFF, 0.2, normalize_first, name="x"),
            args, kwargs, dropout=True, cached_steps=cached_steps,
        )
        assert (layer.d_model, layer.num_heads, layer.dff, layer.dropout_rate) == (
            D_MODEL, NUM_HEADS, DFF, 0.2)
        assert layer.normalize_first is normalize_first
    assert not cls(d_model=16, num_heads=4, dff=32).normalize_first  # the paper's by default


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"d_model": 16, "num_heads": 4, "dff": 0}, "dff=0"),
        ({"d_model": 15, "num_heads": 4, "dff": 8}, "divisor"),
        ({"d_model": 16, "num_heads": 4, "dff": 8, "dropout_rate": -0.1}, "dropout_rate"),
    ],
)
def test_layer_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EncoderLayer(**kwargs)


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + norm.epsilon) * norm.gamma.numpy() + norm.beta.numpy()


def test_encoder_layer_pre_norm_is_x_plus_sublayer_of_layer_norm_x():
    """`normalize_first`: `x + sublayer(LayerNorm(x))` for both sublayers, each
    with its own layer norm, and no layer norm after the sum."""
    keras.utils.set_random_seed(0)
    layer = EncoderLayer(d_model=16, num_heads=4, dff=32, dropout_rate=0.0,
                         normalize_first=True)
    x = tf.random.normal((2, 7, 16)) * 3 + 1
    mask = create_padding_mask(tf.constant([[1] * 7, [1] * 5 + [0] * 2]))
    layer(x, padding_mask=mask)
    # Each layer norm its own gamma and beta, so that using the wrong one shows.
    rng = np.random.default_rng(1)
    for norm in (layer.self_attention.layernorm, layer.ffn_layernorm):
        norm.gamma.assign(rng.uniform(0.5, 1.5, 16).astype("float32"))
        norm.beta.assign(rng.normal(0.0, 0.3, 16).astype("float32"))
    out, weights = layer(x, padding_mask=mask)
    block = layer.self_attention
    h = tf.constant(_layer_norm(x.numpy(), block.layernorm), tf.float32)
    attn, want_weights = block.mha(h, h, h, mask=mask)
    x1 = x.numpy() + attn.numpy()
    want = x1 + layer.ffn(_layer_norm(x1, layer.ffn_layernorm)).numpy()
    np.testing.assert_allclose(out.numpy(), want, atol=1e-4)
    np.testing.assert_allclose(weights.numpy(), want_weights.numpy(), atol=1e-6)
    assert abs(out.numpy().mean()) > 0.1  # not normalized: the paper's layer would be
