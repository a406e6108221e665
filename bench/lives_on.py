"""A translator that lives on: the best weights against the last, and adaptation to new text.

Trains, each pinned to one core (`taskset`), with `train.py`'s defaults:

- `bible45`: the Bible corpus, `--time-budget 45m` (core 0);
- `ui15`: ui-es-en, `--time-budget 15m` (core 1, beside it);
- then on core 1, on `bible2k.tsv`, 2,000 training verses drawn with seed 0,
  validated on `valid200.tsv`, the first 200 validation verses (an epoch
  of 2,000 pairs is about 60 steps, and validating all 1,198 verses after
  each would take most of the time): `adapt5`, `--init-from ui15
  --time-budget 5m`; `scratch5`, the same 5 minutes from scratch;
  `adapt5_low`, `adapt5` with `--warmup-steps 100 --learning-rate 0.0005`.

Then it scores, lower-cased BLEU with beam 4 (sacrebleu 13a,
`transformer.run.evaluation`): for `bible45` and `ui15` their own test split
with the weights they ended with (the moving average of the last step) and
with the best by validation loss (`best.weights.h5`); for the three Bible
runs and the unadapted `ui15`, the Bible test split and the ui-es-en test
split. A run whose `metrics.json` exists is not trained again.

    python bench/lives_on.py --bible data/bible-es-en --ui ui-es-en --runs runs/lives_on
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from common import REPO, RESULTS, BenchError, machine, pinned, read_pairs, write_json  # noqa: E402

ADAPT_PAIRS = 2000


def _split(corpus: Path, name: str) -> str:
    return str(corpus / f"{name}.tsv")


def runs(args) -> list[tuple[str, int, list[str]]]:
    """`(name, core, train.py arguments)` of every run, in the order they start."""
    bible, ui = args.bible, args.ui
    bible_eval = ["--valid", str(args.runs / "valid200.tsv"), "--test", _split(bible, "test")]
    small = str(args.runs / "bible2k.tsv")
    return [
        ("bible45", 0, ["--data", _split(bible, "train"), "--valid", _split(bible, "valid"),
                        "--test", _split(bible, "test"), "--time-budget", "45m"]),
        ("ui15", 1, ["--data", _split(ui, "train"), "--valid", _split(ui, "valid"),
                     "--test", _split(ui, "test"), "--time-budget", "15m"]),
        ("adapt5", 1, ["--init-from", str(args.runs / "ui15"), "--data", small, *bible_eval,
                       "--time-budget", "5m"]),
        ("scratch5", 1, ["--data", small, *bible_eval, "--time-budget", "5m"]),
        ("adapt5_low", 1, ["--init-from", str(args.runs / "ui15"), "--data", small, *bible_eval,
                           "--time-budget", "5m", "--warmup-steps", "100",
                           "--learning-rate", "0.0005"]),
    ]


def write_adaptation_pairs(train_tsv: Path, output: Path) -> None:
    """`ADAPT_PAIRS` lines of `train_tsv` drawn with seed 0, in file order."""
    lines = train_tsv.read_text(encoding="utf-8").splitlines()
    picked = sorted(random.Random(0).sample(range(len(lines)), ADAPT_PAIRS))
    output.write_text("".join(lines[i] + "\n" for i in picked), encoding="utf-8")


def train_all(args) -> None:
    """Core 0's run in the background, core 1's in turn; finished runs are skipped."""
    background = []
    for name, core, train_args in runs(args):
        run_dir = args.runs / name
        if (run_dir / "metrics.json").is_file():
            continue
        command = pinned([sys.executable, str(REPO / "train.py"), *train_args, "--no-export",
                          "--output-dir", str(run_dir)], core)
        log = open(args.runs / f"{name}.log", "w", encoding="utf-8")  # noqa: SIM115 - kept open
        print(f"{time.strftime('%H:%M:%S')} {name}: {' '.join(command)}", flush=True)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        if core == 0:
            background.append((name, process))
        elif process.wait() != 0:
            raise BenchError(f"{name} failed; see {args.runs / f'{name}.log'}")
    for name, process in background:
        if process.wait() != 0:
            raise BenchError(f"{name} failed; see {args.runs / f'{name}.log'}")


def score(run_dir: Path, test: str, best: bool = False) -> float:
    """Lower-cased beam-4 BLEU of a run's weights (or its best) on a test file."""
    from transformer.decoding.pipeline import load_run
    from transformer.run.callbacks import BEST_WEIGHTS
    from transformer.run.config import load_config
    from transformer.run.evaluation import evaluate

    tokenizers, model = load_run(run_dir)
    if best:
        model.load_weights(run_dir / BEST_WEIGHTS)
    config = load_config(run_dir)
    evaluation = evaluate(model, tokenizers, read_pairs(test), max_tokens=config.resolved_max_tokens,
                          lower_case=config.lower_case, beam_size=4)
    return round(evaluation.bleu_lowercase, 2)


def report(args) -> dict:
    bible_test, ui_test = _split(args.bible, "test"), _split(args.ui, "test")
    record = {}
    for name in ("bible45", "ui15"):
        run_dir = args.runs / name
        best = json.loads((run_dir / "best.json").read_text())
        own = bible_test if name == "bible45" else ui_test
        metrics = json.loads((run_dir / "metrics.json").read_text())
        record[name] = {"final_step": metrics["final_step"], "best": best,
                        "BLEU, last weights": score(run_dir, own),
                        "BLEU, best weights": score(run_dir, own, best=True)}
        print(name, record[name], flush=True)
    for name in ("ui15", "adapt5", "scratch5", "adapt5_low"):
        run_dir = args.runs / name
        metrics = json.loads((run_dir / "metrics.json").read_text())
        record.setdefault(name, {}).update({
            "final_step": metrics["final_step"],
            "BLEU, Bible test": score(run_dir, bible_test),
            "BLEU, ui-es-en test": score(run_dir, ui_test)})
        print(name, record[name], flush=True)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bible", type=Path, required=True, help="bench/bible_corpus.py's output")
    parser.add_argument("--ui", type=Path, required=True, help="the ui-es-en corpus directory")
    parser.add_argument("--runs", type=Path, default=Path("runs/lives_on"))
    parser.add_argument("--name", default="", help="suffix of the results file")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    before = machine()
    try:
        if not (args.runs / "bible2k.tsv").is_file():
            write_adaptation_pairs(args.bible / "train.tsv", args.runs / "bible2k.tsv")
            lines = (args.bible / "valid.tsv").read_text(encoding="utf-8").splitlines(True)
            (args.runs / "valid200.tsv").write_text("".join(lines[:200]), encoding="utf-8")
        train_all(args)
        record = report(args)
    except BenchError as err:
        print(f"lives_on: {err}", file=sys.stderr)
        return 1
    name = "lives_on" + (f"_{args.name}" if args.name else "")
    write_json(RESULTS / f"{name}.json", {
        "machine_before": before, "machine_after": machine(), "runs": {
            name: " ".join(train_args) for name, _, train_args in runs(args)},
        "results": record, "command": "python bench/lives_on.py " + " ".join(sys.argv[1:])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
