"""Decoding: greedy and beam search through the model's own layers.

Decoding is autoregressive (section 3 of Vaswani et al., 2017): the decoder
starts from `[START]` and emits one token at a time, each conditioned on the
source and on every token emitted before it, until `[END]`.

- `naive_greedy_decode` is the tutorial's loop: every step re-runs the whole
  `Transformer((context, output_so_far))`, encoder included, and takes the
  argmax of the last position. It is kept as the reference.
- `decode_step` is the one step that every cached loop runs: the newest
  token goes through `Decoder.call(..., cache=...)`, so through the very
  layers that training runs; each `MultiHeadAttention` appends the new
  position's keys and values to its own cache (masked self-attention) or
  reads the encoder output's keys and values projected once per sentence
  (encoder-decoder attention).
- `cached_greedy_decode` gives the naive loop's tokens, much faster.
- `beam_search_decode` is the paper's beam search (section 6.1: beam size 4,
  length penalty alpha = 0.6) with the GNMT length penalty
  `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016), on the same step.

The loops are explicit `tf.while_loop`s compiled with
`tf.function(autograph=False)` and an `input_signature` with `None`
dimensions (`compile_greedy_decode`, `compile_beam_search`): one trace serves
every batch size and sentence length, and nothing depends on AutoGraph
(which cannot always read the source of code defined in a Jupyter notebook).

Conventions: token ids are those of `transformer.constants` (0 `[PAD]`,
2 `[START]`, 3 `[END]`); "output tokens" are the generated tokens without the
leading `[START]`, with `[END]` when it was produced and `[PAD]` after it;
`max_length` counts output tokens, `[END]` included. Masks follow
docs/design.md: 1 where attention is NOT allowed.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.masking import create_padding_mask

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BEAM_SIZE",
    "DEFAULT_EXTRA_LENGTH",
    "beam_search_decode",
    "cached_greedy_decode",
    "compile_beam_search",
    "compile_greedy_decode",
    "decode_step",
    "length_penalty",
    "naive_greedy_decode",
    "output_limits",
    "sequence_log_probs",
    "start_decoding",
]

# The paper's beam search settings (section 6.1), used when a beam is asked for.
DEFAULT_BEAM_SIZE = 4
DEFAULT_ALPHA = 0.6

TOKENS_SPEC = tf.TensorSpec([None, None], tf.int64, name="encoder_tokens")
_SCALAR_INT = tf.TensorSpec([], tf.int32)
_SCALAR_FLOAT = tf.TensorSpec([], tf.float32)
_SCALAR_BOOL = tf.TensorSpec([], tf.bool)
_FLAGS_SPEC = tf.TensorSpec([None], tf.bool, name="initial_finished")
_LIMITS_SPEC = tf.TensorSpec([None], tf.int32, name="row_limits")

# Section 6.1: "maximum output length during inference to input length + 50".
DEFAULT_EXTRA_LENGTH = 50


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
            tf.constant(0, tf.int32), output, _flags(initial_finished, batch_size)
        ),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None])),
    )
    return output[:, 1:]  # (batch, steps)


# ---------------------------------------------------------------------------
# One step through the model's own layers.


def start_decoding(model, encoder_tokens):
    """Runs the encoder once and prepares the decoder's caches.

    Args:
        model: a `Transformer`.
        encoder_tokens: int64 source tokens `(batch, input_len)`, 0 = padding.

    Returns:
        `(cache, cross_mask)`: the per-layer caches of `Decoder.initial_cache`
        (no target position yet; the encoder output projected once for
        encoder-decoder attention) and the source padding mask
        `(batch, 1, 1, input_len)`, 1 at padding.
    """
    cross_mask = create_padding_mask(encoder_tokens)  # (batch, 1, 1, input_len)
    context, _ = model.encoder(
        encoder_tokens, padding_mask=cross_mask, training=False
    )  # (batch, input_len, d_model)
    return model.decoder.initial_cache(context), cross_mask


def decode_step(model, output_so_far, cache, cross_mask):
    """The next token's logits, with the newest token run through the decoder.

    Computes what `model((context, output_so_far))[:, -1]` computes at
    inference, for the newest position only: `Decoder.call` with a cache
    embeds the last token at its position and runs it through every layer,
    whose attention layers read (and extend) the cached keys and values. The
    target-padding mask over `output_so_far` is the full decoder's.

    Args:
        model: a `Transformer`.
        output_so_far: int64 `(batch, t + 1)`, `[START]` first.
        cache, cross_mask: from `start_decoding`, or the previous step.

    Returns:
        `(logits, cache)`: float32 `(batch, target_vocab_size)` for token `t + 1`,
        and the caches grown by one position.
    """
    x, _, cache = model.decoder(
        output_so_far, None, padding_mask=cross_mask, training=False, cache=cache
    )  # (batch, d_model)
    logits = model.final_layer(x)  # (batch, target_vocab_size)
    return tf.cast(logits, tf.float32), cache


def _flags(initial_finished, batch_size):
    if initial_finished is None:
        return tf.zeros([batch_size], tf.bool)
    return tf.convert_to_tensor(initial_finished, tf.bool)


def cached_greedy_decode(
    model, encoder_tokens, max_length, force_length=False, initial_finished=None,
    return_log_probs=False, row_limits=None,
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
        return_log_probs: also return each sentence's `log P(Y | X)`, summed
            in the loop over the tokens up to and including `[END]`.
        row_limits: optional int32 `(batch,)`: the most output tokens of each
            sentence (see `output_limits`); a sentence that reaches its limit
            without `[END]` stops there.

    Returns:
        int64 `(batch, steps)` output tokens (no `[START]`); a finished sentence
        has `[PAD]` after its `[END]`. `steps <= max_length`, and the loop stops
        as soon as every sentence has emitted `[END]`. With
        `return_log_probs`, `(tokens, log_probs)` with float32 `(batch,)`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    force_length = tf.convert_to_tensor(force_length, tf.bool)
    batch_size = tf.shape(encoder_tokens)[0]
    cache, cross_mask = start_decoding(model, encoder_tokens)
    output = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))  # (batch, 1)

    def cond(step, output, finished, log_probs, cache):
        return (step < max_length) & (force_length | ~tf.reduce_all(finished))

    def body(step, output, finished, log_probs, cache):
        logits, cache = decode_step(model, output, cache, cross_mask)  # (batch, vocab)
        next_token = tf.argmax(logits, axis=-1, output_type=tf.int64)  # (batch,)
        # log_softmax at the arg-max, without the whole (batch, vocab) tensor.
        token_log_prob = tf.reduce_max(logits, axis=-1) - tf.reduce_logsumexp(
            logits, axis=-1
        )  # (batch,)
        log_probs += tf.where(finished, 0.0, token_log_prob)
        next_token = tf.where(finished, tf.constant(PAD_ID, tf.int64), next_token)
        finished = finished | (tf.equal(next_token, END_ID) & ~force_length)
        if row_limits is not None:
            finished = finished | (step + 1 >= row_limits)
        output = tf.concat([output, next_token[:, tf.newaxis]], axis=1)  # (batch, step + 2)
        return step + 1, output, finished, log_probs, cache

    _, output, _, log_probs, _ = tf.while_loop(
        cond,
        body,
        loop_vars=(
            tf.constant(0, tf.int32), output, _flags(initial_finished, batch_size),
            tf.zeros([batch_size]), cache,
        ),
        shape_invariants=(
            tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None]),
            tf.TensorShape([None]), model.decoder.cache_shape(),
        ),
    )
    if return_log_probs:
        return output[:, 1:], log_probs  # (batch, steps), (batch,)
    return output[:, 1:]  # (batch, steps)


# ---------------------------------------------------------------------------
# Beam search, in named pieces.


def _merge_finished(finished_tokens, finished_scores, tokens, scores, k):
    """Keeps the `k` best of the finished hypotheses and the new ones (best first)."""
    all_scores = tf.concat([finished_scores, scores], axis=1)  # (batch, k + n)
    all_tokens = tf.concat([finished_tokens, tokens], axis=1)  # (batch, k + n, max_length)
    best_scores, best = tf.math.top_k(all_scores, k=k)  # (batch, k)
    return tf.gather(all_tokens, best, batch_dims=1), best_scores


def _pad_to(sequences, max_length):
    """`(batch, n, len)` -> `(batch, n, max_length)`, padded with `[PAD]`."""
    pad = max_length - tf.shape(sequences)[2]
    return tf.pad(sequences, [[0, 0], [0, 0], [0, pad]], constant_values=PAD_ID)


def _top_candidates(logits, alive, alive_log_probs, k):
    """Extends every live hypothesis by every token and keeps the `2k` best.

    Returns:
        `(log_probs, tokens, rows, sequences)`: each `(batch, 2k)` but the last,
        `(batch, 2k, step + 2)`; `rows` are the candidates' parents' rows in
        `alive` and the caches.
    """
    batch_size = tf.shape(alive_log_probs)[0]
    vocab_size = tf.shape(logits)[-1]
    log_probs = tf.reshape(
        tf.nn.log_softmax(logits, axis=-1), [batch_size, k, vocab_size]
    )  # (batch, k, vocab)
    candidates = alive_log_probs[:, :, tf.newaxis] + log_probs  # (batch, k, vocab)
    candidates = tf.reshape(candidates, [batch_size, k * vocab_size])  # (batch, k * vocab)
    cand_log_probs, cand_index = tf.math.top_k(candidates, k=2 * k)  # (batch, 2k)
    cand_token = tf.cast(cand_index % vocab_size, tf.int64)  # (batch, 2k)
    cand_rows = tf.range(batch_size)[:, tf.newaxis] * k + cand_index // vocab_size  # (batch, 2k)
    cand_seqs = tf.gather(alive, cand_rows)  # (batch, 2k, step + 1)
    cand_seqs = tf.concat([cand_seqs, cand_token[:, :, tf.newaxis]], axis=2)  # (..., step + 2)
    return cand_log_probs, cand_token, cand_rows, cand_seqs


def _finish_alive(state, rows, penalty, max_length, k):
    """Finishes the live hypotheses of the sentences `rows` (bool `(batch,)`) as they
    are, scored at their length, and marks those sentences done."""
    (step, alive, alive_log_probs, cache, finished_tokens, finished_scores,
     num_finished, done) = state
    batch_size = tf.shape(alive_log_probs)[0]
    scores = tf.where(rows[:, tf.newaxis], alive_log_probs / penalty, -np.inf)  # (batch, k)
    sequences = tf.reshape(alive[:, 1:], [batch_size, k, -1])  # (batch, k, length)
    finished_tokens, finished_scores = _merge_finished(
        finished_tokens, finished_scores, _pad_to(sequences, max_length), scores, k
    )
    return (step, alive, alive_log_probs, cache, finished_tokens, finished_scores,
            num_finished, done | rows)


def _beam_step(model, k, alpha, max_length, cross_mask, row_limits, state):
    """One step of beam search: extend, finish the ending candidates, keep `k` live."""
    (step, alive, alive_log_probs, cache, finished_tokens, finished_scores,
     num_finished, done) = state
    batch_size = tf.shape(alive_log_probs)[0]
    logits, cache = decode_step(model, alive, cache, cross_mask)  # (batch * k, vocab)
    cand_log_probs, cand_token, cand_rows, cand_seqs = _top_candidates(
        logits, alive, alive_log_probs, k
    )
    neg_inf = tf.constant(-np.inf, tf.float32)
    # Candidates ending in [END] among the first k ranks finish.
    is_end = tf.equal(cand_token, END_ID)  # (batch, 2k)
    first_k = tf.range(2 * k) < k  # (2k,)
    finishing = is_end & first_k[tf.newaxis, :] & ~done[:, tf.newaxis]  # (batch, 2k)
    penalty = length_penalty(step + 1, alpha)
    finished_tokens, finished_scores = _merge_finished(
        finished_tokens, finished_scores, _pad_to(cand_seqs[:, :, 1:], max_length),
        tf.where(finishing, cand_log_probs / penalty, neg_inf), k,
    )
    num_finished += tf.reduce_sum(tf.cast(finishing, tf.int32), axis=1)
    # The k best candidates that did not end stay live.
    alive_log_probs, keep = tf.math.top_k(
        tf.where(is_end, neg_inf, cand_log_probs), k=k
    )  # (batch, k), best first
    # Done: k finished, none worse than the best live hypothesis at its length.
    best_alive = alive_log_probs[:, 0] / penalty  # (batch,)
    done = done | ((num_finished >= k) & (finished_scores[:, -1] >= best_alive))
    alive = tf.reshape(
        tf.gather(cand_seqs, keep, batch_dims=1), [batch_size * k, step + 2]
    )  # (batch * k, step + 2)
    rows = tf.reshape(tf.gather(cand_rows, keep, batch_dims=1), [-1])  # (batch * k,)
    state = (step + 1, alive, alive_log_probs, _reorder_cache(cache, rows), finished_tokens,
             finished_scores, num_finished, done)
    if row_limits is not None:  # sentences at their own limit finish as they are
        at_limit = (step + 1 >= row_limits) & ~state[-1]  # (batch,)
        state = tf.cond(
            tf.reduce_any(at_limit),
            lambda: _finish_alive(state, at_limit, penalty, max_length, k),
            lambda: state,
        )
    return state


def _reorder_cache(cache, rows):
    """Gathers the self-attention caches by hypothesis; the encoder-decoder
    caches are the same for every hypothesis of a sentence and stay."""
    return [
        {"self": tuple(tf.gather(t, rows) for t in layer["self"]), "cross": layer["cross"]}
        for layer in cache
    ]


def _initial_beams(model, encoder_tokens, max_length, k, initial_finished):
    """The loop's first state: `k` copies of `[START]` per sentence, one of them live."""
    batch_size = tf.shape(encoder_tokens)[0]
    cache, cross_mask = start_decoding(model, encoder_tokens)
    # Every beam gets its own copy of the caches and the mask, rows b * k + j.
    cache = tf.nest.map_structure(lambda t: tf.repeat(t, k, axis=0), cache)
    cross_mask = tf.repeat(cross_mask, k, axis=0)  # (batch * k, 1, 1, input_len)
    neg_inf = tf.constant(-np.inf, tf.float32)
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
    state = (tf.constant(0, tf.int32), alive, alive_log_probs, cache, finished_tokens,
             finished_scores, tf.zeros([batch_size], tf.int32),
             _flags(initial_finished, batch_size))
    invariants = (
        tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None, None]),
        model.decoder.cache_shape(), tf.TensorShape([None, None, None]),
        tf.TensorShape([None, None]), tf.TensorShape([None]), tf.TensorShape([None]),
    )
    return state, invariants, cross_mask


