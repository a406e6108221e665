"""Tests of transformer.data.batching: ((context, x), labels) for teacher forcing."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.data.batching import (
    batches_from_tokens,
    batches_per_pass,
    budget_batches_from_tokens,
    fixed_batches_from_tokens,
    make_batches,
    sample_pairs,
    token_budget_batches,
    tokenize_pairs,
)
from transformer.data.corpus import DataError
from transformer.data.tokenizers import build_tokenizers
from transformer.data.toy import generate_toy_corpus


@pytest.fixture(scope="module")
def corpus():
    return generate_toy_corpus(seed=0, n_train=1000, n_valid=10, n_test=10)


@pytest.fixture(scope="module")
def tokenizers(corpus):
    return build_tokenizers(corpus.train, kind="wordpiece")


@pytest.fixture(scope="module")
def tokenized(corpus, tokenizers):
    return tokenize_pairs(corpus.train, tokenizers, max_tokens=64)


def _rows(batch_tensor) -> list[list[int]]:
    """Rows of a padded batch without their trailing padding."""
    rows = []
    for row in batch_tensor.numpy().tolist():
        while row and row[-1] == PAD_ID:
            row.pop()
        rows.append(row)
    return rows


def test_batch_structure_shapes_and_dtypes(corpus, tokenizers):
    dataset = make_batches(corpus.train, tokenizers, batch_size=32, max_tokens=64)
    (context, x), labels = next(iter(dataset))
    assert context.dtype == x.dtype == labels.dtype == tf.int64
    assert context.shape[0] == x.shape[0] == labels.shape[0] == 32
    assert x.shape == labels.shape
    assert dataset.element_spec[0][0].shape.as_list() == [None, None]
    assert int(dataset.cardinality()) == 1000 // 32 + 1


def test_x_and_labels_are_the_target_shifted_by_one(corpus, tokenizers):
    dataset = make_batches(
        corpus.train[:40], tokenizers, batch_size=40, max_tokens=64, shuffle=False
    )
    (context, x), labels = next(iter(dataset))
    targets = tokenizers.target.tokenize(tf.constant([t for _, t in corpus.train[:40]])).to_list()
    sources = tokenizers.source.tokenize(tf.constant([s for s, _ in corpus.train[:40]])).to_list()
    assert _rows(context) == sources
    for target, x_row, label_row in zip(targets, x.numpy(), labels.numpy(), strict=True):
        n = len(target) - 1
        assert x_row[:n].tolist() == target[:-1]  # [START] w1 ... wk
        assert label_row[:n].tolist() == target[1:]  # w1 ... wk [END]
        assert x_row[0] == START_ID and label_row[n - 1] == END_ID
        # Zero padding; x of a shorter target still holds its [END] (the
        # tutorial's layout), where the label is already padding.
        assert not label_row[n:].any()
        assert x_row[n:].tolist() in ([], [END_ID] + [PAD_ID] * (len(x_row) - n - 1))
    # The batch is as long as its longest sentence, no longer.
    assert x.shape[1] == max(len(t) for t in targets) - 1
    assert context.shape[1] == max(len(s) for s in sources)


def test_padding_is_zero_and_only_at_the_end(corpus, tokenizers):
    dataset = make_batches(corpus.train, tokenizers, batch_size=64, max_tokens=64)
    for (context, x), labels in dataset.take(5):
        for tensor in (context, x, labels):
            values = tensor.numpy()
            is_pad = values == PAD_ID
            # Once padding starts in a row, it continues to the end.
            assert (np.diff(is_pad.astype(int), axis=1) >= 0).all()
        assert ((labels.numpy() == PAD_ID) == (np.roll(x.numpy(), -1, axis=1) == PAD_ID))[
            :, :-1
        ].all()


def test_each_pair_once_per_epoch_and_shuffle_is_seeded(tokenized):
    def epoch_orders(seed, epochs=2):
        dataset = batches_from_tokens(tokenized, batch_size=100, shuffle=True, seed=seed)
        orders = []
        for _ in range(epochs):
            orders.append([tuple(r) for (c, _), _ in dataset for r in _rows(c)])
        return orders

    first, second = epoch_orders(seed=3)
    unshuffled = [
        tuple(r)
        for (c, _), _ in batches_from_tokens(tokenized, 100, shuffle=False)
        for r in _rows(c)
    ]
    assert sorted(first) == sorted(unshuffled) == sorted(second)  # every pair, once
    assert first != unshuffled and second != first  # shuffled anew each epoch
    assert epoch_orders(seed=3) == [first, second]  # the same for the same seed
    assert epoch_orders(seed=4)[0] != first


def test_no_shuffle_keeps_order_and_drop_remainder(tokenized):
    dataset = batches_from_tokens(tokenized, batch_size=300, shuffle=False, drop_remainder=True)
    batches = list(dataset)
    assert len(batches) == 3 and all(b[1].shape[0] == 300 for b in batches)
    assert _rows(batches[0][0][0])[0] == tokenized.context[0].tolist()


def test_long_pairs_are_trimmed_keeping_end_and_counted(tokenizers, caplog):
    long_source = " ".join(["o gato preto"] * 10)  # 30 words
    long_target = " ".join(["the black cat"] * 10)
    pairs = [(long_source, "the cat"), ("o gato", long_target), ("o gato", "the cat")]
    with caplog.at_level(logging.WARNING, logger="transformer.data.batching"):
        tokenized = tokenize_pairs(pairs, tokenizers, max_tokens=8)
    assert (tokenized.num_trimmed, tokenized.num_trimmed_source, tokenized.num_trimmed_target) == (
        2,
        1,
        1,
    )
    assert "Trimmed 2 of 3 pairs to max_tokens=8" in caplog.text
    context = tokenized.context.to_list()
    target = tokenized.target.to_list()
    assert len(context[0]) == 8 and context[0][0] == START_ID and context[0][-1] == END_ID
    assert len(target[1]) == 9 and target[1][0] == START_ID and target[1][-1] == END_ID
    full = tokenizers.target.tokenize(tf.constant([long_target])).to_list()[0]
    assert target[1][:-1] == full[:8]  # the first tokens are kept
    assert context[2] == tokenizers.source.tokenize(tf.constant(["o gato"])).to_list()[0]

    (c, x), labels = next(iter(batches_from_tokens(tokenized, 3, shuffle=False)))
    assert c.shape[1] <= 8 and x.shape[1] <= 8 and labels.shape[1] <= 8
    assert labels.numpy()[1, -1] == END_ID


def test_nothing_trimmed_nothing_logged(corpus, tokenizers, caplog):
    with caplog.at_level(logging.WARNING, logger="transformer.data.batching"):
        tokenized = tokenize_pairs(corpus.valid, tokenizers, max_tokens=64)
    assert tokenized.num_trimmed == 0 and "Trimmed" not in caplog.text
    assert len(tokenized) == len(corpus.valid)


def test_bad_arguments(corpus, tokenizers, tokenized):
    with pytest.raises(ValueError, match="`max_tokens`.*Received: max_tokens=1"):
        make_batches(corpus.train, tokenizers, batch_size=8, max_tokens=1)
    with pytest.raises(ValueError, match="`batch_size`.*Received: batch_size=0"):
        batches_from_tokens(tokenized, batch_size=0)
    with pytest.raises(DataError, match="empty"):
        make_batches([], tokenizers, batch_size=8, max_tokens=16)


def test_token_budget_batches_cover_every_pair_once_within_the_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 40, size=2000)
    budget = 256
    batches = token_budget_batches(lengths, budget, seed=1, pass_index=0)
    indices = np.concatenate(batches)
    assert sorted(indices.tolist()) == list(range(2000))  # each pair exactly once
    for batch in batches:
        assert lengths[batch].max() * len(batch) <= budget or len(batch) == 1
    # Almost no padding: within a batch the lengths are close.
    padded = sum(lengths[b].max() * len(b) for b in batches)
    assert lengths.sum() / padded > 0.9
    # Seeded: the same pass is the same; another pass or seed is another order.
    again = token_budget_batches(lengths, budget, seed=1, pass_index=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    other = token_budget_batches(lengths, budget, seed=1, pass_index=1)
    assert not all(np.array_equal(a, b) for a, b in zip(batches, other, strict=False))


def test_a_pair_longer_than_the_budget_gets_a_batch_of_its_own():
    batches = token_budget_batches(np.array([5, 50, 5, 5]), 20, seed=0, pass_index=0)
    assert [0, 1, 2, 3] == sorted(np.concatenate(batches).tolist())
    assert [1] in [b.tolist() for b in batches]


def test_budget_stream_is_seeded_endless_and_well_formed(tokenized):
    budget = 200
    stream = budget_batches_from_tokens(tokenized, budget, seed=3)
    first = [(c.numpy(), x.numpy(), y.numpy()) for (c, x), y in stream.take(12)]
    again = [(c.numpy(), x.numpy(), y.numpy()) for (c, x), y in
             budget_batches_from_tokens(tokenized, budget, seed=3).take(12)]
    for (c1, x1, y1), (c2, x2, y2) in zip(first, again, strict=True):
        np.testing.assert_array_equal(c1, c2)
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    # Skipping resumes the same stream (what a resumed run does).
    skipped = next(iter(budget_batches_from_tokens(tokenized, budget, seed=3).skip(5)))
    np.testing.assert_array_equal(skipped[1].numpy(), first[5][2])
    for context, x, labels in first:
        assert max(context.size, x.size) <= budget or context.shape[0] == 1
        assert (x[:, 0] == START_ID).all() and x.shape == labels.shape
    steps = batches_per_pass(tokenized, budget, seed=3)
    pairs = sum(c.shape[0] for c, _, _ in
                [(c.numpy(), x, y) for (c, x), y in
                 budget_batches_from_tokens(tokenized, budget, seed=3).take(steps)])
    assert pairs == len(tokenized)  # the first `steps` batches are one pass


def test_fixed_shape_batches_have_one_shape_per_width_and_lose_no_pair(tokenized):
    """length_step pads both sides to a multiple of it and fills the batch with
    all-padding rows, so every batch of a width has the same shape."""
    budget, step = 200, 8
    steps = batches_per_pass(tokenized, budget, seed=3, length_step=step)
    batches = [((c.numpy(), x.numpy()), y.numpy()) for (c, x), y in
               budget_batches_from_tokens(tokenized, budget, seed=3, length_step=step).take(steps)]
    plain = [((c.numpy(), x.numpy()), y.numpy()) for (c, x), y in
             budget_batches_from_tokens(tokenized, budget, seed=3).take(5)]
    shapes = set()
    real_rows = 0
    for (context, x), labels in batches:
        rows, width = context.shape
        assert width % step == 0 and x.shape == labels.shape == (rows, width)
        assert rows == budget // width or rows == 1
        shapes.add(context.shape)
        real = labels.any(axis=1)
        # Padding rows are all [PAD] on both sides; real rows start with [START].
        assert (context[~real] == PAD_ID).all() and (x[~real] == PAD_ID).all()
        assert (x[real, 0] == START_ID).all() and (context[real, 0] == START_ID).all()
        real_rows += int(real.sum())
    assert real_rows == len(tokenized)  # one pass, each pair once
    # One shape per width, and widths up to max_tokens (64): at most 8 shapes.
    assert len(shapes) == len({width for _, width in shapes}) <= 64 // step
    # Without the step, the batches keep their own lengths (and more shapes).
    assert any(c.shape[1] % step for (c, _), _ in plain)


def test_fixed_shape_batch_rows_equal_the_unpadded_pairs(tokenized):
    budget, step = 200, 8
    indices = token_budget_batches(
        np.maximum(tokenized.context.lengths, tokenized.target.lengths - 1),
        budget, seed=3, pass_index=0, length_step=step)[0]
    (context, x), labels = next(iter(
        budget_batches_from_tokens(tokenized, budget, seed=3, length_step=step)))
    for row, index in enumerate(indices):
        source = tokenized.context[index]
        target = tokenized.target[index]
        np.testing.assert_array_equal(context[row, : len(source)], source)
        assert (context[row, len(source):] == PAD_ID).numpy().all()
        np.testing.assert_array_equal(x[row, : len(target) - 1], target[:-1])
        np.testing.assert_array_equal(labels[row, : len(target) - 1], target[1:])
        assert labels[row, len(target) - 2] == END_ID


def test_padded_width_rounds_up_to_the_step():
    from transformer.data.batching import padded_width

    assert padded_width(np.array([0, 1, 8, 9, 16]), 8).tolist() == [8, 8, 8, 16, 16]
    assert padded_width(np.array([3, 5]), 1).tolist() == [3, 5]
    with pytest.raises(ValueError, match="length_step"):
        padded_width(np.array([3]), 0)


def test_tokenized_pairs_lengths_are_the_longer_of_context_and_x():
    from transformer.data.batching import TokenizedPairs

    context = tf.ragged.constant([[2, 5, 3], [2, 5, 6, 7, 3], [2, 3]], tf.int32)
    target = tf.ragged.constant([[2, 4, 4, 4, 4, 3], [2, 3], [2, 4, 3]], tf.int32)
    # x is the target without its last token: 5, 1 and 2 tokens.
    lengths = TokenizedPairs(context, target, max_tokens=8).lengths
    assert lengths.tolist() == [5, 5, 2]


@pytest.mark.parametrize("length_step", [1, 8])
def test_budget_stream_is_pass_after_pass_of_exactly_the_planned_pairs(tokenized, length_step):
    """Two passes: batch for batch, the stream holds the pairs `token_budget_batches`
    plans for pass 0 and then for pass 1 (another order), with nothing else but
    all-padding rows."""
    budget, seed = 200, 3
    lengths = tokenized.lengths
    plan = [
        batch
        for pass_index in (0, 1)
        for batch in token_budget_batches(
            lengths, budget, seed, pass_index, length_step=length_step
        )
    ]
    first_pass = batches_per_pass(tokenized, budget, seed=seed, length_step=length_step)
    assert 0 < first_pass < len(plan)
    assert batches_per_pass(tokenized, budget, seed=seed, pass_index=1,
                            length_step=length_step) == len(plan) - first_pass
    assert not all(
        np.array_equal(a, b) for a, b in zip(plan[:first_pass], plan[first_pass:], strict=False)
    )
    stream = budget_batches_from_tokens(tokenized, budget, seed, length_step=length_step)
    for indices, ((context, x), labels) in zip(plan, stream.take(len(plan)), strict=True):
        want_context = _padded([tokenized.context[i] for i in indices], context.shape)
        want_target = _padded([tokenized.target[i] for i in indices], (x.shape[0], x.shape[1] + 1))
        np.testing.assert_array_equal(context.numpy(), want_context)
        np.testing.assert_array_equal(x.numpy(), want_target[:, :-1])
        np.testing.assert_array_equal(labels.numpy(), want_target[:, 1:])


def _padded(rows, shape):
    """`rows` (then all-padding rows) padded with [PAD] to `shape`."""
    out = np.full(shape, PAD_ID, np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


# -- subword regularisation: sample_pairs ----------------------------------


@pytest.fixture(scope="module")
def sp_tokenizers(corpus):
    """A shared unigram SentencePiece vocabulary: the real corpora's kind."""
    return build_tokenizers(corpus.train, 300, kind="sentencepiece", shared=True,
                            learn_params={"model_type": "unigram"})


