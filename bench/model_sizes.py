"""BLEU against minutes for each model size: the measurements behind the size
rule (`transformer/run/sizing.py`) and its figure.

For each size S (a preset of `transformer.model_config.PRESETS`, or `auto`:
the size rule's own choice, recorded per run as `preset`), it runs
`bench/budget_curve.py --train-args "--preset S"` on one core, for the budgets
and seeds given, with the runs in `RUNS/S/` (finished runs are read, not
trained again; an interrupted one resumes). Then it collects every size's
results file into one (`--json`): per run the updates, the mean target tokens
a second (from the run's own once-a-minute log lines), the body parameters
and the target tokens per body parameter that the rule reads, and BLEU; and
draws BLEU against minutes, a line per size, the envelope (the best size at
each budget) marked (`--plot`).

Example (one core; BENCHMARKS.md, "The budget chooses the model", has the
report's commands):

    python bench/model_sizes.py --corpus data/bible-es-en ui-es-en \\
        --sizes small tutorial medium --budgets 5 --seeds 0 1 --core 1 \\
        --runs runs/model_sizes --json bench/results/model_sizes_zen4.json \\
        --plot docs/model_sizes.png

Tokens are counted as the size rule counts them: a run's updates times its
batches' token budget (`--batch-tokens`, 32 pairs of mean padded length),
repeated passes over the corpus counted for less
(`transformer.run.sizing.effective_tokens`); the target tokens a second of
the logs are recorded beside them.

`--collect` skips training and collects the results files in `RUNS/` (each
size's `RUNS/{corpus}_{M}min_{S}_s{seed}.json`, as `budget_curve.py --json`
writes them).

`--measurement-cost` times instead what the size rule's measurement of each
size costs at the start of a run (wall and CPU seconds, the trace included),
in this process (pin it with taskset):

    taskset -c 1 python bench/model_sizes.py --measurement-cost \
        --sizes small tutorial medium large --precision mixed_bfloat16 \
        --json bench/results/model_sizes_measurement_zen4.json

`--cores-speed` measures instead each size's training steps on one core and
on `--both-cores` (one process, TensorFlow's threads over them), in float32
and mixed_bfloat16 (`--precisions`); with `--independent` also one process
on each core at the same time, which shows what the cores give each other;
at a batch of `--pairs` pairs of `--length` tokens, a
process each (`transformer.run.calibration.step_seconds`), and writes the target
tokens a second and the ratio of the two (`--json`):

    python bench/model_sizes.py --cores-speed --sizes small tutorial medium large \
        --core 1 --both-cores 0,1 --json bench/results/model_sizes_cores_zen4.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from common import BenchError, machine, write_json  # noqa: E402

RATE = re.compile(r"\(([\d,]+) target tokens a second\)")
PAIRS = re.compile(r"^Corpus .*: (\d+) training", re.MULTILINE)


def results_path(runs: Path, corpus: str, minutes: float, size: str, seed: int) -> Path:
    return runs / f"{corpus}_{minutes:g}min_{size}_s{seed}.json"


def train(args) -> None:
    """Every size, budget and seed through `budget_curve.py`, one results file each."""
    for corpus, minutes, seed, size in itertools.product(args.corpus, args.budgets, args.seeds,
                                                          args.sizes):
        command = [sys.executable, str(BENCH / "budget_curve.py"),
                   "--corpus", str(corpus), "--budgets", f"{minutes:g}",
                   "--seeds", str(seed), "--core", str(args.core),
                   "--runs", str(args.runs / size), "--train-args", f"--preset {size}",
                   "--label", size, "--json",
                   str(results_path(args.runs, corpus.name, minutes, size, seed))]
        if subprocess.run(command).returncode:
            raise BenchError(f"budget_curve.py failed for {size}, {minutes:g} min, "
                             f"seed {seed}")


def log_rate(log: Path) -> float | None:
    """The mean of a run's once-a-minute target tokens a second (None without them)."""
    if not log.is_file():
        return None
    rates = [float(found.replace(",", "")) for found in RATE.findall(log.read_text("utf-8"))]
    return round(statistics.mean(rates), 1) if rates else None


