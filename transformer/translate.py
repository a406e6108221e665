"""Translating with a trained Transformer: greedy and beam search, cached decoding, export.

Decoding is autoregressive (section 3 of Vaswani et al., 2017): the decoder
starts from `[START]` and emits one token at a time, each conditioned on the
source and on every token emitted before it, until `[END]`.

- `naive_greedy_decode` is the tutorial's loop: every step re-runs the whole
  `Transformer((context, output_so_far))`, encoder included, and takes the
  argmax of the last position. It is kept as the reference.
- `cached_greedy_decode` gives the same tokens, much faster: the encoder runs
  once, the encoder-decoder keys and values are projected once per layer, and
  each step feeds only the newest token (at its position) through the
  decoder, appending its self-attention keys and values to a per-layer cache.
- `beam_search_decode` is the paper's beam search (section 6.1: beam size 4,
  length penalty alpha = 0.6) with the GNMT length penalty
  `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016), on the same cache.
- `Translator` maps text to text with the tokenizers, and hands back the
  tokens and every attention weight of the final output.
- `export_translator` writes a SavedModel that maps strings to strings with the
  tokenizers inside; it reloads with only `tensorflow` and `tensorflow_text`.

The decoding loops are explicit `tf.while_loop`s compiled with
`tf.function(autograph=False)` and an `input_signature` with `None`
dimensions: one trace serves every batch size and sentence length, and
nothing depends on AutoGraph (which cannot always read the source of code
defined in a Jupyter notebook).

Conventions: token ids are those of `transformer.constants` (0 `[PAD]`,
2 `[START]`, 3 `[END]`); "output tokens" are the generated tokens without the
leading `[START]`, with `[END]` when it was produced and `[PAD]` after it;
`max_length` counts output tokens, `[END]` included. Masks follow DESIGN.md:
1 where attention is NOT allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import numbers
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import transformer.model  # noqa: F401 - registers the Keras classes that model.keras names
from transformer import rundir
from transformer.attention import scaled_dot_product_attention
from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.masking import create_padding_mask

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BEAM_SIZE",
    "DEFAULT_MAX_LENGTH",
    "Translation",
    "Translator",
    "beam_search_decode",
    "cached_greedy_decode",
    "compile_beam_search",
    "compile_greedy_decode",
    "export_translator",
    "length_penalty",
    "naive_greedy_decode",
    "sequence_log_probs",
]

# The paper's beam search settings (section 6.1), used when a beam is asked for.
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6
# The tutorial's cap on output tokens; never more than the model's `max_length`.
DEFAULT_MAX_LENGTH = 128

_TOKENS_SPEC = tf.TensorSpec([None, None], tf.int64, name="encoder_tokens")
_SCALAR_INT = tf.TensorSpec([], tf.int32)
_SCALAR_FLOAT = tf.TensorSpec([], tf.float32)
_SCALAR_BOOL = tf.TensorSpec([], tf.bool)
_FLAGS_SPEC = tf.TensorSpec([None], tf.bool, name="initial_finished")


def length_penalty(length, alpha):
    """The GNMT length penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016).

    Beam search ranks a finished hypothesis by `log P(Y | X) / lp(Y)`; with
    `alpha = 0` that is the plain log-probability, and larger `alpha` favours
    longer outputs. `|Y|` counts the output tokens, `[END]` included.

    Args:
        length: number of output tokens (a number, array or tensor).
        alpha: the penalty's exponent, `>= 0`.

    Returns:
        The penalty, of the type of `length` (a tensor for tensors, float32).

    Example:

    >>> round(float(length_penalty(7, 0.6)), 4)   # ((5 + 7) / 6) ** 0.6
    1.5157
    """
    if isinstance(length, tf.Tensor) or isinstance(alpha, tf.Tensor):
        length = tf.cast(length, tf.float32)
        return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))
    return np.power((5.0 + np.asarray(length, np.float64)) / 6.0, alpha)


# ---------------------------------------------------------------------------
# The reference: the tutorial's loop.


def naive_greedy_decode(
    model, encoder_tokens, max_length, force_length=False, initial_finished=None
):
    """Greedy decoding the tutorial's way: re-run the whole model for every new token.

    At step `t` it computes `Transformer((context, output_so_far))` over the
    whole source and all `t + 1` target tokens, and appends the argmax of the
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
        force_length: ignore `[END]` and generate exactly `max_length` tokens
            (for benchmarks).
        initial_finished: optional bool `(batch,)`; these sentences are
            finished from the start (all `[PAD]`), e.g. empty sentences.

    Returns:
        int64 `(batch, steps)` output tokens (no `[START]`).
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    force_length = tf.convert_to_tensor(force_length, tf.bool)
    batch_size = tf.shape(encoder_tokens)[0]
    if initial_finished is None:
        initial_finished = tf.zeros([batch_size], tf.bool)
    output = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))  # (batch, 1)

    def cond(step, output, finished):
        return (step < max_length) & (force_length | ~tf.reduce_all(finished))

    def body(step, output, finished):
        logits = model((encoder_tokens, output), training=False)  # (batch, step + 1, vocab)
        next_token = tf.argmax(logits[:, -1, :], axis=-1, output_type=tf.int64)  # (batch,)
        next_token = tf.where(finished, tf.constant(PAD_ID, tf.int64), next_token)
        finished = finished | (tf.equal(next_token, END_ID) & ~force_length)
        output = tf.concat([output, next_token[:, tf.newaxis]], axis=1)  # (batch, step + 2)
        return step + 1, output, finished

    _, output, _ = tf.while_loop(
        cond,
        body,
        loop_vars=(
            tf.constant(0, tf.int32), output, tf.convert_to_tensor(initial_finished, tf.bool)
        ),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None])),
    )
    return output[:, 1:]  # (batch, steps)


