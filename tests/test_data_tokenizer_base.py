"""Tests of transformer.data.tokenizer_base: the tokenizers' traced methods.

Every tokenizer method is a `tf.function` traced without autograph (see the
module docstring of `transformer.data.tokenizer_base`): autograph's path is
the one that receives a method bound to TensorFlow's placeholder `self`, and
a body run with that placeholder fails as `'TfMethodTarget' object has no
attribute '_valid_ids'`.
"""

from __future__ import annotations

import gc
import inspect

import pytest
import tensorflow as tf

from transformer.constants import RESERVED_TOKENS
from transformer.data.sentencepiece import (
    SentencePieceTokenizer,
    learn_sentencepiece_model,
    write_sentencepiece_files,
)
from transformer.data.wordpiece import WordPieceTokenizer

WORDS = ["o", "gato", "preto", "come", "bolo", "the", "cat", "black", "eats", "cake"]
SENTENCES = ["o gato preto come o bolo", "the black cat eats the cake"] * 20


@pytest.fixture(scope="module")
def vocab_files(tmp_path_factory):
    """A WordPiece vocabulary file and a SentencePiece model, both tiny."""
    directory = tmp_path_factory.mktemp("tokenizer_base")
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join([*RESERVED_TOKENS, *WORDS, "##s"]) + "\n", encoding="utf-8")
    proto = learn_sentencepiece_model(SENTENCES, vocab_size=30)
    return {"wordpiece": vocab, "sentencepiece": write_sentencepiece_files(proto, directory, "x")}


def _build(cls, vocab_files):
    if issubclass(cls, SentencePieceTokenizer):
        return cls(vocab_files["sentencepiece"].model)
    return cls(vocab_files["wordpiece"])


def _traced_methods(cls):
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if isinstance(member, tf.types.experimental.PolymorphicFunction)
    }


@pytest.mark.parametrize("cls", [WordPieceTokenizer, SentencePieceTokenizer])
def test_no_traced_tokenizer_method_is_autograph_converted(cls):
    methods = _traced_methods(cls)
    # tokenize, detokenize, lookup, get_vocab_size, get_vocab_path,
    # get_reserved_tokens (and get_model_path for SentencePiece).
    assert len(methods) >= 6, sorted(methods)
    converted = sorted(name for name, method in methods.items() if method._autograph)
    assert not converted, f"{cls.__name__} traces {converted} with autograph"


@pytest.mark.parametrize("cls", [WordPieceTokenizer, SentencePieceTokenizer])
def test_method_bodies_run_with_the_instance_and_autograph_off(cls, vocab_files):
    """Traced in `__init__`, `detokenize` and `lookup` call `self._valid_ids`:
    with the real instance as `self`, and not inside autograph's converted call."""
    seen = []

    class Probe(cls):
        def _valid_ids(self, token_ids):
            status = tf.__internal__.autograph.control_status_ctx().status
            seen.append((type(self).__name__, status.name))
            return super()._valid_ids(token_ids)

    tokenizer = _build(Probe, vocab_files)
    ids = tokenizer.tokenize(tf.constant(["o gato preto"]))
    assert tokenizer.lookup(ids).shape[0] == 1
    # Two dtypes x dense and ragged, for detokenize and for lookup.
    assert len(seen) == 8
    assert {name for name, _ in seen} == {"Probe"}
    assert "ENABLED" not in {status for _, status in seen}, seen


def test_a_body_run_with_the_placeholder_self_fails_as_seen(vocab_files):
    """The diagnosis: TensorFlow binds each method to a `TfMethodTarget` placeholder;
    the body run with it as `self` raises exactly the error of the flaky run."""
    tokenizer = _build(SentencePieceTokenizer, vocab_files)
    bound_to_placeholder = tokenizer.lookup.python_function.__original_wrapped__
    assert type(bound_to_placeholder.__self__).__name__ == "TfMethodTarget"
    with pytest.raises(AttributeError, match="'TfMethodTarget' object has no attribute '_valid_ids'"):
        bound_to_placeholder(tf.constant([[2, 3]]))


def test_a_tokenizer_survives_building_and_deleting_under_eager_garbage_collection(
    vocab_files,
):
    """Built, deleted and rebuilt with a collection at every allocation, so that
    every weak reference TensorFlow keeps dies as early as it can. SentencePiece,
    whose construction failed in the flaky run (WordPiece's traces the same way
    and costs four times as much here)."""
    ids = tf.RaggedTensor.from_tensor(tf.constant([[2, 5, 6, 3]]))
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 50, 50)  # every allocation; the older generations less often
    try:
        tokenizer = _build(SentencePieceTokenizer, vocab_files)
        del tokenizer
        gc.collect()
        tokenizer = _build(SentencePieceTokenizer, vocab_files)
        text = tokenizer.detokenize(tokenizer.tokenize(tf.constant(["o gato preto"])))
        looked_up = tokenizer.lookup(ids).to_list()
    finally:
        gc.set_threshold(*thresholds)
    assert text.numpy().tolist() == [b"o gato preto"]
    assert looked_up[0][0] == b"[START]" and looked_up[0][-1] == b"[END]"
