"""Tests of transformer/decoding/search.py and transformer/decoding/pipeline.py: the model's two
halves (`encode`, `decode_step`), cached greedy decoding against the naive
loop (random and trained models, compiled, pre-norm, mixed precision), beam
search (a beam of one is greedy, scores, brute force), the search strategies on
callbacks that know nothing of a model (greedy, beam with n-best, sampling with
temperature, top-k and top-p), and the per-sentence output limit (input length
+ 50, section 6.1). The `Translator` on top of them is tested in test_translate.py."""

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from translate_helpers import (
    TARGET_VOCAB,
    beam_search_decode,
    cached_greedy_decode,
    first_end_lengths,
    random_model,
    random_sources,
    sample_decode,
)

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.decoding.pipeline import (
    compile_decode,
    decode,
    naive_greedy_decode,
    output_limits,
    sequence_log_probs,
    start_decoding,
)
from transformer.decoding.search import (
    BeamState,
    beam_search,
    greedy_search,
    length_penalty,
    repeat_beams,
    sample_search,
    setting_tensors,
)
from transformer.decoding.strategies import Beam, Greedy, Sample

LENGTHS = [9, 3, 6, 2, 7]  # a padded batch: every row has a different length
PACKAGE = Path(__file__).resolve().parents[1] / "transformer"


def _decode_position_by_position(model, sources, targets):
    context, padding_mask = model.encode(sources)
    cache, memory = model.initial_cache(context, padding_mask)
    logits = []
    for t in range(targets.shape[1]):
        step_logits, cache = model.decode_step(targets[:, : t + 1], cache, memory)
        assert cache[0][0].shape[2] == t + 1  # one more cached position per step
        logits.append(step_logits.numpy())
    return np.stack(logits, axis=1)  # (batch, steps, vocab)


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_decode_step_equals_the_full_model_position_by_position(tie_embeddings):
    """The tied case reads the logits through the shared table (section 3.4)."""
    model = random_model(seed=3, tie_embeddings=tie_embeddings)
    vocab = TARGET_VOCAB if tie_embeddings else 60
    sources = tf.constant(random_sources(3, LENGTHS, vocab_size=vocab))
    targets = tf.constant(random_sources(4, [6] * len(LENGTHS), vocab_size=TARGET_VOCAB))
    full = model((sources, targets), training=False).numpy()  # (batch, 6, vocab)
    np.testing.assert_allclose(_decode_position_by_position(model, sources, targets), full,
                               atol=2e-4, rtol=1e-4)
    cached = cached_greedy_decode(model, sources, 12)
    np.testing.assert_array_equal(cached.numpy(), naive_greedy_decode(model, sources, 12))


def test_the_memory_is_the_encoder_output_projected_once():
    model = random_model(seed=2)
    sources = tf.constant(random_sources(2, LENGTHS))
    context, padding_mask = model.encode(sources)
    np.testing.assert_array_equal(padding_mask.numpy()[:, 0, 0], random_sources(2, LENGTHS) == 0)
    cache, memory = model.initial_cache(context, padding_mask)
    assert len(cache) == len(memory["cross"]) == model.config.num_layers
    heads, depth = model.config.num_heads, model.config.d_model // model.config.num_heads
    assert cache[0][0].shape == (len(LENGTHS), heads, 0, depth)
    assert memory["cross"][0][0].shape == (len(LENGTHS), heads, max(LENGTHS), depth)


def test_output_limits_are_input_length_plus_extra_capped():
    sources = random_sources(0, [9, 3, 2])  # 7, 1 and 0 tokens between [START] and [END]
    np.testing.assert_array_equal(output_limits(sources, 100, 50).numpy(), [57, 51, 50])
    np.testing.assert_array_equal(output_limits(sources, 52, 50).numpy(), [52, 51, 50])
    np.testing.assert_array_equal(output_limits(sources, 30, None).numpy(), [30, 30, 30])


