"""The search loops in TensorFlow (token by token, greedy, sampling, beam) over a
next-token function.

`transformer.decoding.strategies` says what to search (objects, no
TensorFlow); this module does it, knowing no model;
`transformer.decoding.pipeline` plugs the model in.

Decoding is autoregressive (section 3 of Vaswani et al., 2017): from
`[START]`, each output token is chosen given the source and every token
chosen before it, until `[END]`. How it is chosen is the search strategy,
and nothing here knows the model. Every strategy takes

- `next_logits(tokens, cache, index) -> (logits, cache)`: the logits
  `(rows, vocab)` of the token after `tokens` `(rows, index + 1)` (int64,
  `[START]` first; `index` is the position of the newest token), and the
  callback's own state `cache` (any nest of tensors whose first axis is the
  row) updated for it;
- the callback's initial `cache`;
- `limits`, int32 `(batch,)`: the most output tokens of each sentence
  (`[END]` included); a sentence stops at its own limit;
- optionally `initial_finished`, bool `(batch,)`: sentences to skip (all
  `[PAD]`);
- its own settings.

`transformer.decoding.pipeline` builds the callback from a `Transformer`, as
flax's `beam_search(..., tokens_to_logits, ...)` and keras-hub's samplers
take theirs. A strategy object of `transformer.decoding.strategies` (what to
search, no TensorFlow) runs its own search with these loops
(`Strategy.search`), and `run_search` runs a strategy; `one_row` gives a
one-row search the layout that strategies return (`SearchResult`), with the
strategy's own score. The loops:

- `token_by_token`: the public loop of every one-row search. A `choose`
  function picks each row's next token; the loop feeds it back to the model,
  stops each row at `[END]` or its limit and sums `log P(Y | X)`.
  `next_token_search` runs a strategy's one method, `Strategy.next_tokens`,
  on it;
- `greedy_search`: the most probable token at every step;
- `sample_search`: a token drawn at every step, from the distribution
  sharpened or flattened by `temperature` and cut to the `top_k` most
  probable tokens and to the smallest set whose probability reaches `top_p`
  (nucleus sampling, Holtzman et al., 2020), reproducibly from `seed`;
- `beam_search`: the paper's beam search (section 6.1: beam size 4, length
  penalty alpha = 0.6), with the `n_best` best hypotheses.

Every loop is an explicit `tf.while_loop` (no AutoGraph), so it runs eagerly
and compiles into one graph under `tf.function`; the loop's shapes are
declared with `None` for the rows and the lengths, so one trace serves every
batch size and length. The callback's cache may grow along the axes that are
empty at the start (the keys and values of the positions so far); its other
axes keep their size. Output tokens are the generated tokens without the
leading `[START]`, with `[END]` when it was produced and `[PAD]` after it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, START_ID

__all__ = [
    "BeamState",
    "SearchResult",
    "beam_search",
    "greedy_search",
    "length_penalty",
    "next_token_search",
    "one_row",
    "output_lengths",
    "repeat_beams",
    "run_search",
    "sample_search",
    "search_result",
    "setting_specs",
    "setting_tensors",
    "token_by_token",
]


class SearchResult(NamedTuple):
    """What a strategy's search returns (`Strategy.search`); `n` results per sentence."""

    tokens: tf.Tensor  # (batch, n, steps) int64: output tokens, best first, [PAD] after [END]
    scores: tf.Tensor  # (batch, n) float32: the strategy's `score`, what it ranks by
    log_probs: tf.Tensor  # (batch, n) float32: log P(Y | X)
    stopped: tf.Tensor  # (batch,) bool: the search stopped at the sentence's limit


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


def _cache_shapes(cache):
    """`tf.while_loop` shape invariants of the callback's cache: any number of
    rows, and any size along the axes that are empty (or of unknown size) at
    the start, which are the ones a cache grows along; every other axis keeps
    its static size (which the step's kernels need: leaving them unknown made
    a step 1.5 to 1.8 times slower)."""

    def invariant(tensor):
        dims = tensor.shape.as_list()
        return tf.TensorShape([None if axis == 0 or size in (0, None) else size
                               for axis, size in enumerate(dims)])

    return tf.nest.map_structure(invariant, cache)


