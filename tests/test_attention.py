import functools
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_checks import (
    D_MODEL,
    NUM_HEADS,
    SOURCE_PADDING,
    SOURCE_STATES,
    TARGET_LEN,
    TARGET_PADDING,
    TARGET_STATES,
    check_layer,
)

from transformer import (
    CausalSelfAttention,
    CrossAttention,
    EncoderDecoderAttention,
    EncoderSelfAttention,
    GlobalSelfAttention,
    MaskedDecoderSelfAttention,
    MultiHeadAttention,
    copy_weights_from_keras,
    copy_weights_to_keras,
    create_look_ahead_mask,
    create_padding_mask,
    mask_value,
    scaled_dot_product_attention,
)

TEMP_K = tf.constant([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], dtype=tf.float32)
TEMP_V = tf.constant([[1, 0], [10, 0], [100, 5], [1000, 6]], dtype=tf.float32)


@pytest.mark.parametrize(
    "query,weights,output",
    [
        ([[0, 10, 0]], [[0, 1, 0, 0]], [[10, 0]]),
        ([[0, 0, 10]], [[0, 0, 0.5, 0.5]], [[550, 5.5]]),
        ([[10, 10, 0]], [[0.5, 0.5, 0, 0]], [[5.5, 0]]),
    ],
)
def test_tutorial_printed_examples(query, weights, output):
    out, w = scaled_dot_product_attention(tf.constant(query, tf.float32), TEMP_K, TEMP_V)
    np.testing.assert_allclose(w.numpy(), weights, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), output, rtol=1e-5, atol=1e-4)


def test_tutorial_example_with_three_queries_at_once():
    q = tf.constant([[0, 0, 10], [0, 10, 0], [10, 10, 0]], tf.float32)
    out, w = scaled_dot_product_attention(q, TEMP_K, TEMP_V)
    np.testing.assert_allclose(w.numpy(), [[0, 0, .5, .5], [0, 1, 0, 0], [.5, .5, 0, 0]], atol=1e-6)
    np.testing.assert_allclose(out.numpy(), [[550, 5.5], [10, 0], [5.5, 0]], rtol=1e-5, atol=1e-4)