def test_greedy_row_limits_cut_each_sentence_where_the_naive_loop_would_be_cut():
    model = random_model(seed=5, end_bias=-20.0)  # never ends by itself
    sources = tf.constant(random_sources(5, LENGTHS))
    limits = tf.constant([4, 1, 7, 2, 5], tf.int32)
    naive = naive_greedy_decode(model, sources, 7).numpy()
    assert not (naive == END_ID).any()
    cut, log_probs = cached_greedy_decode(
        model, sources, 7, row_limits=limits, return_log_probs=True
    )
    cut = cut.numpy()
    for row, limit in enumerate(limits.numpy()):
        np.testing.assert_array_equal(cut[row, :limit], naive[row, :limit])
        assert (cut[row, limit:] == PAD_ID).all()
    free, free_log_probs = cached_greedy_decode(model, sources, 7, return_log_probs=True)
    shorter = limits.numpy() < 7  # fewer tokens scored, each with a log-probability < 0
    assert (log_probs.numpy()[shorter] > free_log_probs.numpy()[shorter]).all()
    np.testing.assert_allclose(log_probs.numpy()[~shorter], free_log_probs.numpy()[~shorter])


def test_beam_row_limits_bound_every_output_and_change_nothing_when_loose():
    model = random_model(seed=6, end_bias=2.0)
    sources = tf.constant(random_sources(6, LENGTHS))
    free, free_scores = beam_search_decode(model, sources, 12, 3, 0.6)
    loose = tf.fill([len(LENGTHS)], 12)
    same, same_scores = beam_search_decode(model, sources, 12, 3, 0.6, row_limits=loose)
    np.testing.assert_array_equal(same.numpy(), free.numpy())
    np.testing.assert_allclose(same_scores.numpy(), free_scores.numpy(), rtol=1e-6)
    limits = np.array([1, 2, 3, 1, 2], np.int32)
    tight, _ = beam_search_decode(model, sources, 12, 3, 0.6, row_limits=tf.constant(limits))
    lengths = (tight.numpy() != PAD_ID).sum(axis=1)
    assert (lengths <= limits).all() and (lengths >= 1).all()


# --- the strategies know nothing of a model: a table of logits as the callback ----


def _table_callback(table):
    """`next_logits` of a bigram model: the logits follow from the newest token
    alone, `table[token]`. Its cache counts the calls per row."""
    table = tf.constant(table, tf.float32)

    def next_logits(tokens, cache, index):
        assert tokens.shape.rank == 2
        return tf.gather(table, tokens[:, -1]), cache + 1  # (rows, vocab), (rows,)

    return next_logits


def _bigram_table(seed, vocab=7, end_boost=0.0):
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, 2.0, (vocab, vocab)).astype(np.float32)
    table[:, END_ID] += end_boost
    table[:, PAD_ID] = table[:, START_ID] = -30.0  # never generated
    return table


def _bigram_log_prob(table, tokens):
    log_softmax = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    previous, total = START_ID, 0.0
    for token in tokens:
        total += log_softmax[previous, token]
        if token == END_ID:
            break
        previous = token
    return total


