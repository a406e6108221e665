"""Re-scores a finished `train.py` run on a test TSV under several decoding caps and BLEU forms.

`train.py` decodes the test sources greedily with at most the model's
`max_length` tokens (256 for the tutorial preset) and scores BLEU on
`normalize_text` forms of both sides (`transformer.training.evaluate`). The
tutorial decodes at most 64 tokens and scores the detokenized output against the
raw references. This script decodes once with the largest cap and, since a
greedy output cut at k tokens is what decoding with cap k gives, scores every
cap from that one decoding:

- `max_length` (train.py's cap), 64 (the tutorial's) and `input length + 50`
  (section 6.1 of Vaswani et al., 2017; input length in subword tokens,
  `[START]` and `[END]` included);
- for each: sacrebleu lower-cased 13a and cased 13a against the raw references,
  and train.py's normalized BLEU and exact match (`bench/real_text_scoring.py`),
  with the share of outputs that reach the cap without `[END]`.

Example:

    python bench/real_text_eval.py runs/train --test test.tsv --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from real_text_scoring import bleu_all_ways, length_report, machine  # noqa: E402

from transformer.constants import END_ID, PAD_ID  # noqa: E402
from transformer.data import read_tsv  # noqa: E402
from transformer.translate import Translator  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--test", required=True)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    machine_start = machine()
    pairs = read_tsv(args.test)
    sources = [s for s, _ in pairs]
    references = [r for _, r in pairs]
    # Translator's own default cap is lower than the model's max_length; train.py
    # decodes with the model's max_length (translate_all(max_length=max_tokens)).
    translator = Translator.from_run(args.run_dir, max_length=1 << 20)
    max_length = int(translator.max_length)  # min(requested, model's max_length)

    t0 = time.perf_counter()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i].split()))
    ids = [None] * len(sources)
    in_lengths = [0] * len(sources)
    for start in range(0, len(order), args.batch_size):
        indices = order[start : start + args.batch_size]
        results = translator([sources[i] for i in indices], max_length=max_length,
                             return_attention=False)
        for i, result in zip(indices, results, strict=True):
            ids[i] = np.asarray(result.token_ids, np.int64)  # generated ids, [END] if any
            in_lengths[i] = len(result.input_tokens)
    decode_seconds = time.perf_counter() - t0

    def texts_for(caps):
        width = max(max(len(x) for x in ids), 1)
        rows = np.full([len(ids), width], PAD_ID, np.int64)
        lengths = []
        for row, (x, cap) in enumerate(zip(ids, caps, strict=True)):
            x = x[:cap]
            rows[row, : len(x)] = x
            lengths.append(len(x))
        texts = [t.decode("utf-8")
                 for t in translator.tokenizers.target.detokenize(tf.constant(rows)).numpy()]
        return texts, lengths

    variants = {}
    for name, caps in (
        (f"cap_{max_length}", [max_length] * len(ids)),
        ("cap_64", [64] * len(ids)),
        ("cap_input_plus_50", [n + 50 for n in in_lengths]),
    ):
        texts, lengths = texts_for(caps)
        ended = [len(x[:c]) > 0 and END_ID in x[:c] for x, c in zip(ids, caps, strict=True)]
        report = length_report(lengths, in_lengths, min(caps))
        # An output hits its cap when it has no [END] within it.
        report["hit_cap"] = int(len(ended) - sum(ended))
        report["hit_cap_share"] = round(1 - sum(ended) / len(ended), 4)
        if name == "cap_input_plus_50":
            report["cap"] = "input tokens + 50 (per sentence)"
        variants[name] = {"test": bleu_all_ways(texts, references), "lengths": report}
        if name == f"cap_{max_length}":
            examples = [{"source": s, "reference": r, "translation": t, "tokens": int(len(x))}
                        for s, r, t, x in zip(sources[: args.examples], references[: args.examples],
                                              texts[: args.examples], ids[: args.examples],
                                              strict=True)]

    result = {
        "what": "bench/real_text_eval.py: a train.py run re-scored",
        "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "date": started_at,
        "machine_start": machine_start,
        "machine_end": machine(),
        "run_config": json.loads((Path(args.run_dir) / "config.json").read_text()),
        "run_metrics": json.loads((Path(args.run_dir) / "metrics.json").read_text()),
        "run_metrics_csv": (Path(args.run_dir) / "metrics.csv").read_text().splitlines(),
        "decode_seconds": round(decode_seconds, 1),
        "variants": variants,
        "examples": examples,
    }
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
