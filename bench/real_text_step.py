"""Training steps on real text: what the allocators, the XLA loss and fixed shapes cost.

`train.py` on a real corpus batches pairs of about equal length under a
token budget (section 5.1), so the shapes of its batches vary from step to
step. This script times such steps, each variant in its own process (the
allocators are chosen per process), the variants alternating over `--rounds`
rounds, so that the ratios are paired within the same minutes of a shared
machine:

- `default`: the library's `train()` when it is imported by your own code:
  glibc's malloc thresholds raised by
  `transformer.kernels.allocator.keep_freed_memory`, the loss compiled by XLA;
- `glibc`: the same with glibc's own malloc thresholds;
- `no-xla-loss`: `default` with the loss run by TensorFlow's kernels (no
  compilation per new batch shape);
- `bfc`: `default` with TensorFlow's own memory pool for CPU tensors
  (`TF_CPU_ALLOCATOR_USE_BFC=true`), what `train.py` does;
- `arena1`: `default` with one glibc malloc arena (`M_ARENA_MAX=1`);
- `bfc-step8`, `bfc-step4`: `bfc` with every batch padded to a fixed shape
  (lengths rounded up to a multiple of 8 or 4, `batch_tokens // width`
  rows; `length_step` of `budget_batches_from_tokens`);
- `bfc-step8-xla`: `bfc-step8` with the whole train step compiled by XLA.

Each process builds SentencePiece vocabularies from the training file, then
times `--steps` steps of the tutorial preset (float32) twice: the first ones
of the stream (every new batch shape is compiled) and the next ones (most
shapes seen). It reports milliseconds per step of wall time and of user and
system CPU time, and wall milliseconds per 1,000 real (not padding) target
tokens, which is the fair measure when the variants pad differently; the
ratios are against the first variant given.

Command (the development corpus of the project's real-text work):
    python bench/real_text_step.py --data ui-es-en/train.tsv \
        --variants default bfc arena1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from real_text_scoring import machine, variant_rounds  # noqa: E402

sys.path.insert(0, str(ROOT))
from transformer.kernels.allocator import BFC_ALLOCATOR_ENV  # noqa: E402 - standard library only

VARIANTS = ("default", "glibc", "no-xla-loss", "bfc", "arena1", "bfc-step8", "bfc-step4",
            "bfc-step8-xla")


def _usage():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime, usage.ru_stime


def _per_step(start, end, steps):
    return [round((b - a) / steps * 1000, 1) for a, b in zip(start, end, strict=True)]


def worker(args) -> dict:
    """One variant in this process; returns ms per step (wall, user, sys) per pass."""
    sys.path.insert(0, str(ROOT))
    from transformer.kernels import allocator

    if args.variant != "glibc":
        allocator.keep_freed_memory()
    if args.variant == "arena1":
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    import keras
    import tensorflow as tf

    from transformer import training
    from transformer.data import load_corpus
    from transformer.data.batching import budget_batches_from_tokens, tokenize_pairs
    from transformer.data.tokenizers import build_tokenizers
    from transformer.kernels.optimizers import make_optimizer
    from transformer.model import build_model
    from transformer.model_config import TransformerConfig

    if args.variant == "no-xla-loss":
        training._xla_token_losses = tf.function(training.token_losses)
    corpus = load_corpus(data=args.data, seed=0)
    tokenizers = build_tokenizers(corpus.train, 8000, False, kind="sentencepiece")
    tokens = tokenize_pairs(corpus.train, tokenizers, 256)
    keras.utils.set_random_seed(0)
    config = TransformerConfig.from_preset("tutorial")
    model = build_model(config, int(tokenizers.source.get_vocab_size()),
                        int(tokenizers.target.get_vocab_size()))
    model.compile(optimizer=make_optimizer(128, 4000),
                  loss=training.MaskedLoss(0.1), metrics=[training.masked_accuracy],
                  jit_compile=args.variant.endswith("-xla"))
    step = int(args.variant.split("step")[1].split("-")[0]) if "step" in args.variant else 1
    stream = budget_batches_from_tokens(tokens, args.batch_tokens, 0, length_step=step)
    model.fit(stream.take(5), verbose=0)  # builds the model
    passes = {}
    for index, name in enumerate(("first steps", "next steps")):
        part = stream.skip(5 + index * args.steps).take(args.steps)
        real = sum(int(tf.math.count_nonzero(labels)) for _, labels in part)
        start = _usage()
        model.fit(part, verbose=0)
        end = _usage()
        passes[name] = _per_step(start, end, args.steps)
        passes[name + " ms per 1000 target tokens"] = round((end[0] - start[0]) / real * 1e6, 1)
    return passes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a TSV of training pairs")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-tokens", type=int, default=684)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(ROOT / "bench/results/real_text_step.json"))
    args = parser.parse_args(argv)
    if args.variant:  # a worker process
        print(json.dumps(worker(args)))
        return 0
    arguments = ["--data", args.data, "--steps", str(args.steps),
                 "--batch-tokens", str(args.batch_tokens)]

    def environment(variant):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        if variant.startswith("bfc"):
            env[BFC_ALLOCATOR_ENV] = "true"
        return env

    runs = variant_rounds(__file__, arguments, args.variants, args.rounds, environment)
    summary = {}
    for variant, results in runs.items():
        summary[variant] = {
            name: ([statistics.median(r[name][i] for r in results) for i in range(3)]
                   if isinstance(results[0][name], list)
                   else statistics.median(r[name] for r in results))
            for name in results[0]
        }
    print("\nms per step (wall, user CPU, system CPU), medians over rounds:")
    for variant, passes in summary.items():
        print(f"  {variant:12s} " + "; ".join(f"{k}: {v}" for k, v in passes.items()))
    reference = args.variants[0]
    for variant in args.variants[1:]:
        ratio = [round(summary[variant][k] / summary[reference][k], 2)
                 for k in summary[reference] if k.endswith("tokens")]
        print(f"  {variant} / {reference} wall time per target token "
              f"(first, next steps): {ratio}")
    record = {"machine": machine(), "precision": "float32", "args": vars(args), "runs": runs,
              "summary": summary}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