# ---------------------------------------------------------------------------
# Cached incremental decoding.


class _CachedDecoder:
    """The decoder of a `Transformer` run one position at a time, with caches.

    It reuses the model's own sublayers and helpers (embedding, every layer's
    attention projections `wq`/`wk`/`wv`/`dense`, `scaled_dot_product_attention`,
    the residual + layer norm of each sublayer (`_residual`, `_ffn_block`) and
    the final layer), so it computes the same function as `Decoder.call` at
    inference (dropout is the identity then), one query position at a time:

    - `encode` runs the encoder once and projects the encoder-decoder keys and
      values of every layer once (`MultiHeadAttention.project_keys_values`).
    - `step` embeds the newest token at its position and, in every layer,
      projects its self-attention key and value, appends them to the layer's
      cache and attends over the cache (earlier positions only, so no
      look-ahead mask is needed), then over the cached encoder keys.

    The decoder's target-padding mask is reproduced: a cached position whose
    token is `[PAD]` is masked as a key, exactly as `Decoder.call` does.
    """

    def __init__(self, model):
        self.model = model
        self.decoder = model.decoder
        self.layers = list(model.decoder.dec_layers)
        self.num_heads = model.num_heads
        self.depth = model.d_model // model.num_heads

    def encode(self, encoder_tokens):
        """Returns `(cross_kv, cross_mask)`: per-layer projected encoder keys/values."""
        cross_mask = create_padding_mask(encoder_tokens)  # (batch, 1, 1, input_len)
        context, _ = self.model.encoder(
            encoder_tokens, padding_mask=cross_mask, training=False
        )  # (batch, input_len, d_model)
        cross_kv = [
            layer.cross_attention.mha.project_keys_values(context, context)
            for layer in self.layers
        ]  # each (batch, num_heads, input_len, depth)
        return cross_kv, cross_mask

    def empty_cache(self, batch_size):
        """Per-layer `(keys, values)` of shape `(batch, num_heads, 0, depth)`."""
        dtype = self.model.compute_dtype
        empty = tf.zeros([batch_size, self.num_heads, 0, self.depth], dtype=dtype)
        return [(empty, empty) for _ in self.layers]

    def cache_shape_invariants(self):
        shape = tf.TensorShape([None, self.num_heads, None, self.depth])
        return [(shape, shape) for _ in self.layers]

    def step(self, output_so_far, position, cache, cross_kv, cross_mask):
        """Runs the newest token of `output_so_far` through the decoder.

        The hidden state of the one new position is kept 2-D, `(batch, d_model)`,
        so every `Dense` sublayer is a single matrix product.

        Args:
            output_so_far: int64 `(batch, position + 1)`, `[START]` first; only
                the last column is embedded, the others are used for the
                target-padding mask.
            position: int32 scalar, the position of the newest token.
            cache: per-layer `(keys, values)`, `(batch, heads, position, depth)`.
            cross_kv, cross_mask: from `encode`.

        Returns:
            `(logits, cache)`: float32 `(batch, target_vocab_size)` for the next
            token, and the caches grown to `position + 1` positions.
        """
        newest = tf.reshape(output_so_far[:, -1], [-1, 1])  # (batch, 1)
        x = self.decoder.pos_embedding(newest, start_position=position)  # (batch, 1, d_model)
        x = tf.reshape(x, [-1, self.model.d_model])  # (batch, d_model)
        self_mask = create_padding_mask(output_so_far)  # (batch, 1, 1, position + 1)
        new_cache = []
        for layer, (k_cache, v_cache), (k_ctx, v_ctx) in zip(
            self.layers, cache, cross_kv, strict=True
        ):
            # Masked decoder self-attention (3.2.3): the query sees the cached
            # positions and itself; the future is not computed yet.
            block = layer.causal_self_attention
            k_cache = tf.concat(
                [k_cache, self._split_one(block.mha.wk(x))], axis=2
            )  # (batch, heads, position + 1, depth)
            v_cache = tf.concat(
                [v_cache, self._split_one(block.mha.wv(x))], axis=2
            )  # (batch, heads, position + 1, depth)
            attn = self._attend_one(block.mha, x, k_cache, v_cache, self_mask)
            # The layers' own residual + layer norm, so the numbers are theirs.
            x = block._residual(x, attn, training=False)  # (batch, d_model)
            # Encoder-decoder attention over the keys and values projected once.
            block = layer.cross_attention
            attn = self._attend_one(block.mha, x, k_ctx, v_ctx, cross_mask)
            x = block._residual(x, attn, training=False)  # (batch, d_model)
            x = layer._ffn_block(x, training=False)  # (batch, d_model)
            new_cache.append((k_cache, v_cache))
        logits = self.model.final_layer(x)  # (batch, target_vocab_size)
        return tf.cast(logits, tf.float32), new_cache

    def _split_one(self, x):
        """`split_heads` for one position: `(batch, d_model)` -> `(batch, heads, 1, depth)`."""
        return tf.reshape(x, [-1, self.num_heads, 1, self.depth])

    def _attend_one(self, mha, x, k_heads, v_heads, mask):
        """`mha.attend` (sections 3.2.1-3.2.2) for the query of one position."""
        q = self._split_one(mha.wq(x))  # (batch, heads, 1, depth)
        out, _ = scaled_dot_product_attention(q, k_heads, v_heads, mask)  # (batch, heads, 1, depth)
        return mha.dense(tf.reshape(out, [-1, self.model.d_model]))  # (batch, d_model)


