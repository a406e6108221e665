"""The time budget chooses the model (transformer/run/sizing.py): the presets,
the size rule at real-run settings, the calibration, and what overrides them."""

from __future__ import annotations

import dataclasses
import json
import logging
import math

import pytest

from transformer.model_config import PAPER_PRESETS, PRESETS, TransformerConfig
from transformer.run import sizing
from transformer.run.config import RunConfig
from transformer.run.recipes import CorpusFacts, resolve
from transformer.run.sizing import (
    AUTO_PRESET,
    SIZE_LADDER,
    TOKENS_PER_PARAMETER,
    Speed,
    body_parameters,
    parameter_count,
    token_cost,
)

# A speed of the kind measured on one CPU core: 40 ms a step besides 2e-11 s a
# multiply-add per target token (about 5,000 tokens a second for the tutorial's size).
ONE_CORE = Speed(step_seconds=0.04, seconds_per_cost=2.5e-11)


def _resolved(minutes, pairs=26_000, mean_tokens=12.0, speed=ONE_CORE, **choices):
    """The resolved config, and the (config, preset) of each step time measured."""
    calls = []

    def measure_step(config, preset):
        calls.append((config, preset))
        model = sizing.candidate_model(preset, config.model)
        return speed.step(token_cost(model, 4000, mean_tokens), config.batch_tokens)

    config = RunConfig(data="pairs.tsv", precision="float32",
                       time_budget=None if minutes is None else minutes * 60.0, **choices)
    # A pass's batches of the token budget, as the corpus would give them.
    def pass_batches(batch_tokens, batch_size):
        return math.ceil(pairs * mean_tokens / batch_tokens)

    facts = CorpusFacts(pairs, mean_tokens, pass_batches, vocab_size=4000,
                        measure_step=measure_step)
    return resolve(config, facts), calls


def test_paper_presets_have_the_papers_sizes_and_parameter_counts():
    base, big = PRESETS["base"], PRESETS["big"]
    assert (base.num_layers, base.d_model, base.num_heads, base.dff, base.dropout_rate) == (
        6, 512, 8, 2048, 0.1)
    assert (big.num_layers, big.d_model, big.num_heads, big.dff, big.dropout_rate) == (
        6, 1024, 16, 4096, 0.3)
    # Table 3 of the paper: 65 and 213 million parameters, with one shared
    # vocabulary of about 37,000 pieces and tied embeddings (section 3.4).
    for name, paper in (("base", 65e6), ("big", 213e6)):
        tied = dataclasses.replace(PRESETS[name], tie_embeddings=True)
        assert parameter_count(tied, 37_000, 37_000) == pytest.approx(paper, rel=0.05)


@pytest.mark.parametrize("tie,pre", [(False, False), (True, True), (False, True)])
def test_parameter_count_is_the_built_models(tie, pre):
    from transformer.model import build_model

    for name in ("toy", "small"):
        config = dataclasses.replace(PRESETS[name], tie_embeddings=tie, normalize_first=pre,
                                     num_decoder_layers=1)
        target = 300 if tie else 250
        model = build_model(config, 300, target)
        assert parameter_count(config, 300, target) == model.count_params()


def test_the_ladder_grows_in_parameters_and_cost():
    models = [PRESETS[name] for name in SIZE_LADDER]
    params = [body_parameters(model) for model in models]
    costs = [token_cost(model, 4000, 20) for model in models]
    assert params == sorted(params) and len(set(params)) == len(params)
    assert costs == sorted(costs) and len(set(costs)) == len(costs)


def test_a_paper_preset_keeps_the_papers_regularisation_on_real_text():
    for name in PAPER_PRESETS:
        config = RunConfig(data="pairs.tsv", preset=name)
        assert config.label_smoothing == 0.1
        assert config.model.dropout_rate == PRESETS[name].dropout_rate
        assert config.learning_rate == pytest.approx((PRESETS[name].d_model * 4000) ** -0.5)
    tutorial = RunConfig(data="pairs.tsv", preset="tutorial")
    assert tutorial.label_smoothing == 0.0 and tutorial.model.dropout_rate == 0.0
    given = RunConfig(data="pairs.tsv", preset="base", label_smoothing=0.0)
    assert given.label_smoothing == 0.0  # a user's 0 is kept


