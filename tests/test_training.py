"""Tests of transformer.training: schedule, losses and metric (section 5 of the paper)."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from transformer.kernels.optimizers import AveragingAdam, FusedAdam, use_moving_average
from transformer.training import (
    CustomSchedule,
    MaskedLoss,
    make_optimizer,
    masked_accuracy,
    masked_loss,
)

LN2, LN3 = math.log(2.0), math.log(3.0)

# Two sentences of 3 target tokens, vocabulary of 3; id 0 is padding.
LABEL = np.array([[1, 2, 0], [2, 0, 0]], np.int32)
# Uniform logits give -log p = ln 3; logits (0, 0, ln 2) give p = (1/4, 1/4, 1/2).
HALF = [0.0, 0.0, LN2]
LOGITS = np.array(
    [
        [[0.0, 0.0, 0.0], HALF, [9.0, -3.0, 4.0]],
        [HALF, [1.0, 2.0, 3.0], [-7.0, 0.5, 8.0]],
    ],
    np.float32,
)


def test_masked_loss_by_hand():
    # Real tokens: (label 1, uniform) -> ln 3; (label 2, HALF) -> ln 2; (label 2, HALF) -> ln 2.
    expected = (LN3 + LN2 + LN2) / 3
    assert float(masked_loss(LABEL, LOGITS)) == pytest.approx(expected, rel=1e-6)


def test_masked_loss_ignores_padding():
    changed = LOGITS.copy()
    changed[0, 2] = [100.0, -50.0, 3.0]
    changed[1, 1:] = 1e3 * np.random.default_rng(0).standard_normal((2, 3))
    assert float(masked_loss(LABEL, changed)) == pytest.approx(float(masked_loss(LABEL, LOGITS)))
    # Padding only: 0, not NaN.
    assert float(masked_loss(np.zeros((1, 3), np.int32), LOGITS[:1])) == 0.0


def test_label_smoothing_formula():
    eps = 0.1
    # Uniform logits: every -log p_v is ln 3, so smoothing changes nothing: ln 3.
    # HALF, label 2: (1 - eps) * ln 2 + eps * mean(ln 4, ln 4, ln 2) = (1 - eps) ln 2 + eps * 5/3 ln 2.
    half = (1 - eps) * LN2 + eps * (5.0 / 3.0) * LN2
    expected = (LN3 + half + half) / 3
    assert float(masked_loss(LABEL, LOGITS, label_smoothing=eps)) == pytest.approx(expected, rel=1e-6)
    assert float(MaskedLoss(label_smoothing=eps)(LABEL, LOGITS)) == pytest.approx(expected, rel=1e-6)


def test_label_smoothing_matches_keras_on_real_tokens():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((2, 3, 5)).astype(np.float32)
    label = np.array([[4, 2, 0], [1, 3, 3]], np.int32)
    keep = label != 0
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2)(
        tf.one_hot(label[keep], 5), logits[keep]
    )
    assert float(masked_loss(label, logits, 0.2)) == pytest.approx(float(reference), rel=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_xla_loss_value_and_gradient_match_keras(eps):
    # The step's loss is compiled by XLA; inside a tf.function (as in `fit`) and
    # for several padded lengths, its value and its gradient with respect to
    # the logits must be those of Keras's categorical cross-entropy over the
    # real tokens, also for logits far from 0.
    loss_fn = MaskedLoss(label_smoothing=eps)
    rng = np.random.default_rng(2)

    @tf.function(reduce_retracing=True)
    def ours(label, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = loss_fn(label, logits)
        return loss, tape.gradient(loss, logits)

    def reference(label, logits):
        keep = label != 0
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps)(
                tf.one_hot(label[keep], logits.shape[-1]), tf.boolean_mask(logits, keep)
            )
        return loss, tape.gradient(loss, logits)

    for length, scale in [(3, 1.0), (7, 30.0), (5, 1e3)]:
        logits = tf.constant(scale * rng.standard_normal((4, length, 11)), tf.float32)
        label = rng.integers(1, 11, size=(4, length)).astype(np.int32)
        label[:, length // 2 + 1:] = 0  # padding at the end of every sentence
        loss, grad = ours(label, logits)
        want_loss, want_grad = reference(label, logits)
        assert np.isfinite(float(loss))
        assert float(loss) == pytest.approx(float(want_loss), rel=1e-5, abs=1e-5 * scale)
        np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), atol=1e-6)
        assert not np.any(grad.numpy()[label == 0])  # padding gets no gradient


@pytest.mark.parametrize("bad_id", [5, -1])
def test_loss_rejects_labels_outside_the_vocabulary(bad_id):
    # XLA's gather would clamp the index; the loss must fail as TensorFlow's does.
    pred = tf.zeros((1, 2, 4))
    label = tf.constant([[bad_id, 2]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="target token id outside"):
        masked_loss(label, pred)
    loss_fn = MaskedLoss(0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="target token id outside"):
        tf.function(loss_fn)(label, pred)
    assert np.isfinite(float(masked_loss(tf.constant([[3, 2]]), pred)))  # the edge id is fine


def test_loss_of_bfloat16_logits_is_computed_in_float32():
    rng = np.random.default_rng(3)
    logits = tf.constant(rng.standard_normal((2, 4, 9)), tf.bfloat16)
    label = rng.integers(1, 9, size=(2, 4)).astype(np.int32)
    loss = masked_loss(label, logits, 0.1)
    assert loss.dtype == tf.float32
    want = masked_loss(label, tf.cast(logits, tf.float32), 0.1)
    assert float(loss) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.1", True])
def test_label_smoothing_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="label_smoothing"):
        masked_loss(LABEL, LOGITS, label_smoothing=bad)


def test_masked_accuracy_by_hand():
    # Arg-maxes: row 0 -> (0, 2, 0), row 1 -> (2, 2, 2). Real tokens: (1 vs 0) wrong,
    # (2 vs 2) right, (2 vs 2) right: 2 of 3.
    assert float(masked_accuracy(LABEL, LOGITS)) == pytest.approx(2 / 3)


def paper_rate(d_model, warmup, step):
    """Section 5.3's formula, by hand: `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_custom_schedule_at_1_warmup_and_twice_warmup():
    schedule = CustomSchedule(d_model=128, warmup_steps=4000)
    scale = 128**-0.5
    assert float(schedule(1)) == pytest.approx(scale * 4000**-1.5, rel=1e-6)
    assert float(schedule(4000)) == pytest.approx(scale * 4000**-0.5, rel=1e-6)
    assert float(schedule(8000)) == pytest.approx(scale * 8000**-0.5, rel=1e-6)
    # Linear rise before the peak, inverse square root after it.
    assert float(schedule(2000)) == pytest.approx(float(schedule(4000)) / 2, rel=1e-6)
    assert float(schedule(16000)) == pytest.approx(float(schedule(4000)) / 2, rel=1e-6)
    assert float(schedule(0)) == 0.0