def cached_greedy_decode(
    model, encoder_tokens, max_length, force_length=False, initial_finished=None
):
    """Greedy decoding with cached keys and values: the naive loop's tokens, faster.

    Runs as a `tf.while_loop`, so it compiles into one graph under `tf.function`
    (see `compile_greedy_decode`); called eagerly it loops in Python.

    Args:
        model: a `Transformer`.
        encoder_tokens: int64 source tokens `(batch, input_len)`, 0 = padding.
        max_length: the most output tokens to generate (int or int32 scalar).
        force_length: ignore `[END]` and generate exactly `max_length` tokens.
        initial_finished: optional bool `(batch,)`: sentences finished from the
            start (all `[PAD]`).

    Returns:
        int64 `(batch, steps)` output tokens (no `[START]`); a finished sentence
        has `[PAD]` after its `[END]`. `steps <= max_length`, and the loop stops
        as soon as every sentence has emitted `[END]`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    force_length = tf.convert_to_tensor(force_length, tf.bool)
    batch_size = tf.shape(encoder_tokens)[0]
    if initial_finished is None:
        initial_finished = tf.zeros([batch_size], tf.bool)
    decoder = _CachedDecoder(model)
    cross_kv, cross_mask = decoder.encode(encoder_tokens)
    output = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))  # (batch, 1)

    def cond(step, output, finished, cache):
        return (step < max_length) & (force_length | ~tf.reduce_all(finished))

    def body(step, output, finished, cache):
        logits, cache = decoder.step(output, step, cache, cross_kv, cross_mask)
        next_token = tf.argmax(logits, axis=-1, output_type=tf.int64)  # (batch,)
        next_token = tf.where(finished, tf.constant(PAD_ID, tf.int64), next_token)
        finished = finished | (tf.equal(next_token, END_ID) & ~force_length)
        output = tf.concat([output, next_token[:, tf.newaxis]], axis=1)  # (batch, step + 2)
        return step + 1, output, finished, cache

    _, output, _, _ = tf.while_loop(
        cond,
        body,
        loop_vars=(
            tf.constant(0, tf.int32),
            output,
            tf.convert_to_tensor(initial_finished, tf.bool),
            decoder.empty_cache(batch_size),
        ),
        shape_invariants=(
            tf.TensorShape([]),
            tf.TensorShape([None, None]),
            tf.TensorShape([None]),
            decoder.cache_shape_invariants(),
        ),
    )
    return output[:, 1:]  # (batch, steps)


def beam_search_decode(
    model, encoder_tokens, max_length, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA,
    initial_finished=None,
):
    """Batched beam search with the GNMT length penalty, on the cached decoder.

    Section 6.1 of Vaswani et al., 2017: "we used beam search with a beam size
    of 4 and length penalty alpha = 0.6". A hypothesis `Y` is ranked by
    `log P(Y | X) / lp(Y)` with `lp(Y) = ((5 + |Y|) / 6) ** alpha`.

    Every step extends each of the `beam_size` live hypotheses of a sentence by
    every token and keeps the `2 * beam_size` best candidates by
    log-probability. Candidates ending in `[END]` that rank among the first
    `beam_size` are finished (scored with the length penalty) and the
    `beam_size` best finished hypotheses are kept; the `beam_size` best
    candidates that do not end stay live (as in fairseq). A sentence is done
    once it has `beam_size` finished hypotheses and its best live hypothesis,
    scored at its current length, is no better than the worst of them (as in
    Hugging Face's beam search; with `alpha = 0` this bound is exact, since a
    live hypothesis can only lose probability). At `max_length`, the live
    hypotheses are finished as they are. The answer is the best finished
    hypothesis. With `beam_size = 1` this is exactly greedy decoding: the
    argmax either ends the sentence (every other continuation scores lower)
    or is the one live token.

    Args:
        model: a `Transformer`.
        encoder_tokens: int64 source tokens `(batch, input_len)`, 0 = padding.
        max_length: the most output tokens per hypothesis (int or int32 scalar).
        beam_size: live hypotheses per sentence (int or int32 scalar, >= 1).
        alpha: length-penalty exponent (float or float32 scalar, >= 0).
        initial_finished: optional bool `(batch,)`: sentences to skip (their
            output is all `[PAD]` and their score `-inf`).

    Returns:
        `(tokens, scores)`: int64 `(batch, max_length)` output tokens of the best
        hypothesis, `[PAD]` after `[END]`, and float32 `(batch,)` its score
        `log P / lp`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    k = tf.convert_to_tensor(beam_size, tf.int32)
    alpha = tf.convert_to_tensor(alpha, tf.float32)
    batch_size = tf.shape(encoder_tokens)[0]
    if initial_finished is None:
        initial_finished = tf.zeros([batch_size], tf.bool)
    vocab_size = model.target_vocab_size
    decoder = _CachedDecoder(model)
    cross_kv, cross_mask = decoder.encode(encoder_tokens)
    # Every beam gets its own copy of the encoder's keys and values, rows b * k + j.
    cross_kv = [(tf.repeat(kc, k, axis=0), tf.repeat(vc, k, axis=0)) for kc, vc in cross_kv]
    cross_mask = tf.repeat(cross_mask, k, axis=0)  # (batch * k, 1, 1, input_len)
    neg_inf = tf.constant(-np.inf, tf.float32)
    row_offsets = tf.range(batch_size)[:, tf.newaxis] * k  # (batch, 1)
    first_k = tf.range(2 * k) < k  # (2k,): ranks that may finish

    alive = tf.fill([batch_size * k, 1], tf.constant(START_ID, tf.int64))  # (batch * k, 1)
    # All beams start as the same `[START]`; only the first is live, or the
    # first step would pick the same token k times.
    alive_log_probs = tf.concat(
        [tf.zeros([batch_size, 1]), tf.fill([batch_size, k - 1], neg_inf)], axis=1
    )  # (batch, k)
    finished_tokens = tf.fill(
        [batch_size, k, max_length], tf.constant(PAD_ID, tf.int64)
    )  # (batch, k, max_length)
    finished_scores = tf.fill([batch_size, k], neg_inf)  # (batch, k), best first
    num_finished = tf.zeros([batch_size], tf.int32)

    def merge(finished_tokens, finished_scores, tokens, scores):
        """Keeps the k best of the finished and the new hypotheses."""
        all_scores = tf.concat([finished_scores, scores], axis=1)  # (batch, k + n)
        all_tokens = tf.concat([finished_tokens, tokens], axis=1)  # (batch, k + n, max_length)
        best_scores, best = tf.math.top_k(all_scores, k=k)  # (batch, k)
        return tf.gather(all_tokens, best, batch_dims=1), best_scores

    def pad_to_max_length(sequences):
        """(batch, n, len) without `[START]` -> (batch, n, max_length)."""
        pad = max_length - tf.shape(sequences)[2]
        return tf.pad(sequences, [[0, 0], [0, 0], [0, pad]], constant_values=PAD_ID)

    def cond(step, alive, alive_log_probs, cache, finished_tokens, finished_scores,
             num_finished, done):
        return (step < max_length) & ~tf.reduce_all(done)

    def body(step, alive, alive_log_probs, cache, finished_tokens, finished_scores,
             num_finished, done):
        logits, cache = decoder.step(alive, step, cache, cross_kv, cross_mask)
        log_probs = tf.nn.log_softmax(logits, axis=-1)  # (batch * k, vocab)
        log_probs = tf.reshape(log_probs, [batch_size, k, vocab_size])  # (batch, k, vocab)
        candidates = alive_log_probs[:, :, tf.newaxis] + log_probs  # (batch, k, vocab)
        candidates = tf.reshape(candidates, [batch_size, k * vocab_size])  # (batch, k * vocab)
        cand_log_probs, cand_index = tf.math.top_k(candidates, k=2 * k)  # (batch, 2k)
        cand_beam = cand_index // vocab_size  # (batch, 2k)
        cand_token = tf.cast(cand_index % vocab_size, tf.int64)  # (batch, 2k)
        cand_rows = row_offsets + cand_beam  # (batch, 2k) rows of `alive` and caches
        cand_seqs = tf.gather(alive, cand_rows)  # (batch, 2k, step + 1)
        cand_seqs = tf.concat([cand_seqs, cand_token[:, :, tf.newaxis]], axis=2)  # (..., step + 2)

        # Candidates ending in [END] among the first k ranks finish.
        is_end = tf.equal(cand_token, END_ID)  # (batch, 2k)
        finishing = is_end & first_k[tf.newaxis, :] & ~done[:, tf.newaxis]  # (batch, 2k)
        penalty = length_penalty(step + 1, alpha)
        new_scores = tf.where(finishing, cand_log_probs / penalty, neg_inf)  # (batch, 2k)
        finished_tokens, finished_scores = merge(
            finished_tokens, finished_scores, pad_to_max_length(cand_seqs[:, :, 1:]), new_scores
        )
        num_finished += tf.reduce_sum(tf.cast(finishing, tf.int32), axis=1)

        # The k best candidates that did not end stay live.
        alive_log_probs, keep = tf.math.top_k(
            tf.where(is_end, neg_inf, cand_log_probs), k=k
        )  # (batch, k), best first
        # Done: k finished, none worse than the best live hypothesis at its length.
        best_alive = alive_log_probs[:, 0] / length_penalty(step + 1, alpha)  # (batch,)
        done = done | ((num_finished >= k) & (finished_scores[:, -1] >= best_alive))
        alive = tf.reshape(
            tf.gather(cand_seqs, keep, batch_dims=1), [batch_size * k, step + 2]
        )  # (batch * k, step + 2)
        rows = tf.reshape(tf.gather(cand_rows, keep, batch_dims=1), [-1])  # (batch * k,)
        cache = [(tf.gather(kc, rows), tf.gather(vc, rows)) for kc, vc in cache]
        return (step + 1, alive, alive_log_probs, cache, finished_tokens, finished_scores,
                num_finished, done)

    step, alive, alive_log_probs, _, finished_tokens, finished_scores, _, done = tf.while_loop(
        cond,
        body,
        loop_vars=(
            tf.constant(0, tf.int32), alive, alive_log_probs,
            decoder.empty_cache(batch_size * k), finished_tokens, finished_scores,
            num_finished, tf.convert_to_tensor(initial_finished, tf.bool),
        ),
        shape_invariants=(
            tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None, None]),
            decoder.cache_shape_invariants(), tf.TensorShape([None, None, None]),
            tf.TensorShape([None, None]), tf.TensorShape([None]), tf.TensorShape([None]),
        ),
    )
    # Sentences still running at max_length finish with their live hypotheses.
    alive_scores = tf.where(
        done[:, tf.newaxis], neg_inf, alive_log_probs / length_penalty(step, alpha)
    )  # (batch, k)
    alive = tf.reshape(alive[:, 1:], [batch_size, k, -1])  # (batch, k, step)
    finished_tokens, finished_scores = merge(
        finished_tokens, finished_scores, pad_to_max_length(alive), alive_scores
    )
    return finished_tokens[:, 0, :], finished_scores[:, 0]