def collect(args) -> dict:
    """One record of every size's runs of every corpus found in `args.runs`,
    and the size rule's constants fitted to them (`fit`)."""
    runs = [run for corpus in args.corpus for run in collect_corpus(args.runs, corpus)]
    return {"corpora": [corpus.name for corpus in args.corpus], "machine": machine(),
            "runs": runs, "fit": fit(runs)}


def collect_corpus(runs_dir: Path, corpus: Path) -> list[dict]:
    """Every size's runs of `corpus` in `runs_dir`."""
    from transformer.run.config import RunConfig
    from transformer.run.sizing import body_parameters, effective_tokens

    runs = []
    for path in sorted(runs_dir.glob(f"{corpus.name}_*min_*_s*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for run in record["runs"]:
            run_dir = Path(run["run_dir"])
            config = RunConfig.from_dict({
                key: value for key, value in json.loads(
                    (run_dir / "config.json").read_text(encoding="utf-8")).items()
                if key in RunConfig.__dataclass_fields__})
            log = run_dir.parent / f"{run_dir.name}.log"
            rate = log_rate(log)
            pairs = PAIRS.search(log.read_text("utf-8")) if log.is_file() else None
            # As the size rule counts them: pairs times the mean padded pair length.
            corpus_tokens = round(int(pairs.group(1)) * config.batch_tokens / config.batch_size) \
                if pairs and config.batch_tokens else None
            params = body_parameters(config.model)
            # As the size rule plans them: the updates times the batches' token
            # budget, repeated passes counted for less (`effective_tokens`).
            planned = run["updates"] * config.batch_tokens if config.batch_tokens else None
            tokens = effective_tokens(planned, corpus_tokens or 0) if planned else None
            # "auto" is the size rule's own choice: the preset it chose is in config.json.
            runs.append({**run, "corpus": corpus.name, "size": record["label"],
                         "preset": config.preset,
                         "run_dir": f"{runs_dir.name}/{run_dir.parent.name}/{run_dir.name}",
                         "command": portable_command(run["command"], run_dir, corpus),
                         "model": {k: getattr(config.model, k)
                                   for k in ("num_layers", "d_model", "num_heads", "dff")},
                         "body_parameters": params,
                         "target_tokens_per_second": rate,
                         "batch_tokens": config.batch_tokens,
                         "planned_tokens": planned,
                         "effective_tokens": round(tokens) if tokens else None,
                         "tokens_per_parameter": round(tokens / params, 3) if tokens else None,
                         # As the size rule counts them: planned over the corpus's tokens.
                         "passes": round(planned / corpus_tokens, 2)
                         if planned and corpus_tokens else None,
                         # An "auto" run's own plan, made before training (None for a preset).
                         "rule_tokens_per_parameter": (
                             config.size_rule["candidates"][config.preset]["tokens_per_parameter"]
                             if config.size_rule and "candidates" in config.size_rule else None),
                         # The threshold the rule chose with (it has been refitted since).
                         "rule_threshold": (config.size_rule or {}).get("tokens_per_parameter"),
                         "corpus_tokens": corpus_tokens,
                         "machine": record.get("machine_after") or record.get("machine_before")})
    if not runs:
        raise BenchError(f"no results files of {corpus.name} in {runs_dir}")
    return runs


def fit(runs: list[dict]) -> dict:
    """The size rule's thresholds (`transformer.run.sizing`: `PASSES`,
    `CORPUS_TOKENS_PER_PARAMETER`, `TOKENS_PER_PARAMETER`) from the runs.

    At each budget, every size is compared with the next smaller one by mean
    BLEU. Where the larger wins, the rule must choose it; where it loses, not.
    Passes first: over the comparisons in which the larger size read the
    corpus more than once, its passes are fitted as one threshold, at the
    top of the range that separates wins from losses (`threshold`); the corpus's tokens per body parameter must be at least
    the lowest at which a larger size won by its passes (rounded down to a
    thousandth). The threshold of effective tokens per body parameter is then
    fitted over the comparisons the passes do not decide. A run the rule
    sized itself ("auto") also has the ratio the rule planned for it before
    training (`rule_tokens_per_parameter`; a shared machine trains fewer
    tokens than planned): a loss counts at the larger of the two, a win at
    the smaller, so the rule would not make a losing choice again.
    `wrong_choices` counts the fitted rule's wrong choices. Only comparisons
    of two sizes the rule chooses from (`SIZE_LADDER`, or its own choice,
    "auto") count; the others are recorded with `"fitted": false`.
    """
    from transformer.run.sizing import SIZE_LADDER, fed

    chosen_from = {*SIZE_LADDER, "auto"}
    by_budget: dict[tuple[str, float], dict[str, list[dict]]] = {}
    for run in runs:
        by_budget.setdefault((run["corpus"], run["minutes"]), {}).setdefault(
            run["size"], []).append(run)
    comparisons = []
    for (corpus, minutes), sizes in sorted(by_budget.items()):
        ordered = sorted(sizes, key=lambda s: sizes[s][0]["body_parameters"])
        for smaller, larger in zip(ordered, ordered[1:], strict=False):
            mean = {s: round(statistics.mean(r["bleu_lc"] for r in sizes[s]), 2)
                    for s in (smaller, larger)}
            wins = mean[larger] > mean[smaller]
            pick = min if wins else max
            ratio = statistics.mean(pick(r["tokens_per_parameter"],
                                         r.get("rule_tokens_per_parameter") or
                                         r["tokens_per_parameter"]) for r in sizes[larger])
            first = sizes[larger][0]
            comparisons.append({"corpus": corpus, "minutes": minutes, "smaller": smaller,
                                "larger": larger, "bleu": mean, "larger_wins": wins,
                                "fitted": {smaller, larger} <= chosen_from,
                                "larger_tokens_per_parameter": round(ratio, 3),
                                "passes": {s: round(statistics.mean(r.get("passes") or 0.0
                                                                    for r in sizes[s]), 2)
                                           for s in (smaller, larger)},
                                "larger_corpus_tokens_per_parameter": round(
                                    first["corpus_tokens"] / first["body_parameters"], 5)
                                if first.get("corpus_tokens") else None,
                                "updates": {s: round(statistics.mean(r["updates"] for r in
                                                                     sizes[s]))
                                            for s in (smaller, larger)}})
    fitted = [c for c in comparisons if c["fitted"]]

    def passes(c):
        return c["passes"][c["larger"]]

    def chosen(c, thresholds):
        corpus = c["larger_corpus_tokens_per_parameter"]
        return fed(c["larger_tokens_per_parameter"], passes(c),
                   float("-inf") if corpus is None else corpus, thresholds)

    repeated = [c for c in fitted if passes(c) > 1]
    by_passes = threshold([passes(c) for c in repeated if c["larger_wins"]],
                          [passes(c) for c in repeated if not c["larger_wins"]], highest=True)
    corpus_ratios = [c["larger_corpus_tokens_per_parameter"] for c in repeated
                     if c["larger_wins"] and by_passes["fitted"] is not None
                     and passes(c) >= by_passes["fitted"]
                     and c["larger_corpus_tokens_per_parameter"] is not None]
    least_corpus = math.floor(min(corpus_ratios) * 1000) / 1000 if corpus_ratios else None
    # The comparisons the passes decide leave the tokens threshold to the rest.
    rest = [c for c in fitted if not chosen(c, (None, by_passes["fitted"], least_corpus))]
    by_tokens = threshold([c["larger_tokens_per_parameter"] for c in rest if c["larger_wins"]],
                          [c["larger_tokens_per_parameter"] for c in rest
                           if not c["larger_wins"]])
    thresholds = (by_tokens["fitted"], by_passes["fitted"], least_corpus)
    return {"comparisons": comparisons, "passes": by_passes,
            "corpus_tokens_per_parameter": {
                "at_most": min(corpus_ratios, default=None), "fitted": least_corpus,
                "note": None if least_corpus is not None else
                "no larger size won by its passes: the passes decide nothing"},
            "tokens_per_parameter": by_tokens,
            "wrong_choices": sum(chosen(c, thresholds) != c["larger_wins"] for c in fitted)}


def threshold(won: list[float], lost: list[float], highest: bool = False) -> dict:
    """One threshold from the values at which the larger size won and lost:
    the geometric mean of the highest losing and the lowest winning value
    (with `highest`, the lowest winning value rounded down to a tenth: a rule
    that plans with a faster speed than its runs reach then still keeps the
    smaller size where it won); with no win measured, the first tenth above
    the highest losing value (a lower bound: longer runs would raise it).
    Where wins and losses overlap, no threshold makes every choice right: the
    fitted one is the one that makes the fewest wrong (`fewest_wrong`), and
    `wrong_choices` counts them."""
    above, below = (max(lost) if lost else None), (min(won) if won else None)
    if above and below and above < below:
        value = max(math.floor(below * 10) / 10, just_above(above)) if highest else \
            round((above * below) ** 0.5, 2)
    elif above and not below:
        value = just_above(above)
    elif above and below:
        value = fewest_wrong(won, lost)
    else:
        value = None
    return {"above": above, "at_most": below, "fitted": value,
            "wrong_choices": wrong_choices(value, won, lost) if value else None,
            "fewest_wrong_ranges": fewest_wrong_ranges(won, lost)}


def fewest_wrong_ranges(won: list[float], lost: list[float]) -> list[dict]:
    """Every range of thresholds that makes the fewest wrong choices, as
    `{"above": a, "at_most": b}` (None: unbounded), and that number.

    >>> fewest_wrong_ranges(won=[1.8, 3.0], lost=[0.7, 2.1])
    [{'above': 0.7, 'at_most': 1.8, 'wrong': 1}, {'above': 2.1, 'at_most': 3.0, 'wrong': 1}]
    """
    if not won and not lost:
        return []
    points = sorted(set(won) | set(lost))
    # `wrong_choices` is constant between two neighbouring ratios (above the
    # lower, at most the upper); above the highest, every win is wrong.
    ranges = [{"above": low, "at_most": high,
               "wrong": wrong_choices(high, won, lost) if high is not None else len(won)}
              for low, high in zip([None, *points], [*points, None], strict=True)]
    least = min(r["wrong"] for r in ranges)
    return [r for r in ranges if r["wrong"] == least]


def wrong_choices(threshold: float, won: list[float], lost: list[float]) -> int:
    """How many comparisons `threshold` gets wrong: a win below it (the smaller
    size chosen) or a loss at or above it (the larger chosen)."""
    return sum(r < threshold for r in won) + sum(r >= threshold for r in lost)


def just_above(ratio: float) -> float:
    """The first tenth above `ratio`: a threshold at which that ratio is not fed."""
    return math.floor(ratio * 10 + 1) / 10


def fewest_wrong(won: list[float], lost: list[float]) -> float:
    """The threshold that makes the fewest wrong choices when wins (the larger
    size's ratios where it won) and losses overlap: a larger size is chosen at
    and above it. Of equally good ones, the highest, since the smaller size won
    more often than not.

    >>> fewest_wrong(won=[1.8, 3.0], lost=[0.7, 2.1])
    3.0
    >>> fewest_wrong(won=[1.8, 3.0], lost=[0.7, 1.2, 2.1, 2.4])
    3.0
    >>> fewest_wrong(won=[1.8, 1.9, 3.0], lost=[0.7, 2.1])
    1.8
    """
    candidates = sorted(set(won) | {just_above(ratio) for ratio in lost})
    wrong = {t: wrong_choices(t, won, lost) for t in candidates}
    least = min(wrong.values())
    return max(t for t in candidates if wrong[t] == least)


def portable_command(command: str, run_dir: Path, corpus: Path) -> str:
    """`command` as a reader runs it from a clone: `python train.py`, the corpus
    by its directory's name, the run directory under `runs/`."""
    command = re.sub(r"\S*/python[\d.]*\b", "python", command)
    command = re.sub(r"\S*/(train\.py|translate\.py)", r"\1", command)
    command = re.sub(r"\S*/" + re.escape(corpus.name) + "/", corpus.name + "/", command)
    return command.replace(str(run_dir.parent.parent), "runs/model_sizes")


def envelope(runs: list[dict]) -> dict[float, tuple[str, float]]:
    """The best size's mean BLEU at each budget."""
    means: dict[float, dict[str, list[float]]] = {}
    for run in runs:
        means.setdefault(run["minutes"], {}).setdefault(run["size"], []).append(run["bleu_lc"])
    return {minutes: max(((size, statistics.mean(v)) for size, v in sizes.items()),
                         key=lambda item: item[1])
            for minutes, sizes in sorted(means.items())}


def plot(record: dict, path: Path, title: str) -> None:
    """BLEU against minutes, a panel per corpus: each seed a point, each size's
    mean a line, the envelope (the best size at each budget) a thick grey line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    corpora = list(dict.fromkeys(run["corpus"] for run in record["runs"]))
    fig, axes = plt.subplots(1, len(corpora), figsize=(5.2 * len(corpora), 4.0), dpi=120,
                             squeeze=False)
    sizes = sorted({run["size"] for run in record["runs"]}, key=lambda s: min(
        r["body_parameters"] for r in record["runs"] if r["size"] == s))
    for ax, corpus in zip(axes[0], corpora, strict=True):
        runs = [run for run in record["runs"] if run["corpus"] == corpus]
        best = envelope(runs)
        ax.plot(list(best), [bleu for _, bleu in best.values()], "-", color="0.8",
                linewidth=7, label="envelope: the best size at each budget", zorder=1)
        for index, size in enumerate(sizes):
            own = [run for run in runs if run["size"] == size]
            if not own:
                continue
            by_minutes: dict[float, list[float]] = {}
            for run in own:
                by_minutes.setdefault(run["minutes"], []).append(run["bleu_lc"])
            minutes = sorted(by_minutes)
            params = own[0]["body_parameters"] / 1e6
            # Only `auto` runs chose their preset (the others name theirs, or passed
            # its sizes as model options).
            presets = sorted({run.get("preset") for run in own} - {None}) if size == "auto" else []
            thresholds = sorted({run.get("rule_threshold") for run in own} - {None})
            chosen = (f": the rule chose {', '.join(presets)}"
                      + (f" (threshold {', '.join(map(str, thresholds))})" if thresholds else "")
                      if presets else "")
            # An `auto` run that chose one size takes that size's colour, as a star.
            colour = f"C{sizes.index(presets[0])}" if len(presets) == 1 and \
                presets[0] in sizes else f"C{index}"
            marker, mark_size = ("*", 11) if size == "auto" else ("D", 4)
            ax.plot([r["minutes"] for r in own], [r["bleu_lc"] for r in own], "o", alpha=0.45,
                    color=colour, markersize=4, zorder=2)
            ax.plot(minutes, [statistics.mean(by_minutes[m]) for m in minutes], "-" + marker,
                    color=colour, markersize=mark_size, zorder=3,
                    label=f"{size}{chosen} ({params:.1f}M body parameters)")
        ax.set_title(corpus, fontsize=10)
        ax.set_xlabel("training budget (minutes, one CPU core)")
        ax.set_ylabel("test BLEU (sacrebleu 13a, lower-cased, beam 4)")
        ax.set_xlim(0, max(r["minutes"] for r in runs) * 1.1)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def fit_step_seconds(model, args) -> float:
    """The mean step time of `model.fit` over `args.steps` steps (after two that
    trace it) of random batches of `args.pairs` pairs, on `args.replicas`
    mirrored logical CPU devices (1: no strategy), with `args.intra_threads`
    threads an op (0: TensorFlow's choice). The same timing for one replica and
    for several, so that their ratio is the strategy's alone."""
    import keras
    import tensorflow as tf

    from transformer.model import build_model
    from transformer.run.calibration import random_batch
    from transformer.run.distribute import configure_cpu_devices
    from transformer.training import MaskedLoss

    if args.intra_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_threads)
    configure_cpu_devices(args.replicas)
    strategy = (tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.replicas)])
                if args.replicas > 1 else tf.distribute.get_strategy())
    batches = tf.data.Dataset.from_tensors(
        random_batch(args.vocab, args.pairs, args.length)).repeat()
    with strategy.scope():
        built = build_model(model, args.vocab, args.vocab)
        built.compile(optimizer=keras.optimizers.Adam(1e-4), loss=MaskedLoss())
    built.fit(batches, steps_per_epoch=2, epochs=1, verbose=0)
    started = time.perf_counter()
    built.fit(batches, steps_per_epoch=args.steps, epochs=1, verbose=0)
    return (time.perf_counter() - started) / args.steps