def test_custom_schedule_with_a_chosen_peak():
    schedule = CustomSchedule(d_model=128, warmup_steps=300, peak_learning_rate=1e-3)
    assert float(schedule(300)) == pytest.approx(1e-3, rel=1e-6)
    assert float(schedule(150)) == pytest.approx(5e-4, rel=1e-6)  # linear rise
    assert float(schedule(1200)) == pytest.approx(5e-4, rel=1e-6)  # inverse square root
    assert float(schedule(0)) == 0.0
    # The paper's formula is the case peak = (d_model * warmup)^-0.5.
    same = CustomSchedule(128, 4000, (128 * 4000) ** -0.5)
    for step in (1, 1000, 4000, 9000):
        assert float(same(step)) == pytest.approx(paper_rate(128, 4000, step), rel=1e-6)


def test_custom_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        CustomSchedule(128, warmup_steps=0)
    with pytest.raises(ValueError, match="d_model"):
        CustomSchedule(-1)
    for bad in (0, -1e-3, 2.0, True, "1e-3"):
        with pytest.raises(ValueError, match="learning rate in"):
            CustomSchedule(128, 400, peak_learning_rate=bad)


def test_a_run_shorter_than_the_warmup_rises_to_the_same_peak_at_its_end():
    short = CustomSchedule(128, 4000, total_steps=1000)
    peak = (128 * 4000) ** -0.5
    assert float(short(1000)) == pytest.approx(peak, rel=1e-6)
    assert float(short(250)) == pytest.approx(peak / 4, rel=1e-6)  # linear, 4x the slope
    assert float(short(250)) == pytest.approx(4 * paper_rate(128, 4000, 250), rel=1e-6)
    assert float(short(4000)) == pytest.approx(peak / 2, rel=1e-6)  # then 1/sqrt, past the end
    assert float(short(0)) == 0.0
    # A run at least as long as the warm-up keeps the paper's schedule.
    for step in (1, 2000, 4000, 9000):
        assert float(CustomSchedule(128, 4000, total_steps=4000)(step)) == pytest.approx(
            paper_rate(128, 4000, step), rel=1e-6)
    # With a chosen peak too.
    chosen = CustomSchedule(128, 400, peak_learning_rate=1e-3, total_steps=200)
    assert float(chosen(100)) == pytest.approx(5e-4, rel=1e-6)


