"""BLEU against training minutes: `train.py --time-budget` on one core, for
several budgets and seeds, with the peer (JoeyNMT, `bench/peer_joeynmt/run.py`)
beside it.

For each budget M and seed S it runs, pinned to one core with `taskset`:

    train.py --data D/train.tsv --valid D/valid.tsv --test D/test.tsv \\
        --time-budget {M}m --seed S --output-dir RUNS/{corpus}_{M}min_s{S}

(the defaults otherwise; more options with `--train-args`) and reads the run's
own beam-4 test BLEU (sacrebleu 13a, lower-cased and cased) from its
`metrics.json`. A run whose `metrics.json` exists is not trained again, and one
that holds only `config.json` is resumed, so an interrupted benchmark continues
where it stopped. `--translate` also decodes the test split with `translate.py
--beam 4` on the same core and scores it as the peer is scored (copyable
tokens included); that costs a second decoding of the test split.

It writes one JSON per corpus (`RUNS/{corpus}.json`, or `--json` for a single
corpus). `--from-json` regenerates the report's table (`--table`, Markdown) and
plot (`--plot`) from such files and the peer's JSON alone, without TensorFlow;
several files of one corpus (budgets measured apart, each with its own label)
make one series with `--label`.

Example (the peer on the other core at the same time):

    python bench/budget_curve.py --corpus ui-es-en --budgets 5 10 15 --seeds 0 1 2 \\
        --core 0 --json runs/budget_curve_ui.json
    python bench/budget_curve.py --from-json runs/budget_curve_ui.json \\
        --peer bench/results/peer_joeynmt_ui-es-en_45min_xeon207.json --plot curve.png --table

The report's figure, three results files of the Bible corpus as one series:

    python bench/budget_curve.py --label "train.py --time-budget, the defaults" \\
        --from-json bench/results/budget_bible-es-en_5min_xeon207_vocab4000.json \\
        bench/results/budget_bible-es-en_15min_xeon207_vocab8000.json \\
        bench/results/budget_bible-es-en_45min_xeon207_defaults.json \\
        --peer bench/results/peer_joeynmt_bible-es-en_45min_xeon207.json \\
        --peer-label "JoeyNMT 2.3, 45 min" --plot docs/budget_bleu_bible.png \\
        --title "Bible es-en, Intel Xeon (model 207), float32, one core"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from common import (  # noqa: E402
    DEFAULT_CORPUS,
    REPO,
    BenchError,
    bleu_all_ways,
    copyable_share,
    machine,
    pinned,
    read_pairs,
    write_json,
)

SPLITS = ("train", "valid", "test")


# --- Training and reading the runs -----------------------------------------------------------


def run_name(corpus: Path, minutes: float, seed: int) -> str:
    return f"{corpus.name}_{minutes:g}min_s{seed}"


def train_command(args, corpus: Path, minutes: float, seed: int, run_dir: Path) -> list[str]:
    """The pinned `train.py` command of one corpus, budget and seed."""
    command = [sys.executable, str(REPO / "train.py")]
    for flag, split in zip(("--data", "--valid", "--test"), SPLITS, strict=True):
        command += [flag, str(corpus / f"{split}.tsv")]
    command += ["--time-budget", f"{minutes:g}m", "--seed", str(seed),
                "--output-dir", str(run_dir), *shlex.split(args.train_args)]
    return pinned(command, args.core)


def read_run(run_dir: Path) -> dict:
    """What a finished run reports of itself: its updates, epochs, seconds and test BLEU."""
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    test = metrics.get("test") or {}
    per_epoch = config.get("steps_per_epoch")
    return {
        "updates": metrics["final_step"],
        "epochs": round(metrics["final_step"] / per_epoch, 2) if per_epoch else None,
        "train_seconds": metrics["train_seconds"],
        "precision": config.get("precision"),
        "beam_size": test.get("beam_size"),
        "bleu_lc": round(test["bleu_lowercase"], 2),
        "bleu_cased": round(test["bleu"], 2),
        "exact_match": test.get("exact_match"),
    }


def translate_and_score(args, run_dir: Path, pairs) -> dict:
    """The test split decoded by `translate.py --beam 4` on the run's core, scored
    as the peer is (BLEU three ways, copyable tokens)."""
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    command = pinned([sys.executable, str(REPO / "translate.py"), "--run", str(run_dir),
                      "--beam", "4"], args.core)
    started = time.perf_counter()
    done = subprocess.run(command, input="\n".join(sources) + "\n", capture_output=True,
                          text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode:
        raise BenchError(f"translate.py --run {run_dir} failed: {done.stderr.strip()[-500:]}")
    hypotheses = done.stdout.splitlines()
    return {"seconds": round(time.perf_counter() - started, 1),
            "bleu": bleu_all_ways(hypotheses, references),
            "copyable_tokens": copyable_share(sources, references, hypotheses)}


def train_one(args, corpus: Path, minutes: float, seed: int) -> dict:
    """Trains one budget and seed unless its run is finished; returns its record."""
    name = run_name(corpus, minutes, seed)
    run_dir = args.runs / name
    command = train_command(args, corpus, minutes, seed, run_dir)
    wall = None
    if not (run_dir / "metrics.json").is_file():
        resume = ["--resume"] if (run_dir / "config.json").is_file() else []
        started = time.perf_counter()
        with open(args.runs / f"{name}.log", "a", encoding="utf-8") as log:
            done = subprocess.run(command + resume, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        if done.returncode:
            raise BenchError(f"train.py exited with {done.returncode}; its output: "
                             f"{args.runs / (name + '.log')}")
        wall = round(time.perf_counter() - started, 1)
    return {"minutes": minutes, "seed": seed, "run_dir": str(run_dir),
            "command": shlex.join(command), "command_wall_seconds": wall, **read_run(run_dir)}


def measure(args) -> int:
    """Every corpus in turn, each with its own results file."""
    for corpus in args.corpus:
        for split in SPLITS:
            if not (corpus / f"{split}.tsv").is_file():
                raise BenchError(f"{corpus / (split + '.tsv')} not found (--corpus DIR)")
    args.runs = args.runs or REPO / "runs" / "budget_curve"
    args.runs.mkdir(parents=True, exist_ok=True)
    for corpus in args.corpus:
        measure_corpus(args, corpus, args.json or args.runs / f"{corpus.name}.json")
    return 0


def measure_corpus(args, corpus: Path, json_path: Path) -> None:
    """Every budget and seed on one corpus; the results file is rewritten after each run."""
    pairs = read_pairs(corpus / "test.tsv") if args.translate else None
    record = {"date": datetime.date.today().isoformat(), "corpus": corpus.name,
              "label": args.label or _label(corpus.name, args.train_args),
              "train_args": args.train_args, "core": args.core,
              "machine_before": machine(), "runs": []}
    for minutes in args.budgets:
        for seed in args.seeds:
            run = train_one(args, corpus, minutes, seed)
            if args.translate:
                run["translate_beam4"] = translate_and_score(args, Path(run["run_dir"]), pairs)
            record["runs"].append(run)
            record["machine_after"] = machine()
            write_json(json_path, record)  # after every run: a partial file is usable
            print(f"{corpus.name}, {minutes:g} min, seed {seed}: {run['updates']} updates, "
                  f"{run['epochs']} epochs, BLEU lc {run['bleu_lc']}", flush=True)
    print(f"written: {json_path}")


def _label(corpus: str, train_args: str) -> str:
    return f"{corpus}, train.py --time-budget" + (f" {train_args}" if train_args else "")


# --- Table and plot from results -------------------------------------------------------------


def normalized(run: dict) -> dict:
    """A run of a results file as `{minutes, seed, bleu_lc, updates, epochs, train_seconds}`;
    files of the earlier format (BLEU under `translate_beam4`, the seed in the
    command) are read too."""
    bleu = run.get("bleu_lc")
    if bleu is None:
        bleu = run["translate_beam4"]["bleu_lc_13a"]
    seed = run.get("seed")
    if seed is None:
        found = re.search(r"--seed (\d+)", run.get("command", ""))
        seed = int(found.group(1)) if found else 0
    return {"minutes": run["minutes"], "seed": seed, "bleu_lc": bleu,
            "updates": run.get("updates", run.get("final_step")), "epochs": run.get("epochs"),
            "train_seconds": run.get("train_seconds")}


def load_series(paths: list[Path], label: str | None = None) -> list[tuple[str, list[dict]]]:
    """`(label, runs)` per label of the files, in order; files of one label (runs
    measured apart) make one series."""
    series: dict[str, list[dict]] = {}
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        name = label or record.get("label") or record.get("corpus") or Path(path).stem
        series.setdefault(name, []).extend(normalized(run) for run in record["runs"])
    return list(series.items())


def load_peer(path: Path, label: str | None = None) -> dict:
    peer = json.loads(Path(path).read_text(encoding="utf-8"))
    training = peer.get("training") or {}
    return {"label": label or f"JoeyNMT 2.3, {peer['setup']}, {peer['minutes']:g} min",
            "minutes": peer["minutes"], "bleu_lc": peer["bleu"]["bleu_lc_13a"],
            "updates": training.get("batches")}


def _by_budget(runs: list[dict]) -> dict[float, list[dict]]:
    groups: dict[float, list[dict]] = {}
    for run in sorted(runs, key=lambda r: (r["minutes"], r["seed"])):
        groups.setdefault(run["minutes"], []).append(run)
    return groups


def _joined(values, form="{:,}") -> str:
    return "; ".join("-" if v is None else form.format(v) for v in values)


def table(series, peers) -> str:
    """Markdown: per series and budget, the mean BLEU, each seed's BLEU, updates
    and epochs, with each peer's BLEU beside it."""
    peer_heads = "".join(f" {p['label']} |" for p in peers)
    lines = []
    for label, runs in series:
        lines += [f"**{label}**", "",
                  "| budget | mean BLEU | BLEU by seed | updates | epochs |" + peer_heads,
                  "|---|---|---|---|---|" + "---|" * len(peers)]
        for minutes, group in _by_budget(runs).items():
            mean = statistics.mean(r["bleu_lc"] for r in group)
            seeds = "; ".join(f"{r['bleu_lc']:.2f} (seed {r['seed']})" for r in group)
            lines.append(f"| {minutes:g} min | {mean:.2f} | {seeds} | "
                         f"{_joined(r['updates'] for r in group)} | "
                         f"{_joined((r['epochs'] for r in group), '{:.2f}')} |"
                         + "".join(f" {p['bleu_lc']:.2f} |" for p in peers))
        lines.append("")
    return "\n".join(lines)


