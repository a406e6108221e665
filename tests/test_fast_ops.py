"""The step's faster pieces compute Keras's math: layer norm with its written-out
gradient (`add_and_layer_norm`) and `Dropout` with 16-bit random numbers."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from transformer.kernels.fast_ops import Dropout, add_and_layer_norm, normalize


def _keras_and_ours(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.standard_normal(shape) * 3 + 1, tf.float32)
    y = tf.constant(rng.standard_normal(shape), tf.float32)
    layer = keras.layers.LayerNormalization(epsilon=1e-6)
    layer.build(shape)
    layer.gamma.assign(rng.standard_normal(shape[-1:]).astype(np.float32))
    layer.beta.assign(rng.standard_normal(shape[-1:]).astype(np.float32))
    dy = tf.constant(rng.standard_normal(shape), tf.float32)
    return x, y, layer, dy


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 16), (2, 3, 4, 6)])
def test_layer_norm_value_and_gradients_equal_keras(shape):
    x, y, layer, dy = _keras_and_ours(shape)
    variables = [layer.gamma, layer.beta]

    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            out = fn()
        return out, tape.gradient(out, [x, y, *variables], output_gradients=dy)

    ours, ours_grads = grads(lambda: add_and_layer_norm(layer, x, y))
    want, want_grads = grads(lambda: layer(x + y))
    np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    for name, got, expected in zip(["x", "y", "gamma", "beta"], ours_grads, want_grads, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=f"gradient of {name}")


def test_normalize_value_and_gradients_equal_keras():
    x, _, layer, dy = _keras_and_ours((3, 5, 16), seed=2)

    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = fn()
        return out, tape.gradient(out, [x, layer.gamma, layer.beta], output_gradients=dy)

    ours, ours_grads = grads(lambda: normalize(layer, x))
    want, want_grads = grads(lambda: layer(x))
    np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    for name, got, expected in zip(["x", "gamma", "beta"], ours_grads, want_grads, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=f"gradient of {name}")


def test_layer_norm_gradient_in_a_compiled_function_and_mixed_precision():
    x, y, layer, dy = _keras_and_ours((4, 7, 16), seed=1)

    @tf.function
    def grad_of_x(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = add_and_layer_norm(layer, x, y)
        return tape.gradient(out, x, output_gradients=dy)

    with tf.GradientTape() as tape:
        tape.watch(x)
        want = layer(x + y)
    np.testing.assert_allclose(grad_of_x(x, y).numpy(),
                               tape.gradient(want, x, output_gradients=dy).numpy(), atol=1e-4)

    bf16 = keras.layers.LayerNormalization(epsilon=1e-6, dtype="mixed_bfloat16")
    bf16.build(x.shape)
    out = add_and_layer_norm(bf16, tf.cast(x, tf.bfloat16), tf.cast(y, tf.bfloat16))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(),
                               tf.cast(bf16(x + y), tf.float32).numpy(), atol=0.05)


def test_dropout_drops_the_rate_and_keeps_the_mean():
    layer = Dropout(0.1, seed=3)
    x = tf.ones((1001, 999))  # an odd number of elements
    y = layer(x, training=True).numpy()
    dropped = float(np.mean(y == 0))
    # 999,999 Bernoulli(0.1) draws: the standard deviation of the share is 0.0003.
    assert abs(dropped - 0.1) < 0.0015
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 65536 / (65536 - 6554), rtol=1e-6)
    assert abs(float(y.mean()) - 1.0) < 0.005


def test_dropout_masks_differ_per_call_and_repeat_per_seed():
    x = tf.ones((64, 64))
    a, b = Dropout(0.5, seed=7), Dropout(0.5, seed=7)
    first = a(x, training=True).numpy()
    assert np.array_equal(first, b(x, training=True).numpy())  # same seed, same mask
    assert not np.array_equal(first, a(x, training=True).numpy())  # a new mask per call
    # The two 16-bit halves of one random word are not copies of each other.
    pairs = (first.reshape(-1, 2) != 0)
    assert 0.4 < float(np.mean(pairs[:, 0] != pairs[:, 1])) < 0.6


def test_dropout_is_identity_outside_training_and_keeps_keras_options():
    x = tf.random.stateless_normal((8, 10), seed=(1, 2))
    np.testing.assert_array_equal(Dropout(0.3)(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(Dropout(0.0)(x, training=True).numpy(), x.numpy())
    # noise_shape goes to Keras's implementation: whole columns are dropped.
    y = Dropout(0.5, noise_shape=(1, 10), seed=1)(x, training=True).numpy()
    zero_columns = np.all(y == 0, axis=0)
    assert np.all((y != 0) | zero_columns[None, :])
    # Rates that 16 bits cannot resolve go to Keras's implementation too.
    assert np.count_nonzero(Dropout(1e-6, seed=1)(x, training=True).numpy()) in (79, 80)
    assert np.count_nonzero(Dropout(1 - 1e-6, seed=1)(x, training=True).numpy()) <= 1
    config = Dropout(0.2, seed=5).get_config()
    assert Dropout.from_config(config).rate == pytest.approx(0.2)


def test_dropout_gradient_is_the_mask_and_dtype_is_kept():
    layer = Dropout(0.25, seed=2)
    x = tf.random.stateless_normal((32, 16), seed=(3, 4))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    grad = tape.gradient(y, x).numpy()
    scale = 65536 / (65536 - 16384)
    np.testing.assert_allclose(grad, np.where(y.numpy() != 0, scale, 0.0), rtol=1e-6)
    half = Dropout(0.25, seed=2, dtype="mixed_bfloat16")(tf.ones((4, 4)), training=True)
    assert half.dtype == tf.bfloat16
