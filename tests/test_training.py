"""Tests of transformer.training: schedule, losses, metric, config and resume state."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from transformer.rundir import RunDirError
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


def test_custom_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        CustomSchedule(128, warmup_steps=0)
    with pytest.raises(ValueError, match="d_model"):
        CustomSchedule(-1)


def test_optimizer_serializes_with_its_schedule():
    optimizer = make_optimizer(64, warmup_steps=100)
    config = keras.optimizers.serialize(optimizer)
    restored = keras.optimizers.deserialize(config)
    assert isinstance(restored._learning_rate, CustomSchedule)
    assert restored._learning_rate.get_config() == {"d_model": 64, "warmup_steps": 100}
    assert (restored.beta_1, restored.beta_2, restored.epsilon) == (0.9, 0.98, 1e-9)


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


# --------------------------------------------------------------------------
# Precision, configuration, evaluation helpers
# --------------------------------------------------------------------------


def test_default_precision_reads_cpu_flags(tmp_path):
    from transformer.training import cpu_flags, default_precision, explain_default_precision

    assert default_precision({"avx2", "amx_bf16", "amx_tile"}) == "mixed_bfloat16"
    # AVX-512 BF16 without AMX trains no faster in bfloat16: float32.
    assert default_precision({"avx512f", "avx512_bf16"}) == "float32"
    assert default_precision({"avx2", "avx512f"}) == "float32"
    assert default_precision(set()) == "float32"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 amx_bf16\n")
    assert cpu_flags(cpuinfo) == {"fpu", "sse", "avx512_bf16", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()
    assert explain_default_precision({"amx_bf16"}).startswith("mixed_bfloat16")
    assert explain_default_precision({"avx512_bf16"}).startswith("float32")
    assert explain_default_precision(set()).startswith("float32")


def test_run_config_round_trip_and_defaults():
    from transformer.model import PRESETS
    from transformer.training import CORPUS_DEFAULTS, TOY_DEFAULTS, RunConfig

    config = RunConfig(output_dir="runs/x", batch_size=16)
    assert (config.preset, config.epochs, config.warmup_steps) == (
        TOY_DEFAULTS["preset"], TOY_DEFAULTS["epochs"], TOY_DEFAULTS["warmup_steps"])
    assert config.model == PRESETS["toy"]
    assert RunConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["model"]["d_model"] == PRESETS["toy"].d_model
    assert str(config.run_dir) == "runs/x"
    assert str(RunConfig().run_dir) == "runs/toy"
    real = RunConfig(data="corpora/por.tsv")
    assert real.preset == CORPUS_DEFAULTS["preset"] and real.epochs == CORPUS_DEFAULTS["epochs"]
    assert str(real.run_dir) == "runs/por"
    assert str(RunConfig(dataset="ted_hrlr_translate/pt_to_en").run_dir) == "runs/ted_hrlr_pt_to_en"
    assert RunConfig().resolved_max_tokens == PRESETS["toy"].max_length


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"preset": "huge"}, "preset"),
        ({"precision": "float8"}, "precision"),
        ({"strategy": "tpu"}, "strategy"),
        ({"dataset": "wmt"}, "dataset"),
        ({"batch_size": 0}, "batch_size"),
        ({"label_smoothing": 1.5}, "label_smoothing"),
        ({"max_tokens": 1000}, "max_tokens"),
        ({"max_tokens": 1}, "max_tokens"),
        ({"data": "a.tsv", "source_column": 1, "target_column": 1}, "same column"),
        ({"valid": "v.tsv"}, "without `data`"),
    ],
)
def test_run_config_rejects_bad_values(kwargs, match):
    from transformer.training import RunConfig

    with pytest.raises(ValueError, match=match):
        RunConfig(**kwargs)


def test_for_resume_allows_only_some_changes():
    from transformer.training import RunConfig

    saved = RunConfig(output_dir="runs/x", epochs=2, steps_per_epoch=10)
    resumed = saved.for_resume(epochs=5, checkpoint_every=7, d_model=saved.model.d_model)
    assert (resumed.epochs, resumed.checkpoint_every, resumed.steps_per_epoch) == (5, 7, 10)
    with pytest.raises(ValueError, match=r"Cannot change `d_model` when resuming.*d_model=64"):
        saved.for_resume(d_model=32)
    with pytest.raises(ValueError, match="Cannot change `seed`"):
        saved.for_resume(seed=3)


def test_normalize_text():
    from transformer.training import normalize_text

    assert normalize_text("The boy's  Café.") == "the boy ' s cafe ."
    assert normalize_text("the boy ' s cafe .") == "the boy ' s cafe ."
    assert normalize_text("Não!", lower_case=False) == "Não !"


def test_truncate_metrics_csv(tmp_path):
    from transformer.training import _truncate_metrics_csv

    path = tmp_path / "metrics.csv"
    path.write_text("epoch,loss\n0,3.0\n1,2.0\n2,1.0\n")
    _truncate_metrics_csv(path, 2)
    assert path.read_text() == "epoch,loss\n0,3.0\n1,2.0\n"
    _truncate_metrics_csv(tmp_path / "absent.csv", 0)  # nothing to do


def test_stop_on_nan_names_the_step():
    from transformer.training import StopOnNaN, TrainingError

    class FakeOptimizer:
        iterations = tf.Variable(42, dtype=tf.int64)

    class FakeModel:
        optimizer = FakeOptimizer()
        stop_training = False

    callback = StopOnNaN("runs/x/checkpoints")
    callback.set_model(FakeModel())
    callback.on_epoch_begin(3)
    callback.on_train_batch_end(4, {"loss": 1.5})  # finite: nothing happens
    with pytest.raises(TrainingError, match=r"nan at step 42 \(epoch 4, batch 5\).*runs/x"):
        callback.on_train_batch_end(5 - 1, {"loss": float("nan")})
    assert callback.model.stop_training


# --------------------------------------------------------------------------
# Training through the library: tiny runs
# --------------------------------------------------------------------------

TINY = {
    "model": {"num_layers": 1, "d_model": 16, "num_heads": 2, "dff": 32, "dropout_rate": 0.0,
              "max_length": 32},
    "batch_size": 16,
    "steps_per_epoch": 5,
    "warmup_steps": 10,
    "label_smoothing": 0.1,
    "precision": "float32",
    "num_examples": 2,
    "eval_batch_size": 32,
}


@pytest.fixture(scope="module")
def tiny_tsv(tmp_path_factory):
    from conftest import write_toy_tsv

    return write_toy_tsv(tmp_path_factory.mktemp("tsv"), n_train=120, n_valid=16, n_test=16)


def tiny_config(tsv, output_dir, **changes):
    from transformer.training import RunConfig

    train_tsv, valid_tsv, test_tsv = tsv
    settings = {**TINY, **changes}
    return RunConfig(output_dir=str(output_dir), data=str(train_tsv), valid=str(valid_tsv),
                     test=str(test_tsv), **settings)


def load_weights(run_dir):
    model = keras.saving.load_model(run_dir / "model.keras")
    return [w.numpy() for w in model.weights], int(model.optimizer.iterations)


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def reference_run(tiny_tsv, tmp_path_factory):
    """Three uninterrupted epochs of the tiny settings, seed 0."""
    from transformer import training

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    return training.train(tiny_config(tiny_tsv, run_dir, epochs=3), verbose=0, export=False)


def test_resume_mid_epoch_continues_exactly(tiny_tsv, tmp_path, monkeypatch, reference_run):
    """Weights, optimizer state, schedule step, epoch and data order all survive."""
    from transformer import training

    assert reference_run.final_step == 15
    assert set(reference_run.history) >= {"loss", "masked_accuracy", "val_loss", "learning_rate"}
    assert len(reference_run.history["loss"]) == 3

    # Interrupt at step 8, mid-epoch 2; the last checkpoint is step 6 (every 3).
    original = training.CheckpointSaver.on_train_batch_end

    def interrupt(self, batch, logs=None):
        original(self, batch, logs)
        if training.optimizer_step(self.model.optimizer) == 8:
            raise Interrupted

    monkeypatch.setattr(training.CheckpointSaver, "on_train_batch_end", interrupt)
    config = tiny_config(tiny_tsv, tmp_path / "run", epochs=3, checkpoint_every=3)
    with pytest.raises(Interrupted):
        training.train(config, verbose=0, export=False)
    monkeypatch.undo()
    checkpoints = tf.train.get_checkpoint_state(str(tmp_path / "run" / "checkpoints"))
    assert checkpoints.model_checkpoint_path.endswith("ckpt-6")

    with pytest.raises(RunDirError, match="not empty"):
        training.train(config, verbose=0)
    resumed = training.train(config, resume=True, verbose=0, export=False)
    assert (resumed.initial_step, resumed.final_step) == (6, 15)
    # Epoch 2 was finished (4 steps), then epoch 3 ran: two history rows.
    assert len(resumed.history["loss"]) == 2
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["0", "1", "2"]

    assert resumed.weights_sha256 == reference_run.weights_sha256
    ref_weights, ref_step = load_weights(reference_run.run_dir)
    run_weights, run_step = load_weights(tmp_path / "run")
    assert ref_step == run_step == 15
    for a, b in zip(ref_weights, run_weights, strict=True):
        np.testing.assert_array_equal(a, b)

    # A finished run resumes to nothing, and is evaluated again.
    again = training.train(training.RunConfig.load(tmp_path / "run"), resume=True, verbose=0,
                           export=False)
    assert (again.initial_step, again.final_step) == (15, 15)
    assert again.evaluation.exact_match == resumed.evaluation.exact_match


def test_another_seed_gives_another_run(tiny_tsv, tmp_path, reference_run):
    """The same seed gives the same run: test_resume_mid_epoch_continues_exactly
    trains twice from scratch (tokenizers, initial weights, data order) and ends
    with identical weights. Here, seed 1 must end elsewhere."""
    from transformer import training

    other = training.train(tiny_config(tiny_tsv, tmp_path / "b", epochs=3, seed=1), verbose=0,
                           export=False)
    assert other.final_step == reference_run.final_step
    assert other.weights_sha256 != reference_run.weights_sha256


def test_nan_loss_stops_with_the_step(tiny_tsv, tmp_path, monkeypatch):
    from transformer import training

    models = []
    original_compile = keras.Model.compile
    original_call = training.MaskedLoss.call

    def remember(model, *args, **kwargs):
        models.append(model)
        return original_compile(model, *args, **kwargs)

    def poisoned(self, y_true, y_pred):
        # NaN from the 7th update on (the optimizer has made 6 before it).
        loss = original_call(self, y_true, y_pred)
        return tf.where(models[-1].optimizer.iterations >= 6, float("nan"), loss)

    monkeypatch.setattr(keras.Model, "compile", remember)
    monkeypatch.setattr(training.MaskedLoss, "call", poisoned)
    config = tiny_config(tiny_tsv, tmp_path / "run", epochs=2, checkpoint_every=2)
    with pytest.raises(training.TrainingError, match=r"at step 7 \(epoch 2, batch 2\)"):
        training.train(config, verbose=0)
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert latest.endswith("ckpt-6")  # the NaN weights were never saved


def test_tiny_run_fixture_is_a_complete_run(tiny_run):
    from transformer import rundir

    run_dir = rundir.check_run_dir(tiny_run.run_dir)
    for name in (rundir.CHECKPOINTS_DIR, rundir.METRICS_CSV, rundir.METRICS_JSON, rundir.LOGS_DIR):
        assert (run_dir / name).exists(), name
    metrics = rundir.read_json(run_dir / rundir.METRICS_JSON)
    assert metrics["test"]["bleu_signature"].startswith("nrefs:1|")
    assert 0 <= metrics["test"]["exact_match"] <= 1
    assert metrics["weights_sha256"] == tiny_run.weights_sha256
    config = rundir.read_json(run_dir / rundir.CONFIG_FILE)
    assert config["input_vocab_size"] > 4 and config["model"]["d_model"] == 32
    # The model learnt something in its few steps: on the test split it is far
    # better than at chance (1 / vocabulary, about 0.005 for an untrained model)
    # and better than its average over the first epoch of training (0.65
    # against 0.31 on the machine this was written on; the bounds leave room
    # for other machines' weights).
    accuracy = tiny_run.evaluation.masked_accuracy
    assert accuracy > 20 / config["target_vocab_size"]
    assert accuracy > tiny_run.history["masked_accuracy"][0] + 0.1
    # translate.py's loader needs nothing else.
    from transformer.translate import Translator

    translation = Translator.from_run(run_dir)(tiny_run.examples[0][0], return_attention=False)
    assert translation.text == tiny_run.examples[0][2]


def _event_scalars(log_dir):
    """`{tag: [(step, value), ...]}` of the TensorBoard event files in `log_dir`."""
    scalars = {}
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    assert files, log_dir
    for path in files:
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "scalars", value.tag
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
    return scalars


def test_tiny_run_logs_the_schedules_learning_rate_and_tensorboard_scalars(tiny_run):
    import csv
    from pathlib import Path

    from transformer import rundir

    config = tiny_run.config
    d_model, warmup, steps = config.model.d_model, config.warmup_steps, config.steps_per_epoch
    assert (d_model, warmup, steps, config.epochs) == (32, 40, 50, 2)  # tests/conftest.py
    # Each epoch logs the learning rate of its last update: Keras calls the
    # schedule with the updates already applied, so update 50 (the last of
    # epoch 1) used step 49 and update 100 step 99. Step 49 is past the
    # warm-up (inverse square root), as is step 99.
    by_hand = [d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5) for s in (49, 99)]
    assert by_hand == pytest.approx(
        [float(CustomSchedule(d_model, warmup)(s)) for s in (49, 99)], rel=1e-6)
    # Not the rate of the step after (50, 100): 1% apart, far beyond float32.
    assert float(CustomSchedule(d_model, warmup)(50)) != pytest.approx(by_hand[0], rel=1e-4)
    history = tiny_run.history
    assert history["learning_rate"] == pytest.approx(by_hand, rel=1e-6)

    run_dir = Path(tiny_run.run_dir)
    with open(run_dir / rundir.METRICS_CSV) as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert set(rows[0]) == {"epoch", *history}
    for key, values in history.items():
        assert [float(row[key]) for row in rows] == pytest.approx(values, rel=1e-6), key

    # TensorBoard: train/ holds loss, accuracy and learning rate, validation/
    # the val_ ones, each at the optimizer's step at the end of the epoch.
    train_scalars = _event_scalars(run_dir / rundir.LOGS_DIR / "train")
    valid_scalars = _event_scalars(run_dir / rundir.LOGS_DIR / "validation")
    ends = [steps, 2 * steps]
    assert set(train_scalars) == {"epoch_loss", "epoch_masked_accuracy", "epoch_learning_rate"}
    assert set(valid_scalars) == {"epoch_loss", "epoch_masked_accuracy"}
    for scalars, prefix in ((train_scalars, ""), (valid_scalars, "val_")):
        for tag, points in scalars.items():
            key = prefix + tag.removeprefix("epoch_")
            assert [step for step, _ in points] == ends, tag
            assert [value for _, value in points] == pytest.approx(history[key], rel=1e-6), tag
    assert [v for _, v in train_scalars["epoch_learning_rate"]] == pytest.approx(by_hand,
                                                                                rel=1e-6)