def step_worker(args) -> int:
    """One size's mean step time in this process (its cores as taskset gave them):
    `train_on_batch` as the size rule times it, or with `--replicas` `model.fit`
    (`fit_step_seconds`)."""
    import keras

    from transformer.model_config import PRESETS
    from transformer.run.calibration import step_seconds
    from transformer.run.recipes import default_model

    keras.mixed_precision.set_global_policy(args.precision)
    model = default_model(args.sizes[0], data="corpus.tsv", tie_embeddings=True)
    if args.replicas:
        seconds = fit_step_seconds(model, args)
    else:
        seconds = step_seconds(model, args.vocab, args.pairs, args.length, steps=args.steps)
    print(json.dumps({"size": args.sizes[0], "precision": args.precision, "seconds": seconds,
                      "target_tokens_per_second": args.pairs * args.length / seconds,
                      "d_model": PRESETS[args.sizes[0]].d_model}))
    return 0


def measurement_cost(args) -> dict:
    """What the size rule's measurement of each size costs at the start of a run
    (`transformer.run.calibration.measure_step`, its trace included): wall and
    CPU seconds in this process, and the step time it measured."""
    import keras

    from transformer.run.calibration import measure_step
    from transformer.run.config import RunConfig

    config = RunConfig(data="corpus.tsv", precision=args.precision,
                       batch_tokens=args.pairs * args.length)
    rows = []
    keras.mixed_precision.set_global_policy(args.precision)
    for size in args.sizes:
        wall, cpu = time.perf_counter(), time.process_time()
        seconds = measure_step(config, size, args.vocab, args.length)
        rows.append({"size": size, "wall_seconds": round(time.perf_counter() - wall, 2),
                     "cpu_seconds": round(time.process_time() - cpu, 2),
                     "step_seconds": round(seconds, 5)})
        print(f"{size}: {rows[-1]['wall_seconds']} s ({rows[-1]['cpu_seconds']} s of CPU), "
              f"a step {seconds * 1000:.1f} ms", flush=True)
    return {"machine": machine(), "precision": args.precision,
            "batch": {"pairs": args.pairs, "length": args.length, "vocab": args.vocab},
            "rows": rows}