def _numpy_attention(q, k, v, mask=None):
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-1])
    if mask is not None:
        logits = logits + mask * -1e9
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def test_attention_matches_float64_numpy_with_mask_and_unequal_lengths():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 5, 8))
    k = rng.normal(size=(2, 3, 7, 8))
    v = rng.normal(size=(2, 3, 7, 4))
    tokens = np.array([[4, 5, 6, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
    mask = create_padding_mask(tokens).numpy()
    out, w = scaled_dot_product_attention(q.astype("float32"), k.astype("float32"),
                                          v.astype("float32"), mask)
    ref_out, ref_w = _numpy_attention(q, k, v, mask)
    assert out.shape == (2, 3, 5, 4) and w.shape == (2, 3, 5, 7)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-5)
    np.testing.assert_array_equal(w.numpy()[0, :, :, 3:], 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_masked_logits_stay_finite_even_when_a_whole_row_is_masked(dtype):
    rng = np.random.default_rng(1)
    q = tf.constant(rng.normal(size=(1, 2, 3, 4)) * 30, dtype)
    k = tf.constant(rng.normal(size=(1, 2, 3, 4)) * 30, dtype)
    v = tf.constant(rng.normal(size=(1, 2, 3, 4)), dtype)
    mask = tf.constant([[[[1, 1, 1], [0, 1, 1], [1, 1, 1]]]], tf.float32)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == tf.as_dtype(dtype)
    w32 = tf.cast(w, tf.float32).numpy()
    assert np.isfinite(w32).all() and np.isfinite(tf.cast(out, tf.float32).numpy()).all()
    np.testing.assert_allclose(w32[0, :, 1], [[1, 0, 0]] * 2, atol=1e-3)
    # A fully masked row carries no information, but it must stay a distribution.
    np.testing.assert_allclose(w32.sum(-1), 1, atol=1e-2)


def test_mask_value_per_dtype():
    assert mask_value(tf.float32) == -1e9
    assert np.isfinite(np.float16(mask_value(tf.float16)) * 2 / 2)
    assert mask_value(tf.float16) == pytest.approx(-65504 / 2)
    assert mask_value(tf.bfloat16) < -1e38


def test_multi_head_attention_shapes_self_and_cross():
    keras.utils.set_random_seed(0)
    mha = MultiHeadAttention(d_model=32, num_heads=4)
    x = tf.random.uniform((2, 5, 32))
    ctx = tf.random.uniform((2, 9, 32))
    out, w = mha(x, x, x)
    assert out.shape == (2, 5, 32) and w.shape == (2, 4, 5, 5)
    out, w = mha(x, ctx, ctx)
    assert out.shape == (2, 5, 32) and w.shape == (2, 4, 5, 9)
    np.testing.assert_allclose(w.numpy().sum(-1), 1, rtol=1e-5)


def test_split_heads_layout():
    mha = MultiHeadAttention(d_model=6, num_heads=2)
    x = tf.reshape(tf.range(12, dtype=tf.float32), (1, 2, 6))
    heads = mha.split_heads(x, 1).numpy()
    assert heads.shape == (1, 2, 2, 3)
    np.testing.assert_array_equal(heads[0, 1, 0], [3, 4, 5])
    np.testing.assert_array_equal(mha.combine_heads(tf.constant(heads), 1).numpy(), x.numpy())


def test_multi_head_attention_matches_float64_numpy():
    keras.utils.set_random_seed(3)
    d_model, heads = 12, 3
    mha = MultiHeadAttention(d_model, heads)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 4, d_model))
    ctx = rng.normal(size=(2, 6, d_model))
    mask = create_padding_mask(np.array([[1, 2, 3, 4, 0, 0], [1, 2, 3, 4, 5, 6]])).numpy()
    out, w = mha(x.astype("float32"), ctx.astype("float32"), ctx.astype("float32"), mask=mask)

    def proj(dense, t):
        return t @ dense.kernel.numpy().astype("float64") + dense.bias.numpy()

    def split(t):
        return t.reshape(2, -1, heads, d_model // heads).transpose(0, 2, 1, 3)

    q, k, v = split(proj(mha.wq, x)), split(proj(mha.wk, ctx)), split(proj(mha.wv, ctx))
    ref, ref_w = _numpy_attention(q, k, v, mask)
    ref = proj(mha.dense, ref.transpose(0, 2, 1, 3).reshape(2, -1, d_model))
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-5)


@pytest.mark.parametrize(
    "d_model,num_heads,seq_q,seq_k,mask_kind",
    [
        (16, 4, 5, 5, None),
        (16, 4, 5, 5, "causal"),
        (24, 3, 4, 7, "padding"),
        (24, 6, 7, 3, None),
    ],
)
def test_equivalence_with_keras_multi_head_attention(d_model, num_heads, seq_q, seq_k, mask_kind):
    keras.utils.set_random_seed(7)
    ours = MultiHeadAttention(d_model, num_heads)
    theirs = keras.layers.MultiHeadAttention(num_heads, key_dim=d_model // num_heads)
    rng = np.random.default_rng(7)
    q = rng.normal(size=(2, seq_q, d_model)).astype("float32")
    kv = q if seq_q == seq_k else rng.normal(size=(2, seq_k, d_model)).astype("float32")
    ours(q, kv, kv)
    copy_weights_to_keras(ours, theirs)
    mask = None
    if mask_kind == "causal":
        mask = create_look_ahead_mask(seq_q)[tf.newaxis]  # (1, seq_q, seq_q)
        mask = tf.tile(mask, [2, 1, 1])
    elif mask_kind == "padding":
        tokens = np.array([[1] * (seq_k - 2) + [0, 0], [1] * seq_k])
        mask = tf.tile(create_padding_mask(tokens)[:, 0], [1, seq_q, 1])  # (2, seq_q, seq_k)
    out, w = ours(q, kv, kv, mask=None if mask is None else mask[:, tf.newaxis])
    keras_mask = None if mask is None else 1 - mask
    ref, ref_w = theirs(q, kv, kv, attention_mask=keras_mask, return_attention_scores=True)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w.numpy(), atol=1e-5)


def test_copy_weights_from_keras_round_trip():
    keras.utils.set_random_seed(11)
    theirs = keras.layers.MultiHeadAttention(2, key_dim=4)
    x = np.random.default_rng(11).normal(size=(1, 3, 8)).astype("float32")
    ref = theirs(x, x)
    ours = copy_weights_from_keras(theirs, MultiHeadAttention(8, 2))
    out, _ = ours(x, x, x)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)


def _built_ours(d_model=8, num_heads=2):
    ours = MultiHeadAttention(d_model, num_heads)
    x = tf.zeros((1, 2, d_model))
    ours(x, x, x)
    return ours