def _flags(initial_finished, batch_size):
    if initial_finished is None:
        return tf.zeros([batch_size], tf.bool)
    return tf.convert_to_tensor(initial_finished, tf.bool)


def output_lengths(output_tokens, limits=None):
    """Tokens up to and including the first `[END]` of each row (the last axis);
    all of them if there is none.

    Args:
        output_tokens: int output tokens `(..., steps)`.
        limits: optional int `(batch,)` for tokens `(batch, n, steps)`: each
            sentence's limit, which caps its lengths (an output that its limit
            stopped has no `[END]`, and `[PAD]` after the limit).

    Returns:
        int64 `(...)`.
    """
    output_tokens = tf.convert_to_tensor(output_tokens, tf.int64)
    width = tf.shape(output_tokens, out_type=tf.int64)[-1]
    positions = tf.range(width, dtype=tf.int64)  # (steps,)
    end_lengths = tf.where(tf.equal(output_tokens, END_ID), positions + 1, width)  # (..., steps)
    # The minimum over an empty row is the largest int64; `width` (0) caps it.
    lengths = tf.minimum(tf.reduce_min(end_lengths, axis=-1), width)  # (...,)
    if limits is None:
        return lengths
    return tf.minimum(lengths, tf.cast(limits, tf.int64)[:, tf.newaxis])  # (batch, n)


def _token_log_probs(logits, tokens):
    """`log softmax(logits)` at `tokens`, without the whole `(rows, vocab)` tensor."""
    chosen = tf.gather(logits, tokens, batch_dims=1)  # (rows,)
    return chosen - tf.reduce_logsumexp(logits, axis=-1)  # (rows,)


# ---------------------------------------------------------------------------
# One token at a time: greedy search and sampling.


def token_by_token(next_logits, choose, cache, limits, initial_finished=None):
    """The public loop of a one-row search: `choose` picks each row's next token.

    From `[START]`, every step asks the model's callback for the logits of
    the next token, `choose` picks it, and the loop appends it and feeds it
    back; a row that has produced `[END]` or reached its limit gets `[PAD]`
    from then on, and the loop stops once every row has. Greedy search,
    sampling and every `Strategy.next_tokens` run on it.

    Args:
        next_logits, cache, limits, initial_finished: see the module docstring.
        choose: `choose(logits, tokens, index) -> next_tokens`, in TensorFlow
            ops: float32 logits `(batch, vocab)` of this step, int64 tokens
            so far `(batch, index + 1)` (`[START]` first), int32 `index` (the
            output tokens chosen before); returns int64 `(batch,)`.

    Returns:
        `(tokens, log_probs)`: int64 `(batch, steps)` output tokens and float32
        `(batch,)` `log P(Y | X)` of each under the unchanged logits, summed
        over the tokens up to and including `[END]`.
    """
    limits = tf.convert_to_tensor(limits, tf.int32)
    batch_size = tf.shape(limits)[0]
    max_length = tf.reduce_max(tf.concat([limits, [0]], axis=0))
    tokens = tf.fill([batch_size, 1], tf.constant(START_ID, tf.int64))  # (batch, 1)
    finished = _flags(initial_finished, batch_size) | (limits <= 0)  # (batch,)

    def cond(step, tokens, finished, log_probs, cache):
        return (step < max_length) & ~tf.reduce_all(finished)

    def body(step, tokens, finished, log_probs, cache):
        logits, cache = next_logits(tokens, cache, step)  # (batch, vocab)
        next_token = choose(logits, tokens, step)  # (batch,)
        log_probs += tf.where(finished, 0.0, _token_log_probs(logits, next_token))
        next_token = tf.where(finished, tf.constant(PAD_ID, tf.int64), next_token)
        finished = finished | tf.equal(next_token, END_ID) | (step + 1 >= limits)
        tokens = tf.concat([tokens, next_token[:, tf.newaxis]], axis=1)  # (batch, step + 2)
        return step + 1, tokens, finished, log_probs, cache

    _, tokens, _, log_probs, _ = tf.while_loop(
        cond, body,
        loop_vars=(tf.constant(0, tf.int32), tokens, finished, tf.zeros([batch_size]), cache),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None]), tf.TensorShape([None]), _cache_shapes(cache)),
    )
    return tokens[:, 1:], log_probs  # (batch, steps), (batch,)