def plot(series, peers, path: Path, title: str | None = None) -> None:
    """BLEU against the budget: every seed a point, the mean per budget a line,
    one colour per series; each peer a horizontal line at its BLEU, named in
    the legend, with a square at its own training minutes (no labels on the
    points, so none overlap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for index, (label, runs) in enumerate(series):
        color = f"C{index}"
        groups = _by_budget(runs)
        ax.plot([r["minutes"] for r in runs], [r["bleu_lc"] for r in runs], "o", color=color,
                alpha=0.45, markersize=4, linestyle="none", label=f"{label}: each seed")
        means = [statistics.mean(r["bleu_lc"] for r in group) for group in groups.values()]
        ax.plot(list(groups), means, "-", color=color, marker="D", markersize=4,
                label=f"{label} (mean of seeds)")
    for index, peer in enumerate(peers):
        color = f"C{len(series) + index}"
        ax.axhline(peer["bleu_lc"], color=color, linestyle="--",
                   linewidth=1, label=f"{peer['label']}: {peer['bleu_lc']:.2f}")
        ax.plot([peer["minutes"]], [peer["bleu_lc"]], "s", color=color, markersize=5,
                label="_nolegend_")
    ax.set_xlabel("training budget (minutes, one CPU core)")
    ax.set_ylabel("test BLEU (sacrebleu 13a, lower-cased, beam 4)")
    ax.set_title(title or "BLEU against training time", fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def report(args) -> int:
    try:
        series = load_series(args.from_json, args.label)
        labels = args.peer_label + [None] * (len(args.peer) - len(args.peer_label))
        peers = [load_peer(path, label) for path, label in zip(args.peer, labels, strict=True)]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise BenchError(f"--from-json/--peer: cannot read a results file: {error}") from None
    if args.table:
        print(table(series, peers))
    if args.plot:
        plot(series, peers, args.plot, args.title)
        print(f"written: {args.plot}", file=sys.stderr)
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, nargs="+", default=[DEFAULT_CORPUS],
                        help="directories with train.tsv, valid.tsv, test.tsv, one results "
                        "file each (default: ui-es-en, the development corpus)")
    parser.add_argument("--budgets", type=float, nargs="+", default=[5, 10, 15],
                        help="training budgets in minutes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="train.py --seed")
    parser.add_argument("--core", type=int, default=0, help="the one CPU core (taskset -c)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="RUNS, where the run directories and results files go "
                        "(default: runs/budget_curve)")
    parser.add_argument("--train-args", default="", help="more train.py options, quoted")
    parser.add_argument("--translate", action="store_true",
                        help="also decode the test split with translate.py --beam 4 and score "
                        "it as the peer is (copyable tokens): a second decoding per run")
    parser.add_argument("--json", type=Path, default=None,
                        help="the results file of a single corpus (default: "
                        "RUNS/{corpus}.json)")
    parser.add_argument("--label", default=None,
                        help="the series' name in the table and plot (default: the corpus "
                        "and --train-args); with --from-json, one name for all the files")
    parser.add_argument("--from-json", type=Path, nargs="+", default=None,
                        help="no training: the table and plot of these results files")
    parser.add_argument("--peer", type=Path, nargs="*", default=[],
                        help="JSON files of bench/peer_joeynmt/run.py, shown beside")
    parser.add_argument("--peer-label", nargs="*", default=[],
                        help="the peers' names, one per --peer file in order (default: "
                        "JoeyNMT 2.3, its setup and minutes)")
    parser.add_argument("--table", action="store_true", help="print the Markdown table")
    parser.add_argument("--plot", type=Path, default=None, help="PNG to write")
    parser.add_argument("--title", default=None, help="the plot's title (e.g. the CPU)")
    args = parser.parse_args(argv)
    if args.from_json is None and (args.table or args.plot or args.peer):
        parser.error("--table, --plot and --peer go with --from-json")
    if len(args.peer_label) > len(args.peer):
        parser.error("--peer-label names at most one peer per --peer file")
    if args.from_json is not None and not (args.table or args.plot):
        parser.error("--from-json needs --table or --plot")
    if args.json and len(args.corpus) > 1:
        parser.error("--json names the results file of one corpus; with several, leave it out")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return report(args) if args.from_json else measure(args)
    except BenchError as error:
        print(f"budget_curve: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
