"""Tests of transformer.run.config: RunConfig's defaults, checks and resume changes."""

from __future__ import annotations

import pytest

from transformer.run.config import config_from_record, for_resume, resumed_with


def test_run_config_round_trip_and_defaults():
    from transformer.model_config import PRESETS
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS

    config = RunConfig(output_dir="runs/x", batch_size=16)
    assert (config.preset, config.epochs, config.warmup_steps) == (
        TOY_DEFAULTS["preset"], TOY_DEFAULTS["epochs"], TOY_DEFAULTS["warmup_steps"])
    assert config.model == PRESETS["toy"]
    assert RunConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["model"]["d_model"] == PRESETS["toy"].d_model
    assert str(config.run_dir) == "runs/x"
    assert str(RunConfig().run_dir) == "runs/toy"
    real = RunConfig(data="corpora/por.tsv")
    assert real.preset == CORPUS_DEFAULTS["preset"] and real.epochs is None  # sized later
    assert str(real.run_dir) == "runs/por"
    assert str(RunConfig(dataset="ted_hrlr_translate/pt_to_en").run_dir) == "runs/ted_hrlr_pt_to_en"
    assert RunConfig().resolved_max_tokens == PRESETS["toy"].max_length


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"preset": "huge"}, "preset"),
        ({"precision": "float8"}, "precision"),
        ({"strategy": "tpu"}, "strategy"),
        ({"dataset": "wmt"}, "dataset"),
        ({"batch_size": 0}, "batch_size"),
        ({"label_smoothing": 1.5}, "label_smoothing"),
        ({"learning_rate": 0.0}, "learning rate in"),
        ({"learning_rate": "fast"}, "learning rate in"),
        ({"average_checkpoints": 0}, "average_checkpoints"),
        ({"ema_momentum": 1.0}, "ema_momentum"),
        ({"ema_momentum": -0.1}, "ema_momentum"),
        ({"ema_momentum": 0.999, "average_checkpoints": 5}, "both average the weights"),
        ({"time_budget": 0}, "time_budget"),
        ({"time_budget": float("inf")}, "time_budget"),
        ({"time_budget": "10m"}, "time_budget"),
        ({"max_tokens": 1000}, "max_tokens"),
        ({"max_tokens": 1}, "max_tokens"),
        ({"data": "a.tsv", "source_column": 1, "target_column": 1}, "same column"),
        ({"valid": "v.tsv"}, "without `data`"),
        ({"data": "a.tsv", "tokenizer": "wordpiece", "shared_vocab": True}, "wordpiece"),
        ({"data": "a.tsv", "subword_sampling": 1.0}, "subword_sampling"),
        ({"data": "a.tsv", "tokenizer": "wordpiece", "subword_sampling": 0.5},
         "only SentencePiece draws"),
        ({"data": "a.tsv", "subword_model": "bpe", "subword_sampling": 0.5},
         "expected subword_model='unigram'"),
    ],
)
def test_run_config_rejects_bad_values(kwargs, match):
    from transformer.run.config import RunConfig

    with pytest.raises(ValueError, match=match):
        RunConfig(**kwargs)


def test_for_resume_allows_only_some_changes():
    from transformer.run.config import RunConfig

    saved = RunConfig(output_dir="runs/x", epochs=2, steps_per_epoch=10)
    resumed = for_resume(saved, epochs=5, checkpoint_every=7, d_model=saved.model.d_model,
                               time_budget=60.0)
    assert (resumed.epochs, resumed.checkpoint_every, resumed.steps_per_epoch) == (5, 7, 10)
    assert resumed.time_budget == 60.0
    with pytest.raises(ValueError, match=r"Cannot change `d_model` when resuming.*d_model=64"):
        for_resume(saved, d_model=32)
    with pytest.raises(ValueError, match="Cannot change `seed`"):
        for_resume(saved, seed=3)


def test_resumed_with_keeps_what_the_corpus_sized_and_refuses_other_changes():
    """The config a resumed run starts from: the saved one with the new run's
    resumable settings; the fields the new config leaves to the corpus (None)
    keep the saved values."""
    from transformer.run.config import RunConfig

    saved = RunConfig(data="pairs.tsv", output_dir="runs/x", epochs=7, steps_per_epoch=858,
                      batch_tokens=357)
    asked = RunConfig(data="pairs.tsv", output_dir="runs/x", checkpoint_every=50)
    resumed = resumed_with(saved, asked)
    assert (resumed.epochs, resumed.steps_per_epoch, resumed.batch_tokens) == (7, 858, 357)
    assert resumed.checkpoint_every == 50
    assert resumed_with(saved, RunConfig(data="pairs.tsv", output_dir="runs/x",
                                        epochs=9)).epochs == 9
    with pytest.raises(ValueError, match="Cannot change `batch_tokens`"):
        resumed_with(saved, RunConfig(data="pairs.tsv", output_dir="runs/x", batch_tokens=500))


def test_configs_written_before_the_tokenizer_choice_load_as_wordpiece():
    from transformer.run.config import RunConfig

    saved = RunConfig(dataset="ted_hrlr_translate/pt_to_en", epochs=2, warmup_steps=10,
                      tokenizer="wordpiece").to_dict()
    for key in ("tokenizer", "batch_tokens", "eval_beam_size"):
        saved.pop(key)
    saved["format_version"] = 1
    saved["lower_case"] = True
    old = config_from_record(saved)
    assert (old.tokenizer, old.batch_tokens, old.lower_case) == ("wordpiece", 0, True)


