"""The tutorial's WordPiece tokenizer (`WordPieceTokenizer`) and the learning of its vocabulary.

`WordPieceTokenizer` wraps `tensorflow_text.BertTokenizer`: it lower-cases,
strips accents, splits punctuation off words and then words into pieces
("gatinhos" -> "gat", "##inhos"). `transformer.data.tokenizers` builds one
per language (`build_tokenizers(kind="wordpiece")`) from the vocabulary that
`build_vocab` learns: `word_counts` splits the sentences into words as the
tokenizer will, and `learn_wordpiece_vocab` learns word pieces from the counts.

`tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset` (used by
TensorFlow's subword tokenizer tutorial) counts words with BERT's basic
tokenizer and then runs `wordpiece_tokenizer_learner_lib.learn`: a binary
search over a frequency threshold, where every step runs a few iterations of
"count every candidate subword, keep those at or above the threshold". In pure
Python that is slow on a real corpus (timings in BENCHMARKS.md, "Data and
tokenizers").

`learn_wordpiece_vocab` runs the same algorithm and returns the same
vocabulary (the tests compare it with tensorflow_text's on real and random
text) in a fraction of the time, because:

- the first iteration does not depend on the threshold, so it is computed once
  for the whole search instead of once per step;
- a word ending is split into pieces once, however many words end with it;
- subword counts come from a sorted list of strings with running totals
  (see `_PrefixCounter`), and the search never looks at subwords whose count
  is already below the threshold, where tensorflow_text counts every
  substring of every word at every step.

The preprocessing steps (search bounds, filtering rare characters and long
words) and the final ordering of the vocabulary are tensorflow_text's own
functions, called directly.
"""

from __future__ import annotations

import bisect
import collections
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as _learner

from transformer.constants import DEFAULT_VOCAB_SIZE, RESERVED_TOKENS
from transformer.data.corpus import DataError
from transformer.data.tokenizer_base import TokenizerBase

__all__ = ["WordPieceTokenizer", "build_vocab", "learn_wordpiece_vocab", "word_counts"]


def learn_wordpiece_vocab(
    word_counts: Mapping[str, int] | Iterable[tuple[str, int]],
    vocab_size: int,
    reserved_tokens: list[str],
    upper_thresh: int | None = int(1e7),
    lower_thresh: int | None = 10,
    num_iterations: int = 4,
    max_input_tokens: int | None = int(5e6),
    max_token_length: int = 50,
    max_unique_chars: int = 1000,
    slack_ratio: float = 0.05,
    include_joiner_token: bool = True,
    joiner: str = "##",
) -> list[str]:
    """Learns a WordPiece vocabulary from word counts.

    A drop-in replacement for `wordpiece_tokenizer_learner_lib.learn` of
    tensorflow_text, with the same arguments, defaults and result.

    Args:
        word_counts: `{word: count}` or `(word, count)` pairs, the words as
            BERT's basic tokenizer splits them (lower-cased, accents removed,
            punctuation split off).
        vocab_size: the largest vocabulary wanted, reserved tokens included.
        reserved_tokens: tokens put first, in order (so `[PAD]` gets id 0).
        upper_thresh: initial upper bound of the frequency-threshold search.
        lower_thresh: initial lower bound of the frequency-threshold search.
        num_iterations: how many count-and-keep iterations per threshold.
        max_input_tokens: only the most frequent this many words are used.
        max_token_length: words longer than this are ignored.
        max_unique_chars: the alphabet is limited to the most frequent this
            many characters; words with other characters are ignored.
        slack_ratio: a vocabulary of `vocab_size * (1 - slack_ratio)` tokens
            or more is accepted.
        include_joiner_token: whether word continuations get the `joiner`.
        joiner: the prefix of word continuations ("##" as in "play ##ing").

    Returns:
        The vocabulary as a list of strings: the reserved tokens, then every
        character (alone and as a continuation), then subwords by decreasing
        count.

    Example:

    >>> learn_wordpiece_vocab({"gato": 20, "gatos": 15}, 100, ["[PAD]"])[:3]
    ['[PAD]', 'a', 'g']
    """
    if isinstance(word_counts, Mapping):
        word_counts = list(word_counts.items())
    else:
        word_counts = list(word_counts)
    params = _learner.Params(
        upper_thresh,
        lower_thresh,
        num_iterations,
        max_input_tokens,
        max_token_length,
        max_unique_chars,
        vocab_size,
        slack_ratio,
        include_joiner_token,
        joiner,
        reserved_tokens,
    )
    upper, lower = _learner.get_search_threshs(word_counts, upper_thresh, lower_thresh)
    all_counts = _learner.get_input_words(word_counts, reserved_tokens, max_token_length)
    allowed_chars = _learner.get_allowed_chars(all_counts, max_unique_chars)
    filtered = _learner.filter_input_words(all_counts, allowed_chars, max_input_tokens)

    learner = _ThresholdLearner(filtered, params)
    # The binary search of `learn_binary_search`, as a loop.
    slack = max(slack_ratio * vocab_size, 0)
    while True:
        thresh = (upper + lower) // 2
        vocab = learner.vocab_for(thresh)
        size = len(vocab)
        within_slack = size <= vocab_size and vocab_size - size <= slack
        if within_slack or lower >= upper or thresh <= 1:
            return vocab
        if size > vocab_size:
            lower = thresh + 1
        else:
            upper = thresh - 1