def compile_greedy_decode(model):
    """`cached_greedy_decode` for `model`, compiled once for every shape.

    Returns:
        A `tf.function` `f(encoder_tokens, max_length, force_length,
        initial_finished)` taking int64 `(batch, input_len)`, int32, bool and
        bool `(batch,)` tensors; it traces once, whatever the batch size and
        lengths (`f.experimental_get_tracing_count()` stays 1).
    """

    def greedy(encoder_tokens, max_length, force_length, initial_finished):
        return cached_greedy_decode(
            model, encoder_tokens, max_length, force_length, initial_finished
        )

    return tf.function(
        greedy,
        input_signature=[_TOKENS_SPEC, _SCALAR_INT, _SCALAR_BOOL, _FLAGS_SPEC],
        autograph=False,
    )


def compile_beam_search(model):
    """`beam_search_decode` for `model`, compiled once for every shape and beam size.

    Returns:
        A `tf.function` `f(encoder_tokens, max_length, beam_size, alpha,
        initial_finished)` -> `(tokens, scores)`.
    """

    def beam(encoder_tokens, max_length, beam_size, alpha, initial_finished):
        return beam_search_decode(
            model, encoder_tokens, max_length, beam_size, alpha, initial_finished
        )

    return tf.function(
        beam,
        input_signature=[_TOKENS_SPEC, _SCALAR_INT, _SCALAR_INT, _SCALAR_FLOAT, _FLAGS_SPEC],
        autograph=False,
    )