def test_a_time_budget_ends_the_warmup_when_it_runs_out():
    schedule = CustomSchedule(128, 4000, total_steps=100_000)
    peak = (128 * 4000) ** -0.5
    schedule.set_time_progress(0.01)  # the steps are ahead: the paper's rate
    assert float(schedule(1000)) == pytest.approx(paper_rate(128, 4000, 1000), rel=1e-6)
    schedule.set_time_progress(0.5)  # half the budget used at step 1000 (0.25 of the warm-up)
    assert float(schedule(1000)) == pytest.approx(0.5 * peak, rel=1e-6)
    schedule.set_time_progress(1.5)  # clipped: the peak
    assert float(schedule(1000)) == pytest.approx(peak, rel=1e-6)
    # Past the warm-up, the paper's decay whatever the time.
    assert float(schedule(16000)) == pytest.approx(paper_rate(128, 4000, 16000), rel=1e-6)
    # Inside a compiled function the variable is read at every call.
    compiled = tf.function(lambda step: schedule(step))
    schedule.set_time_progress(0.25)
    first = float(compiled(tf.constant(500)))
    schedule.set_time_progress(0.75)
    assert float(compiled(tf.constant(500))) == pytest.approx(3 * first, rel=1e-5)


def test_total_steps_must_be_positive():
    with pytest.raises(ValueError, match="total_steps"):
        CustomSchedule(128, 400, total_steps=0)


@pytest.mark.parametrize("decay", ["linear", "cosine", "cooldown"])
def test_decay_to_zero_warms_up_peaks_and_ends_at_zero(decay):
    # 1,000 steps: the warm-up asked (100 steps) is shorter than 0.8 of the run.
    schedule = CustomSchedule(128, 100, peak_learning_rate=2e-3, total_steps=1000, decay=decay)
    rates = [float(schedule(step)) for step in range(0, 1001)]
    assert rates[0] == 0.0
    assert rates[50] == pytest.approx(1e-3, rel=1e-5)  # half-way up the 100-step rise
    peak_step = max(range(1001), key=rates.__getitem__)
    assert 90 <= peak_step <= 100 and 1.8e-3 < rates[peak_step] <= 2e-3 * (1 + 1e-6)
    falling = rates[peak_step:]
    assert all(a >= b for a, b in zip(falling, falling[1:], strict=False))
    assert rates[1000] == pytest.approx(0.0, abs=1e-9)
    half_way = {"linear": 1e-3, "cosine": 1e-3, "cooldown": 2e-3}[decay]
    assert rates[500] == pytest.approx(half_way, rel=1e-5)
    if decay == "cooldown":  # the peak until 0.8 of the run, then a straight fall
        assert rates[800] == pytest.approx(2e-3, rel=1e-5)
        assert rates[900] == pytest.approx(1e-3, rel=1e-5)
    assert float(schedule(5000)) == pytest.approx(0.0, abs=1e-9)  # past the end: still zero
    # A run shorter than its warm-up reaches the peak at 0.8 of it.
    short = CustomSchedule(128, 800, peak_learning_rate=2e-3, total_steps=500, decay="cooldown")
    assert float(short(400)) == pytest.approx(2e-3, rel=1e-5)
    assert float(short(200)) == pytest.approx(1e-3, rel=1e-5)