def test_sampled_segmentations_spell_the_same_text_and_are_seeded(corpus, sp_tokenizers):
    tokenizer = sp_tokenizers.target
    sentences = [target for _, target in corpus.train[:200]]
    best = tokenizer.tokenize(tf.constant(sentences))
    drawn = tokenizer.sample(sentences, alpha=0.1, seed=5)
    assert drawn.dtype == tf.int64
    rows = drawn.to_list()
    assert all(row[0] == START_ID and row[-1] == END_ID for row in rows)
    # Another split of the same words: the text is unchanged, the pieces are not.
    assert tokenizer.detokenize(drawn).numpy().tolist() == \
        tokenizer.detokenize(best).numpy().tolist()
    assert rows != best.to_list()
    assert tokenizer.sample(sentences, alpha=0.1, seed=5).to_list() == rows
    assert tokenizer.sample(sentences, alpha=0.1, seed=6).to_list() != rows
    with pytest.raises(ValueError, match="alpha"):
        tokenizer.sample(sentences, alpha=0.0, seed=5)


def test_sample_pairs_holds_the_variants_one_after_the_other(corpus, sp_tokenizers):
    pairs = corpus.train[:100]
    sampled = sample_pairs(pairs, sp_tokenizers, max_tokens=64, alpha=0.1, variants=3, seed=1)
    assert len(sampled) == 100 and sampled.variants == 3
    assert len(sampled.context) == len(sampled.target) == 300
    assert sampled.lengths.shape == (100,) and sampled.row_lengths.shape == (300,)
    assert [sampled.variant_offset(p) for p in range(4)] == [0, 100, 200, 0]
    sources = sp_tokenizers.source.detokenize(sampled.context.to_ragged()).numpy().tolist()
    assert sources == [source.encode() for source, _ in pairs] * 3
    variants = [sampled.target[v * 100:(v + 1) * 100].to_list() for v in range(3)]
    assert variants[0] != variants[1] != variants[2]
    again = sample_pairs(pairs, sp_tokenizers, max_tokens=64, alpha=0.1, variants=3, seed=1)
    assert again.target.to_list() == sampled.target.to_list()


