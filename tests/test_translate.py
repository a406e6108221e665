"""Tests of transformer/decoding/translator.py, the pipeline of
transformer/decoding/pipeline.py and the strategies of
transformer/decoding/strategies.py: the `Translator`.

Decoding itself (greedy, beam, sampling, cached against naive) is tested in
test_decoding.py, the export in test_export.py.
"""

import collections
import logging

import numpy as np
import pytest
import tensorflow as tf
from translate_helpers import beam_search_decode, cached_greedy_decode, first_end_lengths

from transformer.constants import END_ID, PAD_ID, START_ID, TRANSLATE_FIRST_PASS_EXTRA
from transformer.decoding.pipeline import (
    length_penalty,
    naive_greedy_decode,
    output_limits,
    sequence_log_probs,
)
from transformer.decoding.strategies import Beam, Greedy, Sample
from transformer.decoding.translator import Translation, Translator
from transformer.model import build_model
from transformer.rundir import CONFIG_FILE, RunDirError

# --- Translator --------------------------------------------------------------------


def _word_overlap(hypothesis, reference):
    """Unigram F1 of two sentences (a crude quality measure)."""
    hyp, ref = hypothesis.split(), reference.split()
    common = sum(min(hyp.count(w), ref.count(w)) for w in set(hyp))
    return 0.0 if not common else 2 * common / (len(hyp) + len(ref))


def _untrained_translator(tiny_run, translator):
    """The tiny run's model and tokenizers with fresh seeded weights."""
    import keras

    keras.utils.set_random_seed(0)
    model = build_model(tiny_run.config.model, translator.transformer.input_vocab_size,
                        translator.transformer.target_vocab_size)
    return Translator(translator.tokenizers, model)


def test_translator_translates_the_toy_test_set(tiny_run, translator, test_pairs):
    sentences = [source for source, _ in test_pairs[:16]]
    results = translator(sentences)
    assert len(results) == 16 and all(isinstance(r, Translation) for r in results)
    # Loaded from the run directory, it translates as the model did at the end
    # of training (train.py's evaluation uses this Translator too) ...
    for source, _, translation in tiny_run.examples:
        assert translator(source).text == translation
    # ... and the translations resemble the references far more than those of
    # the same model untrained (0.67 against 0.02 on the machine this was
    # written on; the bounds leave room for other machines' weights).
    def overlap(translations):
        return np.mean([_word_overlap(r.text, t) for r, (_, t) in zip(translations, test_pairs,
                                                                        strict=False)])

    untrained = _untrained_translator(tiny_run, translator)(sentences)
    trained_overlap, untrained_overlap = overlap(results), overlap(untrained)
    assert trained_overlap > max(0.3, untrained_overlap + 0.25), (
        trained_overlap, untrained_overlap,
        [(r.text, t) for r, (_, t) in zip(results, test_pairs, strict=False)])
    one = translator(sentences[0])
    text, tokens, attention = one  # unpacks like the tutorial's result
    assert text == results[0].text
    assert tokens[0] == "[START]" and tokens[-1] == "[END]"
    assert one.input_tokens[0] == "[START]" and one.input_tokens[-1] == "[END]"
    assert len(one.token_ids) == len(tokens) - 1
    assert one.score == pytest.approx(one.log_prob)  # greedy: alpha 0
    assert one.log_prob < 0



def test_translator_greedy_and_beam(translator, test_pairs):
    sentences = [source for source, _ in test_pairs[:16]]
    greedy = translator(sentences)
    encoder_tokens, _ = translator.encode(sentences)
    model = translator.transformer
    cached = cached_greedy_decode(model, encoder_tokens, translator.max_length).numpy()
    for row, g in enumerate(greedy):
        n = len(g.token_ids)
        np.testing.assert_array_equal(g.token_ids, cached[row, :n])
        assert g.token_ids[-1] == END_ID or n == translator.max_length
        assert g.score == pytest.approx(g.log_prob)
    # A beam of 1 is greedy decoding whatever alpha (only the score changes).
    beam_one = translator(sentences, search=Beam(size=1, alpha=0.6))
    for g, b in zip(greedy, beam_one, strict=True):
        assert b.text == g.text
        assert b.score == pytest.approx(g.log_prob / length_penalty(len(g.token_ids), 0.6),
                                        rel=1e-4)  # float32 sums in another order
    # A beam of 4 returns beam_search_decode's output, scored as the model scores it.
    beam = translator(sentences, search=Beam(4))
    tokens, scores = beam_search_decode(model, encoder_tokens, translator.max_length,
                                        beam_size=4, alpha=0.6)
    for row, b in enumerate(beam):
        n = len(b.token_ids)
        np.testing.assert_array_equal(b.token_ids, tokens.numpy()[row, :n])
        assert b.score == pytest.approx(float(scores[row]), rel=1e-4, abs=1e-4)
        assert b.score == pytest.approx(b.log_prob / length_penalty(n, 0.6))
    # Beam search scores better on average, and rarely worse on a sentence (it
    # may prune the greedy path; see the test below: 2 of 64 test sentences
    # with this model, none of these 16).
    g_scores = np.array([g.log_prob / length_penalty(len(g.token_ids), 0.6) for g in greedy])
    b_scores = np.array([b.score for b in beam])
    worse = b_scores < g_scores - 1e-5
    assert worse.sum() <= 2, b_scores - g_scores
    assert b_scores.mean() > g_scores.mean()
    assert translator.tracing_count(Greedy) == 1 and translator.tracing_count(Beam()) == 1


