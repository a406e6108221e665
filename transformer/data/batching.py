"""Batches for teacher-forced training: `((context, x), labels)`.

The tutorial's `make_batches` tokenizes inside the `tf.data` pipeline on every
epoch and silently lets over-long sentences be cut without their `[END]`.
Here the pairs are tokenized once, up front (`tokenize_pairs`), in chunks on
every core, into compact rows of ids (`transformer.data.token_rows`: in
memory, or memory-mapped files for a corpus of millions of pairs), and every
epoch only shuffles, pads and slices:

- `context` is the source ids, `(batch, source_len)`;
- `x` is the target without its last token, `(batch, target_len)`: the
  decoder's input, starting with `[START]`;
- `labels` is the target without `[START]`, `(batch, target_len)`: what the
  decoder must predict at each position, ending with `[END]`.

All three are int64 and zero-padded (`PAD_ID` = 0) to the longest sequence
of their batch, so the loss can mask padding by comparing with 0.

Over-long pairs are trimmed, not dropped: a sequence longer than its limit
keeps its first tokens and its `[END]`, so it stays well-formed
(`[START] w1 ... wk [END]`) and the decoder still learns to stop. The source
is limited to `max_tokens` tokens and the target to `max_tokens + 1`, so
that `x` and `labels` have at most `max_tokens` tokens each, as in the
tutorial. How many pairs were trimmed is logged and kept in
`TokenizedPairs.num_trimmed`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from transformer._validation import (
    check_max_tokens,
    check_non_negative_int,
    check_positive_int,
)
from transformer.data.corpus import DataError, Pair
from transformer.data.sentencepiece import SentencePieceTokenizer
from transformer.data.token_rows import Rows, RowsWriter, ids_dtype

logger = logging.getLogger(__name__)

_CHUNK = 8192  # sentences per tokenizer call


@dataclasses.dataclass
class TokenizedPairs:
    """Sentence pairs tokenized once: rows of ids, ready to batch many times.

    The rows are `transformer.data.token_rows.Rows`, in memory or
    memory-mapped from a run's `tokens/` files, so a corpus of millions of
    pairs costs a few bytes a pair in memory (`row_lengths`).

    Attributes:
        context: source ids, `Rows` `(num_pairs, (tokens))`, each row
            `[START] ... [END]`, at most `max_tokens` long. A
            `tf.RaggedTensor` given here is converted.
        target: target ids, `Rows`, each row `[START] ... [END]`, at most
            `max_tokens + 1` long.
        max_tokens: the limit the pairs were trimmed to.
        num_trimmed: pairs with either side trimmed.
        num_trimmed_source: pairs whose source was trimmed.
        num_trimmed_target: pairs whose target was trimmed.
        variants: how many segmentations of every pair the rows hold
            (`sample_pairs`): row `v * len(self) + i` is pair `i` split the
            `v`-th way. 1 for `tokenize_pairs`.
        sampled_from_pass: with `variants` > 1, 0 if every variant was drawn
            at random, and pass `p` over the pairs reads variant
            `p % variants`; else variant 0 is the best split, which passes
            before this one read, and pass `p` after it reads variant
            `1 + (p - sampled_from_pass) % (variants - 1)`.
    """

    context: Rows
    target: Rows
    max_tokens: int
    num_trimmed: int = 0
    num_trimmed_source: int = 0
    num_trimmed_target: int = 0
    variants: int = 1
    sampled_from_pass: int = 0

    def __post_init__(self):
        for name in ("context", "target"):
            if not isinstance(getattr(self, name), Rows):
                setattr(self, name, Rows.from_ragged(getattr(self, name)))

    def __len__(self) -> int:
        return len(self.context) // self.variants

    @functools.cached_property
    def row_lengths(self) -> np.ndarray:
        """Every row's padded length in a batch (all variants): the longer of
        `context` and `x`."""
        return np.maximum(self.context.lengths, self.target.lengths - 1)

    @property
    def lengths(self) -> np.ndarray:
        """Each pair's padded length in a batch, as the first variant splits it."""
        return self.row_lengths[: len(self)]

    def variant_offset(self, pass_index: int) -> int:
        """The first row of the variant that pass `pass_index` reads."""
        return int(self._variant(pass_index)) * len(self)

    def _variant(self, pass_index):
        """The variant pass `pass_index` reads; a Python int or a tensor, like it."""
        start, variants = self.sampled_from_pass, self.variants
        if variants == 1:
            return pass_index * 0
        if not start:
            return pass_index % variants
        after = 1 + (pass_index - start) % (variants - 1)
        if isinstance(pass_index, int):
            return 0 if pass_index < start else after
        return tf.where(pass_index < start, tf.zeros_like(pass_index), after)


