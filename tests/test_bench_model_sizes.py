"""bench/model_sizes.py: collecting every size's runs (tokens a second from the
runs' own log lines, tokens per body parameter), the envelope and the figure.
Nothing is trained here."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path[:0] = [str(BENCH)]

import model_sizes  # noqa: E402


def _run(runs: Path, corpus: str, size: str, minutes: float, seed: int, bleu: float,
         rates: list[int], updates: int = 100, pairs: int = 1_000_000) -> None:
    """A finished run of budget_curve.py: its results file, config.json and log
    (by default a small part of a pass over the corpus)."""
    from transformer.run.config import RunConfig

    run_dir = runs / size / f"{corpus}_{minutes:g}min_s{seed}"
    run_dir.mkdir(parents=True)
    config = RunConfig(data="train.tsv", preset=size, batch_tokens=384)
    (run_dir / "config.json").write_text(json.dumps(config.to_dict()), encoding="utf-8")
    lines = [f"Corpus {corpus}/train.tsv: {pairs} training, 10 validation, 10 test pairs."]
    lines += [f"Step {i}: 9.00 steps a second ({rate:,} target tokens a second), loss 3.0."
             for i, rate in enumerate(rates)]
    (run_dir.parent / f"{run_dir.name}.log").write_text("\n".join(lines), encoding="utf-8")
    command = (f"taskset -c 1 {sys.executable} /somewhere/train.py --data /data/{corpus}/train.tsv "
               f"--output-dir {run_dir}")
    record = {"label": size, "runs": [{"minutes": minutes, "seed": seed, "run_dir": str(run_dir),
                                       "command": command,
                                       "bleu_lc": bleu, "updates": updates,
                                       "train_seconds": minutes * 60}]}
    path = model_sizes.results_path(runs, corpus, minutes, size, seed)
    path.write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def runs(tmp_path):
    _run(tmp_path, "ui", "tutorial", 5, 0, 34.0, [3000, 4000])
    _run(tmp_path, "ui", "tutorial", 5, 1, 32.0, [3500])
    _run(tmp_path, "ui", "medium", 5, 0, 19.0, [1500], updates=200)
    _run(tmp_path, "ui", "tutorial", 15, 0, 45.0, [3500])
    _run(tmp_path, "ui", "medium", 15, 0, 47.0, [1500], updates=600)
    return tmp_path


def test_collect_reads_rates_from_the_logs_and_relates_tokens_to_parameters(runs):
    from transformer.model_config import PRESETS
    from transformer.run.sizing import body_parameters

    args = types.SimpleNamespace(runs=runs, corpus=[Path("ui")])
    record = model_sizes.collect(args)
    assert len(record["runs"]) == 5
    first = next(r for r in record["runs"] if r["size"] == "tutorial" and r["minutes"] == 5
                 and r["seed"] == 0)
    assert first["target_tokens_per_second"] == 3500.0  # the mean of its lines
    # As the rule plans them: updates times the batches' token budget.
    assert first["planned_tokens"] == 100 * 384
    assert first["body_parameters"] == body_parameters(PRESETS["tutorial"])
    assert first["tokens_per_parameter"] == pytest.approx(
        100 * 384 / body_parameters(PRESETS["tutorial"]), abs=1e-3)
    assert first["corpus_tokens"] == 1_000_000 * 384 // 32  # pairs times their mean padded length
    assert first["passes"] == round(100 * 384 / first["corpus_tokens"], 2)  # planned over them
    assert first["model"]["d_model"] == 128
    # As a reader runs it from a clone, with no path of this machine.
    assert first["command"] == ("taskset -c 1 python train.py --data ui/train.tsv --output-dir "
                                "runs/model_sizes/tutorial/ui_5min_s0")
    assert first["run_dir"] == f"{runs.name}/tutorial/ui_5min_s0"


def test_the_envelope_is_the_best_mean_at_each_budget(runs):
    record = model_sizes.collect(types.SimpleNamespace(runs=runs, corpus=[Path("ui")]))
    assert model_sizes.envelope(record["runs"]) == {5: ("tutorial", 33.0), 15: ("medium", 47.0)}


def test_the_fit_bounds_the_threshold_by_wins_and_losses(runs):
    """medium loses at 5 minutes and wins at 15: the threshold of tokens per
    parameter lies between its two ratios, at their geometric mean."""
    record = model_sizes.collect(types.SimpleNamespace(runs=runs, corpus=[Path("ui")]))
    medium = {r["minutes"]: r["tokens_per_parameter"] for r in record["runs"]
              if r["size"] == "medium"}
    threshold = record["fit"]["tokens_per_parameter"]
    assert (threshold["above"], threshold["at_most"]) == (medium[5], medium[15])
    assert threshold["fitted"] == pytest.approx((medium[5] * medium[15]) ** 0.5, abs=0.01)
    assert [c["larger_wins"] for c in record["fit"]["comparisons"]] == [False, True]


def test_the_figure_is_written(runs, tmp_path):
    record = model_sizes.collect(types.SimpleNamespace(runs=runs, corpus=[Path("ui")]))
    path = tmp_path / "figure.png"
    model_sizes.plot(record, path, "ui")
    assert path.stat().st_size > 10_000


def test_no_results_is_a_one_line_error(tmp_path, capsys):
    assert model_sizes.main(["--collect", "--corpus", "ui", "--runs", str(tmp_path)]) == 1
    assert "no results files of ui" in capsys.readouterr().err


def test_with_no_win_the_fit_is_a_lower_bound(runs):
    record = model_sizes.collect(types.SimpleNamespace(runs=runs, corpus=[Path("ui")]))
    lost = [r for r in record["runs"] if not (r["size"] == "medium" and r["minutes"] == 15)]
    threshold = model_sizes.fit(lost)["tokens_per_parameter"]
    assert threshold["at_most"] is None
    assert threshold["above"] < threshold["fitted"] <= threshold["above"] + 0.1 + 1e-9


def test_a_rule_sized_run_that_lost_raises_the_threshold_above_its_plan(runs):
    """An "auto" run trained fewer tokens than the rule planned (a shared core):
    its loss bounds the threshold from below at the plan, the larger ratio."""
    record = model_sizes.collect(types.SimpleNamespace(runs=runs, corpus=[Path("ui")]))
    lost = [r for r in record["runs"] if not (r["size"] == "medium" and r["minutes"] == 15)]
    medium = next(r for r in lost if r["size"] == "medium")
    assert medium["rule_tokens_per_parameter"] is None  # a preset's run has no plan
    planned = dict(medium, rule_tokens_per_parameter=medium["tokens_per_parameter"] * 3)
    threshold = model_sizes.fit([r for r in lost if r is not medium] + [planned])
    assert threshold["tokens_per_parameter"]["above"] == pytest.approx(
        planned["rule_tokens_per_parameter"], abs=1e-3)


def test_the_mirrored_row_times_every_layout_and_relates_it_to_one_core():
    args = model_sizes.parse_args(["--cores-speed", "--mirrored", "--core", "1",
                                   "--both-cores", "0,1"])
    asked = []

    def rate(size, precision, cores, *extra):
        asked.append((cores, extra))
        return {"1": 100.0, "0,1": 150.0}[str(cores)] * (1.2 if "2" in extra else 1.0)

    row = model_sizes.mirrored_row(rate, "medium", "float32", args)
    assert asked == [(1, ("--replicas", "1")), ("0,1", ("--replicas", "1")),
                     ("0,1", ("--replicas", "2")),
                     ("0,1", ("--replicas", "2", "--intra-threads", "1"))]
    assert row["one_core"] == 100.0 and row["both_cores_over_one"] == 1.5
    assert row["mirrored_over_one"] == row["mirrored_one_thread_an_op_over_one"] == 1.8


def test_overlapping_wins_and_losses_fit_the_threshold_with_the_fewest_wrong_choices(tmp_path):
    """medium wins at 5 minutes and loses at 15, where it has more tokens a
    parameter: no threshold is right for both; the fit makes one wrong choice,
    and of the equally wrong ones keeps the smaller size longer."""
    _run(tmp_path, "ui", "tutorial", 5, 0, 34.0, [3000])
    _run(tmp_path, "ui", "medium", 5, 0, 40.0, [1500], updates=200)
    _run(tmp_path, "ui", "tutorial", 15, 0, 45.0, [3500])
    _run(tmp_path, "ui", "medium", 15, 0, 44.0, [1500], updates=600)
    record = model_sizes.collect(types.SimpleNamespace(runs=tmp_path, corpus=[Path("ui")]))
    medium = {r["minutes"]: r["tokens_per_parameter"] for r in record["runs"]
              if r["size"] == "medium"}
    threshold = record["fit"]["tokens_per_parameter"]
    assert (threshold["above"], threshold["at_most"]) == (medium[15], medium[5])
    assert threshold["fitted"] == model_sizes.just_above(medium[15]) > medium[15]
    assert threshold["wrong_choices"] == 1
    # Equally wrong: below medium's winning ratio, and above its losing one.
    assert threshold["fewest_wrong_ranges"] == [
        {"above": None, "at_most": medium[5], "wrong": 1},
        {"above": medium[15], "at_most": None, "wrong": 1}]


def test_a_size_the_rule_does_not_choose_from_is_recorded_but_not_fitted():
    """`mini` is below the rule's ladder: its win over `small` would otherwise
    pull the threshold above `small`'s ratio."""
    def run(size, params, bleu, ratio):
        return {"corpus": "ui", "minutes": 5.0, "size": size, "body_parameters": params,
                "bleu_lc": bleu, "tokens_per_parameter": ratio, "updates": 100}

    runs = [run("mini", 1, 30.0, 9.0), run("small", 2, 25.0, 4.0),
            run("tutorial", 4, 20.0, 1.0)]
    result = model_sizes.fit(runs)
    assert [(c["smaller"], c["fitted"]) for c in result["comparisons"]] == \
        [("mini", False), ("small", True)]
    assert result["tokens_per_parameter"]["above"] == 1.0
    assert model_sizes.fit(runs[1:])["tokens_per_parameter"] == result["tokens_per_parameter"]