def _attention_step_by_step(model, encoder_tokens, token_ids):
    """Attention weights for an output, one decoding step at a time.

    Row `t` of the decoder's weights is computed as a decoding loop would
    compute it: the model run on `[START] y_1 ... y_t` for this sentence
    alone, its last query row kept. The encoder's weights come from the same
    runs (they must not change between steps).
    """
    prefix = np.concatenate([[START_ID], token_ids])[np.newaxis]  # (1, n + 1)
    rows, encoder = collections.defaultdict(list), {}
    for t in range(len(token_ids)):
        _, weights = model((tf.constant(encoder_tokens[np.newaxis]),
                            tf.constant(prefix[:, :t + 1])),
                           training=False, return_attention_weights=True)
        for name, w in weights.items():
            w = w.numpy()[0]
            if name.startswith("encoder"):
                if name in encoder:
                    np.testing.assert_allclose(w, encoder[name], atol=1e-6)
                encoder[name] = w
            else:
                rows[name].append(w[:, -1, :])  # (heads, keys)
    n = len(token_ids)
    decoder = {}
    for name, step_rows in rows.items():
        # Self-attention row t has t + 1 keys; pad the future with zeros.
        width = n if name.endswith("block1") else step_rows[0].shape[-1]
        decoder[name] = np.stack(
            [np.pad(r, [(0, 0), (0, width - r.shape[-1])]) for r in step_rows], axis=1
        )  # (heads, n, keys)
    return {**encoder, **decoder}


@pytest.mark.parametrize("search", [Greedy(), Beam(3)])
def test_attention_weights_shapes_rows_and_values(translator, test_pairs, search):
    sentences = [source for source, _ in test_pairs[:3]]
    encoder_tokens, _ = translator.encode(sentences)
    encoder_tokens = encoder_tokens.numpy()
    input_lengths = (encoder_tokens != PAD_ID).sum(axis=1)
    assert len(set(input_lengths)) > 1  # the batch is padded
    results = translator(sentences, search=search)
    model = translator.transformer
    heads, layers = model.config.num_heads, model.config.num_layers
    for row, result in enumerate(results):
        n, s = len(result.tokens) - 1, len(result.input_tokens)
        assert s == input_lengths[row]
        weights = result.attention_weights
        assert sorted(weights) == sorted(
            [f"encoder_layer{i}" for i in range(1, layers + 1)]
            + [f"decoder_layer{i}_block{b}" for i in range(1, layers + 1) for b in (1, 2)]
        )
        for name, w in weights.items():
            if name.startswith("encoder"):
                expected = (heads, s, s)
            elif name.endswith("block1"):
                expected = (heads, n, n)
            else:
                expected = (heads, n, s)
            assert w.shape == expected, name
            np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-5)
        # Masked self-attention never looks ahead.
        block1 = weights["decoder_layer1_block1"]
        assert np.abs(np.triu(block1, k=1)).max() == 0.0
        # The tokens: greedy decoding's (the tutorial's loop, this sentence alone).
        sentence = encoder_tokens[row, :s]
        if search == Greedy():
            naive = naive_greedy_decode(model, sentence[np.newaxis], translator.max_length)
            np.testing.assert_array_equal(result.token_ids, naive.numpy()[0])
        # The weights: the model's own for this sentence and these tokens, step by step.
        reference = _attention_step_by_step(model, sentence, result.token_ids)
        assert sorted(reference) == sorted(weights)
        for name, w in weights.items():
            np.testing.assert_allclose(w, reference[name], atol=1e-5, err_msg=name)


