"""`bench/decode_speed.py cached`: cached greedy decoding against the naive loop.

What it measures, in one process, on the `tutorial` preset (4 layers,
d_model 128, 8 heads, dff 512) with random weights and the tutorial's
vocabulary sizes (7765 Portuguese, 7010 English word pieces):

1. **Cached vs naive, 64 output tokens.** `compile_decode(model, Greedy)`
   (encoder once, encoder-decoder keys and values projected once, one new
   token per step through the decoder with a key/value cache, one compiled
   `tf.while_loop`) against `naive_greedy_decode` (the tutorial's loop: the
   whole `Transformer((context, output_so_far))`, encoder included, every
   step). The model's `[END]` logit is lowered by 1e9, so that neither loop
   ever ends a sentence and both do exactly 64 steps.
   The naive loop is timed compiled the same way (`tf.function` around the
   same `tf.while_loop`), so the ratio measures the caching, not Python; the
   full run also times it eagerly, the way the tutorial's `Translator` runs
   in its notebook. Batch 1 and 32, source sentences of 16 and 64 random
   tokens. Both must give the same tokens; the script checks.
2. **Latency against output length** (16, 32, 64, 128 tokens, batch 1 and
   32, 64-token sources) for both: the naive loop grows quadratically (step
   `t` re-reads all `t` tokens), the cached one linearly.

Every timing is the median of `--repeats` runs right after a warm-up run
of the same method (see `time_blocks` for why the methods are not
interleaved).
Results go to `bench/results/decode_speed.json` (`decode_speed_quick.json`
with `--quick`, `decode_speed_threads1.json` with `--threads 1`).

Commands:
    python bench/decode_speed.py cached --quick     # batch 1 and 32 at 64 tokens, ~2 min
    python bench/decode_speed.py cached             # everything, ~10 min on 2 cores
    python bench/decode_speed.py cached --threads 1 # one intra-op thread (a busy machine)
"""

from __future__ import annotations

import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import RESULTS, machine  # noqa: E402

from transformer.constants import END_ID, START_ID  # noqa: E402
from transformer.decoding.pipeline import compile_decode, naive_greedy_decode  # noqa: E402
from transformer.decoding.strategies import Greedy  # noqa: E402
from transformer.model import build_model  # noqa: E402
from transformer.model_config import TransformerConfig  # noqa: E402

# The vocabulary sizes of the tutorial's ted_hrlr_translate/pt_to_en tokenizers.
SOURCE_VOCAB = 7765
TARGET_VOCAB = 7010
BAR = 10.0  # the bar: cached at least 10x faster than naive


def add_arguments(parser):
    parser.add_argument("--quick", action="store_true",
                        help="fewer configurations and repeats (64-token sources only, "
                             "lengths 16-64, no eager loop)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed runs per measurement (default 5, 3 with --quick)")
    parser.add_argument("--threads", type=int, default=None,
                        help="intra- and inter-op threads (default: TensorFlow's)")
    parser.add_argument("--output-tokens", type=int, default=64)


def random_sources(batch, length, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, SOURCE_VOCAB, size=(batch, length)).astype(np.int64)
    tokens[:, 0], tokens[:, -1] = START_ID, END_ID
    return tf.constant(tokens)


def time_blocks(functions, repeats):
    """Wall-clock and CPU seconds of each function: a warm-up call, then `repeats` calls.

    Each function runs as one block right after its own warm-up. Interleaving
    the calls of the two loops would be fairer to a changing machine load, but
    each naive run creates thousands of oneDNN kernels for its ever longer
    shapes and evicts the other loop's kernels from oneDNN's primitive cache
    (and the weights from the CPU caches), which made the cached loop look
    twice as slow at 128 tokens as it is when it runs alone.

    The CPU time is the whole process's (all TensorFlow threads): on a busy
    machine it varies less than the wall-clock time, which includes waiting
    for a core.
    """
    outputs, stats = {}, {}
    for name, fn in functions.items():
        outputs[name] = fn()  # warm-up (the first call also traces)
        wall, cpu = [], []
        for _ in range(repeats):
            started, started_cpu = time.perf_counter(), time.process_time()
            fn()
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        stats[name] = {"median_s": statistics.median(wall), "min_s": min(wall),
                       "cpu_median_s": statistics.median(cpu), "runs_s": wall,
                       "cpu_runs_s": cpu}
    return stats, outputs