def test_greedy_search_follows_the_callbacks_arg_max_chain():
    table = _bigram_table(0, end_boost=1.0)
    limits = tf.constant([6, 2, 0], tf.int32)
    tokens, log_probs = greedy_search(_table_callback(table), tf.zeros([3], tf.int32), limits)
    expected, token = [], START_ID
    for _ in range(6):
        token = int(np.argmax(table[token]))
        expected.append(token)
        if token == END_ID:
            break
    tokens = tokens.numpy()
    np.testing.assert_array_equal(tokens[0, : len(expected)], expected)
    np.testing.assert_array_equal(tokens[1, : min(2, len(expected))], expected[:2])
    assert (tokens[2] == PAD_ID).all() and log_probs.numpy()[2] == 0.0
    np.testing.assert_allclose(log_probs.numpy()[0], _bigram_log_prob(table, expected),
                               rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_n_best_are_the_best_outputs_of_all_by_brute_force(alpha):
    # A vocabulary of 7 and at most 3 tokens; a beam of 49 keeps every prefix.
    table = _bigram_table(1, end_boost=2.0)
    vocab, width = table.shape[0], 3
    limits = tf.constant([width], tf.int32)
    tokens, scores = beam_search(_table_callback(table), tf.zeros([49], tf.int32), limits,
                                 beam_size=49, alpha=alpha, n_best=5)
    assert tokens.shape == (1, 5, width) and scores.shape == (1, 5)
    outputs = set()
    for length in range(1, width + 1):
        for output in itertools.product(range(vocab), repeat=length):
            if END_ID not in output[:-1] and (length == width or output[-1] == END_ID):
                outputs.add(output)
    ranked = sorted((_bigram_log_prob(table, o) / length_penalty(len(o), alpha), o)
                    for o in outputs)[::-1]
    np.testing.assert_allclose(scores.numpy()[0], [s for s, _ in ranked[:5]], rtol=1e-5)
    for row, (_, output) in zip(tokens.numpy()[0], ranked[:5], strict=True):
        np.testing.assert_array_equal(row[: len(output)], output)
        assert (row[len(output):] == PAD_ID).all()


def test_the_beam_state_has_named_fields_and_the_cache_follows_the_hypotheses():
    assert BeamState._fields == ("step", "alive", "alive_log_probs", "cache",
                                 "finished_tokens", "finished_scores", "num_finished", "done",
                                 "stopped")
    np.testing.assert_array_equal(repeat_beams(tf.constant([5, 6]), 3).numpy(),
                                  [5, 5, 5, 6, 6, 6])
    # The callback's cache (calls so far) is gathered with the hypotheses: every
    # row of it has seen one call per step, whichever parent it came from.
    seen = []

    def next_logits(tokens, cache, index):
        seen.append(int(index))
        tf.debugging.assert_equal(cache, tf.fill(tf.shape(cache), tf.cast(index, tf.int32)))
        return _table_callback(_bigram_table(2))(tokens, cache, index)

    beam_search(next_logits, tf.zeros([2 * 3], tf.int32), tf.constant([4, 4]), 3, 0.6)
    assert seen == [0, 1, 2, 3]


def test_the_loops_keep_the_static_sizes_of_the_cache_axes_that_do_not_grow():
    """Only the rows and the axes empty at the start may vary (with every axis
    unknown, a greedy step took 1.5-1.8x as long: BENCHMARKS.md)."""
    from transformer.decoding.search import _cache_shapes

    model = random_model(seed=0)
    next_logits, cache = start_decoding(model, tf.constant(random_sources(0, [4, 3])))
    shapes = _cache_shapes(cache)
    assert [s.as_list() for s in shapes[0]] == [[None, 4, None, 8]] * 2
    seen = []

    @tf.function(autograph=False)
    def run(sources):
        next_logits, cache = start_decoding(model, sources)

        def spy(tokens, cache, index):
            seen.append(cache[0][0].shape.as_list())
            return next_logits(tokens, cache, index)

        return greedy_search(spy, cache, tf.fill([tf.shape(sources)[0]], 3))

    run.get_concrete_function(tf.TensorSpec([None, None], tf.int64))
    assert seen == [[None, 4, None, 8]]


def _flat_callback(logits):
    """`next_logits` whose logits are `logits` at every step, for every row."""
    logits = tf.constant(logits, tf.float32)

    def next_logits(tokens, cache, index):
        return tf.tile(logits[tf.newaxis], [tf.shape(tokens)[0], 1]), cache

    return next_logits


def _sample_counts(logits, rows=4000, **settings):
    limits = tf.ones([rows], tf.int32)  # one token each
    tokens, _ = sample_search(_flat_callback(logits), tf.zeros([rows]), limits, seed=5,
                              **settings)
    return np.bincount(tokens.numpy()[:, 0], minlength=len(logits)) / rows


def test_sampling_draws_from_the_tempered_and_cut_distribution():
    logits = np.array([-30.0, 0.0, -30.0, 0.5, 1.0, 1.5, 2.0, 0.2], np.float32)
    softmax = np.exp(logits) / np.exp(logits).sum()
    for temperature in (1.0, 0.5, 2.0):
        expected = np.exp(logits / temperature) / np.exp(logits / temperature).sum()
        np.testing.assert_allclose(_sample_counts(logits, temperature=temperature), expected,
                                   atol=0.03)
    top3 = np.where(np.isin(np.arange(8), [4, 5, 6]), softmax, 0.0)
    np.testing.assert_allclose(_sample_counts(logits, top_k=3), top3 / top3.sum(), atol=0.03)
    # The nucleus of 0.7: tokens 6 (p 0.40) and 5 (0.24) reach 0.64 < 0.7, so 4 joins.
    order = np.argsort(-softmax)
    assert softmax[order[:2]].sum() < 0.7 <= softmax[order[:3]].sum()
    nucleus = np.where(np.isin(np.arange(8), order[:3]), softmax, 0.0)
    np.testing.assert_allclose(_sample_counts(logits, top_p=0.7), nucleus / nucleus.sum(),
                               atol=0.03)
    assert _sample_counts(logits, top_k=1)[6] == 1.0
    assert _sample_counts(logits, top_p=0.01)[6] == 1.0
    # Every step draws afresh: two steps of 8 equally likely tokens agree in 1/8 of rows.
    flat = np.where(np.arange(12) >= 4, 0.0, -30.0).astype(np.float32)
    tokens, _ = sample_search(_flat_callback(flat), tf.zeros([4000]), tf.fill([4000], 2),
                              seed=5)
    tokens = tokens.numpy()
    assert tokens.shape == (4000, 2) and (tokens >= 4).all()
    assert abs((tokens[:, 0] == tokens[:, 1]).mean() - 1 / 8) < 0.03


def test_sampling_is_seeded_reproducible_and_scored_by_the_model():
    model = random_model(seed=7, end_bias=0.5)
    sources = tf.constant(random_sources(7, LENGTHS))
    first, log_probs = sample_decode(model, sources, 10, seed=3)
    again, _ = sample_decode(model, sources, 10, seed=3)
    other, _ = sample_decode(model, sources, 10, seed=4)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.array_equal(first.numpy(), other.numpy())
    # The score is log P(Y | X) under the model itself, not under the tempered one.
    tempered, tempered_log_probs = sample_decode(model, sources, 10, seed=3, temperature=0.7,
                                                 top_p=0.9)
    for tokens, scores in ((first, log_probs), (tempered, tempered_log_probs)):
        reference, _ = sequence_log_probs(model, sources, tokens)
        np.testing.assert_allclose(scores.numpy(), reference, rtol=1e-4, atol=1e-4)
    # top_k = 1 is greedy decoding, whatever the temperature.
    greedy = cached_greedy_decode(model, sources, 10).numpy()
    top1, _ = sample_decode(model, sources, 10, seed=9, top_k=1, temperature=3.0)
    np.testing.assert_array_equal(top1.numpy(), greedy)


def test_sampling_respects_each_rows_limit_and_skips_finished_rows():
    model = random_model(seed=8, end_bias=-20.0)  # never ends by itself
    sources = tf.constant(random_sources(8, LENGTHS))
    limits = tf.constant([3, 1, 5, 2, 4])
    finished = tf.constant([False, False, False, True, False])
    tokens, log_probs = sample_decode(model, sources, 6, seed=1, row_limits=limits,
                                      initial_finished=finished)
    lengths = (tokens.numpy() != PAD_ID).sum(axis=1)
    np.testing.assert_array_equal(lengths, [3, 1, 5, 0, 4])
    assert log_probs.numpy()[3] == 0.0


@pytest.mark.parametrize("search", [Greedy(), Beam(size=3, alpha=0.6, n_best=2)])
def test_a_search_not_stopped_by_its_limit_is_what_any_higher_limit_gives(search):
    """`decode(..., return_stopped=True)` flags the sentences whose limit stopped
    their search; the others have the outputs and scores of a higher limit."""
    model = random_model(seed=2, end_bias=2.0)
    sources = tf.constant(random_sources(5, LENGTHS))
    flags = tf.constant([False, False, True, False, False])  # one sentence skipped
    short, short_scores, stopped = decode(model, sources, tf.fill([5], 5), flags, search,
                                          return_stopped=True)
    long, long_scores, long_stopped = decode(model, sources, tf.fill([5], 40), flags, search,
                                             return_stopped=True)
    stopped, kept = stopped.numpy(), ~stopped.numpy()
    assert stopped.any() and kept[[0, 1, 3, 4]].any() and not stopped[2]
    width = short.shape[2]
    np.testing.assert_array_equal(short.numpy()[kept], long.numpy()[kept][:, :, :width])
    assert (long.numpy()[kept][:, :, width:] == PAD_ID).all()
    np.testing.assert_allclose(short_scores.numpy()[kept], long_scores.numpy()[kept], rtol=1e-6)
    assert not long_stopped.numpy()[kept].any()


def test_decode_gives_one_layout_for_every_strategy():
    model = random_model(seed=1, end_bias=1.5)
    sources = tf.constant(random_sources(1, LENGTHS))
    limits = tf.fill([len(LENGTHS)], 12)
    flags = tf.zeros([len(LENGTHS)], tf.bool)
    greedy, greedy_scores = decode(model, sources, limits, flags, Greedy())
    beam, beam_scores = decode(model, sources, limits, flags, Beam(size=4, alpha=0.6, n_best=3))
    sample, _ = decode(model, sources, limits, flags, Sample(top_k=1, seed=2))
    assert greedy.shape[:2] == (5, 1) and beam.shape == (5, 3, 12) and sample.shape[1] == 1
    np.testing.assert_array_equal(sample.numpy(), greedy.numpy())  # top_k = 1
    assert (np.diff(beam_scores.numpy(), axis=1) <= 0).all()  # best first
    best, best_score = beam_search_decode(model, sources, 12, 4, 0.6)
    np.testing.assert_array_equal(beam.numpy()[:, 0], best.numpy())
    np.testing.assert_allclose(beam_scores.numpy()[:, 0], best_score.numpy())
    with pytest.raises(ValueError, match="`kind`"):
        decode(model, sources, limits, flags, str, {})
    compiled = compile_decode(model, Beam)
    tokens, _ = compiled(sources, limits, flags, setting_tensors(Beam(4, 0.6, 2)))
    np.testing.assert_array_equal(tokens.numpy(), beam.numpy()[:, :2])
    assert greedy_scores.shape == (5, 1)


def test_start_decoding_repeats_the_memory_for_every_beam():
    model = random_model(seed=4)
    sources = tf.constant(random_sources(4, [5, 3]))
    next_logits, cache = start_decoding(model, sources, beam_size=3)
    start = tf.fill([6, 1], tf.constant(START_ID, tf.int64))
    logits, cache = next_logits(start, cache, 0)
    assert logits.shape == (6, TARGET_VOCAB) and cache[0][0].shape[:3] == (6, 4, 1)
    np.testing.assert_allclose(logits.numpy()[:3], np.repeat(logits.numpy()[:1], 3, axis=0),
                               atol=1e-6)


# --- cached greedy decoding equals the naive loop ---------------------------------


@pytest.mark.parametrize("seed,end_bias,max_length", [(0, 0.0, 10), (1, 1.5, 12), (3, 1.5, 12)])
def test_cached_greedy_equals_naive_loop_on_random_models(seed, end_bias, max_length):
    model = random_model(seed, end_bias)
    sources = random_sources(seed, LENGTHS)
    naive = naive_greedy_decode(model, sources, max_length).numpy()
    cached = cached_greedy_decode(model, sources, max_length).numpy()
    # The models are not degenerate: outputs vary.
    assert len(np.unique(naive)) >= 4
    np.testing.assert_array_equal(cached, naive)
    if end_bias:
        # Sentences stop at different steps, and a finished one only gets [PAD].
        ends = first_end_lengths(naive)
        assert len(set(ends)) >= 2
        for row, end in zip(naive, ends, strict=True):
            if end is not None:
                assert (row[end:] == PAD_ID).all()


@pytest.mark.parametrize("seed, decoder_layers", [(0, None), (1, None), (2, 1), (3, 3)])
def test_cached_decoding_of_a_pre_norm_model_equals_the_naive_loop(seed, decoder_layers):
    """The cache holds the projections of the normalized inputs, and the
    decoder's closing layer norm runs on the newest position too; a decoder
    shallower or deeper than the encoder caches one entry per layer of its own."""
    model = random_model(seed, end_bias=1.5, normalize_first=True,
                         num_decoder_layers=decoder_layers)
    assert len(model.decoder.dec_layers) == (decoder_layers or 2)
    sources = random_sources(seed, LENGTHS)
    naive = naive_greedy_decode(model, sources, 12).numpy()
    assert len(np.unique(naive)) >= 3
    np.testing.assert_array_equal(cached_greedy_decode(model, sources, 12).numpy(), naive)
    beam, _ = beam_search_decode(model, sources, 12, beam_size=1, alpha=0.0)
    np.testing.assert_array_equal(beam.numpy()[:, : naive.shape[1]], naive)


def test_compiled_greedy_equals_naive_loop_and_stops_when_all_finished():
    model = random_model(1, end_bias=1.5)  # ends after 4, 1, 7, 1 and 3 tokens
    sources = random_sources(1, LENGTHS)
    greedy = compile_decode(model, Greedy)
    flags = tf.zeros([len(LENGTHS)], tf.bool)
    tokens, _ = greedy(tf.constant(sources), tf.fill([len(LENGTHS)], 30), flags, {})
    out = tokens.numpy()[:, 0]
    naive = naive_greedy_decode(model, sources, 30).numpy()
    np.testing.assert_array_equal(out, naive)
    ends = first_end_lengths(out)
    assert None not in ends and len(set(ends)) >= 2
    assert out.shape[1] == max(ends)  # the loop stopped at the last [END]


def test_padding_in_the_batch_does_not_change_a_sentence():
    model = random_model(2, end_bias=1.5)
    sources = random_sources(2, LENGTHS)
    batched = cached_greedy_decode(model, sources, 8).numpy()
    for row, length in enumerate(LENGTHS):
        alone = cached_greedy_decode(model, sources[row:row + 1, :length], 8).numpy()[0]
        np.testing.assert_array_equal(batched[row, :len(alone)], alone)
        assert (batched[row, len(alone):] == PAD_ID).all()


def test_finished_sentences_do_not_affect_the_others():
    model = random_model(0)
    sources = random_sources(0, LENGTHS)
    finished = np.array([False, True, False, True, False])
    out = cached_greedy_decode(model, sources, 6, initial_finished=finished).numpy()
    free = cached_greedy_decode(model, sources, 6).numpy()
    assert (out[finished] == PAD_ID).all()
    np.testing.assert_array_equal(out[~finished], free[~finished])
    naive = naive_greedy_decode(model, sources, 6, initial_finished=finished).numpy()
    np.testing.assert_array_equal(out, naive)


def test_a_model_that_never_ends_decodes_to_the_limit_as_the_naive_loop():
    model = random_model(0, end_bias=-1e4)  # [END] never wins
    sources = random_sources(0, LENGTHS)
    cached = cached_greedy_decode(model, sources, 6).numpy()
    assert cached.shape == (len(LENGTHS), 6)
    np.testing.assert_array_equal(cached, naive_greedy_decode(model, sources, 6).numpy())


def test_cached_greedy_equals_naive_loop_on_a_trained_model(translator, test_pairs):
    sentences = [source for source, _ in test_pairs[:12]]
    encoder_tokens, _ = translator.encode(sentences)
    model = translator.transformer
    naive = naive_greedy_decode(model, encoder_tokens, 30).numpy()
    cached = cached_greedy_decode(model, encoder_tokens, 30).numpy()
    np.testing.assert_array_equal(cached, naive)
    # The trained model ends its sentences (all 12 here; most, anywhere).
    ends = first_end_lengths(naive)
    assert sum(end is not None for end in ends) >= 9 and len(set(ends)) >= 3, ends


def test_one_trace_for_every_batch_size_length_and_setting():
    model = random_model(0, end_bias=1.5)
    greedy, beam, sample = (compile_decode(model, kind) for kind in (Greedy, Beam, Sample))
    for batch, length, max_length in [(1, 4, 5), (3, 9, 17), (5, 2, 1), (2, 30, 40)]:
        sources = tf.constant(random_sources(batch, [length] * batch))
        flags = tf.zeros([batch], tf.bool)
        limits = tf.fill([batch], max_length)
        greedy(sources, limits, flags, {})
        for size, alpha in ((1, 0.6), (3, 0.0)):
            beam(sources, limits, flags, setting_tensors(Beam(size, alpha)))
        for top_k, top_p, seed in ((None, None, 7), (3, 0.5, 8)):
            sample(sources, limits, flags,
                   setting_tensors(Sample(0.8, top_k=top_k, top_p=top_p, seed=seed)))
    for compiled in (greedy, beam, sample):
        assert compiled.experimental_get_tracing_count() == 1


def test_cached_decoding_runs_under_mixed_precision():
    # Float32 is where tokens must match exactly; bfloat16 must decode too.
    from transformer import Transformer

    model = Transformer(num_layers=2, d_model=32, num_heads=4, dff=64, input_vocab_size=60,
                        target_vocab_size=50, max_length=32, dtype="mixed_bfloat16")
    model.build(((None, None), (None, None)))
    sources = random_sources(0, [5, 3])
    tokens = cached_greedy_decode(model, sources, 6)
    assert tokens.dtype == tf.int64 and tokens.shape[0] == 2 and tokens.shape[1] <= 6
    beam, scores = beam_search_decode(model, sources, 6, beam_size=2, alpha=0.6)
    assert beam.shape == (2, 6) and np.isfinite(scores.numpy()).all()


# --- beam search -----------------------------------------------------------------


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.0) == 1.0
    np.testing.assert_allclose(length_penalty(7, 0.6), (12 / 6) ** 0.6)
    np.testing.assert_allclose(length_penalty(tf.constant(7), 0.6).numpy(), (12 / 6) ** 0.6,
                               rtol=1e-6)


