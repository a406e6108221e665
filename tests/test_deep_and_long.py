"""What the session's fixtures cannot see: deeper stacks and longer outputs.

The trained fixture (tests/conftest.py) has one layer, `max_length` 32 and
short greedy outputs, so a fault that only touches layer 2 and up, the
positions past 32, or the later steps of a search passes every test built
on it. These tests use tiny random models of two layers with `max_length`
64 and searches of more steps than the fixture ever makes.
"""

import numpy as np
import tensorflow as tf
from translate_helpers import TARGET_VOCAB, random_model, random_sources

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.decoding import cached_greedy_decode, naive_greedy_decode
from transformer.search import sample_search

LONG = 44  # past the fixture's max_length of 32


def test_cached_steps_of_a_two_layer_model_equal_the_full_pass_past_position_32():
    """Every position's logits from `decode_step` (each layer reading and
    extending its own cache, at its own position) equal one full pass, for
    sources and targets longer than 32 tokens."""
    model = random_model(seed=5, max_length=64)
    assert model.num_layers == 2
    sources = tf.constant(random_sources(5, [LONG, 37, 40]))
    targets = tf.constant(random_sources(6, [LONG] * 3, vocab_size=TARGET_VOCAB))
    full = model((sources, targets), training=False).numpy()  # (batch, LONG, vocab)
    context, padding_mask = model.encode(sources)
    cache, memory = model.initial_cache(context, padding_mask)
    steps = []
    for t in range(LONG):
        logits, cache = model.decode_step(targets[:, : t + 1], cache, memory)
        steps.append(logits.numpy())
    assert [own[0].shape[2] for own in cache] == [LONG, LONG]  # every layer's cache grew
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=3e-4, rtol=1e-4)


def test_cached_greedy_equals_the_naive_loop_for_outputs_longer_than_32():
    model = random_model(seed=1, end_bias=-1e4, max_length=64)  # [END] never wins
    sources = random_sources(1, [LONG, 9, 30])
    naive = naive_greedy_decode(model, sources, LONG).numpy()
    cached = cached_greedy_decode(model, sources, LONG).numpy()
    assert cached.shape == (3, LONG)
    assert len(np.unique(naive[:, 32:])) >= 4  # the late positions vary
    np.testing.assert_array_equal(cached, naive)


def test_sampling_draws_afresh_at_every_step():
    """A flat distribution sampled for many steps gives many different tokens in
    each row: every step folds its own index into the seed."""
    vocab, rows, steps = 20, 6, 30

    def next_logits(tokens, cache, index):
        flat = np.zeros([vocab], np.float32)
        flat[[PAD_ID, START_ID, END_ID]] = -1e9  # never ends
        return tf.tile(tf.constant(flat)[tf.newaxis], [tf.shape(tokens)[0], 1]), cache

    tokens, _ = sample_search(next_logits, tf.zeros([rows]), tf.fill([rows], steps), seed=3)
    tokens = tokens.numpy()
    assert tokens.shape == (rows, steps)
    assert all(len(set(row)) >= 8 for row in tokens), tokens
