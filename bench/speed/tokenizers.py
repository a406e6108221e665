"""`bench/train_speed.py tokenizers`: WordPiece against SentencePiece on a real corpus.

For each tokenizer setup, on the training pairs of a TSV file:

- the time of `build_tokenizers` (learning both vocabularies and building the
  in-graph tokenizers: what a training run pays), and for SentencePiece the
  time of `learn_sentencepiece_model` alone per side;
- the vocabulary sizes reached;
- the mean number of tokens per sentence, source and target (without
  `[START]` and `[END]`): shorter sequences are cheaper to train on;
- the share of target sentences that come back unchanged from
  `detokenize(tokenize(s))` (WordPiece lower-cases, strips accents and splits
  punctuation off; SentencePiece only applies NFKC and collapses spaces);
- the share of tokens that are `[UNK]`.

Setups: `wordpiece` (the tutorial's, lower-cased), `sentencepiece` (one
unigram model per language) and `sentencepiece shared` (one model learnt on
both sides, section 3.4 of the paper). Results are printed as a Markdown
table and written to `tokenizer_speed.json` in the results folder (`--output`).

Commands:
    python bench/train_speed.py tokenizers --data ui-es-en/train.tsv
    python bench/train_speed.py tokenizers --data por.tsv --source-column 1 --target-column 0
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import RESULTS, machine  # noqa: E402

from transformer.constants import UNK_ID  # noqa: E402
from transformer.data import build_tokenizers, read_tsv  # noqa: E402
from transformer.data.sentencepiece import learn_sentencepiece_model  # noqa: E402

SETUPS = {
    "wordpiece": {"kind": "wordpiece"},
    "sentencepiece": {"kind": "sentencepiece"},
    "sentencepiece shared": {"kind": "sentencepiece", "shared": True},
}


def token_stats(tokenizer, sentences: list[str], chunk: int = 4096) -> dict:
    """Mean tokens per sentence, unchanged round trips and [UNK] share."""
    lengths, unks, same = [], 0, 0
    for start in range(0, len(sentences), chunk):
        batch = sentences[start : start + chunk]
        ids = tokenizer.tokenize(tf.constant(batch))
        lengths.extend((ids.row_lengths().numpy() - 2).tolist())
        unks += int(np.sum(ids.flat_values.numpy() == UNK_ID))
        back = [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]
        same += sum(a == b for a, b in zip(back, batch, strict=True))
    return {
        "mean_tokens": float(np.mean(lengths)),
        "unk_share": unks / max(sum(lengths), 1),
        "unchanged_round_trips": same / len(sentences),
    }


def bench_setup(name: str, pairs, vocab_size: int) -> dict:
    options = SETUPS[name]
    started = time.perf_counter()
    tokenizers = build_tokenizers(pairs, vocab_size, **options)
    seconds = time.perf_counter() - started
    sources = [s for s, _ in pairs]
    targets = [t for _, t in pairs]
    row = {
        "setup": name,
        "build_tokenizers_s": round(seconds, 2),
        "vocab_source": int(tokenizers.source.get_vocab_size()),
        "vocab_target": int(tokenizers.target.get_vocab_size()),
        "source": token_stats(tokenizers.source, sources),
        "target": token_stats(tokenizers.target, targets),
    }
    if options["kind"] == "sentencepiece":
        sides = (
            {"both": sources + targets}
            if options.get("shared")
            else {
                "source": sources,
                "target": targets,
            }
        )
        for side, sentences in sides.items():
            started = time.perf_counter()
            learn_sentencepiece_model(sentences, vocab_size)
            row[f"learn_{side}_s"] = round(time.perf_counter() - started, 2)
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| setup | build_tokenizers (s) | SentencePiece learning alone (s) | vocab (src/tgt) "
        "| tokens per sentence (src/tgt) | unchanged round trips (tgt) | [UNK] share (src/tgt) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        learn = ", ".join(
            f"{key[6:-2]} {value}" for key, value in row.items() if key.startswith("learn_")
        )
        lines.append(
            f"| {row['setup']} | {row['build_tokenizers_s']} | {learn or '-'} "
            f"| {row['vocab_source']:,} / {row['vocab_target']:,} "
            f"| {row['source']['mean_tokens']:.1f} / {row['target']['mean_tokens']:.1f} "
            f"| {100 * row['target']['unchanged_round_trips']:.1f}% "
            f"| {100 * row['source']['unk_share']:.2f}% / {100 * row['target']['unk_share']:.2f}% |"
        )
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--data", required=True, help="a source<TAB>target TSV file")
    parser.add_argument("--source-column", type=int, default=0)
    parser.add_argument("--target-column", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--setups", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument(
        "--output", default=str(RESULTS / "tokenizer_speed.json")
    )


def run(args, parser=None) -> int:
    """The `tokenizers` mode: the vocabulary learners timed, a Markdown table printed."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    pairs = read_tsv(args.data, args.source_column, args.target_column, skip_bad_lines=True)
    header = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": machine()["cpu_model"],
        "cpus": os.cpu_count(),
        "tensorflow": tf.__version__,
        "data": args.data,
        "pairs": len(pairs),
        "vocab_size": args.vocab_size,
        "load_average_start": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(header))
    rows = [bench_setup(name, pairs, args.vocab_size) for name in args.setups]
    header["load_average_end"] = round(os.getloadavg()[0], 1)
    print(markdown(rows))
    print(f"load average at the end {header['load_average_end']}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({**header, "rows": rows}, indent=2) + "\n")
    return 0

