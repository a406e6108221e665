"""The base class of both tokenizers (`TokenizerBase`) and of their traced methods.

What the WordPiece and SentencePiece tokenizers share: the signatures traced
for saving, the `[START]`/`[END]` framing of `tokenize`, the mask of
`detokenize`, `lookup`, the mapping of ids outside the vocabulary to `[UNK]`,
the accessors (reserved tokens, vocabulary file and size), and
`tokenizer_function`, the decorator of every traced tokenizer method. Each
tokenizer holds only what differs: how it splits text into ids (`_split`),
joins ids into text (`_join`), and what its vocabulary is (`_vocabulary`).

Why no autograph: a `tf.function` method is bound, per instance, to a
placeholder `self` (TensorFlow's `TfMethodTarget`), and the real instance is
put in either by the bound-method wrapper (without autograph), which calls
the body with the instance itself, or by autograph, which receives the method
bound to the placeholder and has to unwrap it on each of its paths. The
tokenizers trace about a dozen methods per instance while it is being built,
and a body once ran with the placeholder as `self` (`AttributeError:
'TfMethodTarget' object has no attribute '_valid_ids'`, in a notebook kernel;
not reproduced on demand, 60 builds under `gc.set_threshold(1)` passed).
Only the autograph side ever holds the placeholder-bound method. The methods
have no Python control flow on tensors, so autograph has nothing to convert
in them; `autograph=False` traces them as plain Python called with the real
instance, and the placeholder is never called.
"""

from __future__ import annotations

import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, START_ID, UNK_ID

tokenizer_function = tf.function(autograph=False)
"""Decorates a tokenizer method: traced into the SavedModel, never autograph-converted."""

# The id dtypes `detokenize` and `lookup` are traced for, dense and ragged.
_ID_DTYPES = (tf.int64, tf.int32)


