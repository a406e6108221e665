"""Decoding a `Transformer`, from token ids and from text: the model as the
search strategies' callback, and the translation pipeline in TensorFlow ops.

`transformer.decoding.search` holds the search loops and knows no model;
`transformer.decoding.translator.Translator` (Python objects in and out) and the
SavedModel of `transformer.decoding.saved_model` both run this module's `translate_batch`.

Decoding is autoregressive (section 3 of Vaswani et al., 2017). The model
exposes the two halves that it needs, `Transformer.encode` (run once per
sentence) and `Transformer.decode_step` (the newest token through the very
layers that training runs, each `MultiHeadAttention` reading and extending
its cached keys and values), with `Transformer.initial_cache`. This module
turns them into the `next_logits(tokens, cache, index)` callback of the
search strategies of `transformer.decoding.search`, and runs them:

- `naive_greedy_decode` is the tutorial's loop: every step re-runs the whole
  `Transformer((context, output_so_far))`, encoder included, and takes the
  arg-max of the last position. It is kept as the reference.
- `decode` runs any strategy object (`Greedy()`, `Beam(4)`, `Sample(seed=1)`
  of `transformer.decoding.strategies`) on the cached step, with one output layout;
  cached greedy decoding gives the naive loop's tokens, much faster.
  `compile_decode` compiles it once per strategy (`Strategy.pipeline_key`),
  the settings being tensor inputs.
- `output_limits`: each sentence's most output tokens, input length + 50
  (section 6.1); `sequence_log_probs` scores given outputs.
- `translate_batch`: strings to strings (tokenize, trim, encode, search, cut
  at `[END]`, detokenize), eagerly or in graphs; `compile_pipeline` compiles
  it once per strategy; `load_run` reads a run directory's tokenizers
  and model.

Conventions: token ids are those of `transformer.constants` (0 `[PAD]`,
2 `[START]`, 3 `[END]`); "output tokens" are the generated tokens without the
leading `[START]`, with `[END]` when it was produced and `[PAD]` after it;
a length counts output tokens, `[END]` included. Masks follow docs/design.md:
1 where attention is NOT allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

import transformer.model  # noqa: F401 - registers the Keras classes that model.keras names
from transformer import rundir
from transformer.constants import (
    DEFAULT_ALPHA,
    DEFAULT_BEAM_SIZE,
    DEFAULT_EXTRA_LENGTH,
    DEFAULT_MAX_OUTPUT_LENGTH,
    END_ID,
    PAD_ID,
    START_ID,
)
from transformer.data.tokenizers import load_tokenizers
from transformer.decoding.search import (
    length_penalty,
    output_lengths,
    repeat_beams,
    run_search,
    search_result,
    setting_specs,
)
from transformer.decoding.strategies import as_strategy

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BEAM_SIZE",
    "DEFAULT_EXTRA_LENGTH",
    "TranslationOutput",
    "compile_decode",
    "compile_pipeline",
    "decode",
    "default_max_length",
    "length_penalty",
    "load_run",
    "naive_greedy_decode",
    "output_lengths",
    "output_limits",
    "sequence_log_probs",
    "start_decoding",
    "tokenize_and_trim",
    "translate_batch",
]

TOKENS_SPEC = tf.TensorSpec([None, None], tf.int64, name="encoder_tokens")
LIMITS_SPEC = tf.TensorSpec([None], tf.int32, name="limits")
FLAGS_SPEC = tf.TensorSpec([None], tf.bool, name="initial_finished")

SENTENCES_SPEC = tf.TensorSpec([None], tf.string, name="sentences")
_SCALAR_INT = tf.TensorSpec([], tf.int32)


# ---------------------------------------------------------------------------
# The reference: the tutorial's loop.


def naive_greedy_decode(model, encoder_tokens, max_length, initial_finished=None):
    """Greedy decoding the tutorial's way: re-run the whole model for every new token.

    At step `t` it computes `Transformer((context, output_so_far))` over the
    whole source and all `t + 1` target tokens, and appends the arg-max of the
    last position. A sentence that has emitted `[END]` is finished and gets
    `[PAD]` from then on; the loop stops when every sentence is finished or
    after `max_length` tokens. This is the reference that `cached_greedy_decode`
    must equal token for token.

    Called eagerly, the `tf.while_loop` is a plain Python loop; inside a
    `tf.function` it compiles into one graph, which is how the benchmark runs
    it (so the comparison measures the caching, not Python overhead).

    Args:
        model: a `Transformer`.
        encoder_tokens: int source tokens `(batch, input_len)`, 0 = padding,
            each row `[START] ... [END]`.
        max_length: the most output tokens to generate.
        initial_finished: optional bool `(batch,)`; these sentences are
            finished from the start (all `[PAD]`), e.g. empty sentences.

    Returns:
        int64 `(batch, steps)` output tokens (no `[START]`).
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    batch_size = tf.shape(encoder_tokens)[0]
    output = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))  # (batch, 1)
    if initial_finished is None:
        initial_finished = tf.zeros([batch_size], tf.bool)

    def cond(step, output, finished):
        return (step < max_length) & ~tf.reduce_all(finished)

    def body(step, output, finished):
        logits = model((encoder_tokens, output), training=False)  # (batch, step + 1, vocab)
        next_token = tf.argmax(logits[:, -1, :], axis=-1, output_type=tf.int64)  # (batch,)
        next_token = tf.where(finished, tf.constant(PAD_ID, tf.int64), next_token)
        finished = finished | tf.equal(next_token, END_ID)
        output = tf.concat([output, next_token[:, tf.newaxis]], axis=1)  # (batch, step + 2)
        return step + 1, output, finished

    _, output, _ = tf.while_loop(
        cond,
        body,
        loop_vars=(tf.constant(0, tf.int32), output,
                   tf.convert_to_tensor(initial_finished, tf.bool)),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None])),
    )
    return output[:, 1:]  # (batch, steps)