class _ThresholdLearner:
    """`learn_with_thresh` for many thresholds over the same words."""

    def __init__(self, word_counts: list[tuple[str, int]], params):
        self.words = word_counts
        self.params = params
        self.char_tokens = _learner.extract_char_tokens(word_counts)
        # Iteration 0 splits every word at every character, so whatever the
        # threshold, it counts every word and every word ending.
        plain: dict[str, int] = collections.defaultdict(int)
        endings: dict[str, int] = collections.defaultdict(int)
        for word, count in word_counts:
            if not word:
                continue
            plain[word] += count
            for start in range(1, len(word)):
                endings[word[start:]] += count
        self.first_iteration = self._counters(plain, endings)

    def _counters(self, plain, endings):
        if self.params.include_joiner_token:
            return _PrefixCounter(plain), _PrefixCounter(endings)
        merged = collections.Counter(plain)
        merged.update(endings)
        return _PrefixCounter(merged), _PrefixCounter({})

    def vocab_for(self, thresh: int) -> list[str]:
        params = self.params
        tokens = self._keep(self.first_iteration, thresh)
        for _ in range(1, params.num_iterations):
            plain, endings = _split_all(self.words, tokens, params.include_joiner_token)
            tokens = self._keep(self._counters(plain, endings), thresh)
        return self._final_vocabulary(tokens)

    def _keep(self, counters, thresh: int):
        """The tokens with a count of at least `thresh`, plus every character."""
        plain = counters[0].at_least(thresh)
        joined = counters[1].at_least(thresh)
        for char in self.char_tokens:
            plain.setdefault(char, 1)
            if self.params.include_joiner_token:
                joined.setdefault(char, 1)
        return plain, joined

    def _final_vocabulary(self, tokens) -> list[str]:
        plain, joined = tokens
        joiner = self.params.joiner
        curr_tokens = dict(plain)
        for token, count in joined.items():
            curr_tokens[joiner + token] = count
        return _learner.generate_final_vocabulary(
            self.params.reserved_tokens, self.char_tokens, curr_tokens
        )