def beam_search_decode(
    model, encoder_tokens, max_length, beam_size=DEFAULT_BEAM_SIZE, alpha=DEFAULT_ALPHA,
    initial_finished=None, row_limits=None,
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
        row_limits: optional int32 `(batch,)`: the most output tokens of each
            sentence (see `output_limits`); at its limit a sentence finishes
            with its live hypotheses as they are, as every sentence does at
            `max_length`.

    Returns:
        `(tokens, scores)`: int64 `(batch, max_length)` output tokens of the best
        hypothesis, `[PAD]` after `[END]`, and float32 `(batch,)` its score
        `log P / lp`.
    """
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int64)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    k = tf.convert_to_tensor(beam_size, tf.int32)
    alpha = tf.convert_to_tensor(alpha, tf.float32)
    state, invariants, cross_mask = _initial_beams(
        model, encoder_tokens, max_length, k, initial_finished
    )
    state = tf.while_loop(
        lambda step, *rest: (step < max_length) & ~tf.reduce_all(rest[-1]),
        lambda *state: _beam_step(model, k, alpha, max_length, cross_mask, row_limits, state),
        loop_vars=state,
        shape_invariants=invariants,
    )
    # Sentences still running at max_length finish with their live hypotheses.
    step, done = state[0], state[-1]
    state = _finish_alive(state, ~done, length_penalty(step, alpha), max_length, k)
    finished_tokens, finished_scores = state[4], state[5]
    return finished_tokens[:, 0, :], finished_scores[:, 0]


def compile_greedy_decode(model, return_log_probs=False, row_limits=False):
    """`cached_greedy_decode` for `model`, compiled once for every shape.

    Returns:
        A `tf.function` `f(encoder_tokens, max_length, force_length,
        initial_finished)` taking int64 `(batch, input_len)`, int32, bool and
        bool `(batch,)` tensors (and, with `row_limits`, an int32 `(batch,)`
        fifth argument); it traces once, whatever the batch size and lengths
        (`f.experimental_get_tracing_count()` stays 1). It returns the
        tokens, or `(tokens, log_probs)` with `return_log_probs`.
    """

    def greedy(encoder_tokens, max_length, force_length, initial_finished, limits=None):
        return cached_greedy_decode(
            model, encoder_tokens, max_length, force_length, initial_finished,
            return_log_probs=return_log_probs, row_limits=limits,
        )

    signature = [TOKENS_SPEC, _SCALAR_INT, _SCALAR_BOOL, _FLAGS_SPEC]
    return tf.function(
        greedy, input_signature=signature + [_LIMITS_SPEC] * row_limits, autograph=False
    )


def compile_beam_search(model, row_limits=False):
    """`beam_search_decode` for `model`, compiled once for every shape and beam size.

    Returns:
        A `tf.function` `f(encoder_tokens, max_length, beam_size, alpha,
        initial_finished)` (and, with `row_limits`, an int32 `(batch,)` sixth
        argument) -> `(tokens, scores)`.
    """

    def beam(encoder_tokens, max_length, beam_size, alpha, initial_finished, limits=None):
        return beam_search_decode(
            model, encoder_tokens, max_length, beam_size, alpha, initial_finished,
            row_limits=limits,
        )

    signature = [TOKENS_SPEC, _SCALAR_INT, _SCALAR_INT, _SCALAR_FLOAT, _FLAGS_SPEC]
    return tf.function(
        beam, input_signature=signature + [_LIMITS_SPEC] * row_limits, autograph=False
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
        extra_length: tokens allowed beyond the input length; None for no
            per-sentence limit (every sentence gets `max_length`).

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


def output_lengths(output_tokens):
    """Tokens up to and including the first `[END]`; all of them if there is none."""
    output_tokens = tf.convert_to_tensor(output_tokens, tf.int64)
    width = tf.shape(output_tokens, out_type=tf.int64)[1]
    positions = tf.range(width, dtype=tf.int64)[tf.newaxis, :]  # (1, steps)
    end_lengths = tf.where(tf.equal(output_tokens, END_ID), positions + 1, width)  # (batch, steps)
    # The minimum over an empty row is the largest int64; `width` (0) caps it.
    return tf.minimum(tf.reduce_min(end_lengths, axis=1), width)  # (batch,)


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