def _output_lengths(output_tokens):
    """Tokens up to and including the first `[END]`; all of them if there is none."""
    output_tokens = tf.convert_to_tensor(output_tokens, tf.int64)
    width = tf.shape(output_tokens, out_type=tf.int64)[1]
    positions = tf.range(width, dtype=tf.int64)[tf.newaxis, :]  # (1, steps)
    end_lengths = tf.where(tf.equal(output_tokens, END_ID), positions + 1, width)  # (batch, steps)
    # The minimum over an empty row is the largest int64; `width` (0) caps it.
    return tf.minimum(tf.reduce_min(end_lengths, axis=1), width)  # (batch,)


def _teacher_forced(model, encoder_tokens, output_tokens, lengths, attention=True):
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
    lengths = _output_lengths(output_tokens)
    token_log_probs, _ = _teacher_forced(
        model, encoder_tokens, output_tokens, lengths, attention=False
    )
    return token_log_probs.numpy().astype(np.float64).sum(axis=1), lengths.numpy()


# ---------------------------------------------------------------------------
# Text in, text out.


def _tokenize_and_trim(tokenizer, sentences, max_input_length):
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


@dataclasses.dataclass
class Translation:
    """One translated sentence.

    Unpacks like the tutorial's result:
    `text, tokens, attention_weights = translator(sentence)`.

    Attributes:
        text: the translation (`""` for an empty sentence).
        tokens: the output's subword tokens: `[START]`, the generated tokens, and
            `[END]` when it was produced (empty for an empty sentence).
        attention_weights: for the final output, a dict with every layer's
            `encoder_layer{i}` `(heads, input_len, input_len)`,
            `decoder_layer{i}_block1` (masked self-attention,
            `(heads, output_len, output_len)`) and `decoder_layer{i}_block2`
            (encoder-decoder attention, `(heads, output_len, input_len)`) as
            float32 numpy arrays, where `input_len = len(input_tokens)` and
            `output_len = len(tokens) - 1`; row `i` is the prediction of
            `tokens[i + 1]`. Empty for an empty sentence.
        input_tokens: the source's subword tokens, `[START]` ... `[END]`, as fed to
            the model (after trimming).
        token_ids: int64 numpy array of the output ids (without `[START]`).
        score: `log P(Y | X) / lp(Y)` under the model, with the `alpha` of the
            call (0 for greedy decoding, i.e. the plain log-probability);
            `-inf` for an empty sentence.
        log_prob: `log P(Y | X)` under the model.
    """

    text: str
    tokens: list[str]
    attention_weights: dict[str, np.ndarray]
    input_tokens: list[str]
    token_ids: np.ndarray
    score: float
    log_prob: float

    def __iter__(self):
        return iter((self.text, self.tokens, self.attention_weights))