@pytest.mark.parametrize("seed,end_bias", [(0, 0.0), (1, 1.5), (3, 1.5)])
def test_beam_size_one_equals_greedy_on_random_models(seed, end_bias):
    model = random_model(seed, end_bias)
    sources = random_sources(seed, LENGTHS)
    greedy = naive_greedy_decode(model, sources, 16).numpy()
    tokens, _ = beam_search_decode(model, sources, 16, beam_size=1, alpha=0.6)
    tokens = tokens.numpy()
    np.testing.assert_array_equal(tokens[:, :greedy.shape[1]], greedy)
    assert (tokens[:, greedy.shape[1]:] == PAD_ID).all()


def test_beam_scores_are_the_models_scores():
    model = random_model(1, end_bias=1.5)
    sources = random_sources(1, LENGTHS)
    tokens, scores = beam_search_decode(model, sources, 12, beam_size=3, alpha=0.6)
    log_probs, lengths = sequence_log_probs(model, sources, tokens)
    np.testing.assert_allclose(scores.numpy(), log_probs / length_penalty(lengths, 0.6),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_beam_wider_than_the_search_space_finds_the_best_output(alpha):
    # Target vocabulary of 6 and at most 3 output tokens: 6 + 36 + 216 outputs
    # (shorter ones end with [END]). A beam of 216 keeps every hypothesis, so
    # it must return the best-scoring output of all, found by brute force.
    model = random_model(4, end_bias=1.0, target_vocab_size=6)
    sources = random_sources(4, [5, 3])
    tokens, scores = beam_search_decode(model, sources, 3, beam_size=216, alpha=alpha)
    candidates = []
    for length in (1, 2, 3):
        for prefix in itertools.product(range(6), repeat=length - 1):
            if END_ID in prefix:
                continue
            for last in range(6):
                candidates.append(list(prefix) + [last] + [PAD_ID] * (3 - length))
    candidates = np.array(candidates, np.int64)
    for row in range(2):
        repeated = np.repeat(sources[row:row + 1], len(candidates), axis=0)
        log_probs, lengths = sequence_log_probs(model, repeated, candidates)
        best = np.max(log_probs / length_penalty(lengths, alpha))
        np.testing.assert_allclose(scores.numpy()[row], best, rtol=1e-5, atol=1e-5)


def test_beam_scores_at_least_the_greedy_scores_on_a_trained_model(translator, test_pairs):
    # Beam search scores at least as high as greedy decoding on almost every
    # sentence, and higher on average. It cannot promise it for every sentence:
    # when k other prefixes beat the greedy prefix, the greedy path is pruned
    # (the session's tiny model is weak; 2 of its 64 test sentences do this).
    sentences = [source for source, _ in test_pairs]
    encoder_tokens, _ = translator.encode(sentences)
    model = translator.transformer
    greedy = cached_greedy_decode(model, encoder_tokens, 30)
    g_log_probs, g_lengths = sequence_log_probs(model, encoder_tokens, greedy)
    for alpha in (0.0, 0.6):
        beam, scores = beam_search_decode(model, encoder_tokens, 30, beam_size=4, alpha=alpha)
        b_log_probs, b_lengths = sequence_log_probs(model, encoder_tokens, beam)
        g_scores = g_log_probs / length_penalty(g_lengths, alpha)
        b_scores = b_log_probs / length_penalty(b_lengths, alpha)
        np.testing.assert_allclose(scores.numpy(), b_scores, rtol=1e-4, atol=1e-4)
        worse = b_scores < g_scores - 1e-5
        better = b_scores > g_scores + 1e-5
        assert worse.mean() <= 0.1, (alpha, b_scores - g_scores)
        assert better.sum() > 3 * worse.sum() and b_scores.mean() > g_scores.mean()


def test_beam_search_of_size_one_is_greedy_on_the_trained_model(translator, test_pairs):
    # `Beam(size=1)` runs the beam-search code with a beam of 1 (called here
    # directly, eagerly and compiled): it must give cached greedy decoding's
    # tokens and log-probabilities.
    sentences = [source for source, _ in test_pairs[:16]]
    encoder_tokens, _ = translator.encode(sentences)
    model = translator.transformer
    max_length = translator.max_length
    greedy = cached_greedy_decode(model, encoder_tokens, max_length).numpy()
    log_probs, lengths = sequence_log_probs(model, encoder_tokens, greedy)
    assert len(set(lengths)) >= 3  # sentences end at different steps
    compiled = compile_decode(model, Beam)
    no_flags = tf.zeros([len(sentences)], tf.bool)
    limits = tf.fill([len(sentences)], max_length)
    outputs = [(0.0, beam_search_decode(model, encoder_tokens, max_length, beam_size=1,
                                        alpha=0.0))]
    for alpha in (0.0, 0.6):
        tokens, scores = compiled(encoder_tokens, limits, no_flags,
                                  setting_tensors(Beam(size=1, alpha=alpha)))
        outputs.append((alpha, (tokens[:, 0], scores[:, 0])))
    for alpha, (tokens, scores) in outputs:
        tokens = tokens.numpy()
        assert tokens.shape == (len(sentences), max_length)
        np.testing.assert_array_equal(tokens[:, :greedy.shape[1]], greedy)
        assert (tokens[:, greedy.shape[1]:] == PAD_ID).all()
        np.testing.assert_allclose(scores.numpy(), log_probs / length_penalty(lengths, alpha),
                                   rtol=1e-4, atol=1e-4)
    assert compiled.experimental_get_tracing_count() == 1


# --- where the model's parts are used ---------------------------------------------

_MODEL_PARTS = {"encoder", "decoder", "final_layer", "enc_layers", "dec_layers"}
# The model's own modules, and the CTranslate2 exporter, which reads every
# layer's weights to lay them out as CTranslate2's specification.
_MODEL_MODULES = {"model.py", "layers.py", "attention.py", "ctranslate2_export.py"}


def _attribute_uses(path, names):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.name}:{node.lineno} .{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in names]


def test_nothing_outside_the_model_touches_its_encoder_decoder_or_final_layer():
    uses = []
    for path in PACKAGE.rglob("*.py"):
        if path.name not in _MODEL_MODULES:
            uses += _attribute_uses(path, _MODEL_PARTS)
    assert not uses


def test_the_search_strategies_know_nothing_of_the_model():
    path = PACKAGE / "decoding" / "search.py"
    imported = {node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "typing", "transformer.constants",
                        "transformer.decoding.strategies"}, imported
    assert not _attribute_uses(path, _MODEL_PARTS | {"decode_step", "encode", "initial_cache"})