def cores_speed(args) -> dict:
    """Every size and precision on one core and on both, a worker process each;
    with `--independent`, also one worker on each core at once (what each core
    gives while the other works: twice that is the most one process on both
    cores could reach)."""
    from concurrent.futures import ThreadPoolExecutor

    from common import pinned, worker_json

    def rate(size, precision, cores, *extra):
        command = pinned([sys.executable, __file__, "--step-worker", "--sizes", size,
                          "--precision", precision, "--vocab", str(args.vocab),
                          "--pairs", str(args.pairs), "--length", str(args.length),
                          "--steps", str(args.steps), "--corpus", ".", *extra], cores)
        result = worker_json(command, None, f"{size} {precision} on cores {cores} {extra}")
        return round(result["target_tokens_per_second"], 1)

    rows = []
    for size in args.sizes:
        for precision in args.precisions:
            if args.mirrored:
                rows.append(mirrored_row(rate, size, precision, args))
                continue
            row = {"size": size, "precision": precision,
                   "one_core": rate(size, precision, args.core),
                   "both_cores": rate(size, precision, args.both_cores)}
            row["both_over_one"] = round(row["both_cores"] / row["one_core"], 3)
            if args.independent:
                cores = args.both_cores.split(",")
                with ThreadPoolExecutor(len(cores)) as pool:
                    rates = list(pool.map(rate, [size] * len(cores),
                                          [precision] * len(cores), cores))
                row["each_core_at_once"] = rates
                row["at_once_over_one"] = round(statistics.mean(rates) / row["one_core"], 3)
            rows.append(row)
            print(f"{size} {precision}: {row['one_core']:,.0f} -> {row['both_cores']:,.0f} "
                  f"target tokens a second ({row['both_over_one']:.2f}x)"
                  + (f"; each core while the other works {row['at_once_over_one']:.2f}x"
                     if args.independent else ""), flush=True)
    return {"machine": machine(), "batch": {"pairs": args.pairs, "length": args.length,
                                            "vocab": args.vocab, "steps": args.steps},
            "cores": {"one": str(args.core), "both": args.both_cores}, "rows": rows}


