"""What the WordPiece and SentencePiece tokenizers share: their reserved tokens,
their vocabulary file and the mapping of ids outside the vocabulary to `[UNK]`."""

from __future__ import annotations

import tensorflow as tf

from transformer.constants import UNK_ID


class TokenizerBase(tf.Module):
    """A tokenizer `tf.Module` with `_vocab_path`, `_reserved_tokens` and a
    `_vocabulary()` string tensor (one token per id)."""

    @tf.function
    def get_vocab_path(self):
        """Returns the path of the vocabulary file, a scalar string tensor."""
        return self._vocab_path

    @tf.function
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