def test_the_budget_chooses_a_size_that_never_shrinks_as_it_grows():
    chosen = []
    for minutes in (1, 5, 10, 15, 30, 45, 90, 120, 240, 720, 1440):
        config, _ = _resolved(minutes, pairs=1_000_000, mean_tokens=25.0)
        chosen.append(SIZE_LADDER.index(config.preset))
    assert chosen == sorted(chosen)
    assert len(set(chosen)) >= 3  # the budget does choose


def test_a_day_on_five_million_pairs_gets_a_larger_model_than_five_minutes_on_38000():
    short, _ = _resolved(5, pairs=38_000, mean_tokens=25.0)
    long, _ = _resolved(24 * 60, pairs=5_000_000, mean_tokens=25.0)
    assert SIZE_LADDER.index(long.preset) > SIZE_LADDER.index(short.preset)
    assert body_parameters(long.model) > body_parameters(short.model)


def test_each_boundary_is_where_the_rule_says():
    """Just under a size's threshold of tokens per parameter the smaller size is
    chosen; at it, that size."""
    base = RunConfig(data="pairs.tsv").model
    batch_tokens = round(32 * 12.0)
    for larger in SIZE_LADDER[1:]:
        model = sizing.candidate_model(larger, base)
        rate = sizing.RUN_SPEED_SHARE * ONE_CORE.tokens_per_second(
            token_cost(model, 4000, 12.0), batch_tokens)
        seconds = TOKENS_PER_PARAMETER * body_parameters(model) / rate  # a first pass
        at, _ = _resolved(seconds * 1.001 / 60, pairs=50_000_000)
        under, _ = _resolved(seconds * 0.999 / 60, pairs=50_000_000)
        assert at.preset == larger, (larger, seconds)
        assert SIZE_LADDER.index(under.preset) < SIZE_LADDER.index(larger)


def _leaves_small(choice):
    """The last budget (minutes) at which `choice(minutes)` trains `small` and the
    first at which it does not, a hundredth of a minute apart, within a day."""
    low, high = 1.0, 24 * 60.0
    assert choice(low).preset == "small" and choice(high).preset != "small"
    while high - low > 0.01:
        middle = (low + high) / 2
        low, high = (middle, high) if choice(middle).preset == "small" else (low, middle)
    return choice(low), choice(high)


def test_on_a_corpus_read_many_times_the_boundary_counts_repeats_for_less():
    """On 400,000 pairs read up to 12 times, the tutorial's size is chosen only
    once the budget's tokens, repeated passes discounted, reach the threshold:
    later than the same tokens of a first pass would (and before the passes
    alone would choose it)."""
    def choice(minutes):
        config, _ = _resolved(minutes, pairs=400_000, epochs=12)
        return config

    under, at = _leaves_small(choice)
    assert at.preset == "tutorial"
    rows = {"under": under.size_rule["candidates"]["tutorial"],
            "at": at.size_rule["candidates"]["tutorial"]}
    assert not rows["under"]["fed"] and rows["at"]["fed"]
    assert rows["at"]["tokens_per_parameter"] == pytest.approx(TOKENS_PER_PARAMETER, abs=0.01)
    corpus_tokens = at.size_rule["corpus_tokens"]
    assert rows["at"]["planned_tokens"] > 3 * corpus_tokens  # repeats decide here
    assert rows["at"]["planned_tokens"] > 1.1 * TOKENS_PER_PARAMETER * \
        rows["at"]["body_parameters"]
    assert rows["at"]["passes"] < sizing.PASSES