def _check_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected an integer "
            f">= {minimum}. Received: {name}={value!r}"
        )


def _to_strings(values):
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class Translator:
    """Translates text with tokenizers and a trained `Transformer`.

    Greedy decoding by default, beam search with `beam_size > 1`; both use the
    cached decoder and one compiled graph each (traced once for every batch
    size and length). The attention weights of the final output are
    recomputed by one teacher-forced pass of the full model, so they are
    exactly the model's.

    Args:
        tokenizers: an object with `.source` and `.target` tokenizers, each with
            `tokenize(strings)` (a ragged batch of ids, `[START]` ... `[END]`),
            `detokenize(ids)` and `lookup(ids)` (see `transformer.data.tokenizers`).
        transformer: a trained `Transformer`.
        max_length: default cap on output tokens (`[END]` included); at most the
            model's `max_length`.

    Call arguments:
        sentence_or_list: a string or a list of strings (a batch).
        max_length: the most output tokens (default: the translator's).
        beam_size: 1 for greedy decoding, more for beam search.
        alpha: the length penalty's exponent; `DEFAULT_ALPHA` (0.6) by default
            when `beam_size > 1`. Greedy decoding ignores it except for `score`.
        return_attention: compute the attention weights (default True).

    Returns:
        A `Translation` for a string, a list of them for a list.

    Example:

    >>> translator = Translator.from_run("runs/toy")
    >>> text, tokens, attention_weights = translator("o gato preto come o peixe")
    >>> results = translator(["o gato", "o peixe"], beam_size=4)
    """

    def __init__(self, tokenizers, transformer, max_length=DEFAULT_MAX_LENGTH):
        for side in ("source", "target"):
            if not hasattr(tokenizers, side):
                raise ValueError(
                    "Received invalid `tokenizers`: expected an object with `.source` and "
                    f"`.target` tokenizers. Received: {type(tokenizers).__name__} without "
                    f"`.{side}`"
                )
        if not isinstance(transformer, keras.Model) or not hasattr(transformer, "decoder"):
            raise ValueError(
                "Received an invalid value for argument `transformer`, expected a "
                f"`transformer.Transformer`. Received: {type(transformer).__name__}"
            )
        _check_int("max_length", max_length)
        self.tokenizers = tokenizers
        self.transformer = transformer
        self.max_length = min(int(max_length), int(transformer.max_length))
        self._greedy = compile_greedy_decode(transformer)
        self._beam = compile_beam_search(transformer)

        signature = [
            _TOKENS_SPEC, tf.TensorSpec([None, None], tf.int64), tf.TensorSpec([None], tf.int64)
        ]
        # One compiled teacher-forced pass with the attention weights, one without.
        self._teacher_forced = {
            attention: tf.function(
                functools.partial(_teacher_forced, transformer, attention=attention),
                input_signature=signature,
                autograph=False,
            )
            for attention in (True, False)
        }

    @classmethod
    def from_run(cls, run_dir, **kwargs):
        """Loads the tokenizers and the model of a run directory written by train.py.

        Raises:
            transformer.rundir.RunDirError: a one-line message naming what is
                missing or unreadable.
        """
        path = rundir.check_run_dir(run_dir)
        rundir.read_json(path / rundir.CONFIG_FILE)  # a readable config marks a finished run
        from transformer.data.tokenizers import load_tokenizers

        try:
            tokenizers = load_tokenizers(path / rundir.TOKENIZERS_DIR)
        except Exception as err:  # noqa: BLE001 - any loading failure is reported in one line
            raise rundir.RunDirError(
                f"Could not load the tokenizers from {str(path / rundir.TOKENIZERS_DIR)!r}: "
                f"{_first_line(err)}"
            ) from err
        try:
            model = keras.saving.load_model(path / rundir.MODEL_FILE, compile=False)
        except Exception as err:  # noqa: BLE001
            raise rundir.RunDirError(
                f"Could not load the model from {str(path / rundir.MODEL_FILE)!r}: "
                f"{_first_line(err)}"
            ) from err
        return cls(tokenizers, model, **kwargs)

    @property
    def greedy_tracing_count(self):
        """How many times the compiled greedy loop was traced (stays 1)."""
        return self._greedy.experimental_get_tracing_count()

    @property
    def beam_tracing_count(self):
        """How many times the compiled beam search was traced (stays 1)."""
        return self._beam.experimental_get_tracing_count()

    def encode(self, sentences):
        """Tokenizes and trims a list of strings as the model will see them.

        Logs a warning for each sentence longer than the model's `max_length`.

        Returns:
            `(encoder_tokens, empty)`: int64 tensor `(batch, input_len)` and bool
            numpy `(batch,)`.
        """
        limit = int(self.transformer.max_length)
        encoder_tokens, raw_lengths, empty = _tokenize_and_trim(
            self.tokenizers.source, tf.constant(sentences, tf.string), limit
        )
        for i, length in enumerate(raw_lengths.numpy()):
            if length > limit:
                logger.warning(
                    "Sentence %d has %d tokens, more than the model's max_length=%d; "
                    "trimmed to its first %d tokens and [END].",
                    i + 1, length, limit, limit - 1,
                )
        return encoder_tokens, empty.numpy()

    def __call__(
        self, sentence_or_list, max_length=None, beam_size=1, alpha=None, return_attention=True
    ):
        single = isinstance(sentence_or_list, (str, bytes))
        sentences = [sentence_or_list] if single else sentence_or_list
        if not isinstance(sentences, (list, tuple)) or not all(
            isinstance(s, (str, bytes)) for s in sentences
        ):
            raise ValueError(
                "Received an invalid value for argument `sentence_or_list`, expected a "
                f"string or a list of strings. Received: {sentence_or_list!r:.80}"
            )
        sentences = _to_strings(sentences)
        max_length = self.max_length if max_length is None else max_length
        _check_int("max_length", max_length)
        _check_int("beam_size", beam_size)
        if alpha is None:
            alpha = DEFAULT_ALPHA if beam_size > 1 else 0.0
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (
            math.isfinite(alpha) and alpha >= 0
        ):
            raise ValueError(
                "Received an invalid value for argument `alpha`, expected a finite "
                f"number >= 0. Received: alpha={alpha!r}"
            )
        if max_length > self.transformer.max_length:
            logger.warning(
                "max_length=%d is more than the model's max_length=%d; using %d.",
                max_length, self.transformer.max_length, self.transformer.max_length,
            )
            max_length = int(self.transformer.max_length)
        if not sentences:
            return []

        results = self._translate(sentences, int(max_length), int(beam_size), float(alpha),
                                  return_attention)
        return results[0] if single else results

    def _translate(self, sentences, max_length, beam_size, alpha, return_attention):
        encoder_tokens, empty = self.encode(sentences)
        empty_t = tf.constant(empty)
        max_length_t = tf.constant(max_length, tf.int32)
        if beam_size == 1:
            output = self._greedy(encoder_tokens, max_length_t, tf.constant(False), empty_t)
        else:
            output, _ = self._beam(
                encoder_tokens, max_length_t, tf.constant(beam_size, tf.int32),
                tf.constant(alpha, tf.float32), empty_t,
            )
        lengths = _output_lengths(output)
        lengths = tf.where(empty_t, tf.constant(0, tf.int64), lengths).numpy()  # (batch,)
        width = int(lengths.max()) if lengths.size else 0
        output = output[:, :width]  # (batch, width); a beam pads to max_length
        in_output = tf.sequence_mask(lengths, width)
        output = tf.where(in_output, output, tf.constant(PAD_ID, tf.int64))  # (batch, width)

        texts = _to_strings(self.tokenizers.target.detokenize(output).numpy())
        start = tf.fill([len(sentences), 1], tf.constant(START_ID, tf.int64))
        out_tokens = self.tokenizers.target.lookup(tf.concat([start, output], axis=1))
        out_tokens = _rows(out_tokens)
        in_tokens = _rows(self.tokenizers.source.lookup(encoder_tokens))
        in_lengths = tf.reduce_sum(
            tf.cast(tf.not_equal(encoder_tokens, PAD_ID), tf.int64), axis=1
        ).numpy()

        if width > 0:
            token_log_probs, weights = self._teacher_forced[bool(return_attention)](
                encoder_tokens, output, tf.constant(lengths)
            )
            log_probs = token_log_probs.numpy().astype(np.float64).sum(axis=1)
            weights = {name: w.numpy() for name, w in weights.items()} if return_attention else {}
        else:
            log_probs = np.zeros(len(sentences))
            weights = {}

        results = []
        for b, sentence_empty in enumerate(empty):
            n, s = int(lengths[b]), int(in_lengths[b])
            if sentence_empty:
                results.append(Translation(
                    text="", tokens=[], attention_weights={},
                    input_tokens=_to_strings(in_tokens[b][:s]),
                    token_ids=np.zeros([0], np.int64), score=-math.inf, log_prob=-math.inf,
                ))
                continue
            attention = {}
            for name, w in weights.items():
                keys = s if name.startswith("encoder") or name.endswith("block2") else n
                queries = s if name.startswith("encoder") else n
                attention[name] = np.ascontiguousarray(w[b, :, :queries, :keys])
            log_prob = float(log_probs[b])
            results.append(Translation(
                text=texts[b],
                tokens=_to_strings(out_tokens[b][: n + 1]),
                attention_weights=attention,
                input_tokens=_to_strings(in_tokens[b][:s]),
                token_ids=output[b, :n].numpy(),
                score=log_prob / float(length_penalty(n, alpha)),
                log_prob=log_prob,
            ))
        return results