def greedy_search(next_logits, cache, limits, initial_finished=None):
    """Greedy search: the most probable next token, until `[END]` or the limit.

    Args:
        next_logits, cache, limits, initial_finished: see the module docstring.

    Returns:
        `(tokens, log_probs)`: int64 `(batch, steps)` output tokens, `[PAD]`
        after `[END]` and after a sentence's limit, and float32 `(batch,)`
        `log P(Y | X)`. `steps <= max(limits)`; the loop stops as soon as every
        sentence is finished.
    """

    def choose(logits, tokens, index):
        return tf.argmax(logits, axis=-1, output_type=tf.int64)  # (batch,)

    return token_by_token(next_logits, choose, cache, limits, initial_finished)


def _keep_top_k(logits, top_k):
    """Logits below the `top_k`-th largest of their row become -inf (ties are kept)."""
    top_k = tf.minimum(top_k, tf.shape(logits)[-1])
    kth = tf.math.top_k(logits, k=top_k).values[:, -1:]  # (rows, 1)
    return tf.where(logits < kth, tf.constant(-np.inf, logits.dtype), logits)


def _keep_top_p(logits, top_p):
    """Keeps the most probable tokens of each row whose probabilities first reach
    `top_p` (always at least the most probable one); the others become -inf."""
    ordered = tf.sort(logits, axis=-1, direction="DESCENDING")  # (rows, vocab)
    before = tf.math.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)
    kept = tf.where(before < top_p, ordered, tf.constant(np.inf, logits.dtype))
    smallest = tf.reduce_min(kept, axis=-1, keepdims=True)  # (rows, 1)
    return tf.where(logits < smallest, tf.constant(-np.inf, logits.dtype), logits)


def sample_search(next_logits, cache, limits, seed, temperature=1.0, top_k=0, top_p=1.0,
                  initial_finished=None):
    """Sampling: each next token drawn from the model's (reshaped) distribution.

    The logits are divided by `temperature`, then cut to the `top_k` most
    probable tokens, then to the nucleus: the fewest most probable tokens
    whose probabilities sum to at least `top_p` (Holtzman et al., 2020).
    The draws are stateless (`tf.random.stateless_categorical`), seeded by
    `seed` and the step, so the same seed gives the same tokens for the same
    batch. With `top_k = 1` the draw is the arg-max: greedy search.

    Args:
        next_logits, cache, limits, initial_finished: see the module docstring.
        seed: int64 scalar.
        temperature: float32 scalar, > 0; below 1 sharpens the distribution,
            above 1 flattens it.
        top_k: int32 scalar; 0 keeps every token.
        top_p: float32 scalar in (0, 1]; 1 keeps every token.

    Returns:
        `(tokens, log_probs)` as `greedy_search`; `log_probs` is `log P(Y | X)`
        under the model itself (before the temperature and the cuts).
    """
    seed = tf.stack([tf.cast(seed, tf.int64), tf.constant(0, tf.int64)])  # (2,)
    temperature = tf.convert_to_tensor(temperature, tf.float32)
    top_k = tf.convert_to_tensor(top_k, tf.int32)
    top_p = tf.convert_to_tensor(top_p, tf.float32)

    def choose(logits, tokens, index):
        logits = logits / temperature  # (batch, vocab)
        logits = tf.cond(top_k > 0, lambda: _keep_top_k(logits, top_k), lambda: logits)
        logits = tf.cond(top_p < 1.0, lambda: _keep_top_p(logits, top_p), lambda: logits)
        step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(index, tf.int64))
        return tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int64)[:, 0]

    return token_by_token(next_logits, choose, cache, limits, initial_finished)


