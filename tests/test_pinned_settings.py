"""Settings that must reach a run, and what a run reuses, pinned where a
one-line slip would give a worse translator with no error (issue 66).

Each test pins what the user gets: the value a run trains with, the pairs a
split holds, the tokens a run reads. All are fast (no training).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from conftest import write_toy_tsv

from transformer.cli.train import _config_from_args, build_parser
from transformer.data import streamed
from transformer.data.loading import training_corpus
from transformer.data.source import CorpusSource
from transformer.data.tokenizers import build_tokenizers
from transformer.data.tsv import write_tsv
from transformer.run import distribute, fitting, recipes
from transformer.run.config import RunConfig
from transformer.run.recipes import CorpusFacts, resolve

# ---------------------------------------------------------------------------
# A user's falsy choice (0, False) is a choice, never "use the recipe's default".

# (command-line words, field, value): each value is falsy, each recipe default truthy.
REAL_FALSY = [
    (["--ema-momentum", "0"], "ema_momentum", 0.0),
    (["--no-shared-vocab"], "shared_vocab", False),
    (["--subword-sampling", "0"], "subword_sampling", 0.0),
    (["--no-fit-warmup"], "fit_warmup", False),
    (["--batch-tokens", "0"], "batch_tokens", 0),
]
TOY_FALSY = [
    (["--label-smoothing", "0"], "label_smoothing", 0.0),
    (["--no-fit-warmup"], "fit_warmup", False),
]


def _resolved(config):
    return resolve(config, CorpusFacts(1000, 9.0, lambda tokens, size: 30))


@pytest.mark.parametrize("words, field, value", REAL_FALSY, ids=[w[1] for w in REAL_FALSY])
def test_a_falsy_choice_on_a_real_corpus_is_kept_by_the_api_and_the_command_line(
        words, field, value):
    assert recipes.CORPUS_DEFAULTS.get(field, True)  # the default it must not fall back to
    api = RunConfig(data="pairs.tsv", **{field: value})
    cli = _config_from_args(build_parser().parse_args(["--data", "pairs.tsv", *words]))
    for config in (api, cli, _resolved(api), _resolved(cli)):
        assert getattr(config, field) == value and type(getattr(config, field)) is type(value)


@pytest.mark.parametrize("words, field, value", TOY_FALSY, ids=[w[1] for w in TOY_FALSY])
def test_a_falsy_choice_on_the_toy_corpus_is_kept(words, field, value):
    assert recipes.TOY_DEFAULTS[field]
    api = RunConfig(**{field: value})
    cli = _config_from_args(build_parser().parse_args(words))
    for config in (api, cli, _resolved(api)):
        assert getattr(config, field) == value


def test_falsy_model_choices_are_kept_and_tie_the_embeddings_to_the_vocabulary():
    toy = _config_from_args(build_parser().parse_args(["--dropout", "0"]))
    assert toy.model.dropout_rate == 0.0  # the toy preset's is 0.1
    real = _config_from_args(build_parser().parse_args(
        ["--data", "pairs.tsv", "--no-normalize-first", "--no-shared-vocab"]))
    assert real.model.normalize_first is False and real.model.tie_embeddings is False
    assert RunConfig(data="pairs.tsv").model.tie_embeddings is True  # the default ties them
    # A zero dropout given on a real corpus, and the real default, are zero.
    assert RunConfig(data="pairs.tsv").model.dropout_rate == 0.0


def test_the_default_precision_of_this_cpu_is_the_one_a_run_resolves(monkeypatch):
    monkeypatch.setattr(recipes, "default_precision", lambda: "mixed_bfloat16")
    assert _resolved(RunConfig(data="pairs.tsv")).precision == "mixed_bfloat16"
    chosen = _resolved(RunConfig(data="pairs.tsv", precision="float32"))
    assert chosen.precision == "float32"  # a choice stands


def test_the_corpus_recipe_sizes_epochs_and_batches_and_a_choice_stands():
    config = RunConfig(data="pairs.tsv")
    asked = []
    resolved = resolve(config, CorpusFacts(26_000, 9.0, lambda tokens, size: asked.append(
        (tokens, size)) or 815))
    assert resolved.epochs == 7 and resolved.batch_tokens == 32 * 9
    assert resolved.steps_per_epoch == 815 and asked == [(288, 32)]  # the first pass's batches
    small = resolve(config, CorpusFacts(1_000, 9.0, lambda tokens, size: 1))
    assert small.epochs == recipes.MAX_EPOCHS
    big = resolve(config, CorpusFacts(10_000_000, 9.0, lambda tokens, size: 1))
    assert big.epochs == recipes.MIN_EPOCHS
    budget = resolve(RunConfig(data="pairs.tsv", time_budget=60.0),
                     CorpusFacts(26_000, 9.0, lambda tokens, size: 1))
    assert budget.epochs == recipes.MAX_EPOCHS
    assert budget.vocab_size == recipes.corpus_vocab_size(60.0) < recipes.CORPUS_DEFAULTS[
        "vocab_size"]
    kept = resolve(RunConfig(data="pairs.tsv", epochs=3, batch_tokens=100),
                   CorpusFacts(26_000, 9.0, lambda tokens, size: 1))
    assert (kept.epochs, kept.batch_tokens) == (3, 100)


# ---------------------------------------------------------------------------
# What a run reuses must match what it would make.

def _pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    words = ["gato", "perro", "casa", "libro", "rojo", "verde", "come", "lee", "el", "la"]
    return [(" ".join(rng.choice(words, 3 + i % 6)), f"target {i} " + " ".join(
        rng.choice(words, 2 + i % 5)).upper()) for i in range(n)]


@pytest.fixture(scope="module")
def tsv(tmp_path_factory):
    path = tmp_path_factory.mktemp("pinned_tsv") / "pairs.tsv"
    write_tsv(_pairs(600), path)
    return path


def test_max_held_out_and_the_seed_reach_the_split_through_the_run_config(tsv, tmp_path):
    capped = training_corpus(RunConfig(data=str(tsv), max_held_out=7), record_dir=tmp_path / "a")
    assert len(capped.valid) == 7 and len(capped.test) == 7
    default = training_corpus(RunConfig(data=str(tsv)), record_dir=tmp_path / "b")
    assert len(default.valid) == len(default.test) == 30  # a twentieth of 600 sentences
    other_seed = training_corpus(RunConfig(data=str(tsv), seed=1), record_dir=tmp_path / "c")
    assert other_seed.test != default.test


def test_the_vocabulary_sample_is_seeded_by_the_run_and_capped(tsv, tmp_path, monkeypatch):
    def sample(seed, directory, size=50):
        config = RunConfig(data=str(tsv), vocab_sample=size, seed=seed)
        return training_corpus(config, record_dir=tmp_path / directory).vocab_pairs

    first, again = sample(0, "a"), sample(0, "b")
    assert 30 < len(first) <= 50 and first == again  # the held-out pairs drawn leave it
    assert sample(4, "c") != first
    training = set(map(tuple, training_corpus(RunConfig(data=str(tsv)),
                                              record_dir=tmp_path / "d").train))
    assert set(map(tuple, first)) <= training  # never a held-out pair
    # With the held-out pairs given apart, the seed draws the sample alone.
    held_out = write_toy_tsv(tmp_path, n_train=8, n_valid=8, n_test=8)
    given = [streamed.stream_tsv_corpus(CorpusSource(
        data=tsv, valid=held_out[1], test=held_out[2], seed=seed, vocab_sample=50)).vocab_pairs
        for seed in (0, 0, 4)]
    assert given[0] == given[1] != given[2]
    # The toy corpus (in memory, made smaller here) samples the same way: seeded by the run.
    from transformer.data import loading

    original = loading.generate_toy_corpus
    monkeypatch.setattr(loading, "generate_toy_corpus", lambda **kwargs: original(
        **{**kwargs, "n_train": 300, "n_valid": 4, "n_test": 4}))
    toy = [training_corpus(RunConfig(vocab_sample=40, seed=seed)) for seed in (2, 2, 3)]
    assert len(toy[0].train) == 300 and len(toy[0].vocab_pairs) == 40
    assert toy[0].vocab_pairs == toy[1].vocab_pairs != toy[2].vocab_pairs


@pytest.mark.parametrize("change", [
    {"source_column": 1, "target_column": 0},
    {"seed": 5},
    {"max_held_out": 3},
    {"valid_fraction": 0.2},
], ids=["columns", "seed", "max_held_out", "fraction"])
def test_a_recorded_scan_is_reused_only_for_the_same_settings(tsv, tmp_path, change):
    first = streamed.stream_tsv_corpus(CorpusSource(data=tsv), record_dir=tmp_path)
    changed = CorpusSource(data=tsv, **change)
    fresh = streamed.stream_tsv_corpus(changed)  # no record: what the settings give
    again = streamed.stream_tsv_corpus(changed, record_dir=tmp_path)
    assert (again.valid, again.test) == (fresh.valid, fresh.test)
    assert list(again.train) == list(fresh.train)
    assert (fresh.valid, fresh.test, list(fresh.train)) != (first.valid, first.test,
                                                            list(first.train))


@pytest.fixture(scope="module")
def tokenizers():
    return build_tokenizers(_pairs(300), vocab_size=120, kind="sentencepiece", shared=True)


def test_token_files_are_made_again_for_another_max_tokens_data_or_pairs(tsv, tokenizers,
                                                                         tmp_path):
    corpus = streamed.stream_tsv_corpus(CorpusSource(data=tsv))
    fingerprint = {"data": {"sha256": "a"}}

    def tokens(max_tokens, fp=fingerprint, pairs=corpus.train):
        made = fitting.training_tokens(tmp_path, pairs, tokenizers, max_tokens, fp)
        return made.context.to_list(), made.target.to_list(), made.max_tokens

    long_rows = tokens(32)
    short = tokens(6)
    # Sources of at most 6 tokens; targets of 6 inputs and 6 labels ([START] and [END] apart).
    assert short[2] == 6 and max(map(len, short[0])) == 6 and max(map(len, short[1])) == 7
    assert max(map(len, long_rows[0])) > 6 and max(map(len, long_rows[1])) > 7
    assert tokens(32) == long_rows  # back to the first: made again, not the short ones
    # Other data (another fingerprint) of the same pairs: made again, not opened.
    opened = []
    original = fitting._opened
    fitting._opened = lambda *args: opened.append(1) or original(*args)
    try:
        tokens(32)
        assert opened == [1]  # the same key opens the files
        tokens(32, fp={"data": {"sha256": "b"}})
        assert opened == [1]
        fewer = streamed.stream_tsv_corpus(CorpusSource(data=tsv, max_held_out=3))  # other pairs of the file
        rows = tokens(32, fp={"data": {"sha256": "b"}}, pairs=fewer.train)
        assert opened == [1] and len(rows[0]) == len(fewer.train) != len(corpus.train)
    finally:
        fitting._opened = original


# ---------------------------------------------------------------------------
# Subword sampling and the time budget


def _sampling_config(**changes):
    return RunConfig(**{"data": "a.tsv", "epochs": 20, "steps_per_epoch": 100,
                        "batch_tokens": 0, "batch_size": 32, "subword_sampling": 0.5,
                        **changes})


class _Pairs:
    variants = 1

    def __len__(self):
        return 3200  # 100 batches of 32 a pass


def test_a_budget_run_splits_off_its_first_epoch_to_sample_later():
    # A time-budget run sizes its epochs to the cap: it may sample, so its first
    # epoch is fitted apart and the decision taken at its end.
    budget = resolve(_sampling_config(epochs=None, time_budget=900.0),
                     CorpusFacts(3200, 9.0, lambda tokens, size: 100))
    assert fitting.may_sample(budget, _Pairs())
    exactly = _sampling_config(epochs=recipes.SAMPLING_MIN_PASSES)
    assert fitting.may_sample(exactly, _Pairs())  # on course for exactly enough passes
    assert fitting.expected_passes(exactly, _Pairs(), 100, 1.0) == recipes.SAMPLING_MIN_PASSES
    assert recipes.samples_subwords(recipes.SAMPLING_MIN_PASSES)
    assert not recipes.samples_subwords(recipes.SAMPLING_MIN_PASSES - 0.01)
    # On course for 12 passes of a 20-epoch budget run after 100 steps in 75 s of 900.
    assert fitting.expected_passes(budget, _Pairs(), 100, 75.0) == pytest.approx(12.0)


def test_the_trainer_decides_sampling_from_the_seconds_trained(tmp_path, monkeypatch):
    from transformer.run import trainer

    calls = []
    monkeypatch.setattr(fitting, "sample_pairs", lambda *args, **kwargs: calls.append(
        args) or types.SimpleNamespace(variants=recipes.SAMPLED_SEGMENTATIONS + 1))
    config = _sampling_config(time_budget=600.0)
    session = types.SimpleNamespace(run_dir=tmp_path, write_dir=tmp_path)
    data = types.SimpleNamespace(train_tokens=_Pairs(), corpus=types.SimpleNamespace(
        train=["pair"]), tokenizers="tokenizers")
    # After 100 steps in 50 s of a 600 s budget: 12 passes, so the later passes sample.
    trainer._training_pairs(session, config, data, data.train_tokens, 100, 50.0)
    assert len(calls) == 1
    _pairs_, _tok, max_tokens, alpha, variants, seed, from_pass, best = calls[0][:8]
    assert (alpha, variants, from_pass) == (0.5, recipes.SAMPLED_SEGMENTATIONS, 1)
    assert max_tokens == config.resolved_max_tokens and best is data.train_tokens


def test_multi_worker_runs_count_the_chiefs_seconds_only(monkeypatch):
    """Two workers: the chief trained 10 s, the other 7 s. Both count 10, so a
    budget stops them after the same step (not after 1/2 of it)."""
    contributions = {}

    def run_as(chief, seconds):
        monkeypatch.setattr(distribute, "is_multi_worker", lambda strategy: True)
        monkeypatch.setattr(distribute, "is_chief", lambda strategy: chief)
        # The collective sums what every worker passes; the other's part was recorded.
        monkeypatch.setattr(distribute, "worker_sum", lambda strategy: (
            lambda values: [values[0] + contributions.get(not chief, 0.0)]))
        agree = distribute.chief_clock(object())
        contributions[chief] = agree(seconds) - contributions.get(not chief, 0.0)
        return agree(seconds)

    chief_counts = run_as(True, 10.0)
    other_counts = run_as(False, 7.0)
    assert chief_counts == pytest.approx(10.0) and other_counts == pytest.approx(10.0)
    monkeypatch.setattr(distribute, "is_multi_worker", lambda strategy: False)
    assert distribute.chief_clock(object()) is None  # one process keeps its own clock


def test_a_falsy_change_on_resume_is_kept(tmp_path):
    """`--resume --patience 0 --no-restore-best-weights` turns both off, by
    the API and the command line alike; options not given keep their saved values."""
    from transformer.run.config import for_resume, resumed_with, write_config

    saved = _resolved(RunConfig(data="pairs.tsv", output_dir=str(tmp_path), patience=3,
                                restore_best_weights=True, time_budget=600.0))
    changed = for_resume(saved, patience=0, restore_best_weights=False)
    assert (changed.patience, changed.restore_best_weights) == (0, False)
    api = resumed_with(saved, RunConfig(data="pairs.tsv", output_dir=str(tmp_path), patience=0,
                                        restore_best_weights=False, time_budget=600.0))
    assert (api.patience, api.restore_best_weights, api.epochs) == (0, False, saved.epochs)
    write_config(tmp_path, saved, 100, 100, {})
    cli = _config_from_args(build_parser().parse_args(
        ["--output-dir", str(tmp_path), "--resume", "--patience", "0",
         "--no-restore-best-weights"]))
    assert (cli.patience, cli.restore_best_weights) == (0, False)
    assert (cli.time_budget, cli.epochs, cli.data) == (600.0, saved.epochs, "pairs.tsv")


def test_fixed_size_batches_take_a_new_seeded_order_each_pass(tokenizers):
    """Pass after pass, every pair once, in an order that changes with the pass
    and the seed (a run that saw the same order every pass learns worse)."""
    from transformer.data.batching import fixed_batches_from_tokens, tokenize_pairs

    pairs = [(f"gato {'perro ' * i}casa", f"cat {i}") for i in range(12)]
    tokens = tokenize_pairs(pairs, tokenizers, 32)
    sources = [tuple(row) for row in tokens.context.to_list()]
    assert len(set(sources)) == 12

    def passes(seed, count=2):
        stream = fixed_batches_from_tokens(tokens, 4, seed=seed)
        order = []
        for (context, _), _ in stream.take(3 * count):
            order += [sources.index(tuple(int(t) for t in row if t)) for row in context.numpy()]
        return [order[12 * p: 12 * (p + 1)] for p in range(count)]

    first, second = passes(0)
    assert sorted(first) == sorted(second) == list(range(12))
    assert first != second
    assert passes(0) == [first, second]
    assert passes(1)[0] != first