def _rows(tokens):
    """A (possibly ragged) batch of string tokens -> list of numpy rows."""
    if isinstance(tokens, tf.RaggedTensor):
        return [row.numpy() for row in tokens]
    return list(tokens.numpy())


def _first_line(err):
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# ---------------------------------------------------------------------------
# Export.


class _ExportedTranslator(tf.Module):
    """Strings in, strings out, with the tokenizers inside (a SavedModel).

    `__call__(sentences)` translates a string or a batch of strings (any shape)
    greedily with the default `max_length`; `translate(sentences, max_length,
    beam_size, alpha)` chooses the decoding (beam search for `beam_size > 1`).
    Both return strings of the input's shape. Everything is traced without
    AutoGraph, so it exports from a Jupyter kernel too.
    """

    def __init__(self, tokenizers, transformer, max_length):
        super().__init__(name="translator")
        self.tokenizers = tokenizers
        self.transformer = transformer
        self.max_length = tf.Variable(max_length, dtype=tf.int32, trainable=False,
                                      name="max_length")
        model_max_length = int(transformer.max_length)

        def translate(sentences, max_length, beam_size, alpha):
            shape = tf.shape(sentences)
            flat = tf.reshape(sentences, [-1])  # (batch,)
            encoder_tokens, _, empty = _tokenize_and_trim(
                self.tokenizers.source, flat, model_max_length
            )
            max_length = tf.minimum(max_length, model_max_length)

            def greedy():
                return cached_greedy_decode(
                    self.transformer, encoder_tokens, max_length, False, empty
                )

            def beam():
                tokens, _ = beam_search_decode(
                    self.transformer, encoder_tokens, max_length, beam_size, alpha, empty
                )
                return tokens

            output = tf.cond(beam_size > 1, beam, greedy)  # (batch, steps)
            in_output = tf.sequence_mask(_output_lengths(output), tf.shape(output)[1])
            output = tf.where(in_output & ~empty[:, tf.newaxis], output,
                              tf.constant(PAD_ID, tf.int64))
            text = self.tokenizers.target.detokenize(output)  # (batch,)
            return tf.reshape(text, shape)

        self.translate = tf.function(
            translate,
            input_signature=[
                tf.TensorSpec(None, tf.string, name="sentences"),
                tf.TensorSpec([], tf.int32, name="max_length"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.float32, name="alpha"),
            ],
            autograph=False,
        )

    @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="sentences")],
                 autograph=False)
    def __call__(self, sentences):
        return self.translate(
            sentences, self.max_length.read_value(), tf.constant(1, tf.int32),
            tf.constant(0.0, tf.float32),
        )