def _split_all(words, tokens, include_joiner_token: bool):
    """Splits every word longest-match-first and counts where the pieces start.

    The split is `get_split_indices` of tensorflow_text. A word is counted
    (as `plain[word]`) only if it splits completely; each later piece start
    `s` counts the word ending `word[s:]` (as `endings[word[s:]]`). Since the
    split of a word ending depends only on the ending, endings are split once
    and their counts flow from longer endings to their tails.

    Returns:
        `(plain, endings)`: `{word: count}` and `{word ending: count}`.
    """
    plain_vocab, joined_vocab = tokens
    continuation_vocab = joined_vocab if include_joiner_token else plain_vocab
    longest = max(len(t) for family in tokens for t in family)
    tails: dict[str, str | None] = {}  # ending -> what follows its first piece
    splits: dict[str, bool] = {}  # ending -> whether it splits completely

    def tail(ending: str) -> str | None:
        end = min(len(ending), longest)
        while end > 0 and ending[:end] not in continuation_vocab:
            end -= 1
        return None if end == 0 else ending[end:]

    def splits_completely(ending: str) -> bool:
        path = []
        while ending and ending not in splits:
            path.append(ending)
            rest = tails[ending] = tail(ending)
            if rest is None:
                result = False
                break
            ending = rest
        else:
            result = splits[ending] if ending else True
        for seen in path:
            splits[seen] = result
        return result

    plain: dict[str, int] = collections.defaultdict(int)
    endings: dict[str, int] = collections.defaultdict(int)
    for word, count in words:
        end = min(len(word), longest)
        while end > 0 and word[:end] not in plain_vocab:
            end -= 1
        if end == 0:
            continue
        rest = word[end:]
        if rest and not splits_completely(rest):
            continue
        plain[word] += count
        if rest:
            endings[rest] += count
    # Every ending passes its count on to its tail, longest endings first.
    by_length: dict[int, list[str]] = collections.defaultdict(list)
    for ending in endings:
        by_length[len(ending)].append(ending)
    for length in range(max(by_length, default=0), 0, -1):
        for ending in by_length.get(length, ()):
            rest = tails[ending]
            if rest:
                if rest not in endings:
                    by_length[len(rest)].append(rest)
                endings[rest] += endings[ending]
    return plain, endings


class _PrefixCounter:
    """The learner's subword counts for every prefix of a set of strings.

    tensorflow_text counts every prefix `p` of the strings (`raw(p)`, the
    total count of the strings starting with `p`), then visits prefixes from
    the longest down and subtracts each one's current count from all its own
    prefixes. By induction a prefix ends with `raw(p)` minus the raw counts
    of its one-character-longer extensions, because every extension's final
    count plus what was taken from it is its raw count.

    The strings are kept sorted, with running totals, so that the strings
    starting with a prefix form a range and `raw(p)` is a difference of two
    totals. A prefix whose raw count is below the threshold cannot be kept,
    nor can any of its extensions, so the search never looks below it.
    """

    def __init__(self, strings: dict[str, int]):
        self.keys = sorted(strings)
        self.totals = [0]
        for key in self.keys:
            self.totals.append(self.totals[-1] + strings[key])

    def at_least(self, thresh: int) -> dict[str, int]:
        """`{prefix: final count}` for every prefix with a final count >= `thresh`."""
        keys, totals = self.keys, self.totals
        kept: dict[str, int] = {}
        stack = [("", 0, len(keys))]
        while stack:
            prefix, lo, hi = stack.pop()
            depth = len(prefix)
            i = lo
            if i < hi and len(keys[i]) == depth:  # the prefix itself (keys are unique)
                i += 1
            children = 0
            while i < hi:
                char = keys[i][depth]
                if ord(char) == 0x10FFFF:
                    j = hi
                else:
                    j = bisect.bisect_left(keys, prefix + chr(ord(char) + 1), i, hi)
                raw = totals[j] - totals[i]
                children += raw
                if raw >= thresh:
                    stack.append((prefix + char, i, j))
                i = j
            if depth:
                final = totals[hi] - totals[lo] - children
                if final >= thresh:
                    kept[prefix] = final
        return kept


def word_counts(sentences: Sequence[str], lower_case: bool = True, chunk_size: int = 8192):
    """Counts the words of `sentences` as `BertTokenizer` splits them.

    Words are lower-cased with accents stripped (if `lower_case`), and
    punctuation is split off, exactly as `tensorflow_text.BertTokenizer` does
    before it looks up word pieces.

    Args:
        sentences: the text, one sentence per string.
        lower_case: lower-case and strip accents first.
        chunk_size: how many sentences to split per TensorFlow call.

    Returns:
        A `{word: count}` dict.
    """
    splitter = _word_splitter(lower_case)
    counts: collections.Counter = collections.Counter()
    for start in range(0, len(sentences), chunk_size):
        chunk = tf.constant(list(sentences[start : start + chunk_size]), dtype=tf.string)
        counts.update(splitter.tokenize(chunk).flat_values.numpy().tolist())
    return {word.decode("utf-8"): count for word, count in counts.items()}


