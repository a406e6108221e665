"""One check of a Keras layer, shared by the tests of every public layer.

`check_layer` is this project's counterpart of keras-hub's `run_layer_test`:
given a function that makes the layer and the arguments to call it with, it
checks

1. the config round trip: every constructor argument is in `get_config()`
   (and JSON-serializable), `from_config(get_config())` gives a layer with the
   same config and the same argument values, and, given the original's
   weights, the same outputs;
2. saving: the layer inside a small model saved as `.keras` and loaded again
   gives the same outputs;
3. the training flag: inference (`training=False`, or no flag) gives the same
   outputs every time; with dropout, `training=True` changes the outputs and
   every dropout sublayer with a rate above 0 is run in training mode (and
   none in inference). A layer without dropout says so (`dropout=False`): it
   must have no dropout sublayer with a rate above 0, and `training=True`
   must change nothing;
4. the cache, for layers that have one: the outputs of incremental decoding,
   one position at a time (`cached_steps`), equal the uncached output.

The tests use tiny layers (d_model 8, 2 heads, sequences of 5) and the tiny
inputs below.
"""

from __future__ import annotations

import inspect
import json
import tempfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from transformer import create_padding_mask

D_MODEL, NUM_HEADS, DFF, VOCAB, MAX_LENGTH = 8, 2, 16, 12, 8
TARGET_LEN, SOURCE_LEN = 5, 4
_RNG = np.random.default_rng(0)
# Embedded target and source states, (2, 5, 8) and (2, 4, 8).
TARGET_STATES = tf.constant(_RNG.normal(size=(2, TARGET_LEN, D_MODEL)), tf.float32)
SOURCE_STATES = tf.constant(_RNG.normal(size=(2, SOURCE_LEN, D_MODEL)), tf.float32)
# Token ids; the second rows end in padding.
TARGET_TOKENS = tf.constant([[2, 5, 7, 4, 9], [2, 6, 8, 0, 0]], tf.int64)
SOURCE_TOKENS = tf.constant([[4, 5, 6, 3], [7, 3, 0, 0]], tf.int64)
TARGET_PADDING = create_padding_mask(TARGET_TOKENS)  # (2, 1, 1, 5), 1 at padding
SOURCE_PADDING = create_padding_mask(SOURCE_TOKENS)  # (2, 1, 1, 4)


def check_layer(layer_factory, args, kwargs=None, *, dropout, cached_steps=None,
                not_in_config=(), atol=1e-5):
    """Runs the four checks of the module docstring on `layer_factory()`.

    Args:
        layer_factory: makes the layer to check; called once, after
            `keras.utils.set_random_seed(0)`. With `dropout=True` its dropout
            rate must be above 0.
        args: positional tensors of the call, e.g. `(x, context)`.
        kwargs: keyword tensors of the call (masks), or None.
        dropout: whether the layer has dropout (keyword, required); False
            skips the "dropout acts in training" part: the layer must then
            have no dropout above 0, and `training=True` must change nothing.
        cached_steps: for a layer with a cache, `cached_steps(layer)` runs
            incremental decoding (`training=False`) and returns the output of
            every position, `(batch, ...)` each; stacked on axis 1 they must
            equal the first output of the uncached call.
        not_in_config: constructor arguments that are deliberately not part
            of the config (such as a shared `embedding`).
        atol: tolerance of the cached-against-uncached comparison (the other
            comparisons are exact).

    Returns:
        The layer that was checked.
    """
    kwargs = dict(kwargs or {})
    keras.utils.set_random_seed(0)
    layer = layer_factory()
    expected = _outputs(layer(*args, **kwargs, training=False))
    _check_config(layer, args, kwargs, expected, not_in_config)
    _check_saving(layer, args, kwargs, expected)
    _check_training(layer, args, kwargs, expected, dropout)
    if cached_steps is not None:
        _check_cache(layer, cached_steps, expected, atol)
    return layer


def _outputs(outputs):
    """The leaves of a layer's outputs (tensors, tuples, dicts), as numpy arrays."""
    return [np.asarray(leaf) for leaf in tf.nest.flatten(outputs)]


def _assert_outputs_equal(got, expected, what):
    assert len(got) == len(expected), what
    for index, (a, b) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}, output {index}")