def test_decay_to_zero_follows_the_time_budget():
    # The run's steps are not known; the share of its budget used ends the rise
    # (at 0.8 of it) and the fall (at all of it).
    schedule = CustomSchedule(128, 800, peak_learning_rate=2e-3, total_steps=100_000,
                              decay="linear")
    schedule.set_time_progress(0.4)
    assert float(schedule(10)) == pytest.approx(1e-3, rel=1e-5)  # by time, not by step
    schedule.set_time_progress(0.9)
    assert float(schedule(10)) == pytest.approx(0.2e-3, rel=1e-5)
    schedule.set_time_progress(1.0)
    assert float(schedule(10)) == 0.0


def test_decay_to_zero_needs_the_run_length_and_a_known_name():
    with pytest.raises(ValueError, match="total_steps"):
        CustomSchedule(128, 800, decay="linear")
    with pytest.raises(ValueError, match="`decay`, expected one of"):
        CustomSchedule(128, 800, total_steps=10, decay="exponential")


def test_optimizer_serializes_with_its_schedule():
    optimizer = make_optimizer(64, warmup_steps=100)
    config = keras.optimizers.serialize(optimizer)
    restored = keras.optimizers.deserialize(config)
    assert isinstance(restored._learning_rate, CustomSchedule)
    assert restored._learning_rate.get_config() == {
        "d_model": 64, "warmup_steps": 100, "peak_learning_rate": None,
        "total_steps": None, "decay": "inverse_sqrt"}
    peaked = keras.optimizers.deserialize(keras.optimizers.serialize(make_optimizer(64, 100, 2e-3)))
    assert float(peaked._learning_rate(100)) == pytest.approx(2e-3, rel=1e-6)
    assert (restored.beta_1, restored.beta_2, restored.epsilon) == (0.9, 0.98, 1e-9)
    decaying = keras.optimizers.deserialize(keras.optimizers.serialize(
        make_optimizer(64, 100, 2e-3, total_steps=1000, decay="cosine")))
    assert decaying._learning_rate.decay == "cosine"
    assert float(decaying._learning_rate(1000)) == pytest.approx(0.0, abs=1e-9)
    short = keras.optimizers.deserialize(keras.optimizers.serialize(
        make_optimizer(64, 100, total_steps=30)))
    assert short._learning_rate.total_steps == 30


