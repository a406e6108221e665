"""Models and run directories shared by test_translate.py and test_translate_cli.py.

`trained_run()` trains a tiny translator on the toy corpus once per test
process (a few seconds of `model.fit`) and writes a run directory the way
train.py lays one out (config.json, tokenizers/, model.keras).
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import keras
import numpy as np

from transformer import Transformer
from transformer.constants import END_ID, START_ID
from transformer.rundir import CONFIG_FILE, MODEL_FILE, TOKENIZERS_DIR

SOURCE_VOCAB = 60
TARGET_VOCAB = 50


def random_model(seed, end_bias=0.0, target_vocab_size=TARGET_VOCAB, max_length=64):
    """A tiny Transformer with random weights whose greedy outputs vary.

    Keras's default initialisation makes a small random decoder repeat one
    token whatever its input, which would make "cached equals naive" an easy
    test. Larger embeddings and sharper attention (bigger query and key
    weights) make every output depend on the source, the position and the
    previous tokens. `end_bias` raises the `[END]` logit so that sentences of
    a batch stop at different steps.
    """
    keras.utils.set_random_seed(seed)
    model = Transformer(
        num_layers=2, d_model=32, num_heads=4, dff=64, input_vocab_size=SOURCE_VOCAB,
        target_vocab_size=target_vocab_size, max_length=max_length, dropout_rate=0.1,
    )
    model.build(((None, None), (None, None)))
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        shape = tuple(weight.shape)
        if "embeddings" in weight.path:
            weight.assign(rng.normal(0.0, 1.0, shape).astype(np.float32))
        elif len(shape) == 2:
            scale = 3.0 if ("/wq/" in weight.path or "/wk/" in weight.path) else 1.0
            weight.assign(rng.normal(0.0, scale / np.sqrt(shape[0]), shape).astype(np.float32))
    bias = model.final_layer.bias.numpy()
    bias[END_ID] += end_bias
    model.final_layer.bias.assign(bias)
    return model


def random_sources(seed, lengths, vocab_size=SOURCE_VOCAB):
    """A zero-padded batch of random source rows `[START] ... [END]` of the given lengths."""
    rng = np.random.default_rng(seed)
    batch = np.zeros((len(lengths), max(lengths)), np.int64)
    for row, length in enumerate(lengths):
        batch[row, :length] = rng.integers(4, vocab_size, length)
        batch[row, 0] = START_ID
        batch[row, length - 1] = END_ID
    return batch


@functools.lru_cache(maxsize=1)
def trained_run():
    """Trains a tiny toy translator once and writes its run directory.

    Returns:
        `(run_dir, test_pairs)`: the run directory (a temporary directory removed
        at exit) and held-out `(portuguese, english)` pairs.
    """
    from transformer.data.batching import make_batches
    from transformer.data.tokenizers import build_tokenizers, save_tokenizers
    from transformer.data.toy import generate_toy_corpus
    from transformer.training import masked_accuracy, masked_loss

    keras.utils.set_random_seed(0)
    corpus = generate_toy_corpus(seed=0, n_train=1000, n_valid=10, n_test=40)
    tokenizers = build_tokenizers(corpus.train, vocab_size=400)
    model = Transformer(
        num_layers=2, d_model=64, num_heads=4, dff=128,
        input_vocab_size=int(tokenizers.source.get_vocab_size()),
        target_vocab_size=int(tokenizers.target.get_vocab_size()),
        max_length=40, dropout_rate=0.0,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3), loss=masked_loss, metrics=[masked_accuracy]
    )
    batches = make_batches(corpus.train, tokenizers, batch_size=64, max_tokens=40, seed=0)
    model.fit(batches.repeat(), steps_per_epoch=150, epochs=1, verbose=0)

    run_dir = Path(tempfile.mkdtemp(prefix="translate-test-run-"))
    atexit.register(shutil.rmtree, run_dir, ignore_errors=True)
    save_tokenizers(tokenizers, run_dir / TOKENIZERS_DIR)
    model.save(run_dir / MODEL_FILE)
    config = {"model": {"num_layers": 2, "d_model": 64, "num_heads": 4, "dff": 128,
                        "max_length": 40, "dropout_rate": 0.0}}
    (run_dir / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
    return run_dir, corpus.test
