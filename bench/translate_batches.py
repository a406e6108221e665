"""Translating a test set: one batch against batches sorted by length.

`Translator.__call__` sorts a list of sentences by length and decodes it in
batches of `batch_size` (`transformer.constants.TRANSLATE_BATCH_SIZE`), so
that a batch of short sentences stops early and a sentence that never emits
`[END]` only holds up its own batch. This script loads a trained run once,
translates the source column of a TSV once to trace the decoding loop, then
times the whole list with each batch size in turn, `--rounds` times
alternating, and counts the translations that differ from one batch's.
The reference is one batch of all the sentences (what the translator did
before it batched).

Command (a run trained on the development corpus by `train.py`):
    python bench/translate_batches.py --run runs/train \
        --tsv ui-es-en/test.tsv
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from real_text_scoring import machine  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run directory written by train.py")
    parser.add_argument("--tsv", required=True, help="sentence pairs; the first column is read")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default=str(ROOT / "bench/results/translate_batches.json"))
    args = parser.parse_args(argv)

    from transformer.strategies import evaluation_strategy
    from transformer.translate import Translator

    sources = [line.split("\t")[0] for line in
               Path(args.tsv).read_text(encoding="utf-8").splitlines() if line.strip()]
    translator = Translator.from_run(args.run)
    everything = len(sources)
    sizes = [everything, *args.batch_sizes]

    def translate(batch_size):
        return [r.text for r in translator(sources, search=evaluation_strategy(args.beam),
                                           return_attention=False, batch_size=batch_size)]

    started = time.perf_counter()
    reference = translate(everything)
    print(f"first call (traces the loop): {time.perf_counter() - started:.1f} s", flush=True)
    seconds = {size: [] for size in sizes}
    differ = {}  # translations that differ from one batch's (padding changes float sums)
    for _ in range(args.rounds):
        for size in sizes:
            started = time.perf_counter()
            texts = translate(size)
            seconds[size].append(round(time.perf_counter() - started, 2))
            differ[size] = sum(a != b for a, b in zip(texts, reference, strict=True))
    median = {size: statistics.median(values) for size, values in seconds.items()}
    print(f"{len(sources)} sentences, beam {args.beam}; seconds per pass (median of "
          f"{args.rounds}) and ratio to one batch:")
    for size in sizes:
        name = "one batch" if size == everything else f"batches of {size}"
        print(f"  {name:18s} {median[size]:6.2f} s  {median[size] / median[everything]:.2f}x"
              f"  ({differ[size]} translations differ from one batch's)")
    record = {"machine": machine(), "precision": "float32", "args": vars(args),
              "sentences": len(sources), "seconds": {str(k): v for k, v in seconds.items()},
              "differing_translations": {str(k): v for k, v in differ.items()}}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