def test_without_attention_the_results_are_the_same(translator, test_pairs):
    sentences = [source for source, _ in test_pairs[:3]]
    with_weights = translator(sentences)
    without = translator(sentences, return_attention=False)
    for a, b in zip(with_weights, without, strict=True):
        assert b.attention_weights == {} and a.attention_weights
        assert (a.text, a.tokens, a.input_tokens) == (b.text, b.tokens, b.input_tokens)
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_empty_sentences_give_empty_translations(translator, test_pairs):
    sentence = test_pairs[0][0]
    results = translator(["", sentence, "   "])
    assert [r.text for r in results[::2]] == ["", ""]
    assert results[0].tokens == [] and results[0].attention_weights == {}
    assert results[0].token_ids.shape == (0,)
    assert results[1].text == translator(sentence).text
    assert translator("").text == ""
    assert translator(["", ""], search=Beam(3))[1].text == ""


def test_unknown_words_go_through_unk(translator):
    result = translator("o gato xyzzyq 漢字 come")
    assert "[UNK]" in result.input_tokens
    assert isinstance(result.text, str) and result.tokens[0] == "[START]"


def test_overlong_sentence_is_trimmed_with_a_warning(translator, caplog):
    limit = translator.transformer.config.max_length
    sentence = " ".join(["o gato preto come o bolo"] * 12)  # far more than `limit` tokens
    with caplog.at_level(logging.WARNING, logger="transformer.decoding.translator"):
        result = translator(["o gato", sentence])[1]
    assert "trimmed" in caplog.text and f"max_length={limit}" in caplog.text
    assert len(result.input_tokens) == limit and result.input_tokens[-1] == "[END]"
    assert result.text


def test_max_length_caps_the_output(translator, test_pairs, caplog):
    result = translator(test_pairs[0][0], max_length=2)
    assert len(result.token_ids) <= 2
    with caplog.at_level(logging.WARNING, logger="transformer.decoding.translator"):
        translator(test_pairs[0][0], max_length=10_000)
    assert "more than the model's max_length" in caplog.text


@pytest.mark.parametrize("kwargs,match", [
    ({"max_length": 0}, "max_length"),
    ({"search": "beam"}, "`search`.*Received: search='beam'"),
])
def test_bad_arguments_are_clear_errors(translator, kwargs, match):
    with pytest.raises(ValueError, match=match):
        translator("o gato", **kwargs)


def test_bad_sentences_are_clear_errors(translator):
    with pytest.raises(ValueError, match="sentence_or_list"):
        translator(123)
    with pytest.raises(ValueError, match="sentence_or_list"):
        translator(["o gato", None])
    assert translator([]) == []


def test_missing_or_incomplete_run_directory(tmp_path):
    with pytest.raises(RunDirError, match="does not exist"):
        Translator.from_run(tmp_path / "nope")
    (tmp_path / CONFIG_FILE).write_text("{}")
    with pytest.raises(RunDirError, match="tokenizers, model.keras") as info:
        Translator.from_run(tmp_path)
    assert "\n" not in str(info.value)


def test_unreadable_model_is_a_one_line_error(run_dir, tmp_path):
    import shutil

    for name in ("tokenizers", "config.json"):
        src = run_dir / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "model.keras").write_bytes(b"not a zip file")
    with pytest.raises(RunDirError, match="model.keras") as info:
        Translator.from_run(tmp_path)
    assert "\n" not in str(info.value)




@pytest.mark.parametrize("search", [Greedy(), Beam(3)])
def test_batches_sorted_by_length_keep_the_order_and_the_results(translator, test_pairs,
                                                                 search):
    """A list is decoded in batches of sentences of about equal length; each
    result is the one the sentence gets in a batch of its own."""
    sentences = [source for source, _ in test_pairs[:7]]
    sentences[2] = sentences[2] + " e o gato come o bolo"  # a longer one, out of order
    batched = translator(sentences, search=search, batch_size=2)
    for sentence, result in zip(sentences, batched, strict=True):
        alone = translator(sentence, search=search)
        assert (result.text, result.tokens, result.input_tokens) == (
            alone.text, alone.tokens, alone.input_tokens)
        assert result.score == pytest.approx(alone.score, abs=1e-4)
    # Attention weights of a batched result are its own sentence's.
    first = batched[2].attention_weights["decoder_layer1_block2"]
    alone = translator(sentences[2], search=search).attention_weights
    np.testing.assert_allclose(first, alone["decoder_layer1_block2"], atol=1e-5)