# ---------------------------------------------------------------------------
# Beam search.


class BeamState(NamedTuple):
    """What beam search carries from one step to the next (`k` = the beam size).

    Live hypothesis `j` of sentence `b` is row `b * k + j` of `alive` and of
    the callback's `cache`.
    """

    step: tf.Tensor  # () int32: output tokens generated so far
    alive: tf.Tensor  # (batch * k, step + 1) int64: live hypotheses, [START] first
    alive_log_probs: tf.Tensor  # (batch, k) float32: their log P(Y | X), best first
    cache: Any  # the callback's cache, rows as `alive`
    finished_tokens: tf.Tensor  # (batch, k, max_length) int64: [PAD] after [END]
    finished_scores: tf.Tensor  # (batch, k) float32: log P / lp, best first; -inf = none
    num_finished: tf.Tensor  # (batch,) int32: hypotheses finished so far
    done: tf.Tensor  # (batch,) bool: nothing live can beat the finished ones
    stopped: tf.Tensor  # (batch,) bool: finished at its limit, live hypotheses and all


def repeat_beams(structure, beam_size):
    """Repeats every row of every tensor `beam_size` times: row `b` -> rows
    `b * k ... b * k + k - 1`, the layout of `beam_search`'s cache."""
    return tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), structure)


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


def _top_candidates(logits, state, k):
    """Extends every live hypothesis by every token and keeps the `2k` best.

    Returns:
        `(log_probs, tokens, rows, sequences)`: each `(batch, 2k)` but the last,
        `(batch, 2k, step + 2)`; `rows` are the candidates' parents' rows in
        `alive` and the cache.
    """
    batch_size = tf.shape(state.alive_log_probs)[0]
    vocab_size = tf.shape(logits)[-1]
    log_probs = tf.reshape(
        tf.nn.log_softmax(logits, axis=-1), [batch_size, k, vocab_size]
    )  # (batch, k, vocab)
    candidates = state.alive_log_probs[:, :, tf.newaxis] + log_probs  # (batch, k, vocab)
    candidates = tf.reshape(candidates, [batch_size, k * vocab_size])  # (batch, k * vocab)
    cand_log_probs, cand_index = tf.math.top_k(candidates, k=2 * k)  # (batch, 2k)
    cand_token = tf.cast(cand_index % vocab_size, tf.int64)  # (batch, 2k)
    cand_rows = tf.range(batch_size)[:, tf.newaxis] * k + cand_index // vocab_size  # (batch, 2k)
    cand_seqs = tf.gather(state.alive, cand_rows)  # (batch, 2k, step + 1)
    cand_seqs = tf.concat([cand_seqs, cand_token[:, :, tf.newaxis]], axis=2)  # (..., step + 2)
    return cand_log_probs, cand_token, cand_rows, cand_seqs


def _finish_alive(state, rows, penalty, max_length, k):
    """Finishes the live hypotheses of the sentences `rows` (bool `(batch,)`) as
    they are, scored at their length, and marks those sentences done."""
    batch_size = tf.shape(state.alive_log_probs)[0]
    scores = tf.where(rows[:, tf.newaxis], state.alive_log_probs / penalty, -np.inf)  # (batch, k)
    sequences = tf.reshape(state.alive[:, 1:], [batch_size, k, -1])  # (batch, k, step)
    finished_tokens, finished_scores = _merge_finished(
        state.finished_tokens, state.finished_scores, _pad_to(sequences, max_length), scores, k
    )
    return state._replace(finished_tokens=finished_tokens, finished_scores=finished_scores,
                          done=state.done | rows, stopped=state.stopped | rows)