# ---------------------------------------------------------------------------
# The model's step as the search strategies' callback.


def start_decoding(model, encoder_tokens, beam_size=1):
    """Encodes the source once and gives the search strategies what they start from.

    Args:
        model: a `Transformer`.
        encoder_tokens: int64 source tokens `(batch, input_len)`, 0 = padding.
        beam_size: rows per sentence (int or int32 scalar): the caches and the
            encoder's memory are repeated, row `b * beam_size + j` for
            hypothesis `j` of sentence `b`.

    Returns:
        `(next_logits, cache)`: the callback `next_logits(tokens, cache, index)`
        -> `(logits, cache)` of `Transformer.decode_step` (`index` is implied
        by the width of `tokens`), and its initial cache (no target position).
    """
    context, padding_mask = model.encode(encoder_tokens)  # (batch, input_len, d_model)
    cache, memory = model.initial_cache(context, padding_mask)
    if not (isinstance(beam_size, int) and beam_size == 1):
        cache, memory = repeat_beams((cache, memory), beam_size)

    def next_logits(tokens, cache, index):
        return model.decode_step(tokens, cache, memory)  # (rows, vocab), cache

    return next_logits, cache


def decode(model, encoder_tokens, limits, initial_finished, search, settings=None, *,
           return_stopped=False):
    """Runs a search strategy on the cached decoder (`transformer.decoding.search.run_search`).

    Args:
        model: a `Transformer`.
        encoder_tokens: int64 `(batch, input_len)`.
        limits: int32 `(batch,)`: each sentence's most output tokens.
        initial_finished: bool `(batch,)`: sentences to skip.
        search: a strategy object (`Greedy()`, `Beam(4, 0.6, 2)`, `Sample(seed=1)`),
            or its class, whose default object runs with `settings`.
        settings: the strategy's settings by name, as numbers or scalar tensors
            (default: `search.settings()`).
        return_stopped: also return bool `(batch,)`, see `run_search`.

    Returns:
        `(tokens, scores)`, int64 `(batch, n, steps)` and float32 `(batch, n)`,
        best first (and `stopped` with `return_stopped`), see `run_search`.
    """
    search = as_strategy(search)
    settings = search.settings() if settings is None else settings
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    return run_search(search, settings, lambda rows: start_decoding(model, encoder_tokens, rows),
                      limits, initial_finished, return_stopped)