def test_batch_size_must_be_positive(translator):
    with pytest.raises(ValueError, match="`batch_size`.*Received: batch_size=0"):
        translator(["o gato"], batch_size=0)


def _end_biased_translator(tiny_run, translator):
    """An untrained translator whose [END] is favoured: some searches end early,
    others run on to their limit."""
    model = _untrained_translator(tiny_run, translator).transformer
    bias = model.final_layer.bias.numpy()
    bias[END_ID] += 2.0
    model.final_layer.bias.assign(bias)
    return Translator(translator.tokenizers, model)


def test_greedy_translation_in_two_passes_gives_the_one_pass_results(tiny_run, translator,
                                                                      test_pairs):
    """Greedy translation of a list stops a first pass at input length +
    TRANSLATE_FIRST_PASS_EXTRA tokens and decodes the sentences cut there again
    up to their full limit: every result is the one-pass decoding's."""
    untrained = _end_biased_translator(tiny_run, translator)
    model = untrained.transformer
    sentences = [source for source, _ in test_pairs[:12]]
    calls = []  # (sentences, extra_length) of every batch the greedy pipeline decodes
    pipeline = untrained._pipeline(Greedy())

    def spy(batch, max_length, extra_length, *settings):
        calls.append(([s.decode() for s in batch.numpy()], int(extra_length)))
        return pipeline(batch, max_length, extra_length, *settings)

    untrained._pipelines[Greedy().pipeline_key()] = spy
    results = untrained(sentences, batch_size=4)
    # Two passes: every sentence first, to input length + TRANSLATE_FIRST_PASS_EXTRA,
    # then only those cut there without [END], to their full limit.
    first = [c for c in calls if c[1] == TRANSLATE_FIRST_PASS_EXTRA]
    second = [c for c in calls if c[1] == untrained.extra_length]
    assert calls == first + second and len(first) == 3
    assert sorted(s for batch, _ in first for s in batch) == sorted(sentences)
    again = [s for batch, _ in second for s in batch]
    cut = [sentence for sentence, result in zip(sentences, results, strict=True)
           if len(result.token_ids) > len(result.input_tokens) - 2 + TRANSLATE_FIRST_PASS_EXTRA]
    assert 0 < len(again) < len(sentences) and set(cut) <= set(again)
    lengths = []
    for sentence, result in zip(sentences, results, strict=True):
        encoder_tokens, _ = untrained.encode([sentence])
        limits = output_limits(encoder_tokens, untrained.max_length, untrained.extra_length)
        tokens = cached_greedy_decode(model, encoder_tokens, int(limits[0]),
                                      row_limits=limits).numpy()[0]
        n = first_end_lengths([tokens])[0] or len(tokens)
        np.testing.assert_array_equal(result.token_ids, tokens[:n])
        lengths.append((n, len(result.input_tokens) - 2))
    assert any(n > s + TRANSLATE_FIRST_PASS_EXTRA for n, s in lengths)  # a second pass ran
    assert any(n <= s + TRANSLATE_FIRST_PASS_EXTRA for n, s in lengths)  # the first pass kept


def test_beam_translation_in_two_passes_gives_the_one_pass_results(tiny_run, translator,
                                                                    test_pairs):
    """Beam translation of a list runs the same two passes: a sentence whose
    search ended within the first pass's limit keeps that result, the others
    are searched again to their full limit, and every result (tokens and
    score) is the one-pass search's."""
    untrained = _end_biased_translator(tiny_run, translator)
    model = untrained.transformer
    sentences = [source for source, _ in test_pairs[:12]]
    calls = []  # extra_length of every batch the beam pipeline decodes, and its size
    pipeline = untrained._pipeline(Beam())

    def spy(batch, max_length, extra_length, *settings):
        calls.append((int(extra_length), int(batch.shape[0])))
        return pipeline(batch, max_length, extra_length, *settings)

    untrained._pipelines[Beam().pipeline_key()] = spy
    results = untrained(sentences, batch_size=4, search=Beam(3, 0.6))
    first = [size for extra, size in calls if extra == TRANSLATE_FIRST_PASS_EXTRA]
    second = [size for extra, size in calls if extra == untrained.extra_length]
    assert len(calls) == len(first) + len(second) and sum(first) == len(sentences)
    assert 0 < sum(second) < len(sentences)  # some ended in the first pass, some did not
    for sentence, result in zip(sentences, results, strict=True):
        encoder_tokens, _ = untrained.encode([sentence])
        limits = output_limits(encoder_tokens, untrained.max_length, untrained.extra_length)
        tokens, score = beam_search_decode(model, encoder_tokens, int(limits[0]), 3, 0.6,
                                           row_limits=limits)
        tokens = tokens.numpy()[0]
        n = first_end_lengths([tokens])[0] or len(tokens)
        np.testing.assert_array_equal(result.token_ids, tokens[:n])
        np.testing.assert_allclose(result.score, score.numpy()[0], rtol=1e-5)