def test_compiled_model_saves_and_reloads(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32")
    logits = keras.layers.Dense(5)(keras.layers.Embedding(7, 4)(inputs))
    model = keras.Model(inputs, logits)
    model.compile(make_optimizer(4, 10), loss=MaskedLoss(0.1), metrics=[masked_accuracy])
    x = np.array([[1, 2, 3, 0]], np.int32)
    y = np.array([[2, 3, 4, 0]], np.int32)
    model.fit(x, y, epochs=2, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.loss.label_smoothing == pytest.approx(0.1)
    assert int(reloaded.optimizer.iterations) == 2
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_the_moving_average_is_the_model_only_when_asked(tmp_path):
    """With `ema_momentum`, `fit` leaves the trained weights (Keras' own `fit`
    would overwrite them with the average); `use_moving_average` then sets the average
    m * average + (1 - m) * weights over the steps, with m warmed up as
    min(momentum, (1 + t) / (10 + t)), recomputed here by hand; the
    optimizer saves and reloads as `AveragingAdam`."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int32")
    logits = keras.layers.Dense(5)(keras.layers.Embedding(7, 4)(inputs))
    model = keras.Model(inputs, logits)
    momentum = 0.5
    model.compile(make_optimizer(4, 10, ema_momentum=momentum), loss=MaskedLoss(0.0))
    assert isinstance(model.optimizer, AveragingAdam)
    x = np.array([[1, 2, 3, 0]], np.int32)
    y = np.array([[2, 3, 4, 0]], np.int32)
    expected = None
    for step in range(4):
        model.fit(x, y, epochs=1, verbose=0)
        weights = [w.numpy() for w in model.trainable_weights]
        m = min(momentum, (1 + step) / (10 + step)) if step else 0.0  # the warm-up
        expected = weights if expected is None else [
            m * a + (1 - m) * w for a, w in zip(expected, weights, strict=True)]
    trained = [w.numpy() for w in model.trainable_weights]
    np.testing.assert_array_equal(trained[0], weights[0])  # fit kept the last step's weights
    assert not np.allclose(trained[0], expected[0])
    use_moving_average(model)
    for average, want in zip(model.trainable_weights, expected, strict=True):
        np.testing.assert_allclose(average.numpy(), want, rtol=1e-6)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(reloaded.optimizer, AveragingAdam)
    assert reloaded.optimizer.ema_momentum == momentum


def test_fused_adam_updates_as_keras_adam(monkeypatch):
    """`FusedAdam` (one kernel per weight) gives Keras' Adam's weights, step by
    step, on the dense layers' gradients and on the embedding's sparse ones
    (which take Keras' own update); a large
    epsilon keeps the comparison away from near-zero moments, where rounding
    flips the sign of an update."""
    def trained(optimizer):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((None,), dtype="int32")
        hidden = keras.layers.Embedding(7, 4)(inputs)
        logits = keras.layers.Dense(5)(keras.layers.Dense(4)(hidden))
        model = keras.Model(inputs, logits)
        model.compile(optimizer, loss=MaskedLoss(0.0))
        rng = np.random.default_rng(0)
        weights = []
        for _ in range(4):
            x = rng.integers(1, 7, (3, 4)).astype(np.int32)
            model.train_on_batch(x, rng.integers(1, 5, (3, 4)).astype(np.int32))
            weights.append([w.numpy() for w in model.trainable_weights])
        return weights

    fused_kernels = []

    def apply_adam(**kwargs):
        fused_kernels.append(kwargs["var"])
        return raw_apply_adam(**kwargs)

    raw_apply_adam = tf.raw_ops.ResourceApplyAdam
    monkeypatch.setattr(tf.raw_ops, "ResourceApplyAdam", apply_adam)
    settings = dict(learning_rate=0.05, beta_1=0.9, beta_2=0.98, epsilon=1e-3)
    fused, plain = trained(FusedAdam(**settings)), trained(keras.optimizers.Adam(**settings))
    for fused_step, plain_step in zip(fused, plain, strict=True):
        for a, b in zip(fused_step, plain_step, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(fused[0][0], fused[-1][0])  # the weights moved
    # Each trace of the step fuses the two kernels and two biases, not the table.
    assert fused_kernels and len(fused_kernels) % 4 == 0


def test_no_moving_average_is_fused_adam_and_a_bad_momentum_is_refused():
    optimizer = make_optimizer(4, 10)
    assert type(optimizer) is FusedAdam and not optimizer.use_ema
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is FusedAdam
    with pytest.raises(ValueError, match="ema_momentum"):
        make_optimizer(4, 10, ema_momentum=1.0)


def test_the_moving_average_is_found_inside_the_loss_scale_optimizer():
    """mixed_float16 wraps the optimizer in Keras' `LossScaleOptimizer`; the
    average is the inner optimizer's. A model without an average is refused."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((None,), dtype="int32")
        model = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Embedding(7, 4)(inputs)))
        model.compile(make_optimizer(4, 10, ema_momentum=0.5), loss=MaskedLoss(0.0))
        x = np.array([[1, 2, 3, 0]], np.int32)
        model.fit(x, np.array([[2, 3, 4, 0]], np.int32), epochs=3, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    inner = model.optimizer.inner_optimizer
    averages = [a.numpy() for a in inner._model_variables_moving_average]
    assert not np.allclose(averages[0], model.trainable_weights[0].numpy())
    use_moving_average(model)
    np.testing.assert_array_equal(model.trainable_weights[0].numpy(), averages[0])
    plain = keras.Model(inputs, model.outputs)
    plain.compile(make_optimizer(4, 10), loss=MaskedLoss(0.0))
    with pytest.raises(ValueError, match="ema_momentum > 0"):
        use_moving_average(plain)