def test_a_larger_size_that_won_by_its_passes_fits_the_passes_and_the_corpus_bound(tmp_path):
    """Over a small corpus read many times, medium loses at 4.8 passes and wins
    at 16 although its tokens per parameter stay below those of a loss of
    tutorial's on a large corpus: the passes decide that win (between 4.8 and
    16), the corpus's tokens per parameter bound it from below, and the tokens
    threshold is fitted to the rest."""
    small_corpus = {"pairs": 1000}  # 12,000 tokens: a pass is about 31 updates
    _run(tmp_path, "ui", "tutorial", 5, 0, 34.0, [3000], updates=100, **small_corpus)
    _run(tmp_path, "ui", "medium", 5, 0, 19.0, [1500], updates=150, **small_corpus)
    _run(tmp_path, "ui", "tutorial", 45, 0, 45.0, [3500], updates=800, **small_corpus)
    _run(tmp_path, "ui", "medium", 45, 0, 47.0, [1500], updates=500, **small_corpus)
    _run(tmp_path, "big", "small", 45, 0, 30.0, [9000], updates=9000)
    _run(tmp_path, "big", "tutorial", 45, 0, 29.0, [5000], updates=6000)
    record = model_sizes.collect(types.SimpleNamespace(
        runs=tmp_path, corpus=[Path("ui"), Path("big")]))
    fit = record["fit"]
    assert (fit["passes"]["above"], fit["passes"]["at_most"]) == (4.8, 16.0)
    assert fit["passes"]["fitted"] == 16.0  # the top of the range: the lowest win
    medium = next(r for r in record["runs"] if r["size"] == "medium" and r["minutes"] == 45)
    bound = medium["corpus_tokens"] / medium["body_parameters"]
    assert bound - 0.001 < fit["corpus_tokens_per_parameter"]["fitted"] <= bound
    lost = next(r["tokens_per_parameter"] for r in record["runs"]
                if r["corpus"] == "big" and r["size"] == "tutorial")
    assert medium["tokens_per_parameter"] < lost  # one threshold alone would be wrong once
    assert fit["tokens_per_parameter"]["above"] == lost
    assert fit["tokens_per_parameter"]["at_most"] is None
    assert fit["wrong_choices"] == 0
    # Without the passes' win, nothing is decided by passes.
    without = model_sizes.fit([r for r in record["runs"] if r is not medium])
    assert without["corpus_tokens_per_parameter"]["fitted"] is None
    assert without["wrong_choices"] == 0
