"""Reference values: every sublayer wiring against an independent float64 NumPy model.

Each test builds a layer with seeded random weights, gives its biases and
layer-norm `gamma`/`beta` non-trivial random values (so a dropped `beta`, a
missing residual or a skipped sublayer changes the numbers), reads every weight
out, and compares the layer's float32 output (training=False) and attention
weights with a NumPy float64 implementation written from the paper, not from
the library: post-norm `LayerNorm(x + Sublayer(x))` with epsilon 1e-6 (or
pre-norm `x + Sublayer(LayerNorm(x))`, each stack closed by a layer norm, the
encoder output used as it is by encoder-decoder attention),
`softmax(Q K^T / sqrt(depth) + mask * -1e9)` with mask 1 = NOT allowed, heads
split as `reshape(batch, seq, heads, depth)`, `FFN(x) = relu(x W1 + b1) W2 + b2`,
embeddings times `sqrt(d_model)` plus the interleaved sinusoidal encoding.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from transformer import (
    DecoderLayer,
    EncoderDecoderAttention,
    EncoderLayer,
    EncoderSelfAttention,
    FeedForward,
    MaskedDecoderSelfAttention,
    Transformer,
)

EPSILON = 1e-6
TOL = {"rtol": 1e-4, "atol": 1e-4}

# ---------------------------------------------------------------------------
# The NumPy float64 reference.
# ---------------------------------------------------------------------------


def np_layer_norm(z, gamma, beta):
    """Layer normalization over the last axis."""
    mean = z.mean(axis=-1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (z - mean) / np.sqrt(var + EPSILON) + beta


def np_softmax(logits):
    logits = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=-1, keepdims=True)


def np_mha(q_in, kv_in, p, num_heads, mask):
    """Multi-head attention; returns `(output, weights (batch, heads, seq_q, seq_k))`."""
    batch, seq_q, d_model = q_in.shape[0], q_in.shape[1], p["wq"].shape[1]
    seq_k = kv_in.shape[1]
    depth = d_model // num_heads

    def heads(x, seq):
        return x.reshape(batch, seq, num_heads, depth).transpose(0, 2, 1, 3)

    q = heads(q_in @ p["wq"] + p["bq"], seq_q)
    k = heads(kv_in @ p["wk"] + p["bk"], seq_k)
    v = heads(kv_in @ p["wv"] + p["bv"], seq_k)
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(depth)  # (batch, heads, seq_q, seq_k)
    if mask is not None:
        logits = logits + mask * -1e9
    weights = np_softmax(logits)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, seq_q, d_model)
    return out @ p["wo"] + p["bo"], weights


def np_attention_block(x, context, p, num_heads, mask, pre_norm=False):
    """Residual attention sublayer; `context=None` for self-attention.

    Post-norm: `LayerNorm(x + MHA(x, c, c))` with `c = x` or the context.
    Pre-norm: `x + MHA(LN(x), c, c)` with `c = LN(x)` for self-attention, and
    the context as it is for encoder-decoder attention (the encoder's output,
    already closed by its layer norm).
    """
    h = np_layer_norm(x, p["gamma"], p["beta"]) if pre_norm else x
    attn, weights = np_mha(h, h if context is None else context, p, num_heads, mask)
    if pre_norm:
        return x + attn, weights
    return np_layer_norm(x + attn, p["gamma"], p["beta"]), weights


def np_ffn(x, p):
    return np.maximum(0.0, x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def np_ffn_block(x, p, pre_norm=False):
    if pre_norm:
        return x + np_ffn(np_layer_norm(x, p["gamma"], p["beta"]), p)
    return np_layer_norm(x + np_ffn(x, p), p["gamma"], p["beta"])


def np_look_ahead(size):
    return np.triu(np.ones((size, size)), k=1)


def np_padding(tokens):
    return (np.asarray(tokens) == 0).astype(np.float64)[:, None, None, :]


def np_encoder_layer(x, p, num_heads, mask, pre_norm=False):
    x, weights = np_attention_block(x, None, p["self"], num_heads, mask, pre_norm)
    return np_ffn_block(x, p["ffn"], pre_norm), weights


def np_decoder_layer(x, context, p, num_heads, self_mask, cross_mask, pre_norm=False):
    """`self_mask` must already include the look-ahead part."""
    x, w1 = np_attention_block(x, None, p["self"], num_heads, self_mask, pre_norm)
    x, w2 = np_attention_block(x, context, p["cross"], num_heads, cross_mask, pre_norm)
    return np_ffn_block(x, p["ffn"], pre_norm), w1, w2


def np_positional_encoding(length, depth):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""
    pe = np.zeros((length, depth))
    for pos in range(length):
        for i in range(0, depth, 2):
            angle = pos / 10000.0 ** (i / depth)
            pe[pos, i] = math.sin(angle)
            if i + 1 < depth:
                pe[pos, i + 1] = math.cos(angle)
    return pe


def np_embed(tokens, table, d_model):
    tokens = np.asarray(tokens)
    return table[tokens] * math.sqrt(d_model) + np_positional_encoding(tokens.shape[1], d_model)


def np_transformer(src, tar, p, num_heads, pre_norm=False):
    """The whole forward pass; returns `(logits, attention weights dict)`.

    Pre-norm closes each stack with a layer norm, `p["encoder_norm"]` and
    `p["decoder_norm"]` (`gamma`, `beta`).
    """
    d_model = p["src_embedding"].shape[1]
    src_mask = np_padding(src)  # (batch, 1, 1, src_len)
    tar_mask = np.maximum(np_padding(tar), np_look_ahead(np.asarray(tar).shape[1]))
    weights = {}
    x = np_embed(src, p["src_embedding"], d_model)
    for i, layer in enumerate(p["encoder"]):
        x, weights[f"encoder_layer{i + 1}"] = np_encoder_layer(
            x, layer, num_heads, src_mask, pre_norm
        )
    context = np_layer_norm(x, **p["encoder_norm"]) if pre_norm else x
    y = np_embed(tar, p["tar_embedding"], d_model)
    for i, layer in enumerate(p["decoder"]):
        y, w1, w2 = np_decoder_layer(y, context, layer, num_heads, tar_mask, src_mask, pre_norm)
        weights[f"decoder_layer{i + 1}_block1"] = w1
        weights[f"decoder_layer{i + 1}_block2"] = w2
    if pre_norm:
        y = np_layer_norm(y, **p["decoder_norm"])
    return y @ p["final_w"] + p["final_b"], weights


# ---------------------------------------------------------------------------
# Randomizing the layers' weights and reading them out.
# ---------------------------------------------------------------------------


def _randomize(layer, rng):
    """Gives every bias, `gamma` and `beta` under `layer` a random non-trivial value.

    Keras initializes biases and `beta` to 0 and `gamma` to 1, which would hide a
    dropped bias, a skipped `beta` or an unscaled normalization.
    """
    for variable in layer.weights:
        name = variable.path.rsplit("/", 1)[-1]
        shape = tuple(variable.shape)
        if name == "gamma":
            variable.assign(rng.uniform(0.5, 1.5, size=shape).astype("float32"))
        elif name in ("beta", "bias"):
            variable.assign(rng.normal(0.0, 0.3, size=shape).astype("float32"))
    # The checks below would pass vacuously if nothing had been randomized.
    names = {v.path.rsplit("/", 1)[-1] for v in layer.weights}
    assert "bias" in names or "gamma" in names


def _f64(variable):
    return np.asarray(variable.numpy(), dtype=np.float64)


def _mha_params(mha):
    return {
        "wq": _f64(mha.wq.kernel), "bq": _f64(mha.wq.bias),
        "wk": _f64(mha.wk.kernel), "bk": _f64(mha.wk.bias),
        "wv": _f64(mha.wv.kernel), "bv": _f64(mha.wv.bias),
        "wo": _f64(mha.dense.kernel), "bo": _f64(mha.dense.bias),
    }


def _block_params(block):
    params = _mha_params(block.mha)
    params["gamma"] = _f64(block.layernorm.gamma)
    params["beta"] = _f64(block.layernorm.beta)
    assert not np.allclose(params["beta"], 0) and not np.allclose(params["gamma"], 1)
    return params


def _ffn_params(ffn, layernorm=None):
    params = {
        "w1": _f64(ffn.dense1.kernel), "b1": _f64(ffn.dense1.bias),
        "w2": _f64(ffn.dense2.kernel), "b2": _f64(ffn.dense2.bias),
    }
    if layernorm is not None:
        params["gamma"] = _f64(layernorm.gamma)
        params["beta"] = _f64(layernorm.beta)
    return params


def _encoder_layer_params(layer):
    return {
        "self": _block_params(layer.self_attention),
        "ffn": _ffn_params(layer.ffn, layer.ffn_layernorm),
    }


def _decoder_layer_params(layer):
    return {
        "self": _block_params(layer.causal_self_attention),
        "cross": _block_params(layer.cross_attention),
        "ffn": _ffn_params(layer.ffn, layer.ffn_layernorm),
    }


def _inputs(rng, *shape):
    return rng.normal(size=shape).astype("float32")


def _assert_close(actual, expected):
    actual = np.asarray(actual.numpy() if hasattr(actual, "numpy") else actual)
    assert actual.dtype == np.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.astype(np.float64), expected, **TOL)


# Source-like and target-like token rows with padding (id 0) at the end.
SRC = np.array([[5, 6, 7, 8, 9, 0, 0], [11, 12, 13, 14, 15, 16, 17]])
TAR = np.array([[2, 4, 5, 6, 0], [2, 7, 8, 0, 0]])
D_MODEL, HEADS, DFF = 16, 4, 24


# ---------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------


def test_feed_forward_matches_reference():
    keras.utils.set_random_seed(20)
    rng = np.random.default_rng(20)
    ffn = FeedForward(D_MODEL, DFF)
    ffn.build((None, None, D_MODEL))
    _randomize(ffn, rng)
    x = _inputs(rng, 2, 5, D_MODEL)
    _assert_close(ffn(x), np_ffn(x.astype(np.float64), _ffn_params(ffn)))


def test_encoder_self_attention_block_matches_reference():
    keras.utils.set_random_seed(21)
    rng = np.random.default_rng(21)
    block = EncoderSelfAttention(D_MODEL, HEADS, dropout_rate=0.1)
    block.build((None, None, D_MODEL))
    _randomize(block, rng)
    x = _inputs(rng, 2, SRC.shape[1], D_MODEL)
    mask = np_padding(SRC)
    out, weights = block(x, padding_mask=tf.constant(mask, tf.float32), training=False)
    ref, ref_weights = np_attention_block(
        x.astype(np.float64), None, _block_params(block), HEADS, mask
    )
    _assert_close(out, ref)
    _assert_close(weights, ref_weights)
    # The padding keys of the first row get no weight.
    np.testing.assert_array_equal(weights.numpy()[0, :, :, 5:], 0)


def test_masked_decoder_self_attention_block_matches_reference():
    keras.utils.set_random_seed(22)
    rng = np.random.default_rng(22)
    block = MaskedDecoderSelfAttention(D_MODEL, HEADS, dropout_rate=0.1)
    block.build((None, None, D_MODEL))
    _randomize(block, rng)
    x = _inputs(rng, 2, TAR.shape[1], D_MODEL)
    padding = np_padding(TAR)
    out, weights = block(x, padding_mask=tf.constant(padding, tf.float32), training=False)
    mask = np.maximum(padding, np_look_ahead(TAR.shape[1]))
    ref, ref_weights = np_attention_block(
        x.astype(np.float64), None, _block_params(block), HEADS, mask
    )
    _assert_close(out, ref)
    _assert_close(weights, ref_weights)


def test_masked_decoder_self_attention_applies_look_ahead_without_a_padding_mask():
    keras.utils.set_random_seed(23)
    rng = np.random.default_rng(23)
    block = MaskedDecoderSelfAttention(D_MODEL, HEADS)
    block.build((None, None, D_MODEL))
    _randomize(block, rng)
    x = _inputs(rng, 1, 4, D_MODEL)
    out, weights = block(x, training=False)
    ref, ref_weights = np_attention_block(
        x.astype(np.float64), None, _block_params(block), HEADS, np_look_ahead(4)
    )
    _assert_close(out, ref)
    _assert_close(weights, ref_weights)


def test_encoder_decoder_attention_block_matches_reference_with_unequal_lengths():
    keras.utils.set_random_seed(24)
    rng = np.random.default_rng(24)
    block = EncoderDecoderAttention(D_MODEL, HEADS, dropout_rate=0.1)
    block.build((None, None, D_MODEL), (None, None, D_MODEL))
    _randomize(block, rng)
    x = _inputs(rng, 2, TAR.shape[1], D_MODEL)  # queries: seq_q = 5
    context = _inputs(rng, 2, SRC.shape[1], D_MODEL)  # keys/values: seq_k = 7
    mask = np_padding(SRC)
    out, weights = block(x, context, padding_mask=tf.constant(mask, tf.float32), training=False)
    ref, ref_weights = np_attention_block(
        x.astype(np.float64), context.astype(np.float64), _block_params(block), HEADS, mask
    )
    assert weights.shape == (2, HEADS, TAR.shape[1], SRC.shape[1])
    _assert_close(out, ref)
    _assert_close(weights, ref_weights)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_matches_reference(pre_norm):
    keras.utils.set_random_seed(25)
    rng = np.random.default_rng(25)
    layer = EncoderLayer(D_MODEL, HEADS, DFF, dropout_rate=0.1, normalize_first=pre_norm)
    layer.build((None, None, D_MODEL))
    _randomize(layer, rng)
    x = _inputs(rng, 2, SRC.shape[1], D_MODEL)
    mask = np_padding(SRC)
    out, weights = layer(x, padding_mask=tf.constant(mask, tf.float32), training=False)
    ref, ref_weights = np_encoder_layer(
        x.astype(np.float64), _encoder_layer_params(layer), HEADS, mask, pre_norm
    )
    _assert_close(out, ref)
    _assert_close(weights, ref_weights)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_matches_reference(pre_norm):
    keras.utils.set_random_seed(26)
    rng = np.random.default_rng(26)
    layer = DecoderLayer(D_MODEL, HEADS, DFF, dropout_rate=0.1, normalize_first=pre_norm)
    layer.build((None, None, D_MODEL), (None, None, D_MODEL))
    _randomize(layer, rng)
    x = _inputs(rng, 2, TAR.shape[1], D_MODEL)
    context = _inputs(rng, 2, SRC.shape[1], D_MODEL)
    tar_padding, src_padding = np_padding(TAR), np_padding(SRC)
    out, block1, block2 = layer(
        x,
        context,
        look_ahead_mask=tf.constant(tar_padding, tf.float32),
        padding_mask=tf.constant(src_padding, tf.float32),
        training=False,
    )
    self_mask = np.maximum(tar_padding, np_look_ahead(TAR.shape[1]))
    ref, ref1, ref2 = np_decoder_layer(
        x.astype(np.float64), context.astype(np.float64), _decoder_layer_params(layer),
        HEADS, self_mask, src_padding, pre_norm,
    )
    _assert_close(out, ref)
    _assert_close(block1, ref1)
    _assert_close(block2, ref2)


def test_reference_positional_encoding_is_the_papers():
    """Guards the reference itself: a few hand-computed entries of the encoding."""
    pe = np_positional_encoding(3, 4)
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1])
    np.testing.assert_allclose(pe[2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)])


def _stack_norm(stack):
    return {"gamma": _f64(stack.final_layernorm.gamma), "beta": _f64(stack.final_layernorm.beta)}


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_whole_transformer_matches_reference(pre_norm):
    num_layers = 2
    keras.utils.set_random_seed(27)
    rng = np.random.default_rng(27)
    src_vocab, tar_vocab = 20, 18
    model = Transformer(
        num_layers=num_layers, d_model=D_MODEL, num_heads=HEADS, dff=DFF,
        input_vocab_size=src_vocab, target_vocab_size=tar_vocab, max_length=12,
        dropout_rate=0.1, normalize_first=pre_norm,
    )
    model.build(((None, None), (None, None)))
    _randomize(model, rng)
    logits, weights = model(
        (tf.constant(SRC), tf.constant(TAR)), training=False, return_attention_weights=True
    )
    params = {
        "src_embedding": _f64(model.encoder.pos_embedding.embedding.embeddings),
        "tar_embedding": _f64(model.decoder.pos_embedding.embedding.embeddings),
        "encoder": [_encoder_layer_params(layer) for layer in model.encoder.enc_layers],
        "decoder": [_decoder_layer_params(layer) for layer in model.decoder.dec_layers],
        "final_w": _f64(model.final_layer.kernel),
        "final_b": _f64(model.final_layer.bias),
    }
    if pre_norm:
        params["encoder_norm"] = _stack_norm(model.encoder)
        params["decoder_norm"] = _stack_norm(model.decoder)
    else:
        assert model.encoder.final_layernorm is None and model.decoder.final_layernorm is None
    assert len(params["encoder"]) == len(params["decoder"]) == num_layers
    ref_logits, ref_weights = np_transformer(SRC, TAR, params, HEADS, pre_norm)
    assert logits.shape == (2, TAR.shape[1], tar_vocab)
    _assert_close(logits, ref_logits)
    assert sorted(weights) == sorted(ref_weights)
    for name, ref in ref_weights.items():
        _assert_close(weights[name], ref)
