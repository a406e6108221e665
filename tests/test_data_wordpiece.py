"""Tests of transformer.data.wordpiece: the same vocabulary as tensorflow_text's learner."""

from __future__ import annotations

import random

import pytest
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as reference

from transformer.constants import RESERVED_TOKENS
from transformer.data.toy import sample_toy_pairs
from transformer.data.wordpiece import learn_wordpiece_vocab, word_counts

RESERVED = list(RESERVED_TOKENS)


def _random_word_counts(n_words: int, seed: int) -> dict[str, int]:
    """Zipf-distributed pseudo-words with shared stems and endings, like real text."""
    rng = random.Random(seed)
    stems = [
        "".join(rng.choice("bcdfglmnprstv") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))
        for _ in range(300)
    ]
    endings = ["", "s", "a", "as", "ção", "ções", "mente", "ando", "ei", "ou", "inho", "##"]
    counts: dict[str, int] = {}
    while len(counts) < n_words:
        word = rng.choice(stems) + rng.choice(endings)
        if rng.random() < 0.2:
            word = "".join(
                rng.choice("abcdefghijklmnopqrstuvwxyzçãé") for _ in range(rng.randint(1, 14))
            )
        counts[word] = counts.get(word, 0) + max(1, int(2000 / (1 + len(counts)) ** 0.9))
    return counts


@pytest.fixture(scope="module")
def toy_counts():
    pairs = sample_toy_pairs(3000, seed=0)
    return word_counts([s for s, _ in pairs]), word_counts([t for _, t in pairs])


@pytest.mark.parametrize("vocab_size", [40, 120, 8000])
def test_same_vocabulary_as_tensorflow_text_on_the_toy_corpus(toy_counts, vocab_size):
    for counts in toy_counts:
        expected = reference.learn(counts, vocab_size, RESERVED)
        assert learn_wordpiece_vocab(counts, vocab_size, RESERVED) == expected


@pytest.mark.parametrize(
    "vocab_size, params",
    [
        (60, {}),
        (400, {}),
        (2000, {}),
        (400, {"include_joiner_token": False}),
        (400, {"num_iterations": 2, "lower_thresh": 2}),
        (300, {"max_token_length": 6, "max_unique_chars": 20, "max_input_tokens": 500}),
        (1000, {"slack_ratio": 0.5, "upper_thresh": 50, "joiner": "@@"}),
    ],
)
def test_same_vocabulary_as_tensorflow_text_on_random_words(vocab_size, params):
    counts = _random_word_counts(700, seed=vocab_size)
    expected = reference.learn(counts, vocab_size, RESERVED, **params)
    assert learn_wordpiece_vocab(counts, vocab_size, RESERVED, **params) == expected
    # A list of pairs works as well as a dict.
    assert learn_wordpiece_vocab(list(counts.items()), vocab_size, RESERVED, **params) == expected


def test_vocabulary_layout():
    vocab = learn_wordpiece_vocab({"gato": 30, "gatos": 20, "pato": 12}, 100, RESERVED)
    assert vocab[:4] == RESERVED
    assert len(vocab) == len(set(vocab))
    # Every character, alone and as a continuation.
    for char in "gatosp":
        assert char in vocab and "##" + char in vocab
    assert "gato" in vocab