def _beam_step(next_logits, k, alpha, max_length, limits, state):
    """One step of beam search: extend, finish the ending candidates, keep `k` live."""
    batch_size = tf.shape(state.alive_log_probs)[0]
    logits, cache = next_logits(state.alive, state.cache, state.step)  # (batch * k, vocab)
    cand_log_probs, cand_token, cand_rows, cand_seqs = _top_candidates(logits, state, k)
    neg_inf = tf.constant(-np.inf, tf.float32)
    # Candidates ending in [END] among the first k ranks finish.
    is_end = tf.equal(cand_token, END_ID)  # (batch, 2k)
    first_k = tf.range(2 * k) < k  # (2k,)
    finishing = is_end & first_k[tf.newaxis, :] & ~state.done[:, tf.newaxis]  # (batch, 2k)
    penalty = length_penalty(state.step + 1, alpha)
    finished_tokens, finished_scores = _merge_finished(
        state.finished_tokens, state.finished_scores,
        _pad_to(cand_seqs[:, :, 1:], max_length),
        tf.where(finishing, cand_log_probs / penalty, neg_inf), k,
    )
    num_finished = state.num_finished + tf.reduce_sum(tf.cast(finishing, tf.int32), axis=1)
    # The k best candidates that did not end stay live.
    alive_log_probs, keep = tf.math.top_k(
        tf.where(is_end, neg_inf, cand_log_probs), k=k
    )  # (batch, k), best first
    # Done: k finished, none worse than the best live hypothesis at its length.
    best_alive = alive_log_probs[:, 0] / penalty  # (batch,)
    done = state.done | ((num_finished >= k) & (finished_scores[:, -1] >= best_alive))
    alive = tf.reshape(
        tf.gather(cand_seqs, keep, batch_dims=1), [batch_size * k, state.step + 2]
    )  # (batch * k, step + 2)
    rows = tf.reshape(tf.gather(cand_rows, keep, batch_dims=1), [-1])  # (batch * k,)
    state = BeamState(
        step=state.step + 1, alive=alive, alive_log_probs=alive_log_probs,
        cache=tf.nest.map_structure(lambda t: tf.gather(t, rows), cache),
        finished_tokens=finished_tokens, finished_scores=finished_scores,
        num_finished=num_finished, done=done, stopped=state.stopped,
    )
    # Sentences at their own limit finish with their live hypotheses as they are.
    at_limit = (state.step >= limits) & ~state.done  # (batch,)
    return tf.cond(
        tf.reduce_any(at_limit),
        lambda: _finish_alive(state, at_limit, penalty, max_length, k),
        lambda: state,
    )


def _initial_beams(cache, batch_size, max_length, k, initial_finished):
    """The loop's first state: `k` copies of `[START]` per sentence, one of them live."""
    neg_inf = tf.constant(-np.inf, tf.float32)
    # All beams start as the same `[START]`; only the first is live, or the
    # first step would pick the same token k times.
    alive_log_probs = tf.concat(
        [tf.zeros([batch_size, 1]), tf.fill([batch_size, k - 1], neg_inf)], axis=1
    )  # (batch, k)
    return BeamState(
        step=tf.constant(0, tf.int32),
        alive=tf.fill([batch_size * k, 1], tf.constant(START_ID, tf.int64)),
        alive_log_probs=alive_log_probs,
        cache=cache,
        finished_tokens=tf.fill([batch_size, k, max_length], tf.constant(PAD_ID, tf.int64)),
        finished_scores=tf.fill([batch_size, k], neg_inf),
        num_finished=tf.zeros([batch_size], tf.int32),
        done=_flags(initial_finished, batch_size),
        stopped=tf.zeros([batch_size], tf.bool),
    )