def _constructor_arguments(layer):
    parameters = inspect.signature(type(layer).__init__).parameters.values()
    return [p.name for p in parameters
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _check_config(layer, args, kwargs, expected, not_in_config):
    config = layer.get_config()
    json.dumps(config)  # a config must be JSON-serializable
    missing = set(_constructor_arguments(layer)) - set(config) - set(not_in_config)
    assert not missing, f"get_config() of {type(layer).__name__} lacks {sorted(missing)}"
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    for name in _constructor_arguments(layer):
        if name in config and hasattr(layer, name):
            assert getattr(clone, name) == getattr(layer, name), name
    clone(*args, **kwargs, training=False)  # builds it
    assert [w.shape for w in clone.weights] == [w.shape for w in layer.weights]
    clone.set_weights(layer.get_weights())
    _assert_outputs_equal(_outputs(clone(*args, **kwargs, training=False)), expected,
                          "from_config(get_config()) with the same weights")


@keras.saving.register_keras_serializable(package="layer_checks")
class LayerModel(keras.Model):
    """A model of one layer, called as `layer(*args, **kwargs)`.

    Its build config holds the shapes and dtypes of the arguments, and loading
    builds it by calling it once on zeros of those shapes.
    """

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer
        self._specs = None

    def call(self, inputs, training=None):
        return self.layer(*inputs["args"], **inputs["kwargs"], training=training)

    def get_config(self):
        config = super().get_config()
        config["layer"] = keras.saving.serialize_keras_object(self.layer)
        return config

    @classmethod
    def from_config(cls, config):
        layer = keras.saving.deserialize_keras_object(config.pop("layer"))
        return cls(layer, **config)

    def remember_inputs(self, inputs):
        """Records the shapes and dtypes of `inputs` for the build config."""
        self._specs = {
            "args": [[list(t.shape), t.dtype.name] for t in inputs["args"]],
            "kwargs": {name: [list(t.shape), t.dtype.name] for name, t in inputs["kwargs"].items()},
        }

    def get_build_config(self):
        return {"specs": self._specs}

    def build_from_config(self, config):
        self(_zeros(config["specs"]), training=False)


def _zeros(specs):
    return {"args": [tf.zeros(shape, dtype) for shape, dtype in specs["args"]],
            "kwargs": {name: tf.zeros(shape, dtype)
                       for name, (shape, dtype) in specs["kwargs"].items()}}


def _check_saving(layer, args, kwargs, expected):
    inputs = {"args": list(args), "kwargs": kwargs}
    model = LayerModel(layer)
    model.remember_inputs(inputs)
    _assert_outputs_equal(_outputs(model(inputs, training=False)), expected, "in a model")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "layer.keras"
        model.save(path)
        loaded = keras.models.load_model(path)
    assert type(loaded.layer) is type(layer)
    assert loaded.layer.get_config() == layer.get_config()
    _assert_outputs_equal(_outputs(loaded(inputs, training=False)), expected,
                          "after saving and loading a .keras model")


def _active_dropouts(layer, prefix="", named=None):
    """`{"attribute.path": dropout}` for every dropout sublayer with a rate above 0,
    found through the public attributes (and lists of layers) of `layer`."""
    named = {} if named is None else named
    for attribute, value in vars(layer).items():
        if attribute.startswith("_"):
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for index, sub in enumerate(values):
            if not isinstance(sub, keras.layers.Layer):
                continue
            name = prefix + attribute + (f"[{index}]" if values is value else "")
            if isinstance(sub, keras.layers.Dropout):
                if sub.rate > 0 and sub not in named.values():
                    named[name] = sub
            else:
                _active_dropouts(sub, name + ".", named)
    return named


def _spy_on(dropouts, seen):
    """Records in `seen[name]` the `training` value of every call of each dropout."""
    def spy_for(name, call):
        def spy(inputs, training=False):
            seen.setdefault(name, []).append(bool(training))
            return call(inputs, training=training)

        return spy

    for name, dropout in dropouts.items():
        object.__setattr__(dropout, "call", spy_for(name, dropout.call))


def _check_training(layer, args, kwargs, expected, dropout):
    dropouts = _active_dropouts(layer)
    seen = {}
    _spy_on(dropouts, seen)
    try:
        for training in (False, None):
            flag = {} if training is None else {"training": training}
            _assert_outputs_equal(_outputs(layer(*args, **kwargs, **flag)), expected,
                                  f"inference (training={training})")
        training_at_inference = sorted(name for name, calls in seen.items() if any(calls))
        assert not training_at_inference, f"dropout in training mode at inference: {seen}"
        seen.clear()
        trained = _outputs(layer(*args, **kwargs, training=True))
    finally:
        for dropout_layer in dropouts.values():
            object.__delattr__(dropout_layer, "call")
    if not dropout:
        # No dropout: nothing to switch off at inference, so training changes nothing.
        assert not dropouts, f"{type(layer).__name__} has dropout: {sorted(dropouts)}"
        _assert_outputs_equal(trained, expected, "training=True without dropout")
        return
    assert dropouts, f"{type(layer).__name__} has no dropout above 0 to check"
    assert not np.allclose(trained[0], expected[0]), "training=True changed nothing"
    idle = sorted(name for name in dropouts if not any(seen.get(name, [])))
    assert not idle, f"dropout not run in training mode: {idle}"


def _check_cache(layer, cached_steps, expected, atol):
    steps = [np.asarray(step) for step in cached_steps(layer)]
    assert len(steps) > 1 and len(steps) == expected[0].shape[1], len(steps)
    np.testing.assert_allclose(np.stack(steps, axis=1), expected[0], atol=atol, rtol=1e-5,
                               err_msg="cached step-by-step output against the uncached one")
