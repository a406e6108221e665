"""Scaling up: what `train.py` needs for a corpus of N pairs, measured.

For each N it makes a corpus of N pairs (`make_corpus`: copies of a real
corpus, each copy shuffled by its own seed and the words of each of its
sentences rotated by the copy's number, so that every copy is new text to
the splits, the vocabulary's sample and the batches, with the lengths and
pieces of the real corpus), then runs, as a user would,

    train.py --data scale_N.tsv --time-budget B --eval-beam 1 --output-dir RUNS/scale_N

and then `--resume` of the same run with a budget B longer. For each run it
reports the peak memory (RSS of the training process, memory-mapped pages
included), the seconds from the command's start to the first training step
(TensorFlow's import included), the steps a second after warm-up (the median
of `train.py`'s own once-a-minute progress lines) and the token budget of a
step (`batch_tokens`), the disk the run's `tokens/` takes, and the same for
the resume.

Example (Bible corpus, one core each, 300,000 pairs and 5 million):

    python bench/scale.py --base data/bible-es-en/train.tsv --pairs 30000 300000 5000000 \\
        --cores 0 --budget 3m --json runs/scale_bible.json

The corpora and runs go to `--work` (default `runs/scale`), which needs about
2.5 times the TSV's size in disk for each N.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, BenchError, machine, pinned, portable, write_json

_FIRST_STEP = re.compile(r"First step \(step \d+\) done")
_RATE = re.compile(r"Step \d+ .*?: ([0-9.]+) steps a second")


def _rotated(sentence: str, by: int) -> str:
    words = sentence.split(" ")
    by %= len(words)
    return " ".join(words[by:] + words[:by])


def make_corpus(base: Path, pairs: int, output: Path) -> None:
    """Writes `pairs` pairs: copy `c` of `base` in its own seeded order, the
    words of both sentences of every pair rotated by `c`."""
    lines = [line.rstrip("\n") for line in base.open(encoding="utf-8") if "\t" in line]
    written = 0
    with output.open("w", encoding="utf-8") as out:
        copy = 0
        while written < pairs:
            order = list(range(len(lines)))
            random.Random(copy).shuffle(order)
            for index in order[: pairs - written]:
                source, target = lines[index].split("\t")[:2]
                source, target = _rotated(source, copy), _rotated(target, copy)
                out.write(f"{source}\t{target}\n")
            written += min(len(order), pairs - written)
            copy += 1


def run_train(args: list[str], cores) -> dict:
    """Runs train.py; returns its peak RSS, the seconds to its first step, its
    steps a second after warm-up and the tail of its output."""
    command = pinned([sys.executable, str(REPO / "train.py"), *args], cores)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=REPO)
    first_step, rates, tail = None, [], []
    for line in process.stdout:
        tail = (tail + [line.rstrip()])[-40:]
        if first_step is None and _FIRST_STEP.search(line):
            first_step = time.perf_counter() - started
        if match := _RATE.search(line):
            rates.append(float(match.group(1)))
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        print("\n".join(tail), file=sys.stderr)
        raise BenchError(f"train.py failed: {portable(' '.join(command))}")
    rates = sorted(rates[1:]) or rates  # the first line's minute holds the warm-up
    return {
        "command": portable(" ".join(command)),
        "seconds": round(time.perf_counter() - started, 1),
        "first_step_seconds": None if first_step is None else round(first_step, 1),
        "steps_per_second": round(rates[len(rates) // 2], 3) if rates else None,
        # ru_maxrss is in KiB on Linux.
        "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3),
    }


def disk_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a TSV corpus to copy")
    parser.add_argument("--pairs", type=int, nargs="+", required=True, help="corpus sizes")
    parser.add_argument("--budget", default="3m", help="--time-budget of each run")
    parser.add_argument("--cores", default=None, help="taskset cores, e.g. 0 or 0,1")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "scale")
    parser.add_argument("--train-args", default="", help="more train.py options")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and runs")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    try:
        results = []
        for pairs in args.pairs:
            args.work.mkdir(parents=True, exist_ok=True)
            corpus, run = args.work / f"scale_{pairs}.tsv", args.work / f"scale_{pairs}"
            if not corpus.exists():
                make_corpus(args.base, pairs, corpus)
            shutil.rmtree(run, ignore_errors=True)
            options = ["--data", str(corpus), "--time-budget", args.budget, "--eval-beam", "1",
                       "--output-dir", str(run), *args.train_args.split()]
            first = run_train(options, args.cores)
            config = json.loads((run / "config.json").read_text())
            budget_seconds = config["time_budget"]
            resumed = run_train([*options[:3], f"{2 * budget_seconds:.0f}", *options[4:],
                                 "--resume"], args.cores)
            record = {"pairs": pairs, "tsv_mb": round(corpus.stat().st_size / 1e6, 1),
                      "batch_tokens": config["batch_tokens"],
                      "tokens_mb": disk_mb(run / "tokens"), "run": first, "resume": resumed}
            print(json.dumps(record), flush=True)
            results.append(record)
            if not args.keep:
                corpus.unlink()
                shutil.rmtree(run, ignore_errors=True)
    except BenchError as error:
        print(f"scale.py: {error}", file=sys.stderr)
        return 1
    if args.json:
        write_json(args.json, {"machine": machine(), "base": str(args.base),
                               "budget": args.budget, "cores": args.cores, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
