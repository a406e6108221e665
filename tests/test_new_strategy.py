"""A strategy the package does not have, added as one class: greedy decoding with
a repetition penalty (CTRL; Keskar et al., 2019). Declared here and nowhere
else, it decodes through `Translator`, `translate.py --search`, the SavedModel
and CTranslate2 (whose `repetition_penalty` is the same rule), as issue 59
asks of an open set of strategies."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest
import tensorflow as tf

from transformer.constants import END_ID, START_ID
from transformer.decoding.search import greedy_search, one_row
from transformer.decoding.strategies import Greedy, SavedModelFunction, Strategy

SENTENCES = 12


@dataclasses.dataclass(frozen=True)
class RepetitionPenalty(Strategy, name="repetition_penalty"):
    """Greedy decoding whose logits of the tokens already in the output (`[START]`
    included) are divided by `penalty` where positive and multiplied by it where
    negative, before the arg-max (CTRL's rule). The score is `log P` under the
    penalized distribution, as CTranslate2 scores it."""

    penalty: float = 1.5

    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = (("penalty", "float32"),)
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = SavedModelFunction(
        "penalized", (("penalty", "penalty"),))

    def __post_init__(self):
        if not self.penalty >= 1.0:
            raise ValueError(f"Received penalty={self.penalty!r}, expected a number >= 1.")

    def search(self, settings, start, limits, initial_finished):
        penalty = settings["penalty"]

        def start_penalized(rows):
            next_logits, cache = start(rows)

            def penalized(tokens, cache, index):
                logits, cache = next_logits(tokens, cache, index)  # (rows, vocab)
                seen = tf.reduce_any(
                    tf.equal(tokens[:, :, tf.newaxis], tf.range(tf.shape(logits)[-1],
                                                                dtype=tokens.dtype)), axis=1)
                lowered = tf.where(logits > 0, logits / penalty, logits * penalty)
                return tf.where(seen, lowered, logits), cache

            return penalized, cache

        return one_row(greedy_search, {}, start_penalized, limits, initial_finished)

    @property
    def results_per_sentence(self):
        return 1

    def ctranslate2_options(self):
        return {"beam_size": 1, "length_penalty": 0.0, "repetition_penalty": self.penalty}


def _reference_choices(model, encoder_tokens, token_ids, penalty):
    """Whether each output token is the arg-max of the model's penalized logits,
    computed by one full forward pass (not the cached loop)."""
    output = np.asarray(token_ids, np.int64)[np.newaxis]
    decoder_input = np.concatenate([[[START_ID]], output[:, :-1]], axis=1)
    logits = model((encoder_tokens, tf.constant(decoder_input)), training=False).numpy()[0]
    chosen = []
    for step, row in enumerate(logits):
        seen = np.unique(decoder_input[0, : step + 1])
        row = row.copy()
        row[seen] = np.where(row[seen] > 0, row[seen] / penalty, row[seen] * penalty)
        chosen.append(int(np.argmax(row)) == int(output[0, step]))
    return chosen


@pytest.fixture(scope="module")
def sources(test_pairs):
    return [source for source, _ in test_pairs[:SENTENCES]]


def test_it_decodes_through_the_translator_as_its_rule_says(translator, sources):
    results = translator(sources, search=RepetitionPenalty(3.0), return_attention=False)
    for sentence, result in zip(sources, results, strict=True):
        encoder_tokens, _ = translator.encode([sentence])
        assert all(_reference_choices(translator.transformer, encoder_tokens,
                                      result.token_ids, 3.0)), sentence
    # A penalty of 1 is greedy decoding, scores and all.
    plain = translator(sources, search=RepetitionPenalty(1.0), return_attention=False)
    greedy = translator(sources, return_attention=False)
    assert [r.text for r in plain] == [r.text for r in greedy]
    np.testing.assert_allclose([r.log_prob for r in plain], [r.log_prob for r in greedy],
                               atol=1e-4)
    # Other penalties are tensor inputs of one compiled pipeline.
    translator(sources[:2], search=RepetitionPenalty(2.0), return_attention=False)
    assert translator.tracing_count(RepetitionPenalty(2.0)) == 1


def test_it_penalizes_repeats_on_a_model_that_repeats(translator, sources):
    """On the tiny run's model a strong penalty changes some translations and
    repeats fewer tokens than greedy decoding, which it was made for."""
    greedy = translator(sources, return_attention=False)
    strong = translator(sources, search=RepetitionPenalty(50.0), return_attention=False)

    def repeats(results):
        ids = [r.token_ids[r.token_ids != END_ID] for r in results]
        return sum(len(row) - len(np.unique(row)) for row in ids)

    assert repeats(strong) < repeats(greedy)


def test_a_users_subclass_of_greedy_works_through_the_translator(translator, sources):
    class Mine(Greedy):  # unregistered, in no module of the package
        pass

    greedy = translator(sources, return_attention=False)
    mine = translator(sources, search=Mine(), return_attention=False)
    assert [r.text for r in mine] == [r.text for r in greedy]
    assert translator.tracing_count(Mine()) == 1


def test_translate_py_finds_it_by_name(translator, sources, monkeypatch, capsys):
    from transformer.cli import translate as translate_cli

    monkeypatch.setattr(translate_cli, "tensorflow_translator", lambda run_dir: translator)
    expected = [r.text for r in translator(sources, search=RepetitionPenalty(3.0))]
    status = translate_cli.main(["--run", ".", "--search", "repetition_penalty",
                                 "--setting", "penalty=3.0", *sources])
    assert status == 0 and capsys.readouterr().out.splitlines() == expected
    # The search options set the fields of the same meaning, and no others.
    with pytest.raises(SystemExit):
        translate_cli.parse_args(["--run", ".", "--search", "repetition_penalty",
                                  "--top-k", "3", "o gato"])
    assert "--top-k sets the field 'top_k', which --search repetition_penalty does not " \
           "have (its fields: penalty)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        translate_cli.parse_args(["--run", ".", "--search", "repetition_penalty",
                                  "--setting", "penalty=0.5", "o gato"])
    assert "expected a number >= 1" in capsys.readouterr().err


def test_the_savedmodel_runs_it_as_its_call_and_as_its_own_function(translator, sources,
                                                                      tmp_path):
    from transformer.decoding.saved_model import export_translator

    export_dir = export_translator(translator, tmp_path / "export",
                                   search=RepetitionPenalty(3.0))
    loaded = tf.saved_model.load(str(export_dir))
    expected = [r.text for r in translator(sources, search=RepetitionPenalty(3.0),
                                           return_attention=False)]
    assert [t.decode() for t in loaded(tf.constant(sources)).numpy()] == expected
    by_name = loaded.penalized(tf.constant(sources), max_length=tf.constant(
        translator.max_length), penalty=tf.constant(3.0))
    assert [t.decode() for t in by_name.numpy()] == expected
    greedy = loaded.greedy(tf.constant(sources), tf.constant(translator.max_length))
    assert [t.decode() for t in greedy.numpy()] == [
        r.text for r in translator(sources, return_attention=False)]


def test_ctranslate2_runs_it_with_its_own_option(run_dir, translator, sources,
                                                 tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from translate_helpers import copy_run

    from transformer.cli.export import ctranslate2_model
    from transformer.decoding.ctranslate2_translator import CTranslate2Translator

    run = copy_run(run_dir, tmp_path_factory.mktemp("penalty") / "run")
    engine = CTranslate2Translator(ctranslate2_model(run), use_vmap=False)
    for penalty in (1.0, 3.0):
        search = RepetitionPenalty(penalty)
        expected = [r.text for r in translator(sources, search=search, return_attention=False)]
        assert [h.text for h in engine.translate(sources, search=search)] == expected