class TokenizerBase(tf.Module):
    """A tokenizer `tf.Module`: the traced methods both kinds share, around
    the three things each kind does its own way.

    A subclass sets `_vocab_path` (a `tf.saved_model.Asset`) and
    `_reserved_tokens`, implements `_split` (text to ids), `_join` (ids to
    text) and `_vocabulary` (one token per id), and calls
    `_trace_signatures()` at the end of its `__init__`. Everything else is
    here: the `[START]`/`[END]` framing of `tokenize`, the mask of
    `detokenize` (nothing after the first `[END]`, no `[PAD]`, `[START]` or
    `[END]`), `lookup`, the `[UNK]` mapping of ids outside the vocabulary,
    and the accessors. A SavedModel records the traced functions, never this
    class, so tokenizers saved by any version load without it.
    """

    def _trace_signatures(self, *accessors) -> None:
        """Traces the signatures the SavedModel keeps: `tokenize` on a batch of
        strings, `detokenize` and `lookup` on int32 and int64 ids, dense and
        ragged, and the argument-less accessors (these and `accessors`)."""
        self.tokenize.get_concrete_function(tf.TensorSpec(shape=[None], dtype=tf.string))
        for dtype in _ID_DTYPES:
            for spec in (
                tf.TensorSpec(shape=[None, None], dtype=dtype),
                tf.RaggedTensorSpec(shape=[None, None], dtype=dtype),
            ):
                self.detokenize.get_concrete_function(spec)
                self.lookup.get_concrete_function(spec)
        for method in (self.get_vocab_size, self.get_vocab_path, *accessors,
                       self.get_reserved_tokens):
            method.get_concrete_function()

    @tokenizer_function
    def tokenize(self, strings):
        """Splits sentences into token ids, framed by START and END.

        Args:
            strings: a 1-D string tensor of sentences, shape `(batch,)`.

        Returns:
            An int64 `tf.RaggedTensor` of shape `(batch, (tokens))` with int64
            row splits, every row `[START, ..., END]`; an empty sentence
            gives `[START, END]`. Text outside the vocabulary becomes
            `[UNK]` (id 1).
        """
        ids = self._split(strings)  # (batch, (tokens))
        # The batch size as the ids count their rows, in their row splits'
        # dtype: taken from `strings` instead, one of the two tokenizers, once
        # saved and reloaded, logged a grappler warning ("Skipping loop
        # optimization ... RaggedConcat/assert_equal") on every trace.
        shape = tf.stack([ids.nrows(), 1])  # [batch, 1]
        starts = tf.fill(shape, tf.constant(START_ID, tf.int64))  # (batch, 1)
        ends = tf.fill(shape, tf.constant(END_ID, tf.int64))  # (batch, 1)
        framed = tf.concat([starts, ids, ends], axis=1)  # (batch, (tokens + 2))
        return framed.with_row_splits_dtype(tf.int64)

    @tokenizer_function
    def detokenize(self, tokens):
        """Turns ids back into text, one string per row.

        Everything after the first `[END]` is ignored, and `[PAD]`, `[START]`
        and `[END]` are dropped; ids outside the vocabulary count as `[UNK]`.
        How the remaining ids become text (and how `[UNK]` shows) is the
        subclass's `_join`.

        Args:
            tokens: int32 or int64 ids, a dense `(batch, seq)` tensor or a
                `tf.RaggedTensor` of shape `(batch, (seq))`.

        Returns:
            A string tensor of shape `(batch,)`.
        """
        ids = self._valid_ids(tokens)
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)  # (batch, seq)
        ended = tf.math.cumsum(tf.cast(ids == END_ID, tf.int32), axis=1, exclusive=True) > 0
        keep = ~ended & (ids != PAD_ID) & (ids != START_ID) & (ids != END_ID)  # (batch, seq)
        return self._join(tf.ragged.boolean_mask(ids, keep))  # (batch,)

    @tokenizer_function
    def lookup(self, token_ids):
        """Maps ids to their tokens, one string per id.

        Args:
            token_ids: int32 or int64 ids, dense or ragged `(batch, seq)`.

        Returns:
            Strings of the same shape and kind (dense or ragged), e.g.
            `[[b"[START]", b"gat", b"##inhos", b"[END]"]]` (WordPiece).
        """
        ids = self._valid_ids(token_ids)
        vocabulary = self._vocabulary()
        if isinstance(ids, tf.RaggedTensor):
            return tf.ragged.map_flat_values(lambda flat: tf.gather(vocabulary, flat), ids)
        return tf.gather(vocabulary, ids)

    @tokenizer_function
    def get_vocab_size(self):
        """Returns the number of tokens in the vocabulary, a scalar int32 tensor."""
        return tf.size(self._vocabulary())

    @tokenizer_function
    def get_vocab_path(self):
        """Returns the path of the vocabulary file, a scalar string tensor."""
        return self._vocab_path

    @tokenizer_function
    def get_reserved_tokens(self):
        """Returns the reserved tokens, a string tensor `[PAD] [UNK] [START] [END]`."""
        return tf.constant(self._reserved_tokens)

    def _valid_ids(self, token_ids):
        """Casts to int64 and maps ids outside `[0, vocab_size)` to `[UNK]`."""
        return valid_ids(token_ids, tf.size(self._vocabulary(), out_type=tf.int64))

    def _split(self, strings):
        """Sentences `(batch,)` to int64 ids `(batch, (tokens))`, unframed."""
        raise NotImplementedError

    def _join(self, ids):
        """Kept int64 ids `(batch, (tokens))` to one string per row `(batch,)`."""
        raise NotImplementedError

    def _vocabulary(self):
        """The tokens, a 1-D string tensor (or variable): token `i` is id `i`."""
        raise NotImplementedError


def valid_ids(token_ids, size):
    """`token_ids` (dense or ragged) as int64, with ids outside `[0, size)` as `[UNK]`.

    Shared by both tokenizers: a model can emit any id, the vocabulary cannot
    show every one.
    """
    ids = tf.cast(token_ids, tf.int64)
    if isinstance(ids, tf.RaggedTensor):
        return tf.ragged.map_flat_values(_clip_to_unk, ids, size)
    return _clip_to_unk(ids, size)


def _clip_to_unk(ids, size):
    return tf.where((ids < 0) | (ids >= size), tf.constant(UNK_ID, tf.int64), ids)