def export_translator(translator_or_run_dir, export_dir=None):
    """Exports a translator as a SavedModel that maps strings to strings.

    The SavedModel holds the tokenizers and the model. Reload it with only
    TensorFlow and TensorFlow Text (whose ops the tokenizers use)::

        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        translator = tf.saved_model.load("runs/toy/export")
        translator(tf.constant("o gato preto come o peixe")).numpy().decode()
        translator.translate(tf.constant(["o gato"]), max_length=tf.constant(40),
                             beam_size=tf.constant(4), alpha=tf.constant(0.6))

    Args:
        translator_or_run_dir: a `Translator`, or a run directory to load one from.
        export_dir: where to write; default `<run_dir>/export` when a run
            directory is given.

    Returns:
        The export directory, as a `Path`.
    """
    if isinstance(translator_or_run_dir, Translator):
        translator = translator_or_run_dir
        if export_dir is None:
            raise ValueError(
                "Received no `export_dir`; it is required when exporting a `Translator` "
                "(only a run directory has a default, <run_dir>/export)."
            )
    else:
        translator = Translator.from_run(translator_or_run_dir)
        if export_dir is None:
            export_dir = Path(translator_or_run_dir) / rundir.EXPORT_DIR
    module = _ExportedTranslator(
        translator.tokenizers, translator.transformer, translator.max_length
    )
    export_dir = Path(export_dir)
    tf.saved_model.save(module, str(export_dir))
    logger.info("Exported the translator to %s", export_dir)
    return export_dir