def test_sampling_from_a_later_pass_reads_the_best_split_first(corpus, sp_tokenizers):
    pairs = corpus.train[:100]
    best = tokenize_pairs(pairs, sp_tokenizers, max_tokens=64)
    sampled = sample_pairs(pairs, sp_tokenizers, max_tokens=64, alpha=0.1, variants=2,
                           seed=1, from_pass=3)
    assert (sampled.variants, sampled.sampled_from_pass, len(sampled)) == (3, 3, 100)
    assert [sampled.variant_offset(p) for p in range(7)] == [0, 0, 0, 100, 200, 100, 200]
    assert sampled.context[:100].to_list() == best.context.to_list()
    assert sampled.target[:100].to_list() == best.target.to_list()
    np.testing.assert_array_equal(sampled.lengths, best.lengths)
    # The draws are those of sample_pairs without from_pass, and `best` is only reused.
    alone = sample_pairs(pairs, sp_tokenizers, max_tokens=64, alpha=0.1, variants=2, seed=1)
    assert sampled.target[100:].to_list() == alone.target.to_list()
    given = sample_pairs(pairs, sp_tokenizers, 64, 0.1, 2, seed=1, from_pass=3, best=best)
    assert given.target.to_list() == sampled.target.to_list()


def test_sample_pairs_refuses_wordpiece_and_empty_input(corpus, tokenizers, sp_tokenizers):
    with pytest.raises(ValueError, match="SentencePiece"):
        sample_pairs(corpus.train[:10], tokenizers, 64, alpha=0.1, variants=2)
    with pytest.raises(DataError, match="empty"):
        sample_pairs([], sp_tokenizers, 64, alpha=0.1, variants=2)
    with pytest.raises(ValueError, match="variants"):
        sample_pairs(corpus.train[:10], sp_tokenizers, 64, alpha=0.1, variants=0)


