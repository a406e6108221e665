"""The base class of both tokenizers (`TokenizerBase`) and of their traced methods.

What the WordPiece and SentencePiece tokenizers share: their reserved tokens,
their vocabulary file, the mapping of ids outside the vocabulary to `[UNK]`,
and `tokenizer_function`, the decorator of every traced tokenizer method.

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

from transformer.constants import UNK_ID

tokenizer_function = tf.function(autograph=False)
"""Decorates a tokenizer method: traced into the SavedModel, never autograph-converted."""


class TokenizerBase(tf.Module):
    """A tokenizer `tf.Module` with `_vocab_path`, `_reserved_tokens` and a
    `_vocabulary()` string tensor (one token per id)."""

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