def test_configs_written_before_the_peak_and_averaging_keep_the_paper_schedule():
    from transformer.run.config import RunConfig

    saved = RunConfig(dataset="ted_hrlr_translate/pt_to_en", epochs=2, warmup_steps=4000).to_dict()
    for key in ("learning_rate", "average_checkpoints"):
        saved.pop(key)
    saved["format_version"] = 2
    old = config_from_record(saved)
    assert (old.learning_rate, old.peak_learning_rate, old.average_checkpoints) == (
        "paper", None, 1)
    assert old.warmup_steps == 4000


def test_configs_written_before_the_moving_average_keep_the_final_weights():
    from transformer.run.config import RunConfig

    saved = RunConfig(data="a.tsv", ema_momentum=0.999).to_dict()
    assert config_from_record(saved).ema_momentum == 0.999
    saved.pop("ema_momentum")
    saved["format_version"] = 7
    assert config_from_record(saved).ema_momentum == 0.0
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS

    assert RunConfig(data="a.tsv").ema_momentum == CORPUS_DEFAULTS["ema_momentum"] > 0
    assert RunConfig().ema_momentum == TOY_DEFAULTS["ema_momentum"] == 0.0
    # Averaging the last checkpoints replaces the default moving average.
    assert RunConfig(data="a.tsv", average_checkpoints=5).ema_momentum == 0.0
    with pytest.raises(ValueError, match="Cannot change `ema_momentum`"):
        for_resume(RunConfig(data="a.tsv", output_dir="runs/x"), ema_momentum=0.99)


def test_real_corpora_sample_subwords_with_a_unigram_vocabulary_only():
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS

    assert RunConfig(data="a.tsv").subword_sampling == CORPUS_DEFAULTS["subword_sampling"] > 0
    assert RunConfig().subword_sampling == 0.0  # the toy corpus
    assert RunConfig(data="a.tsv", subword_model="bpe").subword_sampling == 0.0
    assert RunConfig(data="a.tsv", tokenizer="wordpiece").subword_sampling == 0.0
    assert RunConfig(data="a.tsv", subword_sampling=0.0).subword_sampling == 0.0


def test_configs_written_before_subword_sampling_train_on_the_best_split():
    from transformer.run.config import RunConfig

    saved = RunConfig(data="a.tsv", subword_sampling=0.3).to_dict()
    assert config_from_record(saved).subword_sampling == 0.3
    saved.pop("subword_sampling")
    saved["format_version"] = 8
    assert config_from_record(saved).subword_sampling == 0.0


def test_a_shared_vocabulary_ties_the_embeddings():
    from transformer.run.config import RunConfig

    shared = RunConfig(data="a.tsv", shared_vocab=True)
    assert shared.model.tie_embeddings
    assert RunConfig.from_dict(shared.to_dict()) == shared
    # WordPiece learns one vocabulary per language, so it is not shared by default.
    assert not RunConfig(data="a.tsv", tokenizer="wordpiece").shared_vocab
    # The model's field follows the run's choice, both ways.
    untied = RunConfig(data="a.tsv", shared_vocab=False, model=shared.model)
    assert not untied.model.tie_embeddings


def test_configs_written_before_shared_vocabularies_and_fitted_warmups_keep_neither():
    from transformer.run.config import RunConfig

    saved = RunConfig(dataset="ted_hrlr_translate/pt_to_en", epochs=2).to_dict()
    for key in ("shared_vocab", "fit_warmup"):
        saved.pop(key)
    saved["model"].pop("tie_embeddings")
    saved["format_version"] = 4
    old = config_from_record(saved)
    assert (old.shared_vocab, old.fit_warmup, old.model.tie_embeddings) == (False, False, False)


def test_the_toy_corpus_learns_bpe_and_older_configs_keep_unigram():
    from transformer.run.config import RunConfig

    toy = RunConfig()
    assert toy.subword_model == "bpe"
    assert toy.tokenizer_learn_params == {"model_type": "bpe"}
    assert RunConfig(data="a.tsv").subword_model == "unigram"
    assert RunConfig(data="a.tsv", tokenizer="wordpiece").tokenizer_learn_params is None
    saved = toy.to_dict()
    saved.pop("subword_model")
    saved["format_version"] = 5
    assert config_from_record(saved).subword_model == "unigram"
    with pytest.raises(ValueError, match="`subword_model`.*Received: subword_model='bpf'"):
        RunConfig(subword_model="bpf")


def test_runs_that_split_off_data_before_format_12_are_not_resumed(tmp_path):
    from transformer.run.config import RunConfig, check_resumable
    from transformer.rundir import RunDirError

    split = {**RunConfig(data="a.tsv").to_dict(), "format_version": 11}
    with pytest.raises(RunDirError, match="format 11.*split their validation and test pairs"):
        check_resumable(tmp_path, split)
    given = {**RunConfig(data="a.tsv", valid="v.tsv", test="t.tsv").to_dict(),
             "format_version": 11}
    check_resumable(tmp_path, given)  # its held-out pairs are its files
    check_resumable(tmp_path, {**split, "format_version": 12})
    # Such a config is still read (to translate with the run), with today's defaults.
    assert config_from_record(split).max_held_out == RunConfig().max_held_out
