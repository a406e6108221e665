"""BLEU against training minutes: `train.py --time-budget` on one core, for
several budgets, next to the peer benchmark's JoeyNMT runs.

For each budget (minutes) it runs, pinned to one core with `taskset`:

    train.py --data D/train.tsv --valid D/valid.tsv --test D/test.tsv \\
        --time-budget {M}m --output-dir RUNS/budget_{M}min --no-export

(the defaults otherwise), reads the run's own beam-4 evaluation from
`metrics.json`, translates the test sources with `translate.py --beam 4` on
the same core, and scores those translations as the peer benchmark scores
JoeyNMT's (`real_text_scoring.bleu_all_ways`, `copyable_tokens.copyable_share`).
A budget whose run directory already holds `metrics.json` is not trained again,
so an interrupted benchmark continues where it stopped.

It writes a JSON (`--json`) and a plot (`--plot`) of BLEU (sacrebleu 13a,
lower-cased, beam 4) against training minutes, with every peer JSON given by
`--peer` (written by `bench/peer_joeynmt/run.py`) as points of their own.

Example (the development corpus, the peer on the other core at the same time):

    python bench/budget_curve.py --budgets 15 5 10 30 --core 0 \\
        --peer bench/results/peer_joeynmt_cpu_45min.json --plot docs/budget_bleu.png
    python bench/budget_curve.py --from-json bench/results/budget_curve.json \\
        bench/results/budget_curve_f32_15min_again.json bench/results/budget_curve_bf16.json \\
        --peer bench/results/peer_joeynmt_cpu_45min.json --plot docs/budget_bleu.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]
# The development corpus (not in the repository), in the current directory.
DEFAULT_CORPUS = Path("ui-es-en")

from copyable_tokens import copyable_share  # noqa: E402
from real_text_scoring import bleu_all_ways, machine  # noqa: E402


def read_pairs(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise SystemExit(f"budget_curve: {path}:{number}: expected source<TAB>target")
        pairs.append((fields[0], fields[1]))
    return pairs


def train_and_translate(minutes: float, args, pairs) -> dict:
    """Trains (unless done) and translates the test split; returns the record."""
    name = f"budget_{minutes:g}min" + (f"_{args.tag}" if args.tag else "")
    run_dir = args.runs / name
    pin = ["taskset", "-c", str(args.core)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    train_command = [
        sys.executable, str(REPO / "train.py"), "--data", str(args.corpus / "train.tsv"),
        "--valid", str(args.corpus / "valid.tsv"), "--test", str(args.corpus / "test.tsv"),
        "--time-budget", f"{minutes:g}m", "--output-dir", str(run_dir), "--no-export",
        *args.train_args.split(),
    ]
    wall = None
    if not (run_dir / "metrics.json").is_file():
        resume = ["--resume"] if (run_dir / "config.json").is_file() else []
        started = time.perf_counter()
        with open(args.runs / f"{name}.log", "a", encoding="utf-8") as log:
            subprocess.run(pin + train_command + resume, check=True, stdout=log,
                           stderr=subprocess.STDOUT, env=env)
        wall = round(time.perf_counter() - started, 1)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    sources = "\n".join(source for source, _ in pairs) + "\n"
    started = time.perf_counter()
    translated = subprocess.run(
        pin + [sys.executable, str(REPO / "translate.py"), "--run", str(run_dir), "--beam", "4"],
        input=sources, capture_output=True, text=True, check=True, env=env)
    translate_seconds = round(time.perf_counter() - started, 1)
    hypotheses = translated.stdout.splitlines()
    references = [target for _, target in pairs]
    return {
        "minutes": minutes,
        "command": " ".join(pin + train_command),
        "train_seconds": metrics["train_seconds"],
        "final_step": metrics["final_step"],
        "command_wall_seconds": wall,
        "run_evaluation": {key: metrics["test"][key] for key in
                           ("bleu", "bleu_lowercase", "exact_match")},
        "translate_beam4_seconds_one_core": translate_seconds,
        "translate_beam4": bleu_all_ways(hypotheses, references),
        "copyable_tokens": copyable_share([s for s, _ in pairs], references, hypotheses),
    }


def plot(series: list[tuple[str, list[dict]]], peers: list[dict], path: Path,
         machine: str | None = None) -> None:
    """BLEU against training minutes: one line per (label, runs), a point per peer
    run; `machine` (the CPU and precision) goes under the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for label, records in series:
        records = sorted(records, key=lambda run: run["minutes"])
        xs = [r["train_seconds"] / 60 for r in records]
        ys = [r["translate_beam4"]["bleu_lc_13a"] for r in records]
        ax.plot(xs, ys, "o-" if len(xs) > 1 else "o", label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8)
    for peer in peers:
        x = peer["minutes"]
        y = peer["bleu"]["bleu_lc_13a"]
        ax.plot([x], [y], "s", label=f"JoeyNMT 2.3, set-up {peer['setup']!r}")
        ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.set_xlabel("training minutes, one CPU core")
    ax.set_ylabel("test BLEU (sacrebleu 13a, lower-cased, beam 4)")
    title = "Development corpus (es-en, 26k pairs): BLEU against training time"
    ax.set_title(title + (f"\n{machine}" if machine else ""), fontsize=10)
    ax.set_xlim(left=0)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the labels above the points
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _label(train_args: str) -> str:
    return "this project, train.py --time-budget " + (train_args or "(the defaults)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[5, 10, 15, 30],
                        help="training budgets in minutes")
    parser.add_argument("--core", type=int, default=0, help="the one CPU core (taskset -c)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="directory with train.tsv, valid.tsv, test.tsv (default: "
                        "ui-es-en, the development corpus)")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "budget_curve")
    parser.add_argument("--peer", type=Path, nargs="*", default=[],
                        help="JSON files of bench/peer_joeynmt/run.py to plot beside")
    parser.add_argument("--train-args", default="",
                        help="more train.py options, e.g. '--precision mixed_bfloat16'")
    parser.add_argument("--tag", default="", help="suffix of the run directories' names")
    parser.add_argument("--label", default=None,
                        help="the runs' name in the plot (default: from --train-args); with "
                        "--from-json, the name of one line that all the files make")
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "budget_curve.json")
    parser.add_argument("--plot", type=Path, default=None, help="PNG to write")
    parser.add_argument("--machine", default=None,
                        help="the CPU and precision, written under the plot's title")
    parser.add_argument("--from-json", type=Path, nargs="+", default=None,
                        help="only plot: the runs of these JSON files (written by this "
                        "script), with --peer; files with the same label make one line")
    args = parser.parse_args(argv)
    peers = [json.loads(path.read_text(encoding="utf-8")) for path in args.peer]
    if args.from_json:
        recorded = [json.loads(path.read_text(encoding="utf-8")) for path in args.from_json]
        series = {}  # files with the same label (budgets run apart) make one line
        for result in recorded:
            label = args.label or result.get("label") or _label(result.get("train_args", ""))
            series.setdefault(label, []).extend(result["runs"])
        series = list(series.items())
        plot(series, peers, args.plot or BENCH / "results" / "budget_curve.png", args.machine)
        return 0
    for name in ("train.tsv", "valid.tsv", "test.tsv"):
        if not (args.corpus / name).is_file():
            parser.error(f"{args.corpus / name} not found (--corpus DIR)")
    args.runs.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(args.corpus / "test.tsv")
    result = {"date": datetime.date.today().isoformat(), "machine": machine(),
              "train_args": args.train_args, "label": args.label or _label(args.train_args),
              "load_before": os.getloadavg(), "runs": []}
    for minutes in args.budgets:
        record = train_and_translate(minutes, args, pairs)
        result["runs"].append(record)
        print(f"{minutes:g} min: {record['train_seconds']} s trained, {record['final_step']} "
              f"steps, BLEU lc beam 4 {record['translate_beam4']['bleu_lc_13a']}", flush=True)
    result["load_after"] = os.getloadavg()
    result["peers"] = [{"file": str(path), "setup": peer["setup"], "minutes": peer["minutes"],
                        "bleu_lc_13a": peer["bleu"]["bleu_lc_13a"]}
                       for path, peer in zip(args.peer, peers, strict=True)]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.plot:
        plot([(result["label"], result["runs"])], peers, args.plot, args.machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