def mirrored_row(rate, size, precision, args) -> dict:
    """One size and precision timed by `model.fit` on one core and on both cores:
    one replica, and a replica a core (mirrored logical CPU devices) with
    TensorFlow's threads an op and with one."""
    both = len(args.both_cores.split(","))
    row = {"size": size, "precision": precision, "timing": "model.fit",
           "one_core": rate(size, precision, args.core, "--replicas", "1"),
           "both_cores": rate(size, precision, args.both_cores, "--replicas", "1"),
           "mirrored": rate(size, precision, args.both_cores, "--replicas", str(both)),
           "mirrored_one_thread_an_op": rate(size, precision, args.both_cores,
                                             "--replicas", str(both), "--intra-threads", "1")}
    for key in ("both_cores", "mirrored", "mirrored_one_thread_an_op"):
        row[f"{key}_over_one"] = round(row[key] / row["one_core"], 3)
    print(f"{size} {precision}: one core {row['one_core']:,.0f} target tokens a second; "
          f"both cores {row['both_cores_over_one']:.2f}x, mirrored {row['mirrored_over_one']:.2f}x, "
          f"mirrored one thread an op {row['mirrored_one_thread_an_op_over_one']:.2f}x", flush=True)
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, nargs="+", default=[Path("ui-es-en")],
                        help="directories of train.tsv, valid.tsv and test.tsv")
    parser.add_argument("--sizes", nargs="+", default=["small", "tutorial", "medium"])
    parser.add_argument("--budgets", type=float, nargs="+", default=[5, 15])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--core", type=int, default=0, help="the one CPU core (taskset -c)")
    parser.add_argument("--runs", type=Path, default=Path("runs/model_sizes"))
    parser.add_argument("--collect", action="store_true", help="collect only, train nothing")
    parser.add_argument("--json", type=Path, help="the collected results file")
    parser.add_argument("--plot", type=Path, help="the figure (PNG)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--cores-speed", action="store_true",
                        help="measure each size's steps on one core and on --both-cores")
    parser.add_argument("--both-cores", default="0,1")
    parser.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"],
                        help="the precisions of --cores-speed")
    parser.add_argument("--independent", action="store_true",
                        help="--cores-speed: also one worker on each of --both-cores at once")
    parser.add_argument("--mirrored", action="store_true",
                        help="--cores-speed: time model.fit on one core, on --both-cores, and "
                             "mirrored over a logical CPU device a core")
    parser.add_argument("--replicas", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--intra-threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--length", type=int, default=13,
                        help="tokens a sentence (ui-es-en's mean padded pair is about 12)")
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--measurement-cost", action="store_true",
                        help="time the size rule's measurement of each size (--sizes) "
                             "in this process, at --precision")
    parser.add_argument("--precision", default="float32",
                        help="float32 or mixed_bfloat16 (--measurement-cost)")
    parser.add_argument("--step-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.step_worker:
        return step_worker(args)
    if args.cores_speed or args.measurement_cost:
        record = cores_speed(args) if args.cores_speed else measurement_cost(args)
        if args.json:
            write_json(args.json, record)
        return 0
    try:
        if not args.collect:
            train(args)
        record = collect(args)
    except (BenchError, OSError, KeyError, ValueError) as error:
        print(f"model_sizes.py: {error}", file=sys.stderr)
        return 1
    if args.json:
        write_json(args.json, record)
    if args.plot:
        cpu = record["machine"].get("cpu_model", "")
        plot(record, args.plot, args.title or f"{', '.join(record['corpora'])}, {cpu}, one core")
    for corpus in record["corpora"]:
        runs = [run for run in record["runs"] if run["corpus"] == corpus]
        for minutes, (size, bleu) in envelope(runs).items():
            print(f"{corpus}, {minutes:g} min: {size} is best, BLEU {bleu:.2f}")
    print(f"fit: {json.dumps(record['fit'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
