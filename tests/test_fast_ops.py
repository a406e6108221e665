"""The step's faster pieces compute Keras's math: `LayerNormalization` with its
written-out gradient, `Dropout` with 16-bit random numbers, and the training
loss's `softmax_cross_entropy` with its written-out gradient."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from transformer.kernels.fast_ops import Dropout, LayerNormalization


def _keras_and_ours(shape, seed=0, dtype=None):
    """Keras's layer norm and ours with the same random gamma and beta, an input
    and an output gradient."""
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.standard_normal(shape) * 3 + 1, tf.float32)
    dy = tf.constant(rng.standard_normal(shape), tf.float32)
    keras_layer = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours = LayerNormalization(epsilon=1e-6, dtype=dtype)
    gamma = rng.standard_normal(shape[-1:]).astype(np.float32)
    beta = rng.standard_normal(shape[-1:]).astype(np.float32)
    for layer in (keras_layer, ours):
        layer.build(shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    return x, keras_layer, ours, dy


def _value_and_grads(layer, x, dy):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x)
    return out, tape.gradient(out, [x, layer.gamma, layer.beta], output_gradients=dy)


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 16), (2, 3, 4, 6)])
def test_layer_norm_value_and_gradients_equal_keras(shape):
    x, keras_layer, ours, dy = _keras_and_ours(shape)
    got, got_grads = _value_and_grads(ours, x, dy)
    want, want_grads = _value_and_grads(keras_layer, x, dy)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    for name, g, w in zip(["x", "gamma", "beta"], got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=f"gradient of {name}")


def test_layer_norm_gradient_in_a_compiled_function_and_mixed_precision():
    x, keras_layer, ours, dy = _keras_and_ours((4, 7, 16), seed=1)

    @tf.function
    def grad_of_x(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = ours(x)
        return tape.gradient(out, x, output_gradients=dy)

    _, (want, *_) = _value_and_grads(keras_layer, x, dy)
    np.testing.assert_allclose(grad_of_x(x).numpy(), want.numpy(), atol=1e-4)

    x, keras_bf16, ours_bf16, _ = _keras_and_ours((4, 7, 16), seed=1, dtype="mixed_bfloat16")
    out = ours_bf16(tf.cast(x, tf.bfloat16))
    assert out.dtype == tf.bfloat16 and ours_bf16.gamma.dtype == "float32"
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(),
                               tf.cast(keras_bf16(x), tf.float32).numpy(), atol=0.05)


def test_layer_norm_keeps_keras_weights_and_config():
    _, keras_layer, ours, _ = _keras_and_ours((2, 8))
    assert [w.path.split("/")[-1] for w in ours.weights] == [
        w.path.split("/")[-1] for w in keras_layer.weights]
    restored = keras.layers.deserialize(keras.layers.serialize(ours))
    assert type(restored) is LayerNormalization and restored.epsilon == 1e-6


def test_layer_norm_on_other_axes_is_keras_own():
    x = tf.random.stateless_normal((2, 3, 4), seed=(1, 2))
    ours, theirs = LayerNormalization(axis=1), keras.layers.LayerNormalization(axis=1)
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), atol=1e-6)


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


def _losses_and_logit_grads(fn, label, pred, eps, dy):
    with tf.GradientTape() as tape:
        tape.watch(pred)
        losses = fn(label, pred, eps)
    return losses, tape.gradient(losses, pred, output_gradients=dy)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(2, 5, 11), (7, 13)])
def test_softmax_cross_entropy_equals_token_losses_and_its_gradient(shape, eps):
    from transformer.kernels.fast_ops import softmax_cross_entropy
    from transformer.training import token_losses

    def reference(label, pred, eps):  # token_losses takes (batch, target_len) labels
        return token_losses(label[None], pred[None], eps)[0] if len(shape) == 2 else \
            token_losses(label, pred, eps)

    rng = np.random.default_rng(3)
    pred = tf.constant(rng.standard_normal(shape) * 4, tf.float32)
    label = tf.constant(rng.integers(0, shape[-1], shape[:-1]), tf.int32)
    dy = tf.constant(rng.standard_normal(shape[:-1]), tf.float32)
    got, got_grad = _losses_and_logit_grads(softmax_cross_entropy, label, pred, eps, dy)
    want, want_grad = _losses_and_logit_grads(reference, label, pred, eps, dy)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_grad.numpy(), want_grad.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_cross_entropy_caps_an_underflowed_probability_and_keeps_the_gradient():
    from transformer.kernels.fast_ops import TINY, softmax_cross_entropy

    pred = tf.constant([[0.0, 200.0, 0.0]])  # p(label 0) = exp(-200): 0 in float32
    label = tf.constant([0])
    losses, grad = _losses_and_logit_grads(softmax_cross_entropy, label, pred, 0.0,
                                           tf.ones((1,)))
    assert float(losses[0]) == pytest.approx(-np.log(TINY), rel=1e-6)
    np.testing.assert_allclose(grad.numpy(), [[-1.0, 1.0, 0.0]], atol=1e-6)


def test_softmax_cross_entropy_raises_on_a_label_outside_the_vocabulary():
    from transformer.kernels.fast_ops import softmax_cross_entropy

    with pytest.raises(tf.errors.InvalidArgumentError):
        softmax_cross_entropy(tf.constant([[1, 5]]), tf.zeros((1, 2, 5)))
