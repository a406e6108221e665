"""The paper's layers under one Keras backend, run by tests/test_backends.py in
a process of its own (KERAS_BACKEND is set in its environment, before Keras
is imported).

    python tests/backend_layers.py [--check DIR]... [--write DIR] [--fit] [--check-stdin]

`--write DIR` builds every case below with seeded weights and writes, to DIR,
the weights (`<case>.npz` from `get_weights`, or `<case>.weights.h5` for a
`Transformer`), the outputs and attention weights on fixed inputs
(`outputs.npz`) and every layer's `get_config` and weight names
(`layers.json`). `--check DIR` builds the same cases here, loads DIR's weights
and asserts that the outputs match DIR's to 1e-5 (float32) and that the
configs and weight names are equal. `--fit` trains a tiny `Transformer` with
`model.fit` for a few steps and asserts that its loss falls. Under a backend
other than TensorFlow, the TensorFlow-only names must refuse with
`BackendError`. `--check-stdin` then checks each directory named by a line
of the standard input, until it ends, so that one process can check what
others wrote after it (the TensorFlow reference, without a second start).
A JSON line is printed once DIR is written, and the last line printed is a
JSON summary.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import keras
import numpy as np
from keras import ops

import transformer
from transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    MultiHeadAttention,
    PositionalEmbedding,
    Transformer,
    TransformerConfig,
    create_decoder_mask,
    create_look_ahead_mask,
    create_padding_mask,
    positional_encoding,
    scaled_dot_product_attention,
    seams,
    to_keras_attention_mask,
)

VOCAB, D_MODEL, HEADS, DFF = 23, 16, 4, 32
TOLERANCE = 1e-5
CONFIG = TransformerConfig(num_layers=1, d_model=D_MODEL, num_heads=HEADS, dff=DFF,
                           max_length=16, dropout_rate=0.1)


def inputs():
    """The fixed inputs, the same in every process (NumPy's seeded generator)."""
    rng = np.random.default_rng(59)
    source = rng.integers(4, VOCAB, size=(2, 7))
    source[0, 5:] = 0  # padding
    target = rng.integers(4, VOCAB, size=(2, 6))
    target[1, 4:] = 0
    return {
        "source": source, "target": target,
        "x": rng.standard_normal((2, 6, D_MODEL)).astype("float32"),
        "context": rng.standard_normal((2, 7, D_MODEL)).astype("float32"),
        "q": rng.standard_normal((2, HEADS, 6, 4)).astype("float32"),
        "k": rng.standard_normal((2, HEADS, 7, 4)).astype("float32"),
        "v": rng.standard_normal((2, HEADS, 7, 5)).astype("float32"),
    }


def _model(**kwargs):
    return Transformer(num_layers=2, d_model=D_MODEL, num_heads=HEADS, dff=DFF,
                       input_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=16, **kwargs)


def layer_cases():
    """Each case: (name, the layer, a function of the layer and the inputs that
    returns its outputs as a dict of tensors). Built anew in every process."""
    def mha(layer, a):
        out, w = layer(a["x"], a["context"], a["context"], mask=create_padding_mask(a["source"]))
        return {"output": out, "weights": w}

    def encoder_layer(layer, a):
        out, w = layer(a["context"], padding_mask=create_padding_mask(a["source"]))
        return {"output": out, "weights": w}

    def decoder_layer(layer, a):
        out, block1, block2 = layer(a["x"], a["context"],
                                    look_ahead_mask=create_padding_mask(a["target"]),
                                    padding_mask=create_padding_mask(a["source"]))
        return {"output": out, "block1": block1, "block2": block2}

    def encoder(layer, a):
        out, weights = layer(a["source"])
        return {"output": out, **weights}

    def decoder(layer, a):
        out, weights = layer(a["target"], a["context"],
                             padding_mask=create_padding_mask(a["source"]))
        return {"output": out, **weights}

    return [
        ("positional_embedding", PositionalEmbedding(VOCAB, D_MODEL, max_length=16),
         lambda layer, a: {"output": layer(a["target"])}),
        ("multi_head_attention", MultiHeadAttention(D_MODEL, HEADS), mha),
        ("feed_forward", FeedForward(D_MODEL, DFF), lambda layer, a: {"output": layer(a["x"])}),
        ("encoder_layer", EncoderLayer(D_MODEL, HEADS, DFF), encoder_layer),
        ("decoder_layer", DecoderLayer(D_MODEL, HEADS, DFF, normalize_first=True),
         decoder_layer),
        ("encoder", Encoder(CONFIG, VOCAB), encoder),
        ("decoder", Decoder(CONFIG, VOCAB), decoder),
    ]


def model_cases():
    """The `Transformer`s, whose weights travel as `.weights.h5` files."""
    return [("transformer", _model()),
            ("transformer_tied_prenorm", _model(tie_embeddings=True, normalize_first=True))]


def model_outputs(model, a):
    """Logits, every attention weight, and two steps of cached decoding."""
    logits, weights = model((a["source"], a["target"]), return_attention_weights=True)
    outputs = {"logits": logits, **weights}
    context, padding_mask = model.encode(a["source"])
    cache, memory = model.initial_cache(context, padding_mask)
    for step in range(2):
        outputs[f"step{step}"], cache = model.decode_step(a["target"][:, :step + 1], cache, memory)
    return outputs


def function_outputs(a):
    """The functions with no weights: the encoding, the masks, attention."""
    out, w = scaled_dot_product_attention(a["q"], a["k"], a["v"],
                                          mask=create_padding_mask(a["source"]))
    return {
        "positional_encoding": positional_encoding(12, D_MODEL),
        "padding_mask": create_padding_mask(a["source"]),
        "look_ahead_mask": create_look_ahead_mask(6),
        "decoder_mask": create_decoder_mask(a["target"]),
        "keras_mask": ops.cast(to_keras_attention_mask(create_decoder_mask(a["target"])),
                               "float32"),
        "attention_output": out, "attention_weights": w,
    }


def _numpy(outputs, prefix):
    return {f"{prefix}/{key}": ops.convert_to_numpy(value) for key, value in outputs.items()}


def _describe(layer):
    """What must not depend on the backend: the config and the weights' names and shapes."""
    return {"config": json.loads(json.dumps(layer.get_config(), default=str)),
            "weights": [[w.path, list(w.shape)] for w in layer.weights]}


def run_all(a, load_from=None):
    """Builds and calls every case (loading `load_from`'s weights, when given);
    returns (outputs as NumPy arrays, descriptions, the layers and models)."""
    keras.backend.clear_session()  # the same layer names in every build of the cases
    outputs, described, built = _numpy(function_outputs(a), "functions"), {}, {}
    for name, layer, call in layer_cases():
        call(layer, a)  # builds it
        if load_from is not None:
            saved = np.load(load_from / f"{name}.npz")
            layer.set_weights([saved[f"w{i}"] for i in range(len(saved.files))])
        outputs.update(_numpy(call(layer, a), name))
        described[name], built[name] = _describe(layer), layer
    for name, model in model_cases():
        model((a["source"], a["target"]))  # builds it
        if load_from is not None:
            model.load_weights(load_from / f"{name}.weights.h5")
        outputs.update(_numpy(model_outputs(model, a), name))
        described[name], built[name] = _describe(model), model
    return outputs, described, built


def write(directory: Path, a):
    directory.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(59)
    outputs, described, built = run_all(a)
    for name, layer in built.items():
        if isinstance(layer, keras.Model):
            layer.save_weights(directory / f"{name}.weights.h5")
        else:
            np.savez(directory / f"{name}.npz",
                     **{f"w{i}": w for i, w in enumerate(layer.get_weights())})
    np.savez(directory / "outputs.npz", **outputs)
    (directory / "layers.json").write_text(json.dumps(described, indent=1))
    return len(outputs)


def check(directory: Path, a):
    """Asserts this backend's outputs on `directory`'s weights equal its outputs;
    returns the largest difference."""
    outputs, described, _ = run_all(a, load_from=directory)
    expected = np.load(directory / "outputs.npz")
    assert sorted(outputs) == sorted(expected.files), "the cases' outputs differ"
    largest = 0.0
    for key in expected.files:
        got, want = np.asarray(outputs[key], np.float64), np.asarray(expected[key], np.float64)
        assert got.shape == want.shape, f"{key}: shape {got.shape}, expected {want.shape}"
        np.testing.assert_allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE, err_msg=key)
        largest = max(largest, float(np.max(np.abs(got - want), initial=0.0)))
    saved = json.loads((directory / "layers.json").read_text())
    for name, description in described.items():
        assert description == saved[name], f"{name}: config or weights differ\n{description}"
    return largest


