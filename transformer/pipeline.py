"""The translation pipeline, written once: text -> tokens -> encoder -> search ->
cut at `[END]` -> text.

`translate_batch` is the one path from strings to strings. It runs in
TensorFlow ops only, so it works eagerly and in graphs: `Translator`
(`transformer.translate`) compiles it once per search strategy
(`compile_pipeline`), and the SavedModel of `transformer.export` traces the
very same function. The search strategies and their settings are those of
`transformer.decoding.decode`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import keras
import tensorflow as tf

import transformer.model  # noqa: F401 - registers the Keras classes that model.keras names
from transformer import rundir
from transformer.constants import DEFAULT_MAX_OUTPUT_LENGTH, PAD_ID
from transformer.data.tokenizers import load_tokenizers
from transformer.decoding import SEARCH_SETTINGS, decode, output_lengths, output_limits
from transformer.search import length_penalty

__all__ = ["TranslationOutput", "compile_pipeline", "default_max_length", "load_run",
           "tokenize_and_trim", "translate_batch"]

SENTENCES_SPEC = tf.TensorSpec([None], tf.string, name="sentences")
_SCALAR_INT = tf.TensorSpec([], tf.int32)


def tokenize_and_trim(tokenizer, sentences, max_input_length):
    """Tokenizes a batch of strings, trimming rows longer than `max_input_length`.

    A trimmed row keeps its first `max_input_length - 1` tokens and its
    `[END]`. Works eagerly and in graphs.

    Returns:
        `(encoder_tokens, raw_lengths, empty)`: int64 `(batch, input_len)` padded
        with 0, int64 `(batch,)` untrimmed lengths, and bool `(batch,)`, True for
        a sentence with no tokens between `[START]` and `[END]`.
    """
    ragged = tokenizer.tokenize(sentences)  # (batch, None): [START] ... [END]
    ragged = tf.cast(ragged, tf.int64)
    raw_lengths = ragged.row_lengths()  # (batch,)
    head = ragged[:, :-1][:, : max_input_length - 1]  # [START] and at most max - 2 tokens
    trimmed = tf.concat([head, ragged[:, -1:]], axis=1)  # ... and the final [END]
    encoder_tokens = trimmed.to_tensor(default_value=PAD_ID)  # (batch, input_len)
    return encoder_tokens, raw_lengths, raw_lengths <= 2


class TranslationOutput(NamedTuple):
    """What `translate_batch` computes for a batch (`n` hypotheses per sentence)."""

    encoder_tokens: tf.Tensor  # (batch, input_len) int64: the source as the model saw it
    input_lengths: tf.Tensor  # (batch,) int64: source tokens before trimming
    empty: tf.Tensor  # (batch,) bool: no tokens between [START] and [END]
    limits: tf.Tensor  # (batch,) int32: each sentence's most output tokens
    stopped: tf.Tensor  # (batch,) bool: the search stopped at the limit (see `decode`)
    tokens: tf.Tensor  # (batch, n, steps) int64: output tokens, [PAD] after the end
    lengths: tf.Tensor  # (batch, n) int64: output tokens, [END] included; 0 if empty
    scores: tf.Tensor  # (batch, n) float32: what the search ranks by (log P / lp for a beam)
    log_probs: tf.Tensor  # (batch, n) float32: log P(Y | X)
    texts: tf.Tensor  # (batch, n) string: the detokenized outputs


def translate_batch(tokenizers, model, sentences, max_length, extra_length, search, *settings):
    """Translates a batch of strings: the whole pipeline, in TensorFlow ops.

    Args:
        tokenizers: an object with `.source` and `.target` tokenizers.
        model: a `Transformer`.
        sentences: string `(batch,)`.
        max_length: int32 scalar, the most output tokens (at most the model's).
        extra_length: int32 scalar: each output also gets at most its input's
            length plus this many tokens (section 6.1: input length + 50).
        search, settings: the search strategy and its settings, see
            `transformer.decoding.decode`.

    Returns:
        A `TranslationOutput`. An output stops after its first `[END]`, or
        at its sentence's limit; an empty sentence gets no tokens.
    """
    encoder_tokens, input_lengths, empty = tokenize_and_trim(
        tokenizers.source, sentences, int(model.max_length)
    )
    max_length = tf.minimum(max_length, int(model.max_length))
    limits = output_limits(encoder_tokens, max_length, extra_length)  # (batch,)
    tokens, scores, stopped = decode(model, encoder_tokens, limits, empty, search, *settings,
                                     return_stopped=True)
    # Up to [END], or to the sentence's own limit when it stopped there.
    lengths = tf.minimum(output_lengths(tokens), tf.cast(limits, tf.int64)[:, tf.newaxis])
    lengths = tf.where(empty[:, tf.newaxis], tf.constant(0, tf.int64), lengths)  # (batch, n)
    in_output = tf.sequence_mask(lengths, tf.shape(tokens)[2])  # (batch, n, steps)
    tokens = tf.where(in_output, tokens, tf.constant(PAD_ID, tf.int64))
    log_probs = scores
    if search == "beam":  # the search's score is log P / lp: undo the penalty
        log_probs = scores * length_penalty(lengths, settings[1])
    shape = tf.shape(tokens)
    texts = tokenizers.target.detokenize(tf.reshape(tokens, [-1, shape[2]]))  # (batch * n,)
    return TranslationOutput(
        encoder_tokens=encoder_tokens, input_lengths=input_lengths, empty=empty, limits=limits,
        stopped=stopped,
        tokens=tokens, lengths=lengths, scores=scores, log_probs=log_probs,
        texts=tf.reshape(texts, shape[:2]),
    )


def compile_pipeline(tokenizers, model, search):
    """`translate_batch` for one search strategy, compiled once for every shape.

    Returns:
        A `tf.function` `f(sentences, max_length, extra_length, *settings)`
        with a fixed signature (string `(batch,)`, int32, int32 and the
        scalars of `transformer.decoding.SEARCH_SETTINGS[search]`), traced once
        (`f.experimental_get_tracing_count()` stays 1).
    """

    def compiled(sentences, max_length, extra_length, *settings):
        return translate_batch(tokenizers, model, sentences, max_length, extra_length, search,
                               *settings)

    return tf.function(
        compiled,
        input_signature=[SENTENCES_SPEC, _SCALAR_INT, _SCALAR_INT, *SEARCH_SETTINGS[search]],
        autograph=False,
    )


def default_max_length(model, max_length=DEFAULT_MAX_OUTPUT_LENGTH):
    """A translator's cap on output tokens: `max_length`, at most the model's."""
    return min(int(max_length), int(model.max_length))


def load_run(run_dir):
    """The tokenizers and the model of a run directory written by train.py.

    Returns:
        `(tokenizers, model)`.

    Raises:
        transformer.rundir.RunDirError: a one-line message naming what is
            missing or unreadable.
    """
    path = rundir.check_run_dir(run_dir)
    rundir.read_json(path / rundir.CONFIG_FILE)  # a readable config marks a finished run
    try:
        tokenizers = load_tokenizers(path / rundir.TOKENIZERS_DIR)
    except Exception as err:  # noqa: BLE001 - any loading failure is reported in one line
        raise rundir.RunDirError(
            f"Could not load the tokenizers from {str(path / rundir.TOKENIZERS_DIR)!r}: "
            f"{_first_line(err)}"
        ) from err
    try:
        model = keras.saving.load_model(Path(path) / rundir.MODEL_FILE, compile=False)
    except Exception as err:  # noqa: BLE001
        raise rundir.RunDirError(
            f"Could not load the model from {str(path / rundir.MODEL_FILE)!r}: "
            f"{_first_line(err)}"
        ) from err
    return tokenizers, model


def _first_line(err):
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