# --- n-best lists and sampling ------------------------------------------------------


def test_n_best_lists_are_sorted_scored_and_start_with_the_beam_answer(translator,
                                                                       test_pairs):
    sentences = [source for source, _ in test_pairs[:6]] + [""]
    lists = translator(sentences, search=Beam(n_best=3))  # a beam of 4, the best 3
    beam = translator(sentences, search=Beam(4))
    encoder_tokens, _ = translator.encode(sentences[:6])
    for row, (hypotheses, best) in enumerate(zip(lists[:6], beam, strict=False)):
        assert len(hypotheses) == 3 and all(isinstance(h, Translation) for h in hypotheses)
        assert (hypotheses[0].text, list(hypotheses[0].token_ids)) == (
            best.text, list(best.token_ids))
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.token_ids) for h in hypotheses}) == 3
        for h in hypotheses:  # each scored as the model scores it
            log_prob, _ = sequence_log_probs(translator.transformer, encoder_tokens[row:row + 1],
                                             h.token_ids[np.newaxis])
            assert h.log_prob == pytest.approx(log_prob[0], abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.token_ids), 0.6))
    assert [h.text for h in lists[6]] == ["", "", ""]
    # The translator's own default, and one sentence: a list of n.
    two_best = Translator(translator.tokenizers, translator.transformer, search=Beam(n_best=2))
    assert [h.text for h in two_best(sentences[0])] == [h.text for h in lists[0][:2]]
    assert translator.tracing_count(Beam) == 1


def test_sampling_is_seeded_and_top_k_one_is_greedy(translator, test_pairs):
    sentences = [source for source, _ in test_pairs[:20]]
    greedy = translator(sentences)
    top1 = translator(sentences, search=Sample(temperature=2.0, top_k=1, seed=4))
    assert [r.text for r in top1] == [r.text for r in greedy]
    assert [r.log_prob for r in top1] == pytest.approx([r.log_prob for r in greedy], abs=1e-4)
    first = translator(sentences, search=Sample(temperature=1.5, seed=1))
    assert [r.text for r in translator(sentences, search=Sample(1.5, seed=1))] == [
        r.text for r in first]
    assert [r.text for r in translator(sentences, search=Sample(1.5, seed=2))] != [
        r.text for r in first]
    encoder_tokens, _ = translator.encode(sentences)
    for row, result in enumerate(first[:5]):
        log_prob, _ = sequence_log_probs(translator.transformer, encoder_tokens[row:row + 1],
                                         result.token_ids[np.newaxis])
        assert result.log_prob == pytest.approx(log_prob[0], abs=1e-4)
    assert translator.tracing_count(Sample) == 1


@pytest.mark.parametrize("make,match", [
    (lambda: Beam(size=0), r"`size`, expected an integer >= 1\. Received: size=0"),
    (lambda: Beam(alpha=-1.0), r"`alpha`.*Received: alpha=-1\.0"),
    (lambda: Beam(alpha=float("nan")), "alpha"),
    (lambda: Beam(size=2, n_best=3), "size >= n_best"),
    (lambda: Beam(n_best=0), "n_best"),
    (lambda: Sample(top_p=1.5), "top_p"),
    (lambda: Sample(top_p=0.0), "top_p"),
    (lambda: Sample(top_k=0), "top_k"),
    (lambda: Sample(temperature=0.0), "temperature"),
    (lambda: Sample(temperature=float("inf")), "temperature"),
    (lambda: Sample(seed=-1), "seed"),
    (lambda: Sample(seed=1.5), "seed"),
])
def test_strategies_check_their_own_settings(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_strategies_are_frozen_and_know_their_settings():
    assert Beam() == Beam(size=4, alpha=0.6, n_best=1)
    with pytest.raises(AttributeError):
        Beam().size = 2
    assert Beam(3, 0.0, 2).settings() == {"size": 3, "alpha": 0.0, "n_best": 2}
    assert Sample(seed=5).settings() == {"seed": 5, "temperature": 1.0, "top_k": 0,
                                         "top_p": 1.0}
    assert [name for name, _ in Sample.SETTINGS] == list(Sample(seed=1).settings())
    assert Greedy().settings() == {}