def test_sampled_pairs_are_trimmed_keeping_end(corpus, sp_tokenizers):
    sampled = sample_pairs(corpus.train[:50], sp_tokenizers, max_tokens=6, alpha=0.1,
                           variants=2)
    assert sampled.num_trimmed > 0
    assert max(len(row) for row in sampled.context.to_list()) <= 6
    assert all(row[-1] == END_ID for row in sampled.target.to_list())


@pytest.mark.parametrize("budget", [0, 200])
@pytest.mark.parametrize("from_pass", [0, 1])
def test_each_pass_reads_its_variant(corpus, sp_tokenizers, budget, from_pass):
    """Pass p of both kinds of stream holds every pair once, split as
    `variant_offset(p)` says: the draws in turn, after the best split's passes."""
    pairs = corpus.train[:60]
    sampled = sample_pairs(pairs, sp_tokenizers, max_tokens=64, alpha=0.1, variants=2, seed=4,
                           from_pass=from_pass)
    passes = 4
    offsets = [sampled.variant_offset(p) for p in range(passes)]
    assert offsets == ([0, 60, 0, 60] if not from_pass else [0, 60, 120, 60])
    if budget:
        stream = budget_batches_from_tokens(sampled, budget, seed=2)
        per_pass = [len(token_budget_batches(sampled.row_lengths[o:o + 60], budget, 2, p))
                    for p, o in enumerate(offsets)]
        assert per_pass[0] == batches_per_pass(sampled, budget, seed=2)
    else:
        stream = fixed_batches_from_tokens(sampled, batch_size=16, seed=2)
        per_pass = [4] * passes  # of 16 pairs or fewer
        assert batches_per_pass(sampled, 0, batch_size=16, pass_index=3) == 4
    split = [sorted(tuple(r) for r in sampled.context[o:o + 60].to_list()) for o in (0, 60)]
    assert split[0] != split[1]
    batches = iter(stream)
    for pass_index, count in enumerate(per_pass):
        offset = sampled.variant_offset(pass_index)
        want = sorted(tuple(r) for r in sampled.context[offset:offset + 60].to_list())
        got = []
        for _ in range(count):
            (context, _), _ = next(batches)
            got += [tuple(row) for row in _rows(context) if row]
        assert sorted(got) == want, pass_index


def test_every_batch_dataset_runs_without_autotuning(tokenized):
    """Ending an autotuned iterator can keep `fit` from returning for up to the
    tuning thread's period (`batching._untuned`): none of the datasets runs one."""
    for dataset in (batches_from_tokens(tokenized, 4),
                    fixed_batches_from_tokens(tokenized, 4, seed=0),
                    budget_batches_from_tokens(tokenized, 40, seed=0)):
        assert dataset.options().autotune.enabled is False
