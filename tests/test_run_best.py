"""Tests of transformer.run.callbacks: validation of the moving average, the best weights, patience."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from conftest import tiny_config


@pytest.fixture(scope="module")
def best_tsv(tmp_path_factory):
    from conftest import write_toy_tsv

    return write_toy_tsv(tmp_path_factory.mktemp("best_tsv"), n_train=120, n_valid=16,
                         n_test=16)


def _averaging_model(steps=3):
    """A small Dense model trained `steps` steps by `AveragingAdam` (momentum 0.5)."""
    from transformer.training import make_optimizer

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    model.compile(optimizer=make_optimizer(8, 4, 0.05, None, 0.5), loss="mse")
    x, y = np.random.default_rng(0).normal(size=(2, 8, 4)), np.ones((8, 2))
    model.fit(x[0], y, epochs=steps, batch_size=8, verbose=0)
    return model, x[1], y


def _values(variables):
    return [np.array(keras.ops.convert_to_numpy(v)) for v in variables]


def test_swapping_the_moving_average_exchanges_it_and_a_second_swap_restores_both():
    from transformer.kernels.optimizers import keeps_moving_average, swap_moving_average

    model, _, _ = _averaging_model()
    assert keeps_moving_average(model)
    averages = model.optimizer._model_variables_moving_average
    weights, average = _values(model.trainable_variables), _values(averages)
    assert not all(np.array_equal(w, a) for w, a in zip(weights, average, strict=True))
    swap_moving_average(model)
    for w, a, now_w, now_a in zip(weights, average, _values(model.trainable_variables),
                                  _values(averages), strict=True):
        np.testing.assert_array_equal(now_w, a)
        np.testing.assert_array_equal(now_a, w)
    swap_moving_average(model)
    for before, now in zip(weights + average,
                           _values(model.trainable_variables) + _values(averages), strict=True):
        np.testing.assert_array_equal(now, before)


def test_validation_scores_the_moving_average_and_leaves_training_alone():
    from transformer.run.callbacks import ValidateMovingAverage

    model, x, y = _averaging_model()
    weights = _values(model.trainable_variables)
    raw_loss = model.evaluate(x, y, verbose=0)
    averaged_loss = model.evaluate(x, y, verbose=0, callbacks=[ValidateMovingAverage()])
    for before, now in zip(weights, _values(model.trainable_variables), strict=True):
        np.testing.assert_array_equal(now, before)
    from transformer.kernels.optimizers import use_moving_average

    use_moving_average(model)
    assert averaged_loss == pytest.approx(model.evaluate(x, y, verbose=0), rel=1e-6)
    assert averaged_loss != pytest.approx(raw_loss, rel=1e-3)


def _sgd_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_keep_best_saves_on_improvement_and_stops_after_the_patience(tmp_path):
    from transformer.run.callbacks import BEST_RECORD, BEST_WEIGHTS, KeepBest, read_best

    model = _sgd_model()
    keep = KeepBest(tmp_path, patience=2)
    keep.set_model(model)
    keep.on_epoch_end(0, {"val_loss": 2.0})
    keep.on_epoch_end(1, {"val_loss": 1.0})
    saved = _values(model.weights)
    model.layers[0].kernel.assign(np.full((2, 1), 7.0, "float32"))
    keep.on_epoch_end(2, {"val_loss": 1.5})
    assert not model.stop_training
    keep.on_epoch_end(3, {"val_loss": float("nan")})  # not a score: ignored
    keep.on_epoch_end(4, {"val_loss": 1.2})
    assert model.stop_training
    record = read_best(tmp_path)
    assert record == {"val_loss": 1.0, "epoch": 2, "step": 0, "moving_average": False}
    assert json.loads((tmp_path / BEST_RECORD).read_text()) == record
    fresh = _sgd_model()
    fresh.load_weights(tmp_path / BEST_WEIGHTS)
    for before, now in zip(saved, _values(fresh.weights), strict=True):
        np.testing.assert_array_equal(now, before)


def test_a_resumed_run_compares_against_its_record(tmp_path):
    from transformer.run.callbacks import KeepBest

    model = _sgd_model()
    keep = KeepBest(tmp_path, patience=3, record={"val_loss": 1.0, "epoch": 2, "step": 10})
    keep.set_model(model)
    keep.on_epoch_end(3, {"val_loss": 1.1})
    keep.on_epoch_end(4, {"val_loss": 1.1})
    assert model.stop_training  # epochs 3, 4 and 5 without improvement on epoch 2's
    assert not list(tmp_path.iterdir())  # nothing better was saved


def test_a_run_ends_with_its_best_weights(best_tsv, tmp_path):
    """Validation scores the moving average; the best of it is kept and restored."""
    from transformer import run
    from transformer.run.callbacks import BEST_WEIGHTS, read_best

    run_dir = tmp_path / "run"
    result = run.train(tiny_config(best_tsv, run_dir, epochs=3, ema_momentum=0.9,
                                   restore_best_weights=True),
                       verbose=0, export=False)
    losses = result.history["val_loss"]
    record = read_best(run_dir)
    assert record["val_loss"] == pytest.approx(min(losses), rel=1e-6)
    assert record["epoch"] == int(np.argmin(losses)) + 1 and record["moving_average"]
    final = keras.saving.load_model(run_dir / "model.keras")
    best = keras.saving.load_model(run_dir / "model.keras")
    best.load_weights(run_dir / BEST_WEIGHTS)
    for kept, restored in zip(_values(best.weights), _values(final.weights), strict=True):
        np.testing.assert_array_equal(restored, kept)


def test_without_validation_pairs_the_last_weights_stay(tmp_path, caplog):
    from transformer.run.callbacks import restore_best

    model = _sgd_model()
    weights = _values(model.weights)
    assert restore_best(model, tmp_path) is None
    assert "no best weights were kept" in caplog.text.lower()
    for before, now in zip(weights, _values(model.weights), strict=True):
        np.testing.assert_array_equal(now, before)


def test_the_best_weights_are_written_atomically_under_a_name_keras_accepts(tmp_path):
    from transformer import rundir

    tmp = rundir.temporary_path(tmp_path / "best.weights.h5")
    assert tmp.name == "best.tmp.weights.h5" and rundir.is_temporary(tmp)
    assert not rundir.is_temporary(tmp_path / "best.weights.h5")
