"""What the session's fixtures cannot see: deeper stacks and longer outputs.

The trained fixture (tests/conftest.py) has one layer, `max_length` 32 and
short greedy outputs, so a fault that only touches layer 2 and up, the
positions past 32, or the later steps of a search passes every test built
on it. These tests use tiny random models of two layers with `max_length`
64 and searches of more steps than the fixture ever makes.
"""

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from translate_helpers import (
    TARGET_VOCAB,
    cached_greedy_decode,
    copy_run,
    random_model,
    random_sources,
)

from transformer.constants import DEFAULT_ALPHA, END_ID, PAD_ID, START_ID
from transformer.data.batching import TokenizedPairs, token_budget_batches
from transformer.decoding.pipeline import naive_greedy_decode
from transformer.decoding.search import sample_search
from transformer.decoding.strategies import Beam, Greedy, evaluation_strategy, run_strategy
from transformer.decoding.translator import Translator
from transformer.model import build_model
from transformer.run.checkpoints import average_last_checkpoints
from transformer.run.fitting import train_stream as _train_stream
from transformer.rundir import CONFIG_FILE

LONG = 44  # past the fixture's max_length of 32


def test_cached_steps_of_a_two_layer_model_equal_the_full_pass_past_position_32():
    """Every position's logits from `decode_step` (each layer reading and
    extending its own cache, at its own position) equal one full pass, for
    sources and targets longer than 32 tokens."""
    model = random_model(seed=5, max_length=64)
    assert model.config.num_layers == 2
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


# --- runs longer than the fixture's ------------------------------------------------


def _pairs(count, seed=0):
    """`count` random tokenized pairs of 3 to 12 tokens a side."""
    rng = np.random.default_rng(seed)

    def side():
        return tf.ragged.constant([[START_ID, *rng.integers(4, 30, rng.integers(1, 11)), END_ID]
                                   for _ in range(count)], tf.int32)

    return TokenizedPairs(side(), side(), max_tokens=16)


@pytest.mark.parametrize("batch_tokens", [0, 40])
def test_a_resumed_stream_is_the_whole_stream_past_the_steps_done(batch_tokens):
    """Resuming at step 230 (many passes into the stream, more steps than the
    fixture's runs make) reads exactly the batches the uninterrupted run reads."""
    tokens = _pairs(20)

    def contexts(stream, count):
        return [context.numpy().tolist() for (context, _), _ in stream.take(count)]

    whole = contexts(_train_stream(tokens, batch_tokens, 4, 7, 0), 233)
    assert contexts(_train_stream(tokens, batch_tokens, 4, 7, 230), 3) == whole[230:]


@pytest.mark.parametrize("batch_tokens", [0, 40])
def test_the_training_stream_runs_untuned_and_shards_by_data(batch_tokens):
    """No tf.data autotuning thread: ending its iterator could keep `fit` from
    returning for up to the thread's period (`batching._untuned`)."""
    options = _train_stream(_pairs(4), batch_tokens, 4, 7, 0).options()
    assert options.autotune.enabled is False
    assert options.experimental_distribute.auto_shard_policy == \
        tf.data.experimental.AutoShardPolicy.DATA


def test_checkpoint_averaging_is_the_mean_of_the_last_of_more_kept(tmp_path):
    """The last `count` of six kept checkpoints, and all six when `count` is
    larger, against NumPy's mean of the saved weights."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    checkpoint = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=6)
    rng = np.random.default_rng(0)
    saved = []
    for step in range(1, 7):
        model.set_weights([rng.normal(size=w.shape).astype(np.float32)
                           for w in model.get_weights()])
        saved.append(model.get_weights())
        manager.save(checkpoint_number=step)
    for count, expected in ((3, saved[-3:]), (10, saved)):
        assert average_last_checkpoints(checkpoint, manager, count) == len(expected)
        for got, *weights in zip(model.get_weights(), *expected, strict=True):
            np.testing.assert_allclose(got, np.mean(weights, axis=0), rtol=1e-6, atol=1e-6)
    assert average_last_checkpoints(checkpoint, manager, 1) == 0


# --- a model and a run unlike the fixture's ----------------------------------------


def test_a_model_of_max_length_64_reads_sources_past_32_tokens(tiny_run, translator):
    """Sources are trimmed to the model's own `max_length`, not the fixture's 32."""
    keras.utils.set_random_seed(0)
    config = dataclasses.replace(tiny_run.config.model, max_length=64)
    model = build_model(config, translator.transformer.input_vocab_size,
                        translator.transformer.target_vocab_size)
    sentence = " ".join(["o gato preto come o bolo"] * 12)  # more than 64 tokens
    result = Translator(translator.tokenizers, model)(sentence, max_length=3,
                                                      return_attention=False)
    assert len(result.input_tokens) == 64 and result.input_tokens[-1] == "[END]"


def test_from_run_decodes_with_the_beam_the_run_was_evaluated_with(run_dir, tmp_path,
                                                                  test_pairs):
    copy = copy_run(run_dir, tmp_path / "run")
    config = json.loads((copy / CONFIG_FILE).read_text(encoding="utf-8"))
    assert config["eval_beam_size"] == 1  # the fixture's: greedy
    config["eval_beam_size"] = 3
    (copy / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
    assert run_strategy(copy) == Beam(size=3, alpha=DEFAULT_ALPHA)
    translator = Translator.from_run(copy)
    assert translator.search == Beam(size=3, alpha=DEFAULT_ALPHA)
    source = test_pairs[0][0]
    assert translator(source).score == translator(source, search=Beam(3)).score


def test_an_output_that_never_ends_stops_at_its_input_length_plus_50(tiny_run, translator):
    """Section 6.1's limit of input length + 50 output tokens, which the
    fixture's `max_length` of 32 always cuts first."""
    keras.utils.set_random_seed(0)
    config = dataclasses.replace(tiny_run.config.model, max_length=128)
    model = build_model(config, translator.transformer.input_vocab_size,
                        translator.transformer.target_vocab_size)
    bias = model.final_layer.bias.numpy()
    bias[END_ID] = -1e4  # [END] never wins
    model.final_layer.bias.assign(bias)
    results = Translator(translator.tokenizers, model)(
        ["o gato", "o gato preto come o bolo"], return_attention=False)
    for result in results:
        assert len(result.token_ids) == len(result.input_tokens) - 2 + 50


def test_a_pass_of_token_budget_batches_is_not_ordered_by_length():
    """Batches are cut from pairs sorted by length, then shuffled: a pass does
    not run from the short sentences to the long ones (which a run of a
    fraction of a pass, like the fixture's, would not notice)."""
    lengths = np.random.default_rng(0).integers(3, 50, 2000)
    for pass_index in range(3):
        batches = token_budget_batches(lengths, 400, seed=1, pass_index=pass_index)
        assert sorted(np.concatenate(batches).tolist()) == list(range(2000))
        longest = [lengths[batch].max() for batch in batches]
        assert len(longest) > 50
        assert abs(np.corrcoef(np.arange(len(longest)), longest)[0, 1]) < 0.3, pass_index




def test_every_beam_wider_than_one_is_a_beam_search():
    """How a run is evaluated and `Translator.from_run` decodes: a beam of 1 is
    greedy search; 2, the narrowest beam the fixtures do not use, is a beam."""
    assert evaluation_strategy(1) == Greedy()
    for size in range(2, 9):
        assert evaluation_strategy(size) == Beam(size=size, alpha=DEFAULT_ALPHA)
