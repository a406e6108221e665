"""Tests of transformer/decoding.py beyond test_translate.py: the step through the
layers' caches and the per-sentence output limit (input length + 50, section 6.1)."""

import numpy as np
import tensorflow as tf
from translate_helpers import TARGET_VOCAB, random_model, random_sources

from transformer.constants import END_ID, PAD_ID
from transformer.decoding import (
    beam_search_decode,
    cached_greedy_decode,
    decode_step,
    naive_greedy_decode,
    output_limits,
    start_decoding,
)

LENGTHS = [9, 3, 6, 2, 7]


def test_decode_step_equals_the_full_decoder_position_by_position():
    model = random_model(seed=3)
    sources = tf.constant(random_sources(3, LENGTHS))
    targets = tf.constant(random_sources(4, [6] * len(LENGTHS), vocab_size=TARGET_VOCAB))
    full = model((sources, targets), training=False).numpy()  # (batch, 6, vocab)
    cache, cross_mask = start_decoding(model, sources)
    for t in range(targets.shape[1]):
        logits, cache = decode_step(model, targets[:, : t + 1], cache, cross_mask)
        np.testing.assert_allclose(logits.numpy(), full[:, t], atol=2e-4, rtol=1e-4)
        assert cache[0]["self"][0].shape[2] == t + 1  # one more cached position per step


def test_tied_embeddings_decode_as_the_naive_loop():
    """Decoding reads the logits through `final_layer`, which is the shared
    table when the embeddings are tied (section 3.4)."""
    model = random_model(seed=4, tie_embeddings=True)
    sources = tf.constant(random_sources(5, LENGTHS, vocab_size=TARGET_VOCAB))
    targets = tf.constant(random_sources(6, [6] * len(LENGTHS), vocab_size=TARGET_VOCAB))
    full = model((sources, targets), training=False).numpy()  # (batch, 6, vocab)
    cache, cross_mask = start_decoding(model, sources)
    for t in range(targets.shape[1]):
        logits, cache = decode_step(model, targets[:, : t + 1], cache, cross_mask)
        np.testing.assert_allclose(logits.numpy(), full[:, t], atol=2e-4, rtol=1e-4)
    cached = cached_greedy_decode(model, sources, 12)
    naive = naive_greedy_decode(model, sources, 12)
    np.testing.assert_array_equal(np.asarray(cached), np.asarray(naive))


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