def _built_keras(num_heads, key_dim, **kwargs):
    theirs = keras.layers.MultiHeadAttention(num_heads, key_dim=key_dim, **kwargs)
    x = tf.zeros((1, 2, 8))
    theirs(x, x)
    return theirs


@pytest.mark.parametrize("copy", ["to_keras", "from_keras"])
@pytest.mark.parametrize(
    "theirs,error,message",
    [
        (
            lambda: keras.layers.Dense(8),
            TypeError,
            "Expected a `keras.layers.MultiHeadAttention`. Received: Dense",
        ),
        (
            lambda: _built_keras(4, 2),
            ValueError,
            "The two layers have different shapes: ours has num_heads=2, depth=4; "
            "Keras's has num_heads=4, key_dim=2.",
        ),
        (
            lambda: _built_keras(2, 8),
            ValueError,
            "The two layers have different shapes: ours has num_heads=2, depth=4; "
            "Keras's has num_heads=2, key_dim=8.",
        ),
        (
            lambda: _built_keras(2, 4, value_dim=3),
            ValueError,
            "Keras's layer must have value_dim == key_dim to match ours.",
        ),
    ],
    ids=["not_keras_mha", "num_heads", "key_dim", "value_dim"],
)
def test_copy_weights_rejects_mismatched_layers(copy, theirs, error, message):
    ours, theirs = _built_ours(), theirs()
    with pytest.raises(error, match=re.escape(message)):
        if copy == "to_keras":
            copy_weights_to_keras(ours, theirs)
        else:
            copy_weights_from_keras(theirs, ours)


def test_copy_weights_to_keras_needs_our_layer_built():
    with pytest.raises(
        ValueError,
        match=re.escape("Build (or call) our MultiHeadAttention before copying its weights."),
    ):
        copy_weights_to_keras(MultiHeadAttention(8, 2), keras.layers.MultiHeadAttention(2, 4))


def test_copy_weights_from_keras_needs_the_keras_layer_built():
    theirs = keras.layers.MultiHeadAttention(2, key_dim=4)
    assert not theirs.built
    with pytest.raises(
        ValueError,
        match=re.escape("Build (or call) the Keras MultiHeadAttention before copying."),
    ):
        copy_weights_from_keras(theirs, _built_ours())


def test_copy_weights_to_unbuilt_keras_with_different_query_key_value_widths():
    """Ours built on q, k, v of widths 5, 6, 7: the unbuilt Keras layer is built with those."""
    keras.utils.set_random_seed(12)
    rng = np.random.default_rng(12)
    q = rng.normal(size=(2, 3, 5)).astype("float32")
    k = rng.normal(size=(2, 4, 6)).astype("float32")
    v = rng.normal(size=(2, 4, 7)).astype("float32")
    ours = MultiHeadAttention(8, 2)
    ours(q, k, v)
    for dense in (ours.wq, ours.wk, ours.wv, ours.dense):  # non-zero biases
        dense.bias.assign(rng.normal(size=dense.bias.shape).astype("float32"))
    # Keras's output width defaults to the query's (5); ours is d_model (8).
    theirs = keras.layers.MultiHeadAttention(2, key_dim=4, output_shape=8)
    assert copy_weights_to_keras(ours, theirs) is theirs and theirs.built
    assert theirs.query_dense.kernel.shape == (5, 2, 4)
    assert theirs.key_dense.kernel.shape == (6, 2, 4)
    assert theirs.value_dense.kernel.shape == (7, 2, 4)
    out, w = ours(q, k, v)
    ref, ref_w = theirs(q, v, key=k, return_attention_scores=True)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(w.numpy(), ref_w.numpy(), atol=1e-6)


@pytest.mark.parametrize(
    "alias,paper_name",
    [
        ("GlobalSelfAttention", "EncoderSelfAttention"),
        ("CausalSelfAttention", "MaskedDecoderSelfAttention"),
        ("CrossAttention", "EncoderDecoderAttention"),
    ],
)
def test_newer_tutorial_names_are_aliases_of_the_paper_names(alias, paper_name):
    import transformer
    import transformer.attention

    assert getattr(transformer, alias) is getattr(transformer, paper_name)
    assert getattr(transformer.attention, alias) is getattr(transformer.attention, paper_name)
    assert alias in transformer.__all__ and paper_name in transformer.__all__


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"d_model": 10, "num_heads": 3}, "divisor of `d_model`"),
        ({"d_model": 0, "num_heads": 1}, "d_model=0"),
        ({"d_model": 8, "num_heads": -2}, "num_heads=-2"),
        ({"d_model": 8, "num_heads": 2, "dropout_rate": 1.5}, "dropout_rate=1.5"),
    ],
)
def test_multi_head_attention_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs)