def compile_decode(model, search):
    """`decode(model, ...)` for one strategy (an object, or its class's default
    object), compiled once for every shape and setting.

    Returns:
        A `tf.function` `f(encoder_tokens, limits, initial_finished, settings)`
        with a fixed signature (int64 `(batch, input_len)`, int32 `(batch,)`,
        bool `(batch,)` and the dict of scalars `setting_specs(search)`); it
        traces once, whatever the batch size, lengths and settings
        (`f.experimental_get_tracing_count()` stays 1).
    """

    search = as_strategy(search, "search")

    def compiled(encoder_tokens, limits, initial_finished, settings):
        return decode(model, encoder_tokens, limits, initial_finished, search, settings)

    return tf.function(
        compiled,
        input_signature=[TOKENS_SPEC, LIMITS_SPEC, FLAGS_SPEC, setting_specs(search)],
        autograph=False,
    )


def output_limits(encoder_tokens, max_length, extra_length=DEFAULT_EXTRA_LENGTH):
    """Each sentence's most output tokens: its input length + `extra_length`.

    Section 6.1 of Vaswani et al., 2017: "We set the maximum output length
    during inference to input length + 50, but terminate early when
    possible." The input length counts the source's subword tokens between
    `[START]` and `[END]`; the limit never exceeds `max_length`.

    Args:
        encoder_tokens: int source tokens `(batch, input_len)`, 0 = padding.
        max_length: the overall cap (int or int32 scalar).
        extra_length: tokens allowed beyond the input length (int or int32
            scalar); None for no per-sentence limit (every sentence gets
            `max_length`).

    Returns:
        int32 `(batch,)`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens)
    max_length = tf.cast(max_length, tf.int32)
    if extra_length is None:
        return tf.fill([tf.shape(encoder_tokens)[0]], max_length)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(encoder_tokens, PAD_ID), tf.int32), axis=1)
    return tf.minimum(tf.maximum(lengths - 2, 0) + extra_length, max_length)  # (batch,)


# ---------------------------------------------------------------------------
# Scoring given outputs.


def teacher_forced_pass(model, encoder_tokens, output_tokens, lengths, attention=True):
    """One full forward pass over the final output: log-probs and attention weights.

    The decoder input is `[START] y_1 ... y_{n-1}` and the predictions are for
    `y_1 ... y_n`, exactly what decoding computed one step at a time.

    Returns:
        `(token_log_probs, weights)`: float32 `(batch, steps)`, 0 beyond each
        sentence's `lengths`, and the model's attention-weights dict (empty
        when `attention` is False).
    """
    batch_size = tf.shape(output_tokens)[0]
    start = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))
    decoder_input = tf.concat([start, output_tokens[:, :-1]], axis=1)  # (batch, steps)
    if attention:
        logits, weights = model(
            (encoder_tokens, decoder_input), training=False, return_attention_weights=True
        )  # (batch, steps, target_vocab_size)
    else:
        logits, weights = model((encoder_tokens, decoder_input), training=False), {}
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    token_log_probs = tf.gather(log_probs, output_tokens, batch_dims=2)  # (batch, steps)
    in_output = tf.sequence_mask(lengths, tf.shape(output_tokens)[1])  # (batch, steps)
    return tf.where(in_output, token_log_probs, 0.0), weights


def sequence_log_probs(model, encoder_tokens, output_tokens):
    """`log P(Y | X)` of given outputs under `model`, by one teacher-forced pass.

    Args:
        model: a `Transformer`.
        encoder_tokens: int source tokens `(batch, input_len)`.
        output_tokens: int output tokens `(batch, steps)` (no `[START]`); each
            sentence counts up to and including its first `[END]`.

    Returns:
        `(log_probs, lengths)`: float64 numpy `(batch,)` sums of the tokens'
        log-probabilities, and int numpy `(batch,)` output lengths; rank them by
        `log_probs / length_penalty(lengths, alpha)`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    output_tokens = tf.convert_to_tensor(output_tokens, tf.int64)
    lengths = output_lengths(output_tokens)
    token_log_probs, _ = teacher_forced_pass(
        model, encoder_tokens, output_tokens, lengths, attention=False
    )
    return token_log_probs.numpy().astype(np.float64).sum(axis=1), lengths.numpy()