def fit(a):
    """A few steps of `model.fit` on a tiny model: the loss falls, and stays finite."""
    keras.utils.set_random_seed(1)
    model = Transformer(num_layers=1, d_model=D_MODEL, num_heads=2, dff=DFF,
                        input_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=16)
    # XLA only where the backend always compiles with it (JAX); TensorFlow's step
    # as train.py compiles it (a tf.function without XLA, its default), which
    # also traces in a fraction of XLA's time.
    model.compile(optimizer=seams.adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                   ignore_class=0),
                  jit_compile=keras.backend.backend() == "jax")
    source = np.tile(a["source"], (4, 1))
    target = np.tile(a["target"], (4, 1))
    history = model.fit((source, target[:, :-1]), target[:, 1:], batch_size=4, epochs=5,
                        verbose=0, shuffle=False)
    losses = [float(loss) for loss in history.history["loss"]]
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < 0.8 * losses[0], f"the loss did not fall: {losses}"
    return losses


def refusals():
    """The TensorFlow-only parts that refuse (`BackendError`, one line): all of
    them under another backend, none under TensorFlow, where the same calls
    fail for their own reasons (a missing run) or work."""
    refused = []
    for name in ("masked_loss", "CustomSchedule", "Translator"):
        try:
            getattr(transformer, name)
        except seams.BackendError as err:
            assert "\n" not in str(err) and "KERAS_BACKEND=tensorflow" in str(err), str(err)
            refused.append(name)
    attempts = {"seams.token_losses": lambda: seams.token_losses(None, None, 0.0)}
    from transformer.decoding.translator import Translator

    attempts["Translator.from_run"] = lambda: Translator.from_run("no-such-run")
    for name, attempt in attempts.items():
        try:
            attempt()
        except seams.BackendError:
            refused.append(name)
        except Exception:  # noqa: BLE001, S110 - under TensorFlow: no run, no tensors
            pass
    if keras.backend.backend() != "tensorflow":  # under TensorFlow it would train
        from transformer.cli import train as train_cli

        with tempfile.TemporaryDirectory() as folder, \
                contextlib.redirect_stderr(io.StringIO()) as stderr:
            status = train_cli.main(["--epochs", "1", "--output-dir", folder + "/run"])
        lines = stderr.getvalue().strip().splitlines()
        if status == 1 and len(lines) == 1 and "KERAS_BACKEND=tensorflow" in lines[0]:
            refused.append("train.py")
    return refused


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, action="append", default=[])
    parser.add_argument("--write", type=Path)
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--check-stdin", action="store_true")
    args = parser.parse_args(argv)
    a = inputs()
    started, seconds = time.perf_counter(), {}
    summary = {"backend": keras.backend.backend(), "seconds": seconds, "checked": {}}
    for directory in args.check:
        summary["checked"][str(directory)] = check(directory, a)
    seconds["check"] = time.perf_counter() - started - sum(seconds.values())
    if args.write:
        summary["written"] = write(args.write, a)
        seconds["write"] = time.perf_counter() - started - sum(seconds.values())
        print(json.dumps({"written": str(args.write)}), flush=True)
    if args.fit:
        summary["fit_losses"] = fit(a)
        seconds["fit"] = time.perf_counter() - started - sum(seconds.values())
    summary["refused"] = refusals()
    if args.check_stdin:
        for line in sys.stdin:
            if line.strip():
                summary["checked"][line.strip()] = check(Path(line.strip()), a)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