def _word_splitter(lower_case: bool):
    """A BertTokenizer that only splits into words: no vocabulary, unknowns kept as is."""
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(["[UNK]"], tf.constant([0], tf.int64)),
        num_oov_buckets=1,
    )
    return text.BertTokenizer(
        table, token_out_type=tf.string, unknown_token=None, lower_case=lower_case
    )


def build_vocab(
    sentences: Sequence[str],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lower_case: bool = True,
    learn_params: dict | None = None,
    counts: dict[str, int] | None = None,
) -> list[str]:
    """Learns a WordPiece vocabulary from sentences of one language.

    The same algorithm and defaults as `bert_vocab_from_dataset` of
    tensorflow_text (see `transformer.data.wordpiece`).

    Args:
        sentences: the training text of one language.
        vocab_size: the largest vocabulary wanted, reserved tokens included.
        lower_case: lower-case and strip accents (as the tokenizer will).
        learn_params: extra arguments for `learn_wordpiece_vocab`.
        counts: the `word_counts` of `sentences`, if already known.

    Returns:
        The vocabulary, reserved tokens first (`[PAD]` is id 0).
    """
    if counts is None:
        counts = word_counts(sentences, lower_case=lower_case)
    if not counts:
        raise DataError("Cannot build a vocabulary: the sentences contain no words.")
    return learn_wordpiece_vocab(counts, vocab_size, list(RESERVED_TOKENS), **(learn_params or {}))


class WordPieceTokenizer(TokenizerBase):
    """A WordPiece tokenizer for one language, with START and END markers.

    Wraps `tensorflow_text.BertTokenizer`. All methods are `tf.function`s
    traced for fixed signatures, so they survive `tf.saved_model.save` and
    work on the reloaded object without this class.

    Args:
        vocab_path: a text file with one token per line; line `i` is id `i`.
            Its first lines must be `reserved_tokens`.
        reserved_tokens: the special tokens, `[PAD] [UNK] [START] [END]`.
        lower_case: lower-case the text and strip accents before looking words
            up (must match how the vocabulary was learnt).

    Example:

    ```python
    tokenizer = WordPieceTokenizer("vocab.txt")
    ids = tokenizer.tokenize(tf.constant(["the black cat"]))  # RaggedTensor int64
    tokenizer.detokenize(ids)  # tf.Tensor([b'the black cat'])
    ```
    """

    def __init__(self, vocab_path, reserved_tokens=RESERVED_TOKENS, lower_case: bool = True):
        super().__init__()
        vocab_path = os.fspath(vocab_path)
        vocab = Path(vocab_path).read_text(encoding="utf-8").splitlines()
        reserved_tokens = list(reserved_tokens)
        if vocab[: len(reserved_tokens)] != reserved_tokens:
            raise DataError(
                f"{vocab_path}: the vocabulary must start with the reserved tokens "
                f"{reserved_tokens}, found {vocab[: len(reserved_tokens)]}"
            )
        self.tokenizer = text.BertTokenizer(vocab_path, lower_case=lower_case)
        self._reserved_tokens = reserved_tokens
        self._vocab_path = tf.saved_model.Asset(vocab_path)
        self.vocab = tf.Variable(vocab, trainable=False, name="vocab")

        self._trace_signatures()

    def _split(self, strings):
        """Word-piece ids `(batch, (tokens))`, int64, for `tokenize` to frame;
        unknown words are `[UNK]` (id 1)."""
        pieces = self.tokenizer.tokenize(strings)  # (batch, (words), (pieces))
        return pieces.merge_dims(-2, -1)  # (batch, (tokens))

    def _join(self, ids):
        """Kept ids `(batch, (tokens))` to text, for `detokenize`: word pieces
        joined into words, words by single spaces. `[UNK]` stays visible (as in
        the tutorial); the text is lower-cased with punctuation split off
        ("the boy ' s book")."""
        words = self.tokenizer.detokenize(ids)  # (batch, (words))
        return tf.strings.reduce_join(words, separator=" ", axis=-1)  # (batch,)

    def _vocabulary(self):
        return self.vocab