def _trim_keep_end(rows: Rows, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trims every row to `limit` tokens, keeping its last token (`[END]`).

    Returns the trimmed rows' ids and lengths, and a boolean array marking
    trimmed rows.
    """
    values = np.asarray(rows.values[rows.splits[0] : rows.splits[-1]])
    lengths = rows.lengths
    trimmed = lengths > limit
    if not trimmed.any():
        return values, lengths, trimmed
    # Position of every token in its row, and whether it is its row's last.
    positions = np.arange(len(values)) - np.repeat(rows.splits[:-1] - rows.splits[0], lengths)
    is_last = positions == np.repeat(lengths - 1, lengths)
    keep = (positions < limit - 1) | is_last
    return values[keep], np.minimum(lengths, limit), trimmed


def chunks(items: Iterable, size: int = _CHUNK) -> Iterator[list]:
    """`items` (any iterable: a list, or pairs streamed from a file) in lists of `size`."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _in_order(function, items: Iterable, workers: int) -> Iterator:
    """`function(item)` for every item, in order, computed by `workers` threads
    with at most `2 * workers` items in flight (TensorFlow's tokenizers release
    the GIL, so the cores tokenize side by side)."""
    if workers <= 1:
        yield from map(function, items)
        return
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = collections.deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


class _TrimmedWriter:
    """Writes framed rows of both sides, trimmed to `max_tokens` (and the target
    to `max_tokens + 1`), counting the trims; `finish` makes the `TokenizedPairs`."""

    def __init__(self, tokenizers, max_tokens: int, directory=None, prefix: str = ""):
        check_max_tokens(max_tokens)
        vocab = max(int(tokenizers.source.get_vocab_size()),
                    int(tokenizers.target.get_vocab_size()))
        self.max_tokens = max_tokens
        self.sides = [RowsWriter(ids_dtype(vocab), directory, prefix + side)
                      for side in ("source", "target")]
        self.trimmed = [0, 0, 0]  # either, source, target

    def append(self, context: Rows, target: Rows) -> None:
        marks = []
        for writer, rows, limit in zip(self.sides, (context, target),
                                       (self.max_tokens, self.max_tokens + 1), strict=True):
            values, lengths, trimmed = _trim_keep_end(rows, limit)
            writer.append(values, lengths)
            marks.append(trimmed)
        self.trimmed = [a + int(np.count_nonzero(b)) for a, b in
                        zip(self.trimmed, (marks[0] | marks[1], *marks), strict=True)]

    def finish(self, variants: int = 1) -> TokenizedPairs:
        rows = self.sides[0].rows
        if rows == 0:
            raise DataError("Cannot make batches from an empty list of sentence pairs.")
        either, source, target = self.trimmed
        if either:
            logger.warning(
                "Trimmed %d of %d pairs to max_tokens=%d (%d sources, %d targets); each "
                "keeps its [END] token.", either, rows, self.max_tokens, source, target)
        context, target_rows = (writer.finish() for writer in self.sides)
        return TokenizedPairs(context=context, target=target_rows, max_tokens=self.max_tokens,
                              num_trimmed=either, num_trimmed_source=source,
                              num_trimmed_target=target, variants=variants)


def tokenize_pairs(pairs: Iterable[Pair], tokenizers, max_tokens: int,
                   directory=None) -> TokenizedPairs:
    """Tokenizes sentence pairs once, trimming over-long ones and keeping `[END]`.

    The pairs are read in chunks of `_CHUNK` and tokenized on every core, so
    memory holds a few chunks of text at a time, whatever the corpus size.

    Args:
        pairs: `(source, target)` string pairs: a list, or any iterable
            (pairs streamed from a file).
        tokenizers: an object with `.source` and `.target` tokenizers (built by
            `build_tokenizers` or reloaded by `load_tokenizers`).
        max_tokens: the longest source; targets may have `max_tokens + 1`
            tokens so that `x` and `labels` have at most `max_tokens`. At
            least 2 (`[START]` and `[END]`).
        directory: write the ids there (`source.ids`, `source.splits`,
            `target.ids`, `target.splits`) and memory-map them; in memory if None.

    Returns:
        A `TokenizedPairs`.

    Example:

    ```python
    tokenized = tokenize_pairs(corpus.train, tokenizers, max_tokens=64)
    tokenized.num_trimmed  # 0 for the toy corpus
    ```
    """
    writer = _TrimmedWriter(tokenizers, max_tokens, directory)

    def tokenize(chunk):
        return (Rows.from_ragged(tokenizers.source.tokenize(tf.constant([s for s, _ in chunk]))),
                Rows.from_ragged(tokenizers.target.tokenize(tf.constant([t for _, t in chunk]))))

    for context, target in _in_order(tokenize, chunks(pairs), _workers()):
        writer.append(context, target)
    return writer.finish()


def sample_pairs(pairs: Iterable[Pair], tokenizers, max_tokens: int, alpha: float,
                 variants: int, seed: int = 0, from_pass: int = 0,
                 best: TokenizedPairs | None = None, directory=None) -> TokenizedPairs:
    """Tokenizes sentence pairs `variants` times, each segmentation drawn at
    random: subword regularisation (Kudo, 2018), for training batches.

    Both sides of every pair are split by `SentencePieceTokenizer.sample`
    with sharpness `alpha`, a new draw for each variant and chunk of pairs
    (seeded by `seed`, the variant and the chunk), and trimmed as
    `tokenize_pairs` trims. The passes of `budget_batches_from_tokens` and
    `fixed_batches_from_tokens` read the variants in turn, so a pair is seen
    split a new way on each of `variants` passes. With `from_pass` > 0 the
    first `from_pass` passes read the best split (`tokenize_pairs`'s, or
    `best`) and the draws come after them. Evaluation and translation keep
    `tokenize`'s one best segmentation.

    Args:
        pairs: `(source, target)` string pairs: a list, or any iterable that
            can be read `variants` times (pairs streamed from a file).
        tokenizers: `.source` and `.target` SentencePiece tokenizers.
        max_tokens: as for `tokenize_pairs`.
        alpha: the sharpness of the draws, > 0; smaller draws odder splits.
        variants: how many segmentations to draw, at least 1.
        seed: the draws' seed.
        from_pass: the first pass that reads a drawn segmentation.
        best: the pairs as `tokenize_pairs` splits them, if at hand (with
            `from_pass` > 0; made here if None).
        directory: write the rows there (`sampled.source.ids`, ...) and
            memory-map them; in memory if None.

    Returns:
        A `TokenizedPairs` whose rows hold `variants` segmentations of the
        pairs (after the best split, with `from_pass` > 0).

    Raises:
        DataError: for an empty list of pairs.
        ValueError: for a tokenizer that cannot sample (WordPiece) or a bad argument.
    """
    check_max_tokens(max_tokens)
    check_positive_int("variants", variants)
    check_non_negative_int("from_pass", from_pass)
    started = time.perf_counter()
    source_side, target_side = (_sampler(side) for side in (tokenizers.source,
                                                            tokenizers.target))
    writer = _TrimmedWriter(tokenizers, max_tokens, directory, prefix="sampled.")
    if from_pass:
        if best is None:
            best = tokenize_pairs(pairs, tokenizers, max_tokens)
        for start in range(0, len(best), _CHUNK):  # the best split first, chunk by chunk
            rows = slice(start, min(start + _CHUNK, len(best)))
            writer.append(best.context[rows], best.target[rows])
    for variant in range(variants):
        for index, chunk in enumerate(chunks(pairs)):
            source_seed, target_seed = np.random.SeedSequence(
                [seed, variant, index]).generate_state(2)
            writer.append(
                Rows.from_ragged(source_side.sample([s for s, _ in chunk], alpha, source_seed)),
                Rows.from_ragged(target_side.sample([t for _, t in chunk], alpha, target_seed)))
    sampled = writer.finish(variants + 1 if from_pass else variants)
    if from_pass:
        sampled.sampled_from_pass = from_pass
    logger.info("Drew %d segmentations of every training pair (alpha %g) in %.1f s, %.2f "
                "tokens a pair, for the passes from pass %d on.", variants, alpha,
                time.perf_counter() - started, sampled.row_lengths[-len(sampled):].mean(),
                from_pass + 1)
    return sampled


def _sampler(tokenizer):
    """A tokenizer with `sample`: itself, or, for a SentencePiece tokenizer
    reloaded from its SavedModel (a resumed run's), one built from its files."""
    if hasattr(tokenizer, "sample"):
        return tokenizer
    if not hasattr(tokenizer, "get_model_path"):
        raise ValueError("Subword sampling needs SentencePiece tokenizers, not WordPiece ones.")
    return SentencePieceTokenizer(tokenizer.get_model_path().numpy().decode(),
                                  tokenizer.get_vocab_path().numpy().decode())


def batches_from_tokens(
    tokenized: TokenizedPairs,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Makes the `((context, x), labels)` dataset from pairs tokenized once.

    Every epoch shuffles the pairs (a new order each epoch, the same orders
    for the same `seed`), pads each batch to its longest sequence and splits
    the target into `x` and `labels`.

    Args:
        tokenized: the output of `tokenize_pairs`.
        batch_size: pairs per batch.
        shuffle: whether to shuffle the pairs every epoch.
        seed: the shuffle seed.
        drop_remainder: drop the last, smaller batch.

    Returns:
        A prefetched `tf.data.Dataset` of `((context, x), labels)`, int64:
        context `(batch, source_len)`, x and labels `(batch, target_len)`,
        without tf.data autotuning (`_untuned`; `with_options` turns it on).
    """
    check_positive_int("batch_size", batch_size)
    n = len(tokenized)
    dataset = tf.data.Dataset.range(n)
    if shuffle:
        dataset = dataset.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    return _padded(dataset.batch(batch_size, drop_remainder=drop_remainder), tokenized)


def fixed_batches_from_tokens(tokenized: TokenizedPairs, batch_size: int,
                              seed: int = 0, start_step: int = 0) -> tf.data.Dataset:
    """An endless stream of `((context, x), labels)` batches of `batch_size` pairs.

    Pass after pass over the pairs, each cut into batches of `batch_size` (the
    last batch of a pass may be smaller). The order of pass `p` is a
    permutation that depends on `seed` and `p` only
    (`tf.random.experimental.stateless_shuffle`), not on how many iterators
    the dataset has made: the stream is the same for the same seed however
    often it is built or iterated, so a resumed run can skip the batches it
    has already seen, as with `budget_batches_from_tokens`. (A
    `shuffle(reshuffle_each_iteration=True)` draws each pass's order from a
    seed generator that every new iterator advances.)

    Args:
        tokenized: the output of `tokenize_pairs`.
        batch_size: pairs per batch.
        seed: the seed of every pass's order.
        start_step: the first batch of the stream (a resumed run's step); the
            batches before it are skipped as indices, never gathered.

    Returns:
        A prefetched, repeating `tf.data.Dataset` like `batches_from_tokens`'s.
    """
    check_positive_int("batch_size", batch_size)
    check_non_negative_int("start_step", start_step)
    n = len(tokenized)
    seed = tf.constant(seed, tf.int64)

    def one_pass(pass_index):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int64), seed=tf.stack([seed, pass_index])
        )  # (num_pairs,)
        order += tokenized._variant(pass_index) * n  # this pass's segmentation
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    first_pass, skip = divmod(start_step, math.ceil(n / batch_size))
    passes = tf.data.Dataset.counter(start=first_pass).flat_map(one_pass)
    return _padded(passes.skip(skip), tokenized)


def _padded(indices: tf.data.Dataset, tokenized: TokenizedPairs, batch_tokens: int = 0,
            length_step: int = 1) -> tf.data.Dataset:
    """The prefetched, padded `((context, x), labels)` batches of a dataset of
    index batches, gathered from the rows (`_gather`) in NumPy."""

    def gather(indices):
        return _gather(tokenized, indices, batch_tokens, length_step)

    def batch(indices):
        context, target = tf.numpy_function(gather, [indices], [tf.int64, tf.int64],
                                            stateful=False)
        context.set_shape([None, None])  # (batch, src)
        target.set_shape([None, None])  # (batch, tgt)
        x = target[:, :-1]  # (batch, tgt - 1): [START] w1 ... wk (pad)
        labels = target[:, 1:]  # (batch, tgt - 1): w1 ... wk [END] (pad)
        return (context, x), labels

    dataset = indices.map(batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_untuned())


def _untuned() -> tf.data.Options:
    """No tf.data autotuning thread. An autotuned iterator ends by joining that
    thread, which TensorFlow (2.21) often wakes before it marks the thread
    cancelled; the thread then sleeps out its period, which doubles as the
    iterator lives, up to a minute, and `fit` returns that much after its last
    callback. Untuned, the map keeps AUTOTUNE's first parallelism (the cores, at
    most 16) and the prefetch buffer still grows whenever it runs dry."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def _gather(tokenized: TokenizedPairs, indices: np.ndarray, batch_tokens: int = 0,
            length_step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The padded source and target ids of the pairs `indices`, int64.

    Each side is padded to its longest row; with `length_step` > 1 both are
    padded to the batch's width (its longest pair rounded up to a multiple of
    `length_step`) and filled to `batch_tokens // width` rows with padding.
    """
    if length_step == 1:
        return tokenized.context.padded(indices), tokenized.target.padded(indices)
    longest = int(tokenized.row_lengths[indices].max())
    width = -(-longest // length_step) * length_step
    rows = max(batch_tokens // width, len(indices))
    # The target has one more token: x and labels are each `width` long.
    return (tokenized.context.padded(indices, (rows, width)),
            tokenized.target.padded(indices, (rows, width + 1)))


def token_budget_batches(lengths, batch_tokens: int, seed: int, pass_index: int,
                         pool_batches: int = 100, length_step: int = 1) -> list[np.ndarray]:
    """One pass over the pairs as batches of about equal length under a token budget.

    Section 5.1 of Vaswani et al., 2017: "Sentence pairs were batched together
    by approximate sequence length. Each training batch contained a set of
    sentence pairs containing approximately 25000 source tokens and 25000
    target tokens." The pairs are shuffled (seeded by `seed` and
    `pass_index`), cut into pools of about `pool_batches` batches, sorted by
    length within each pool and cut into batches whose padded size
    (pairs x longest pair) stays within `batch_tokens`; then the batches are
    shuffled. Short pairs travel in large batches and long ones in small
    batches, and almost no padding is computed.

    Args:
        lengths: int `(num_pairs,)`, see `TokenizedPairs.lengths`.
        batch_tokens: the most padded tokens per batch and side; a pair
            longer than that gets a batch of its own.
        seed, pass_index: the order of this pass (the same for the same pair).
        pool_batches: batches per sorting pool; larger pools pad less and mix less.
        length_step: lengths are rounded up to a multiple of this before
            batching (see `padded_width`), so that a batch holds at most
            `batch_tokens // width` pairs of its rounded width.

    Returns:
        A list of int64 index arrays, one per batch.
    """
    lengths = padded_width(np.asarray(lengths), length_step)
    rng = np.random.default_rng([seed, pass_index])
    order = rng.permutation(len(lengths))
    pool_size = max(1, int(pool_batches * batch_tokens / max(1.0, lengths.mean())))
    batches = []
    for start in range(0, len(order), pool_size):
        pool = order[start : start + pool_size]
        pool = pool[np.argsort(lengths[pool], kind="stable")]
        pool_lengths = lengths[pool].tolist()  # Python ints: the loop below is per pair
        # Sorted ascending, so a batch's longest pair is its last one.
        first = 0
        for i in range(1, len(pool) + 1):
            if i == len(pool) or pool_lengths[i] * (i + 1 - first) > batch_tokens:
                batches.append(pool[first:i])
                first = i
    rng.shuffle(batches)
    return batches


def padded_width(lengths, length_step: int):
    """`lengths` rounded up to a multiple of `length_step` (at least `length_step`).

    Example:

    >>> padded_width(np.array([1, 8, 9]), 8).tolist()
    [8, 8, 16]
    """
    check_positive_int("length_step", length_step)
    return -(-np.maximum(lengths, 1) // length_step) * length_step


def budget_batches_from_tokens(
    tokenized: TokenizedPairs, batch_tokens: int, seed: int = 0, length_step: int = 1,
    start_step: int = 0,
) -> tf.data.Dataset:
    """An endless stream of `((context, x), labels)` batches under a token budget.

    Pass after pass of `token_budget_batches` (pass `p` seeded by `seed` and
    `p`), so the stream is the same for the same seed and a resumed run can
    skip the batches it has already seen.

    With `length_step` > 1 every batch has a fixed shape for its width: both
    sides are padded to the batch's longest pair rounded up to a multiple of
    `length_step` (`width`), and the batch is filled up to `batch_tokens //
    width` pairs with all-padding rows, which the masked loss and accuracy
    ignore. A corpus then has a few batch shapes instead of hundreds, and
    TensorFlow's kernels on the CPU run faster on shapes they have seen
    (BENCHMARKS.md, "Tried and not adopted").

    Args:
        tokenized: the output of `tokenize_pairs`.
        batch_tokens: the most padded tokens per batch and side.
        seed: the seed of every pass's order.
        length_step: pad lengths to a multiple of this; 1 pads each side to its
            longest sequence and keeps the pairs the budget allows.
        start_step: the first batch of the stream (a resumed run's step): the
            passes before it are only counted, and no skipped batch is gathered.

    Returns:
        A prefetched, repeating `tf.data.Dataset` like `batches_from_tokens`'s.
    """
    check_positive_int("batch_tokens", batch_tokens)
    check_non_negative_int("start_step", start_step)
    lengths = tokenized.row_lengths  # every variant's
    n = len(tokenized)

    def indices():
        pass_index, skip = 0, start_step
        while True:
            offset = tokenized.variant_offset(pass_index)
            batches = token_budget_batches(lengths[offset : offset + n], batch_tokens, seed,
                                           pass_index, length_step=length_step)
            for batch in batches[skip:]:
                yield batch + offset
            skip = max(0, skip - len(batches))
            pass_index += 1

    dataset = tf.data.Dataset.from_generator(
        indices, output_signature=tf.TensorSpec([None], tf.int64)
    )
    return _padded(dataset, tokenized, batch_tokens, length_step)


def batches_per_pass(tokenized: TokenizedPairs, batch_tokens: int, *, batch_size: int = 0,
                     seed: int = 0, pass_index: int = 0, length_step: int = 1) -> int:
    """How many batches pass `pass_index` over the pairs' best split makes:
    token-budget batches of at most `batch_tokens` tokens, as
    `budget_batches_from_tokens` cuts them, or with `batch_tokens` 0 batches of
    `batch_size` pairs, as `fixed_batches_from_tokens` does."""
    if not batch_tokens:
        check_positive_int("batch_size", batch_size)
        return math.ceil(len(tokenized) / batch_size)
    return len(token_budget_batches(tokenized.lengths, batch_tokens, seed, pass_index,
                                    length_step=length_step))


def make_batches(
    pairs: Sequence[Pair],
    tokenizers,
    batch_size: int,
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Tokenizes pairs once and batches them for teacher forcing.

    `x` is the target without its last token and `labels` the target without
    `[START]`, so `labels[:, i]` is the token that follows `x[:, :i + 1]`.

    Args:
        pairs: `(source, target)` string pairs.
        tokenizers: an object with `.source` and `.target` tokenizers.
        batch_size: pairs per batch.
        max_tokens: longest source in tokens; `x` and `labels` have at most
            this many tokens too. Longer pairs are trimmed (keeping `[END]`)
            and counted in a log message.
        shuffle: shuffle the pairs every epoch.
        seed: the shuffle seed.
        drop_remainder: drop the last, smaller batch.

    Returns:
        A prefetched `tf.data.Dataset` of `((context, x), labels)`, all int64
        and zero-padded: context `(batch, source_len)`, x and labels
        `(batch, target_len)`, without tf.data autotuning (`_untuned`).

    Example:

    ```python
    train = make_batches(corpus.train, tokenizers, batch_size=64, max_tokens=64)
    (context, x), labels = next(iter(train))
    model.fit(train, epochs=10)
    ```
    """
    tokenized = tokenize_pairs(pairs, tokenizers, max_tokens)
    return batches_from_tokens(
        tokenized, batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder
    )