def _self_attention_steps(mha):
    """Self-attention one position at a time, the cache one position longer each
    step; the padding mask covers the cached positions and the new one."""
    cache, outputs = mha.empty_cache(2), []
    for t in range(TARGET_LEN):
        x = TARGET_STATES[:, t]  # (batch, d_model): the newest position
        out, _, cache = mha(x, x, x, mask=TARGET_PADDING[..., :t + 1], training=False,
                            cache=cache)
        assert cache[0].shape[2] == cache[1].shape[2] == t + 1
        outputs.append(out)  # (batch, d_model)
    return outputs


def test_multi_head_attention_passes_the_layer_checks():
    """Config round trip, saving, dropout only in training, and the cache
    (tests/layer_checks.py): with look-ahead and padding masks, the cached steps
    are the uncached output."""
    mask = tf.maximum(create_look_ahead_mask(TARGET_LEN), TARGET_PADDING)  # (2, 1, 5, 5)
    mha = check_layer(lambda: MultiHeadAttention(D_MODEL, NUM_HEADS, dropout_rate=0.5, name="m"),
                      (TARGET_STATES,) * 3, {"mask": mask}, dropout=True,
                      cached_steps=_self_attention_steps)
    assert (mha.d_model, mha.num_heads, mha.dropout_rate, mha.depth) == (8, 2, 0.5, 4)


def test_masked_decoder_self_attention_cannot_see_the_future():
    keras.utils.set_random_seed(2)
    layer = MaskedDecoderSelfAttention(16, 4, dropout_rate=0.0)
    x = tf.random.uniform((1, 5, 16))
    out, w = layer(x)
    np.testing.assert_array_equal(np.triu(w.numpy()[0, 0], k=1), 0)
    x2 = tf.concat([x[:, :3], tf.random.uniform((1, 2, 16))], axis=1)
    out2, _ = layer(x2)
    np.testing.assert_allclose(out.numpy()[:, :3], out2.numpy()[:, :3], atol=1e-6)


def test_encoder_self_and_encoder_decoder_attention_shapes():
    keras.utils.set_random_seed(2)
    x = tf.random.uniform((2, 4, 16))
    ctx = tf.random.uniform((2, 6, 16))
    out, w = EncoderSelfAttention(16, 4)(x)
    assert out.shape == (2, 4, 16) and w.shape == (2, 4, 4, 4)
    out, w = EncoderDecoderAttention(16, 4)(x, ctx)
    assert out.shape == (2, 4, 16) and w.shape == (2, 4, 4, 6)
    # Post-norm: every position is layer-normalised (mean 0, variance 1 before gamma/beta).
    np.testing.assert_allclose(out.numpy().mean(-1), 0, atol=1e-5)


def _causal_steps(block):
    cache, outputs = block.mha.empty_cache(2), []
    for t in range(TARGET_LEN):
        out, _, cache = block(TARGET_STATES[:, t], padding_mask=TARGET_PADDING[..., :t + 1],
                              training=False, cache=cache)
        outputs.append(out)
    return outputs


def _cross_steps(block):
    cache, outputs = block.mha.project_keys_values(SOURCE_STATES, SOURCE_STATES), []
    for t in range(TARGET_LEN):
        out, _, cache = block(TARGET_STATES[:, t], padding_mask=SOURCE_PADDING, training=False, cache=cache)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize(
    "cls,args,kwargs,cached_steps",
    [
        (GlobalSelfAttention, (TARGET_STATES,), {"padding_mask": TARGET_PADDING}, None),
        (CausalSelfAttention, (TARGET_STATES,), {"padding_mask": TARGET_PADDING}, _causal_steps),
        (CrossAttention, (TARGET_STATES, SOURCE_STATES), {"padding_mask": SOURCE_PADDING}, _cross_steps),
    ],
    ids=["global_self_attention", "causal_self_attention", "cross_attention"],
)
def test_attention_blocks_pass_the_layer_checks(cls, args, kwargs, cached_steps):
    """Post-norm and pre-norm: config round trip, saving, dropout only in
    training and, with a cache, the cached steps (tests/layer_checks.py)."""
    for normalize_first in (False, True):
        layer = check_layer(functools.partial(cls, D_MODEL, NUM_HEADS, 0.3, normalize_first),
                            args, kwargs, dropout=True, cached_steps=cached_steps)
        assert layer.normalize_first is normalize_first
