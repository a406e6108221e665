"""Evaluation of a trained model: token accuracy, exact match and BLEU on sentence pairs."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Any

import sacrebleu
import tensorflow as tf

from transformer.constants import PAD_ID
from transformer.data.batching import batches_from_tokens, tokenize_pairs
from transformer.decoding.strategies import evaluation_strategy
from transformer.decoding.translator import Translator
from transformer.training import token_losses


def normalize_text(text: str, lower_case: bool = True) -> str:
    """The form in which translations and references are compared.

    The tokenizers' `detokenize` gives lower-cased, accent-free text with
    punctuation split off ("the boy ' s book"), so the references are brought
    to the same form: lower-cased and accents stripped (when the tokenizers
    lower-case), every punctuation mark a word of its own, single spaces.

    Example:

    >>> normalize_text("The boy's  Café.")
    "the boy ' s cafe ."
    """
    if lower_case:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    return " ".join(_WORDS_AND_PUNCTUATION.findall(text))


_WORDS_AND_PUNCTUATION = re.compile(r"\w+|[^\w\s]")


def translate_all(
    model, tokenizers, sentences, batch_size=128, max_length=64, beam_size=1
) -> list[str]:
    """Translates sentences with `transformer.decoding.translator.Translator` (cached
    decoding; at most input length + 50 tokens each), in batches of sentences
    of similar length.

    Args:
        model: a `Transformer`.
        tokenizers: with `.source` and `.target`.
        sentences: the source sentences.
        batch_size: sentences per batch.
        max_length: the most output tokens, `[END]` included.
        beam_size: 1 for greedy decoding; more for the paper's beam search
            (length penalty alpha 0.6).

    Returns:
        The translations, in the order of `sentences`.
    """
    translator = Translator(tokenizers, model, max_length=max_length,
                            search=evaluation_strategy(beam_size))
    results = translator(list(sentences), return_attention=False, batch_size=batch_size)
    return [result.text for result in results]


@dataclasses.dataclass
class Evaluation:
    """The quality of a model on sentence pairs.

    Attributes:
        masked_accuracy: share of non-padding target tokens predicted right
            with teacher forcing (over all tokens, not averaged per batch).
        loss: masked cross-entropy with teacher forcing (no label smoothing).
        exact_match: share of sentences whose translation equals the
            reference, both in `normalize_text` form.
        bleu: sacrebleu's corpus BLEU with its standard settings (cased, 13a
            tokenization) of the translations against the raw references.
        bleu_signature: sacrebleu's signature of that score.
        bleu_lowercase: the same, lower-cased (`lc` in its signature).
        bleu_lowercase_signature: its signature.
        num_sentences: how many pairs were evaluated.
        beam_size: the decoding: 1 greedy, more beam search.
        translations: the translations, in the order of the pairs.
    """

    masked_accuracy: float
    loss: float
    exact_match: float
    bleu: float
    bleu_signature: str
    bleu_lowercase: float
    bleu_lowercase_signature: str
    num_sentences: int
    beam_size: int = 1
    translations: list[str] = dataclasses.field(repr=False, default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("translations")
        data["bleu_text"] = "the translations as printed against the raw references"
        return data


def evaluate(
    model, tokenizers, pairs, *, batch_size=128, max_tokens=None, lower_case=True, beam_size=1
):
    """Masked token accuracy, sentence exact match and corpus BLEU on `pairs`.

    Args:
        model: a `Transformer`.
        tokenizers: with `.source` and `.target`.
        pairs: `(source, reference)` string pairs.
        batch_size: sentences per batch.
        max_tokens: longest source and output in tokens; the model's
            `max_length` by default.
        lower_case: whether the tokenizers lower-case (for the exact match,
            references are normalized the same way).
        beam_size: 1 for greedy decoding, more for beam search.

    Returns:
        An `Evaluation`.

    Example:

    ```python
    result = evaluate(model, tokenizers, corpus.test)
    result.exact_match, result.bleu, result.bleu_signature
    ```
    """
    if not pairs:
        raise ValueError("Cannot evaluate on an empty list of sentence pairs.")
    max_tokens = max_tokens or int(model.config.max_length)
    tokenized = tokenize_pairs(list(pairs), tokenizers, max_tokens)

    correct = total = loss_sum = 0.0
    for (context, x), labels in batches_from_tokens(tokenized, batch_size, shuffle=False):
        logits = model((context, x), training=False)  # (batch, target_len, vocab)
        mask = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        guess = tf.argmax(logits, axis=-1, output_type=tf.int64)
        correct += float(tf.reduce_sum(tf.cast(tf.equal(guess, labels), tf.float32) * mask))
        loss_sum += float(tf.reduce_sum(token_losses(labels, logits, 0.0) * mask))
        total += float(tf.reduce_sum(mask))

    translations = translate_all(
        model, tokenizers, [source for source, _ in pairs], batch_size, max_length=max_tokens,
        beam_size=beam_size,
    )
    references = [reference for _, reference in pairs]
    exact = sum(
        normalize_text(h, lower_case) == normalize_text(r, lower_case)
        for h, r in zip(translations, references, strict=True)
    ) / len(pairs)
    cased, lowercase = sacrebleu.BLEU(), sacrebleu.BLEU(lowercase=True)
    return Evaluation(
        masked_accuracy=correct / max(total, 1.0),
        loss=loss_sum / max(total, 1.0),
        exact_match=exact,
        bleu=float(cased.corpus_score(translations, [references]).score),
        bleu_signature=str(cased.get_signature()),
        bleu_lowercase=float(lowercase.corpus_score(translations, [references]).score),
        bleu_lowercase_signature=str(lowercase.get_signature()),
        num_sentences=len(pairs),
        beam_size=beam_size,
        translations=translations,
    )