# ---------------------------------------------------------------------------
# From text to text.


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
    scores: tf.Tensor  # (batch, n) float32: the strategy's score (log P / lp for a beam)
    log_probs: tf.Tensor  # (batch, n) float32: log P(Y | X)
    texts: tf.Tensor  # (batch, n) string: the detokenized outputs


def translate_batch(tokenizers, model, sentences, max_length, extra_length, search,
                    settings=None):
    """Translates a batch of strings: the whole pipeline, in TensorFlow ops.

    Args:
        tokenizers: an object with `.source` and `.target` tokenizers.
        model: a `Transformer`.
        sentences: string `(batch,)`.
        max_length: int32 scalar, the most output tokens (at most the model's).
        extra_length: int32 scalar: each output also gets at most its input's
            length plus this many tokens (section 6.1: input length + 50).
        search, settings: the search strategy (an object, or its class with
            its settings as tensors), see `decode`.

    Returns:
        A `TranslationOutput`. An output stops after its first `[END]`, or
        at its sentence's limit; an empty sentence gets no tokens.
    """
    search = as_strategy(search, "search")
    settings = search.settings() if settings is None else settings
    encoder_tokens, input_lengths, empty = tokenize_and_trim(
        tokenizers.source, sentences, int(model.config.max_length)
    )
    max_length = tf.minimum(max_length, int(model.config.max_length))
    limits = output_limits(encoder_tokens, max_length, extra_length)  # (batch,)
    result = search_result(search, settings,
                           lambda rows: start_decoding(model, encoder_tokens, rows),
                           limits, empty)
    # Up to [END], or to the sentence's own limit when it stopped there.
    lengths = output_lengths(result.tokens, limits)
    lengths = tf.where(empty[:, tf.newaxis], tf.constant(0, tf.int64), lengths)  # (batch, n)
    in_output = tf.sequence_mask(lengths, tf.shape(result.tokens)[2])  # (batch, n, steps)
    tokens = tf.where(in_output, result.tokens, tf.constant(PAD_ID, tf.int64))
    shape = tf.shape(tokens)
    texts = tokenizers.target.detokenize(tf.reshape(tokens, [-1, shape[2]]))  # (batch * n,)
    return TranslationOutput(
        encoder_tokens=encoder_tokens, input_lengths=input_lengths, empty=empty, limits=limits,
        stopped=result.stopped, tokens=tokens, lengths=lengths, scores=result.scores,
        log_probs=result.log_probs, texts=tf.reshape(texts, shape[:2]),
    )


def compile_pipeline(tokenizers, model, search):
    """`translate_batch` for one strategy, compiled once for every shape and setting
    (so one serves every strategy of the same `Strategy.pipeline_key`).

    Returns:
        A `tf.function` `f(sentences, max_length, extra_length, settings)` with
        a fixed signature (string `(batch,)`, int32, int32 and the dict of
        scalars `transformer.decoding.search.setting_specs(search)`), traced once
        (`f.experimental_get_tracing_count()` stays 1) whatever the settings.
    """

    search = as_strategy(search, "search")

    def compiled(sentences, max_length, extra_length, settings):
        return translate_batch(tokenizers, model, sentences, max_length, extra_length, search,
                               settings)

    return tf.function(
        compiled,
        input_signature=[SENTENCES_SPEC, _SCALAR_INT, _SCALAR_INT, setting_specs(search)],
        autograph=False,
    )


def default_max_length(model, max_length=DEFAULT_MAX_OUTPUT_LENGTH):
    """A translator's cap on output tokens: `max_length`, at most the model's."""
    return min(int(max_length), int(model.config.max_length))


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
