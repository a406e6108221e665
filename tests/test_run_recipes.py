"""Tests of transformer.run.recipes: the dataset defaults and the sizing rule."""

from __future__ import annotations

import doctest

import pytest


def test_the_docstring_examples_hold():
    from transformer.run import recipes

    result = doctest.testmod(recipes)
    assert result.attempted >= 6 and result.failed == 0


def test_both_recipes_name_valid_settings():
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS

    fields = set(RunConfig.__dataclass_fields__)
    assert set(TOY_DEFAULTS) <= fields and set(CORPUS_DEFAULTS) <= fields
    toy, real = RunConfig(), RunConfig(data="pairs.tsv")
    assert all(getattr(toy, key) == value for key, value in TOY_DEFAULTS.items())
    assert all(getattr(real, key) == value for key, value in CORPUS_DEFAULTS.items())


def test_real_corpora_are_sized_from_the_corpus():
    from transformer.model_config import PRESETS
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS, size_epochs_and_batches

    config = RunConfig(dataset="ted_hrlr_translate/pt_to_en")
    assert (config.epochs, config.warmup_steps, config.batch_tokens) == (None, 800, None)
    # The paper's peak of a 4000-step warm-up, reached in 800 steps, for the
    # model the run trains: set once the size rule has chosen it (resolve).
    assert config.preset == "auto" and config.learning_rate is None
    tutorial = RunConfig(dataset="ted_hrlr_translate/pt_to_en", preset="tutorial")
    paper_peak = (tutorial.model.d_model * 4000) ** -0.5
    assert tutorial.learning_rate == tutorial.peak_learning_rate == pytest.approx(paper_peak)
    assert RunConfig(data="a.tsv", learning_rate="paper").peak_learning_rate is None
    assert (config.average_checkpoints, config.eval_beam_size) == (
        1, CORPUS_DEFAULTS["eval_beam_size"])
    assert RunConfig(data="a.tsv", learning_rate=1e-3).peak_learning_rate == 1e-3
    assert config.tokenizer == "sentencepiece" and config.lower_case is False
    assert config.shared_vocab and config.model.tie_embeddings and config.fit_warmup
    sized = size_epochs_and_batches(25_000, 9.0, config)
    assert config.batch_size == CORPUS_DEFAULTS["batch_size"] == 32
    assert sized == {"epochs": 7, "batch_tokens": 288}  # 180,000 pairs seen; 32 x 9 tokens
    assert size_epochs_and_batches(1_000_000, 9.0, config)["epochs"] == 2
    assert size_epochs_and_batches(1_000, 9.0, config)["epochs"] == 20
    mirrored = RunConfig(dataset="ted_hrlr_translate/pt_to_en", strategy="mirrored")
    assert size_epochs_and_batches(25_000, 9.0, mirrored)["batch_tokens"] == 288  # split in two
    given = RunConfig(dataset="ted_hrlr_translate/pt_to_en", epochs=3, batch_tokens=0)
    assert size_epochs_and_batches(25_000, 9.0, given) == {}
    # With a time budget the epochs are only a cap; given epochs stay.
    budget = RunConfig(dataset="ted_hrlr_translate/pt_to_en", time_budget=600.0)
    assert size_epochs_and_batches(25_000, 9.0, budget)["epochs"] == 20
    both = RunConfig(dataset="ted_hrlr_translate/pt_to_en", time_budget=600.0, epochs=3)
    assert "epochs" not in size_epochs_and_batches(25_000, 9.0, both)
    assert config.model.dropout_rate == 0.0  # CORPUS_DROPOUT_RATE: short runs underfit
    toy = RunConfig()
    assert toy.model.dropout_rate == PRESETS["toy"].dropout_rate > 0
    assert (toy.epochs, toy.warmup_steps, toy.batch_tokens, toy.batch_size) == (4, 400, 0, 64)
    assert (toy.learning_rate, toy.peak_learning_rate, toy.average_checkpoints) == (
        "paper", None, 1)
    assert toy.eval_beam_size == 1


@pytest.mark.parametrize("decay", ["inverse_sqrt", "linear", "cosine", "cooldown"])
def test_the_moving_average_is_off_by_default_with_a_fall_to_zero(decay):
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS

    paper = decay == "inverse_sqrt"
    assert RunConfig(data="a.tsv", decay=decay).ema_momentum == (
        CORPUS_DEFAULTS["ema_momentum"] if paper else 0.0)
    assert RunConfig(decay=decay).ema_momentum == TOY_DEFAULTS["ema_momentum"] == 0.0
    # Asked for, it stays; so does the default schedule's.
    assert RunConfig(data="a.tsv", decay=decay, ema_momentum=0.99).ema_momentum == 0.99
    assert RunConfig(data="a.tsv").ema_momentum == CORPUS_DEFAULTS["ema_momentum"] > 0
    assert RunConfig(data="a.tsv", decay=decay, average_checkpoints=3).ema_momentum == 0.0


def test_default_model_drops_dropout_on_real_corpora_unless_given():
    from transformer.model_config import PRESETS
    from transformer.run.recipes import CORPUS_DROPOUT_RATE, default_model

    assert default_model("tutorial", data="pairs.tsv").dropout_rate == CORPUS_DROPOUT_RATE == 0.0
    assert default_model("tutorial", "ted_hrlr_translate/pt_to_en").dropout_rate == 0.0
    assert default_model("tutorial", data="pairs.tsv", dropout_rate=0.1).dropout_rate == 0.1
    assert default_model("toy").dropout_rate == PRESETS["toy"].dropout_rate
    assert default_model("tutorial").dropout_rate == PRESETS["tutorial"].dropout_rate == 0.1
    given = default_model("tutorial", data="pairs.tsv", d_model=64, dropout_rate=None)
    assert (given.d_model, given.dropout_rate) == (64, 0.0)


def test_a_short_time_budget_gives_a_real_corpus_the_smaller_vocabulary():
    from transformer.run.config import RunConfig, config_from_record
    from transformer.run.recipes import (
        CORPUS_DEFAULTS,
        SHORT_RUN_SECONDS,
        SHORT_RUN_VOCAB_SIZE,
        TOY_DEFAULTS,
    )

    assert SHORT_RUN_VOCAB_SIZE < CORPUS_DEFAULTS["vocab_size"]

    def vocab(**fields):
        return RunConfig(**fields).vocab_size

    assert vocab(data="pairs.tsv", time_budget=300) == SHORT_RUN_VOCAB_SIZE
    assert vocab(data="pairs.tsv", time_budget=SHORT_RUN_SECONDS) == SHORT_RUN_VOCAB_SIZE
    assert vocab(data="pairs.tsv", time_budget=SHORT_RUN_SECONDS + 1) == CORPUS_DEFAULTS[
        "vocab_size"]
    assert vocab(data="pairs.tsv") == CORPUS_DEFAULTS["vocab_size"]
    assert vocab(time_budget=300) == TOY_DEFAULTS["vocab_size"]  # the toy corpus keeps its own
    assert vocab(data="pairs.tsv", time_budget=300, vocab_size=6000) == 6000
    # A saved run keeps the vocabulary it was trained with, whatever budget it resumes with.
    saved = RunConfig(data="pairs.tsv", time_budget=300).to_dict()
    assert config_from_record({**saved, "time_budget": 3600}).vocab_size == SHORT_RUN_VOCAB_SIZE