def test_a_small_corpus_that_the_smaller_size_would_finish_early_feeds_a_larger_one():
    """26,000 pairs of 12 tokens (a corpus like ui-es-en): the tutorial's size
    is chosen once the budget lets it make `PASSES` passes, though its
    effective tokens per body parameter stay far below the threshold, and no
    size is chosen whose body parameters exceed what the corpus can feed
    (`CORPUS_TOKENS_PER_PARAMETER`), however long the budget."""
    def choice(minutes):
        config, _ = _resolved(minutes, pairs=26_000)
        return config

    under, at = _leaves_small(choice)
    under = under.size_rule["candidates"]["tutorial"]
    assert at.preset == "tutorial"
    row = at.size_rule["candidates"]["tutorial"]
    assert not under["fed"] and row["fed"]
    assert row["passes"] == pytest.approx(sizing.PASSES, abs=0.02)  # the passes decided
    assert row["tokens_per_parameter"] < TOKENS_PER_PARAMETER / 2
    day = choice(24 * 60)
    corpus_tokens = day.size_rule["corpus_tokens"]
    assert corpus_tokens / body_parameters(day.model) >= sizing.CORPUS_TOKENS_PER_PARAMETER
    larger = SIZE_LADDER[SIZE_LADDER.index(day.preset) + 1]
    assert corpus_tokens / day.size_rule["candidates"][larger]["body_parameters"] < \
        sizing.CORPUS_TOKENS_PER_PARAMETER
    # The passes are those the run's epochs allow: ten passes never make PASSES.
    capped, _ = _resolved(24 * 60, pairs=26_000, epochs=10)
    assert capped.preset == "small"
    assert max(row["passes"] for row in capped.size_rule["candidates"].values()) <= 10.5


def test_no_size_plans_more_updates_than_the_runs_epochs_allow():
    """With a budget the run still stops at its epochs' last step (20 passes):
    a budget longer than the tutorial size needs for them plans no more tokens
    and no larger model than one that just lets it reach them."""
    config, _ = _resolved(60, pairs=26_000)
    assert config.epochs == 20
    most = config.epochs * config.steps_per_epoch * config.size_rule["batch_tokens"]
    assert config.size_rule["max_steps"] == config.epochs * config.steps_per_epoch
    rows = config.size_rule["candidates"]
    assert all(row["planned_tokens"] <= most for row in rows.values())
    capped = [p for p, row in rows.items() if row["planned_tokens"] == most]
    assert "small" in capped  # its 60 minutes would pass over the corpus more than 20 times
    day, _ = _resolved(24 * 60, pairs=26_000)
    assert day.preset == config.preset
    assert day.size_rule["candidates"]["small"]["planned_tokens"] == most


def test_a_small_corpus_caps_the_size():
    """Repeated passes count for less (Muennighoff et al., 2023): a day on 2,000
    pairs gets a smaller model than a day on 5 million."""
    big_corpus, _ = _resolved(24 * 60, pairs=5_000_000)
    tiny_corpus, _ = _resolved(24 * 60, pairs=2_000)
    assert SIZE_LADDER.index(tiny_corpus.preset) < SIZE_LADDER.index(big_corpus.preset)
    assert sizing.effective_tokens(100, 1000) == 100  # a first pass counts whole
    # However long the run, repeats add at most REPEAT_DECAY passes' worth.
    assert sizing.effective_tokens(1e12, 1000) == pytest.approx(
        1000 * (1 + sizing.REPEAT_DECAY))


def test_a_faster_machine_gets_a_larger_model_in_the_same_minutes():
    slow, _ = _resolved(45, pairs=1_000_000)
    fast, _ = _resolved(45, pairs=1_000_000, speed=Speed(0.004, 2.5e-12))
    assert SIZE_LADDER.index(fast.preset) > SIZE_LADDER.index(slow.preset)


