"""Random models, one-output decoders and run-directory helpers for the decoding,
translation and export tests.

Trained-model tests use the session's `tiny_run`, `run_dir`, `test_pairs` and
`translator` fixtures (tests/conftest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from transformer import Transformer
from transformer.constants import DEFAULT_ALPHA, DEFAULT_BEAM_SIZE, END_ID, START_ID
from transformer.decoding.pipeline import decode
from transformer.decoding.strategies import Beam, Greedy, Sample
from transformer.rundir import CONFIG_FILE, MODEL_FILE, TOKENIZERS_DIR

SOURCE_VOCAB = 60
TARGET_VOCAB = 50


def random_model(seed, end_bias=0.0, target_vocab_size=TARGET_VOCAB, max_length=64,
                 tie_embeddings=False, normalize_first=False, num_decoder_layers=None):
    """A tiny Transformer with random weights whose greedy outputs vary.

    Keras's default initialisation makes a small random decoder repeat one
    token whatever its input, which would make "cached equals naive" an easy
    test. Larger embeddings and sharper attention (bigger query and key
    weights) make every output depend on the source, the position and the
    previous tokens. `end_bias` raises the `[END]` logit so that sentences of
    a batch stop at different steps. With `tie_embeddings` the source
    vocabulary is the target's (one table for both embeddings and the
    logits, which then have no bias: `end_bias` must be 0). With
    `normalize_first`, pre-norm layers; `num_decoder_layers`, a decoder of
    another depth than the encoder's 2 layers.
    """
    keras.utils.set_random_seed(seed)
    model = Transformer(
        num_layers=2, d_model=32, num_heads=4, dff=64,
        input_vocab_size=target_vocab_size if tie_embeddings else SOURCE_VOCAB,
        target_vocab_size=target_vocab_size, max_length=max_length, dropout_rate=0.1,
        tie_embeddings=tie_embeddings, normalize_first=normalize_first,
        num_decoder_layers=num_decoder_layers,
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
    if tie_embeddings:
        assert not end_bias, "a tied output projection has no bias"
        return model
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


def first_end_lengths(tokens):
    """Per row, the length up to and including the first `[END]`, or None without one."""
    return [int(np.argmax(row == END_ID)) + 1 if (row == END_ID).any() else None
            for row in np.asarray(tokens)]


def _limits(encoder_tokens, max_length, row_limits):
    """Every sentence's most output tokens: `row_limits` capped at `max_length`, or it."""
    if row_limits is not None:
        return tf.minimum(tf.convert_to_tensor(row_limits, tf.int32), max_length)
    return tf.fill([tf.shape(encoder_tokens)[0]], tf.cast(max_length, tf.int32))


def cached_greedy_decode(model, encoder_tokens, max_length, initial_finished=None,
                         return_log_probs=False, row_limits=None):
    """`decode` with `Greedy()`: int64 `(batch, steps)` tokens, and with
    `return_log_probs` float32 `(batch,)` log P too."""
    tokens, log_probs = decode(model, encoder_tokens, _limits(encoder_tokens, max_length,
                               row_limits), initial_finished, Greedy())
    return (tokens[:, 0], log_probs[:, 0]) if return_log_probs else tokens[:, 0]


def beam_search_decode(model, encoder_tokens, max_length, beam_size=DEFAULT_BEAM_SIZE,
                       alpha=DEFAULT_ALPHA, initial_finished=None, row_limits=None):
    """`decode` with `Beam(beam_size, alpha)`: the best hypothesis's tokens and score."""
    tokens, scores = decode(model, encoder_tokens, _limits(encoder_tokens, max_length,
                            row_limits), initial_finished, Beam(beam_size, alpha))
    return tokens[:, 0], scores[:, 0]


def sample_decode(model, encoder_tokens, max_length, seed, temperature=1.0, top_k=0,
                  top_p=1.0, initial_finished=None, row_limits=None):
    """`decode` with `Sample`'s settings (`top_k = 0` and `top_p = 1` keep every
    token): `(tokens, log_probs)`, `(batch, steps)` and `(batch,)`."""
    settings = {"seed": seed, "temperature": temperature, "top_k": top_k, "top_p": top_p}
    tokens, log_probs = decode(model, encoder_tokens, _limits(encoder_tokens, max_length,
                               row_limits), initial_finished, Sample, settings)
    return tokens[:, 0], log_probs[:, 0]


def copy_run(run_dir, destination):
    """Copies what a translator needs of a run directory (config, tokenizers, model)."""
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG_FILE, MODEL_FILE):
        shutil.copy(Path(run_dir) / name, destination / name)
    shutil.copytree(Path(run_dir) / TOKENIZERS_DIR, destination / TOKENIZERS_DIR)
    return destination
