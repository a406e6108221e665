"""Tests of transformer/run/evaluation.py: the normalized form of translations, and
the values of `evaluate`: exact match, BLEU, loss and accuracy.

The expected values are computed here without `evaluate`'s code: the loss and
the accuracy from one teacher-forced pass of the model per pair (no batch, no
padding) in numpy, exact match and BLEU from text normalised and scored by
this file's own helpers (BLEU checked against `sacrebleu.corpus_bleu` too).
The trained run and its translator are the session's (tests/conftest.py).
"""

from __future__ import annotations

import collections
import math
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from transformer.run import evaluation

# (source, reference, hypothesis returned by the stubbed translate_all).
# Documented comparison: both sides lower-cased, accents stripped, every
# punctuation mark a word of its own, single spaces. Pairs 1 and 2 match only
# after normalisation, pair 1 by normalising the hypothesis and pair 2 the
# reference; pairs 3 and 4 do not match, and their hypotheses are shorter than
# their references (BLEU's brevity penalty applies, so swapping hypotheses and
# references changes the score).
STUBBED = [
    ("o homem velho come o bolo", "the old man eats the cake .", "The old  man eats the CAKE."),
    ("o cão das meninas vê o menino", "The girls' dog sees the Boy!",
     "the girls ' dog sees the boy !"),
    ("duas mulheres encontram quatro livros nas mesas",
     "Two women find four books on the tables.", "two women find four books ."),
    ("o gato dorme no carro perto da casa grande",
     "The cat sleeps in the car near the big house.", "the cat sleeps in the car ."),
    ("os três gatos encontram o livro", "the three cats find the red book",
     "the three cats find the book"),
]
# The normalised forms, written out by hand.
NORMALISED_REFERENCES = [
    "the old man eats the cake .",
    "the girls ' dog sees the boy !",
    "two women find four books on the tables .",
    "the cat sleeps in the car near the big house .",
    "the three cats find the red book",
]
NORMALISED_HYPOTHESES = [
    "the old man eats the cake .",
    "the girls ' dog sees the boy !",
    "two women find four books .",
    "the cat sleeps in the car .",
    "the three cats find the book",
]


def normalise(text, lower_case=True):
    """The documented comparison form, written independently of `normalize_text`."""
    if lower_case:
        text = "".join(
            ch for ch in unicodedata.normalize("NFD", text.lower())
            if not unicodedata.combining(ch)
        )
    text = re.sub(r"([^\w\s])", r" \1 ", text)
    return " ".join(text.split())


def corpus_bleu_by_hand(hypotheses, references):
    """Papineni et al.'s corpus BLEU on whitespace tokens, 1- to 4-grams, no smoothing.

    Every n-gram order must have a match (sacrebleu's exponential smoothing
    then changes nothing); text in normalised form tokenizes the same with
    sacrebleu's 13a tokenizer and with `split()`.
    """
    matches, totals = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        hyp, ref = hypothesis.split(), reference.split()
        hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
        for n in range(1, 5):
            hyp_grams = collections.Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(c, ref_grams[g]) for g, c in hyp_grams.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    assert all(matches), matches
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals,
                                                                        strict=True)) / 4)


def teacher_forced_by_hand(model, tokenizers, pairs, max_tokens):
    """Masked cross-entropy and accuracy over every target token, one pair at a time."""
    nll_sum = correct = count = 0.0
    for source, reference in pairs:
        context = tokenizers.source.tokenize(tf.constant([source])).to_tensor().numpy()
        target = tokenizers.target.tokenize(tf.constant([reference])).to_tensor().numpy()
        assert context.shape[1] <= max_tokens and target.shape[1] <= max_tokens + 1
        logits = model((tf.constant(context, tf.int64), tf.constant(target[:, :-1], tf.int64)),
                       training=False).numpy()[0].astype(np.float64)  # (target_len, vocab)
        labels = target[0, 1:]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        nll_sum -= log_probs[np.arange(len(labels)), labels].sum()
        correct += (logits.argmax(axis=-1) == labels).sum()
        count += len(labels)
    return nll_sum / count, correct / count


def test_normalize_text():
    from transformer.run.evaluation import normalize_text

    assert normalize_text("The boy's  Café.") == "the boy ' s cafe ."
    assert normalize_text("the boy ' s cafe .") == "the boy ' s cafe ."
    assert normalize_text("Não!", lower_case=False) == "Não !"


def test_the_expected_values_are_written_right():
    # The hand-written forms are the documented normal form ...
    assert [normalise(r) for _, r, _ in STUBBED] == NORMALISED_REFERENCES
    assert [normalise(h) for _, _, h in STUBBED] == NORMALISED_HYPOTHESES
    assert normalise("Não, o Café!") == "nao , o cafe !"
    # ... the by-hand BLEU is sacrebleu's ...
    expected = corpus_bleu_by_hand(NORMALISED_HYPOTHESES, NORMALISED_REFERENCES)
    assert expected == pytest.approx(
        sacrebleu.corpus_bleu(NORMALISED_HYPOTHESES, [NORMALISED_REFERENCES]).score, rel=1e-9)
    # ... and the pairs tell a right BLEU (71.3) from a swapped one (68.6: n-gram
    # matches are symmetric, but the brevity penalty and the precisions' counts
    # are not) and from one on raw text (40.8).
    swapped = corpus_bleu_by_hand(NORMALISED_REFERENCES, NORMALISED_HYPOTHESES)
    raw = sacrebleu.corpus_bleu([h for _, _, h in STUBBED], [[r for _, r, _ in STUBBED]]).score
    assert abs(swapped - expected) > 2 and abs(raw - expected) > 20, (expected, swapped, raw)