def test_the_choice_is_complete_and_recorded():
    config, calls = _resolved(600, pairs=5_000_000)  # two sizes measured
    assert calls and all(c.precision == "float32" and c.batch_tokens for c, _ in calls)
    record = config.size_rule
    assert config.preset in SIZE_LADDER and record["preset"] == config.preset
    assert config.model.d_model == PRESETS[config.preset].d_model
    assert config.model.num_layers == PRESETS[config.preset].num_layers
    # The corpus recipe's model settings and the chosen width's peak rate.
    assert config.model.normalize_first and config.model.tie_embeddings
    assert config.model.dropout_rate == 0.0
    assert config.learning_rate == pytest.approx((config.model.d_model * 4000) ** -0.5)
    # The step times measured, each as the machine gave it; every size's figures.
    assert set(record["step_seconds"]) == {preset for _, preset in calls}
    for preset, seconds in record["step_seconds"].items():
        cost = token_cost(PRESETS[preset], 4000, 12.0)
        assert seconds == pytest.approx(ONE_CORE.step(cost, record["batch_tokens"]), rel=1e-3)
    assert set(record["candidates"]) == set(SIZE_LADDER)
    for preset, row in record["candidates"].items():  # estimates through the measured
        cost = token_cost(PRESETS[preset], 4000, 12.0)
        assert row["measured"] == (preset in record["step_seconds"])
        assert row["tokens_per_second"] == pytest.approx(  # the share a run reaches
            sizing.RUN_SPEED_SHARE * ONE_CORE.tokens_per_second(cost, record["batch_tokens"]),
            rel=1e-3)
    assert len(calls) == 2
    assert config.preset in record["reason"] and "600 min" in record["reason"]
    json.dumps(config.to_dict())  # config.json can hold it
    assert RunConfig.from_dict(config.to_dict()) == config  # and gives it back unchanged


def test_overrides_win_and_nothing_is_measured():
    for choices in ({"preset": "tutorial"}, {"preset": "medium"}, {"preset": "base"}):
        config, calls = _resolved(45, pairs=1_000_000, **choices)
        assert calls == [] and config.size_rule is None and config.preset == choices["preset"]
    from transformer.cli.train import config_of_choices

    config = config_of_choices({"data": "pairs.tsv", "num_layers": 2, "time_budget": 2700.0})
    assert config.preset == "tutorial" and config.model.num_layers == 2
    resolved = resolve(config, CorpusFacts(1000, 12.0, lambda tokens, size: 10, 4000,
                                           measure_step=lambda *args: pytest.fail("measured")))
    assert resolved.model.num_layers == 2 and resolved.size_rule is None


def test_without_a_budget_or_with_many_workers_the_reference_is_trained_unmeasured():
    config, calls = _resolved(None)
    assert calls == [] and config.preset == "tutorial"
    assert "no --time-budget" in config.size_rule["reason"]
    workers, calls = _resolved(45, strategy="multi-worker")
    assert calls == [] and workers.preset == "tutorial"
    assert "multi-worker" in workers.size_rule["reason"]
    offered = resolve(RunConfig(data="pairs.tsv", precision="float32", time_budget=600.0),
                      CorpusFacts(26_000, 12.0, lambda tokens, size: 100))
    assert offered.preset == "tutorial" and "no speed measured" in offered.size_rule["reason"]


def test_the_toy_corpus_keeps_its_preset():
    assert RunConfig().preset == "toy" and RunConfig(time_budget=60.0).preset == "toy"


def test_a_resolved_config_resolves_to_itself():
    config, _ = _resolved(45, pairs=1_000_000)
    again = resolve(config, CorpusFacts(1_000_000, 12.0, lambda tokens, size: 100, 4000,
                                        measure_step=lambda *args: pytest.fail("measured")))
    assert again == config


def test_only_the_sizes_the_choice_needs_are_measured():
    """A short budget measures the reference size alone; a size is measured only
    when the one below it was fed and it could be fed at that one's speed; every
    choice is the one that measuring every size would give."""
    def everything_measured(minutes, pairs):
        config, _ = _resolved(minutes, pairs=pairs)
        rows = {p: sizing.RUN_SPEED_SHARE * ONE_CORE.tokens_per_second(
                    token_cost(PRESETS[p], 4000, 12.0), config.size_rule["batch_tokens"])
                for p in SIZE_LADDER}
        most = config.epochs * config.steps_per_epoch * config.size_rule["batch_tokens"]
        fed = [p for p in SIZE_LADDER if sizing.candidate_row(
            PRESETS[p], rows[p], minutes * 60.0, round(pairs * 12.0), most)["fed"]]
        return fed[-1] if fed else SIZE_LADDER[0]

    short, calls = _resolved(5, pairs=38_000)
    assert [preset for _, preset in calls] == ["tutorial"]
    for minutes, pairs in ((5, 38_000), (15, 300_000), (45, 1_000_000), (120, 1_400_000),
                           (1440, 5_000_000), (1440, 2_000), (60, 26_000), (90, 80_000)):
        config, calls = _resolved(minutes, pairs=pairs)
        measured = [preset for _, preset in calls]
        assert measured == list(SIZE_LADDER[1:1 + len(measured)])  # climbed in order
        assert config.preset == everything_measured(minutes, pairs), (minutes, pairs)
        if config.preset != SIZE_LADDER[-1]:  # at most one size above the choice
            assert len(measured) <= SIZE_LADDER.index(config.preset) + 1