def decoders(model):
    """`(greedy_fn, cached_fn, naive_fn)`: `compile_decode`'s function (for its
    tracing count), and the cached and the naive loop, both compiled and both
    `(tokens, limits, finished) -> (batch, steps)` token ids."""
    greedy_fn = compile_decode(model, Greedy)
    naive_fn = tf.function(
        lambda tokens, limits, finished: naive_greedy_decode(
            model, tokens, tf.reduce_max(limits), finished
        ),
        input_signature=greedy_fn.input_signature[:3],  # no settings
        autograph=False,
    )

    def cached_fn(tokens, limits, finished):
        return greedy_fn(tokens, limits, finished, {})[0][:, 0]  # (batch, steps)

    return greedy_fn, cached_fn, naive_fn


def runner(fn, sources, length):
    """A call of `fn` on `sources` with `length` output tokens, as numpy."""
    args_ = (sources, tf.fill([sources.shape[0]], length),
             tf.zeros([sources.shape[0]], tf.bool))
    return lambda: fn(*args_).numpy()


def cached_against_naive(args, model, cached_fn, naive_fn, repeats, tokens_out):
    """Part 1: cached vs naive at `tokens_out` output tokens, one row per source
    length and batch (and the eager naive loop in the full run)."""
    source_lengths = [64] if args.quick else [16, 64]
    table = []
    for source_length in source_lengths:
        for batch in (1, 32):
            sources = random_sources(batch, source_length)
            stats, outputs = time_blocks(
                {"cached": runner(cached_fn, sources, tokens_out),
                 "naive_compiled": runner(naive_fn, sources, tokens_out)},
                repeats,
            )
            same = bool(np.array_equal(outputs["cached"], outputs["naive_compiled"]))
            row = {
                "batch": batch, "source_tokens": source_length, "output_tokens": tokens_out,
                "cached_s": stats["cached"]["median_s"],
                "naive_compiled_s": stats["naive_compiled"]["median_s"],
                "speedup_vs_compiled": stats["naive_compiled"]["median_s"]
                / stats["cached"]["median_s"],
                "speedup_vs_compiled_min": stats["naive_compiled"]["min_s"]
                / stats["cached"]["min_s"],
                "speedup_vs_compiled_cpu": stats["naive_compiled"]["cpu_median_s"]
                / stats["cached"]["cpu_median_s"],
                "same_tokens": same, "runs": stats,
            }
            if not args.quick and source_length == 64:
                eager = runner(lambda t, limits, f: naive_greedy_decode(model, t, tokens_out, f),
                               sources, tokens_out)
                eager()  # warm-up
                started = time.perf_counter()
                eager()
                row["naive_eager_s"] = time.perf_counter() - started
                row["speedup_vs_eager"] = row["naive_eager_s"] / row["cached_s"]
            table.append(row)
            eager_text = (f", naive eager {row['naive_eager_s'] * 1000:.0f} ms "
                          f"({row['speedup_vs_eager']:.0f}x)" if "naive_eager_s" in row else "")
            print(f"batch {batch:2d}, source {source_length:2d}, {tokens_out} tokens: cached "
                  f"{row['cached_s'] * 1000:7.1f} ms, naive compiled "
                  f"{row['naive_compiled_s'] * 1000:7.1f} ms -> "
                  f"{row['speedup_vs_compiled']:.1f}x (min-based "
                  f"{row['speedup_vs_compiled_min']:.1f}x, CPU-time "
                  f"{row['speedup_vs_compiled_cpu']:.1f}x){eager_text}; same tokens: {same}",
                  flush=True)
    return table


def latency_curves(args, cached_fn, naive_fn, repeats):
    """Part 2: latency against output length, batch 1 (and 32 in the full run)."""
    lengths = [16, 32, 64] if args.quick else [16, 32, 64, 128]
    curves = {}
    for batch in (1,) if args.quick else (1, 32):
        sources = random_sources(batch, 64)
        curve = curves[batch] = []
        for length in lengths:
            stats, outputs = time_blocks(
                {"cached": runner(cached_fn, sources, length),
                 "naive_compiled": runner(naive_fn, sources, length)},
                repeats if batch == 1 else min(repeats, 3),
            )
            curve.append({
                "batch": batch, "output_tokens": length,
                "cached_s": stats["cached"]["median_s"],
                "naive_compiled_s": stats["naive_compiled"]["median_s"],
                "cached_cpu_s": stats["cached"]["cpu_median_s"],
                "naive_compiled_cpu_s": stats["naive_compiled"]["cpu_median_s"],
                "same_tokens": bool(np.array_equal(outputs["cached"],
                                                   outputs["naive_compiled"])),
            })
            print(f"batch {batch:2d}, {length:3d} tokens: cached "
                  f"{curve[-1]['cached_s'] * 1000:7.1f} ms, naive compiled "
                  f"{curve[-1]['naive_compiled_s'] * 1000:7.1f} ms", flush=True)
    return curves