def beam_search(next_logits, cache, limits, beam_size, alpha, n_best=1, initial_finished=None,
                *, return_stopped=False):
    """Batched beam search with the GNMT length penalty, keeping the `n_best` best.

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
    live hypothesis can only lose probability). At its limit, a sentence's
    live hypotheses are finished as they are. With `beam_size = 1` this is
    exactly greedy search: the arg-max either ends the sentence (every other
    continuation scores lower) or is the one live token.

    Args:
        next_logits, limits, initial_finished: see the module docstring;
            skipped sentences get all `[PAD]` and scores of `-inf`.
        cache: the callback's cache with `beam_size` rows per sentence, row
            `b * beam_size + j` for hypothesis `j` of sentence `b` (see
            `repeat_beams`).
        beam_size: live hypotheses per sentence (int or int32 scalar, >= 1).
        alpha: length-penalty exponent (float or float32 scalar, >= 0).
        n_best: how many of the best finished hypotheses to return, at most
            `beam_size`.
        return_stopped: also return which sentences reached their limit
            before their search was done. The others have the hypotheses
            they would have with any higher limit.

    Returns:
        `(tokens, scores)`: int64 `(batch, n_best, max(limits))` output tokens,
        best first, `[PAD]` after `[END]`, and float32 `(batch, n_best)` their
        scores `log P / lp` (`-inf` where a sentence has fewer hypotheses);
        with `return_stopped`, also bool `(batch,)`.
    """
    limits = tf.convert_to_tensor(limits, tf.int32)
    k = tf.convert_to_tensor(beam_size, tf.int32)
    alpha = tf.convert_to_tensor(alpha, tf.float32)
    batch_size = tf.shape(limits)[0]
    max_length = tf.reduce_max(tf.concat([limits, [0]], axis=0))
    state = _initial_beams(cache, batch_size, max_length, k, initial_finished)
    state = tf.while_loop(
        lambda *s: (BeamState(*s).step < max_length) & ~tf.reduce_all(BeamState(*s).done),
        lambda *s: _beam_step(next_logits, k, alpha, max_length, limits, BeamState(*s)),
        loop_vars=state,
        shape_invariants=BeamState(
            step=tf.TensorShape([]), alive=tf.TensorShape([None, None]),
            alive_log_probs=tf.TensorShape([None, None]), cache=_cache_shapes(state.cache),
            finished_tokens=tf.TensorShape([None, None, None]),
            finished_scores=tf.TensorShape([None, None]), num_finished=tf.TensorShape([None]),
            done=tf.TensorShape([None]), stopped=tf.TensorShape([None]),
        ),
    )
    state = BeamState(*state)
    # Sentences still running at the end finish with their live hypotheses.
    state = _finish_alive(state, ~state.done, length_penalty(state.step, alpha), max_length, k)
    tokens, scores = state.finished_tokens[:, :n_best], state.finished_scores[:, :n_best]
    return (tokens, scores, state.stopped) if return_stopped else (tokens, scores)


# ---------------------------------------------------------------------------
# A strategy object, run.


def setting_specs(search):
    """The scalar `tf.TensorSpec`s of a strategy's settings (an object or its
    class: `SETTINGS`), a dict by name: the inputs of its compiled search, so
    that other numbers do not retrace."""
    return {name: tf.TensorSpec([], tf.as_dtype(dtype), name=name)
            for name, dtype in search.SETTINGS}


def setting_tensors(search):
    """A strategy object's settings as the scalar tensors of `setting_specs`."""
    specs = setting_specs(search)
    return {name: tf.constant(value, specs[name].dtype)
            for name, value in search.settings().items()}