def test_measure_step_times_real_steps(monkeypatch):
    """The step time is measured, not assumed: real steps of the size asked
    (a one-layer one here, to keep the test fast, not the run's own model) at the
    run's batch shape."""
    monkeypatch.setitem(PRESETS, "one_layer_16", TransformerConfig(
        num_layers=1, d_model=16, num_heads=2, dff=64, max_length=32))
    from transformer.run import calibration

    monkeypatch.setattr(calibration, "CALIBRATION_STEPS", 2)
    built = []
    real_build = calibration.build_model

    def recorded(model, *args):
        built.append(model.d_model)
        return real_build(model, *args)

    monkeypatch.setattr(calibration, "build_model", recorded)
    config = RunConfig(data="pairs.tsv", precision="float32", time_budget=60.0, batch_tokens=96)
    assert config.model.d_model != 16
    seconds = calibration.measure_step(config, "one_layer_16", 200, 8.0)
    assert built == [16]
    assert 0 < seconds < 60


def test_a_budget_run_records_its_choice_and_a_resume_keeps_it(tmp_path, monkeypatch, caplog):
    """At real-run settings (a TSV corpus, a time budget, no model option): the
    trainer measures once, trains the chosen size, records it in config.json
    and says why in one line of the log; the resume trains the same model
    without measuring again."""
    from conftest import write_toy_tsv

    from transformer import rundir
    from transformer.run import train, trainer

    (tmp_path / "data").mkdir()
    train_tsv, valid_tsv, test_tsv = write_toy_tsv(tmp_path / "data", n_train=300)
    # The ladder's two smallest steps here are toy sizes, so the test trains fast.
    monkeypatch.setattr(sizing, "SIZE_LADDER", ("toy", "small"))
    measured = []

    def measure_step(config, preset, vocab_size, mean_tokens):
        measured.append((config.precision, preset, vocab_size, mean_tokens))
        return 0.5  # too slow for `small`

    monkeypatch.setattr(trainer, "measure_step", measure_step)
    config = RunConfig(data=str(train_tsv), valid=str(valid_tsv), test=str(test_tsv),
                       output_dir=str(tmp_path / "run"), time_budget=1.0, vocab_size=120,
                       precision="float32", eval_beam_size=1)
    assert config.preset == AUTO_PRESET
    with caplog.at_level(logging.INFO, logger="transformer"):
        first = train(config, verbose=0, export=False)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Model size:")]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith("Model size: toy") and "small would get" in said[0], said
    saved = json.loads((first.run_dir / rundir.CONFIG_FILE).read_text(encoding="utf-8"))
    assert measured == [("float32", "small", 120, measured[0][3])]
    assert saved["preset"] == "toy" and saved["model"]["d_model"] == PRESETS["toy"].d_model
    assert saved["model"]["max_length"] == PRESETS["tutorial"].max_length  # sized the tokens
    assert saved["size_rule"]["step_seconds"] == {"small": 0.5}
    assert saved["size_rule"]["preset"] == "toy"

    monkeypatch.setattr(trainer, "measure_step", lambda *args: pytest.fail("measured again"))
    resumed = train(config.replace(time_budget=3.0), resume=True, verbose=0, export=False)
    again = json.loads((resumed.run_dir / rundir.CONFIG_FILE).read_text(encoding="utf-8"))
    assert again["model"] == saved["model"] and again["size_rule"] == saved["size_rule"]
    assert resumed.final_step >= first.final_step