def print_table(args, table):
    """Part 1 as a markdown table."""
    print("\n| batch | source tokens | output tokens | cached | naive (compiled) | speedup "
          "| speedup (CPU time) |" + (" naive (eager) | speedup |" if not args.quick else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if not args.quick else ""))
    for row in table:
        line = (f"| {row['batch']} | {row['source_tokens']} | {row['output_tokens']} | "
                f"{row['cached_s'] * 1000:.0f} ms | {row['naive_compiled_s'] * 1000:.0f} ms | "
                f"{row['speedup_vs_compiled']:.1f}x | {row['speedup_vs_compiled_cpu']:.1f}x |")
        if not args.quick:
            line += (f" {row['naive_eager_s'] * 1000:.0f} ms | {row['speedup_vs_eager']:.0f}x |"
                     if "naive_eager_s" in row else " - | - |")
        print(line)


def never_end(model):
    """Lowers the `[END]` logit of `model` by 1e9: every loop runs to its limit."""
    bias = model.final_layer.bias.numpy()
    bias[END_ID] -= 1e9
    model.final_layer.bias.assign(bias)


def run(args, parser=None):
    """The `cached` mode: both parts, then the JSON and a table on standard output."""
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    repeats = args.repeats or (3 if args.quick else 5)
    tokens_out = args.output_tokens
    keras.utils.set_random_seed(0)
    config = TransformerConfig.from_preset("tutorial")
    model = build_model(config, SOURCE_VOCAB, TARGET_VOCAB)
    never_end(model)
    greedy_fn, cached_fn, naive_fn = decoders(model)

    load_before = os.getloadavg()
    print(f"tutorial preset: {config}, vocab {SOURCE_VOCAB}/{TARGET_VOCAB}, "
          f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f}, repeats {repeats}")
    table = cached_against_naive(args, model, cached_fn, naive_fn, repeats, tokens_out)
    curves = latency_curves(args, cached_fn, naive_fn, repeats)

    tracing = {"cached": greedy_fn.experimental_get_tracing_count(),
               "naive_compiled": naive_fn.experimental_get_tracing_count()}
    load_after = os.getloadavg()
    suffix = ("_quick" if args.quick else "") + (f"_threads{args.threads}" if args.threads else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "python bench/decode_speed.py cached" + (" --quick" if args.quick else "")
        + (f" --threads {args.threads}" if args.threads else ""),
        "preset": "tutorial", "config": config.to_dict(),
        "vocab": {"source": SOURCE_VOCAB, "target": TARGET_VOCAB},
        "repeats": repeats, "statistic": "median of repeats after one warm-up run of the same method",
        "threads": args.threads or "tensorflow default",
        "machine": {**machine(), "load_average_before": load_before,
                    "load_average_after": load_after},
        "tensorflow": tf.__version__, "keras": keras.__version__,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "comparison": table, "latency_vs_length": [p for c in curves.values() for p in c],
        "tracing_count": tracing,
        "bar": BAR,
        "passes_bar": all(row["speedup_vs_compiled"] >= BAR for row in table),
    }
    json_path = RESULTS / f"decode_speed{suffix}.json"
    json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print(f"\ntraced: cached {tracing['cached']}x, naive {tracing['naive_compiled']}x "
          f"(once each for every length and batch size); load average "
          f"{load_before[0]:.1f} -> {load_after[0]:.1f}")
    print_table(args, table)
    verdict = "passes" if result["passes_bar"] else "does NOT pass"
    print(f"\nThe cached loop {verdict} the {BAR:.0f}x bar against the compiled naive loop "
          f"in every configuration above.")
    print(f"wrote {json_path.relative_to(RESULTS.parent.parent)}")
    return 0


