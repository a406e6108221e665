"""Scaling up: what `train.py` needs for a corpus of N pairs, measured.

For each N it makes a corpus of N pairs (`make_corpus`: copies of a real
corpus, each copy shuffled by its own seed and the words of each of its
sentences rotated by the copy's number, so that every copy is new text to
the splits, the vocabulary's sample and the batches, with the lengths and
pieces of the real corpus), then runs, as a user would,

    train.py --data scale_N.tsv --time-budget B --eval-beam 1 --output-dir RUNS/scale_N

and then `--resume` of the same run with a budget B longer. For each run it
reports the peak memory (RSS of the training process, memory-mapped pages
included, and its anonymous memory alone, without them), the seconds from the command's start to the first training step
(TensorFlow's import included), the steps a second after warm-up (the median
of `train.py`'s own once-a-minute progress lines) and the token budget of a
step (`batch_tokens`), the disk the run's `tokens/` takes, and the same for
the resume.

Example (Bible corpus, one core each, 300,000 pairs and 5 million):

    python bench/scale.py --base data/bible-es-en/train.tsv --pairs 30000 300000 5000000 \\
        --cores 0 --budget 3m --json runs/scale_bible.json

`--vocab-samples K ...` instead times learning the shared vocabulary (8,000
pieces, as `train.py` learns it) from K pairs of such a corpus, each in a
process of its own: seconds and peak memory, which `--vocab-sample`'s
default weighs against what the vocabulary sees.

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
import threading
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # `transformer`, for machine()

from common import REPO, BenchError, machine, pinned, portable, write_json  # noqa: E402

_FIRST_STEP = re.compile(r"First step \(step \d+\) done")
_RATE = re.compile(r"Step \d+ .*?: ([0-9.]+) steps a second(?: \(([0-9,]+) target tokens)?")
# The log lines that time the work before the first step.
_STAGES = re.compile(r"^(Scanned|Read the scan|Built|Tokenized|Opened) ")


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


class _PeakAnonymous:
    """The largest `RssAnon` of a process (KiB), read from /proc twice a second."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._done.wait(0.5):
            try:
                with open(f"/proc/{self.pid}/status", encoding="ascii") as status:
                    for line in status:
                        if line.startswith("RssAnon:"):
                            self.peak = max(self.peak, int(line.split()[1]))
            except OSError:
                return

    def stop(self):
        self._done.set()
        self._thread.join()


def _median_after_warm_up(values: list[float]) -> float | None:
    """The median of once-a-minute rates without the first, whose minute holds
    the warm-up (with it when it is the only one)."""
    values = sorted(values[1:]) or values
    return values[len(values) // 2] if values else None


def run_train(args: list[str], cores, env=None) -> dict:
    """Runs train.py (with `env` added to its environment); returns its peak
    RSS, the seconds to its first step, its steps and target tokens a second
    after warm-up and the tail of its output."""
    command = pinned([sys.executable, str(REPO / "train.py"), *args], cores)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=REPO, env={**os.environ, **(env or {})})
    anonymous = _PeakAnonymous(process.pid)
    first_step, rates, tokens, tail, stages = None, [], [], [], []
    for line in process.stdout:
        tail = (tail + [line.rstrip()])[-40:]
        if _STAGES.match(line):
            stages.append(portable(line.strip()))
        if first_step is None and _FIRST_STEP.search(line):
            first_step = time.perf_counter() - started
        if match := _RATE.search(line):
            rates.append(float(match.group(1)))
            if match.group(2):
                tokens.append(float(match.group(2).replace(",", "")))
    _, status, usage = os.wait4(process.pid, 0)
    anonymous.stop()
    if os.waitstatus_to_exitcode(status):
        print("\n".join(tail), file=sys.stderr)
        raise BenchError(f"train.py failed: {portable(' '.join(command))}")
    steps, tokens = _median_after_warm_up(rates), _median_after_warm_up(tokens)
    return {
        "command": portable(" ".join(command)),
        "seconds": round(time.perf_counter() - started, 1),
        "first_step_seconds": None if first_step is None else round(first_step, 1),
        "steps_per_second": None if steps is None else round(steps, 3),
        "target_tokens_per_second": tokens,
        # ru_maxrss is in KiB on Linux.
        "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3),
        # Without file-backed pages (the memory-mapped token files, the libraries).
        "peak_anonymous_gib": round(anonymous.peak / 2**20, 3),
        "before_the_first_step": stages,
    }


_LEARN = """
import json, resource, sys, time
from transformer.data.tokenizers import build_tokenizers
from transformer.data.tsv import read_tsv
pairs = read_tsv(sys.argv[1])[: int(sys.argv[2])]
started = time.perf_counter()
tokenizers = build_tokenizers(pairs, 8000, kind="sentencepiece", shared=True)
print(json.dumps({"pairs": len(pairs), "seconds": round(time.perf_counter() - started, 1),
                  "pieces": int(tokenizers.source.get_vocab_size()),
                  "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                        / 2**20, 3)}))
"""


def time_vocabularies(corpus: Path, samples, cores) -> list[dict]:
    """Learns the vocabulary from the first K pairs of `corpus` for each K."""
    records = []
    for size in samples:
        command = pinned([sys.executable, "-c", _LEARN, str(corpus), str(size)], cores)
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            raise BenchError(f"learning a vocabulary from {size} pairs failed")
        records.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(records[-1]), flush=True)
    return records


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
    parser.add_argument("--vocab-samples", type=int, nargs="+",
                        help="time the vocabulary on these sample sizes instead")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    try:
        if args.vocab_samples:
            args.work.mkdir(parents=True, exist_ok=True)
            corpus = args.work / f"scale_{max(args.vocab_samples)}.tsv"
            if not corpus.exists():
                make_corpus(args.base, max(args.vocab_samples), corpus)
            results = time_vocabularies(corpus, args.vocab_samples, args.cores)
            if args.json:
                write_json(args.json, {"machine": machine(), "base": str(args.base),
                                       "cores": args.cores, "vocabularies": results})
            return 0
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
            # The budget counts validation too: the resume gets the run's time so far and more.
            spent = json.loads((run / "metrics.json").read_text())["train_seconds"]
            budget_seconds = spent + config["time_budget"]
            resumed = run_train([*options[:3], f"{budget_seconds:.0f}", *options[4:],
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