@pytest.mark.parametrize("batch_size", [3, 5])
def test_evaluate_values_with_chosen_translations(tiny_run, translator, monkeypatch, batch_size):
    model, tokenizers = translator.transformer, translator.tokenizers
    max_tokens = tiny_run.config.resolved_max_tokens
    pairs = [(source, reference) for source, reference, _ in STUBBED]
    hypotheses = {source: hypothesis for source, _, hypothesis in STUBBED}
    calls = []

    def chosen_translations(model_, tokenizers_, sentences, batch_size_=128, max_length=64,
                            beam_size=1):
        calls.append(list(sentences))
        return [hypotheses[s] for s in sentences]

    monkeypatch.setattr(evaluation, "translate_all", chosen_translations)
    result = evaluation.evaluate(model, tokenizers, pairs, batch_size=batch_size,
                               max_tokens=max_tokens)
    assert calls == [[source for source, _ in pairs]]
    assert result.translations == [hypothesis for _, _, hypothesis in STUBBED]
    assert result.num_sentences == 5
    # Pairs 1 and 2 are equal once normalised: 2 of 5.
    assert result.exact_match == pytest.approx(2 / 5)
    # BLEU with sacrebleu's standard settings on the raw texts, cased and
    # lower-cased (the by-hand BLEU of the raw texts, tokenized like 13a).
    hypotheses_raw = [h for _, _, h in STUBBED]
    references_raw = [r for _, r, _ in STUBBED]
    assert result.bleu == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses_raw, [references_raw]).score, rel=1e-9)
    assert result.bleu_lowercase == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses_raw, [references_raw], lowercase=True).score, rel=1e-9)
    swapped = sacrebleu.corpus_bleu(references_raw, [hypotheses_raw]).score
    assert abs(result.bleu - swapped) > 1 and result.bleu_lowercase > result.bleu + 5
    assert "tok:13a" in result.bleu_signature and "nrefs:1" in result.bleu_signature
    assert "case:mixed" in result.bleu_signature
    assert "case:lc" in result.bleu_lowercase_signature
    # Loss and accuracy: over every target token of every pair, whatever the
    # batches (3: two batches, the first padded; 5: one padded batch).
    loss, accuracy = teacher_forced_by_hand(model, tokenizers, pairs, max_tokens)
    assert result.loss == pytest.approx(loss, rel=1e-5)
    assert result.masked_accuracy == pytest.approx(accuracy, abs=1e-9)
    assert 0 < accuracy < 1  # the accuracy is not trivially right


def test_evaluation_of_the_tiny_run_is_its_own_translations_scored(
    tiny_run, translator, test_pairs
):
    """train() evaluated the test split; every value is recomputed here."""
    evaluation = tiny_run.evaluation
    sources = [source for source, _ in test_pairs]
    assert evaluation.num_sentences == len(test_pairs) == 64
    # Its translations are the translator's greedy translations ...
    translations = [r.text for r in translator(sources, return_attention=False)]
    assert evaluation.translations == translations
    # ... matched against the references in normalised form ...
    lower_case = tiny_run.config.lower_case
    hypotheses = [normalise(t, lower_case) for t in translations]
    references = [normalise(r, lower_case) for _, r in test_pairs]
    assert evaluation.exact_match == pytest.approx(
        np.mean([h == r for h, r in zip(hypotheses, references, strict=True)]))
    # ... and scored by BLEU as printed against the raw references.
    raw_references = [r for _, r in test_pairs]
    assert evaluation.bleu == pytest.approx(
        sacrebleu.corpus_bleu(translations, [raw_references]).score, rel=1e-9)
    assert evaluation.bleu_lowercase == pytest.approx(
        sacrebleu.corpus_bleu(translations, [raw_references], lowercase=True).score, rel=1e-9)
    loss, accuracy = teacher_forced_by_hand(
        translator.transformer, translator.tokenizers, test_pairs,
        tiny_run.config.resolved_max_tokens)
    assert evaluation.loss == pytest.approx(loss, rel=1e-5)
    assert evaluation.masked_accuracy == pytest.approx(accuracy, abs=1e-9)
    # metrics.json holds these values.
    from transformer import rundir

    written = rundir.read_json(Path(tiny_run.run_dir) / rundir.METRICS_JSON)["test"]
    for key, value in evaluation.to_dict().items():
        assert written[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_evaluate_decodes_with_the_beam_it_is_given(tiny_run, translator, test_pairs):
    """On sentences where the tiny model's beam of 4 and greedy decoding
    disagree, `evaluate(..., beam_size=4)` gives the beam's translations."""
    from transformer.decoding.strategies import Beam
    from transformer.decoding.translator import Translator

    model, tokenizers = translator.transformer, translator.tokenizers
    max_tokens = tiny_run.config.resolved_max_tokens
    reference = Translator(tokenizers, model, max_length=max_tokens)
    sources = [source for source, _ in test_pairs]
    greedy = [r.text for r in reference(sources, return_attention=False)]
    beam = [r.text for r in reference(sources, search=Beam(4), return_attention=False)]
    chosen = [i for i in range(len(sources)) if greedy[i] != beam[i]][:4]
    assert chosen, "beam and greedy agree everywhere: the test could not fail"
    chosen.append(next(i for i in range(len(sources)) if greedy[i] == beam[i]))
    result = evaluation.evaluate(model, tokenizers, [test_pairs[i] for i in chosen],
                                 max_tokens=max_tokens, beam_size=4)
    assert result.beam_size == 4
    assert result.translations == [beam[i] for i in chosen]
    greedy_result = evaluation.evaluate(model, tokenizers, [test_pairs[i] for i in chosen],
                                        max_tokens=max_tokens)
    assert greedy_result.translations == [greedy[i] for i in chosen]