def search_result(search, settings, start, limits, initial_finished=None) -> SearchResult:
    """Runs a strategy's search (`Strategy.search`) with its `settings`.

    Args:
        search: a strategy object of `transformer.decoding.strategies`.
        settings: a dict of its settings by name (numbers or scalar tensors,
            see `setting_specs`), e.g. `search.settings()`.
        start: `start(rows_per_sentence) -> (next_logits, cache)`: the callback
            and its initial cache with that many rows per sentence (a beam
            needs one per hypothesis).
        limits, initial_finished: see the module docstring.

    Returns:
        Its `SearchResult`.

    Raises:
        ValueError: a search that returns something else.
    """
    limits = tf.convert_to_tensor(limits, tf.int32)
    if initial_finished is None:
        initial_finished = tf.zeros_like(limits, tf.bool)
    result = search.search(settings, start, limits, initial_finished)
    if not isinstance(result, tuple) or len(result) != len(SearchResult._fields):
        raise ValueError(f"{search!r}.search returned {type(result).__name__}; expected a "
                         "transformer.decoding.search.SearchResult(tokens, scores, log_probs, "
                         "stopped).")
    return SearchResult(*result)


def run_search(search, settings, start, limits, initial_finished=None, return_stopped=False):
    """Runs a strategy's search (`Strategy.search`) with its `settings`.

    Args:
        search, settings, start, limits, initial_finished: see `search_result`.
        return_stopped: also return bool `(batch,)`: the sentences whose
            search their limit stopped (greedy and sampling: without `[END]`).
            The others have the output they would have with any higher limit.

    Returns:
        `(tokens, scores)`: int64 `(batch, n, steps)` output tokens, best first,
        and float32 `(batch, n)` the strategy's `score`, what the search ranks
        by: `log P / lp` for beam search, `log P` for greedy search and
        sampling; `n` is the strategy's `results_per_sentence`. With
        `return_stopped`, `(tokens, scores, stopped)`.
    """
    result = search_result(search, settings, start, limits, initial_finished)
    if return_stopped:
        return result.tokens, result.scores, result.stopped
    return result.tokens, result.scores


def one_row(search, settings, start, limits, initial_finished, score=None):
    """A search of one row per sentence in the layout of `Strategy.search`.

    Args:
        search: `search(next_logits, cache, limits, initial_finished=...,
            **settings) -> (tokens, log_probs)`, such as `greedy_search` and
            `sample_search`.
        settings, start, limits, initial_finished: see `search_result`.
        score: the strategy's `score(log_prob, length, settings)` (float32
            tensors `(batch, 1)`); None: the score is `log P`.

    Returns:
        A `SearchResult` with one result per sentence; a sentence is stopped
        when its output has no `[END]`.
    """
    next_logits, cache = start(1)
    tokens, log_probs = search(next_logits, cache, limits, initial_finished=initial_finished,
                               **settings)
    ended = tf.reduce_any(tf.equal(tokens, END_ID), axis=1)  # (batch,)
    stopped = ~ended & ~_flags(initial_finished, tf.shape(tokens)[0])
    tokens, log_probs = tokens[:, tf.newaxis, :], log_probs[:, tf.newaxis]  # (batch, 1, ...)
    scores = log_probs
    if score is not None:
        lengths = tf.cast(output_lengths(tokens, limits), tf.float32)  # (batch, 1)
        scores = score(log_probs, lengths, settings)
    return SearchResult(tokens, scores, log_probs, stopped)


def next_token_search(strategy, settings, start, limits, initial_finished=None):
    """A strategy's one method, `Strategy.next_tokens`, run on `token_by_token`
    (the default `Strategy.search`): one row per sentence, each step's
    log-probabilities (the model's log-softmax) in, the next tokens out, and
    the strategy's `score` of the summed `log P`.

    Args:
        strategy: a strategy object that defines `next_tokens`.
        settings, start, limits, initial_finished: see `search_result`.

    Returns:
        A `SearchResult` with one result per sentence.
    """

    def search(next_logits, cache, limits, initial_finished=None, **settings):
        def choose(logits, tokens, index):
            log_probs = tf.nn.log_softmax(logits, axis=-1)  # (batch, vocab)
            return tf.cast(strategy.next_tokens(log_probs, tokens, settings), tf.int64)

        return token_by_token(next_logits, choose, cache, limits, initial_finished)

    return one_row(search, settings, start, limits, initial_finished, score=strategy.score)
