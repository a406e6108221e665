"""Decoding speed of this tree against another checkout of the code, alternating.

Each round runs one subprocess per code version, in turn (the versions share
the package name, so they cannot share a process), and each subprocess times:

- the compiled greedy loop on the `tutorial` preset with random weights
  (vocab 7,765 / 7,010), 64-token sources, 64 output tokens (the `[END]`
  logit lowered by 1e9 so that every row runs to its limit), batch 1 and 32;
- the compiled beam search (beam 4, alpha 0.6) on the same model, batch 8;
- with `--run` and `--tsv`: `Translator.__call__` on the TSV's first column
  (greedy, batches of 128, attention weights not read), after one warm-up call.

Every figure is the median of `--repeats` runs after a warm-up. Alternating
the versions round by round lets the machine's load fall on both alike.

Command (the code before, as a plain copy of a commit):
    git archive main | tar -x -C /tmp/before
    python bench/decode_before_after.py --baseline /tmp/before \\
        --run RUN --tsv ui-es-en/test.tsv --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _worker(root, run, tsv, repeats):
    """Times the code under `root` (imported from there); prints one JSON line."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(root))
    import keras
    import numpy as np
    import tensorflow as tf

    import transformer.decoding as decoding
    from transformer.constants import END_ID
    from transformer.model import TransformerConfig, build_model

    keras.utils.set_random_seed(0)
    model = build_model(TransformerConfig.from_preset("tutorial"), 7765, 7010)
    bias = model.final_layer.bias.numpy()
    bias[END_ID] -= 1e9
    model.final_layer.bias.assign(bias)
    if importlib.util.find_spec("transformer.strategies"):  # this tree: strategy objects
        from transformer.search import setting_tensors
        from transformer.strategies import Beam, Greedy

        greedy_fn, beam_fn = decoding.compile_decode(model, Greedy), decoding.compile_decode(
            model, Beam)

        def greedy(src, n):
            return greedy_fn(src, tf.fill([src.shape[0]], n), tf.zeros([src.shape[0]], tf.bool),
                             {})

        def beam(src, n):
            return beam_fn(src, tf.fill([src.shape[0]], n), tf.zeros([src.shape[0]], tf.bool),
                           setting_tensors(Beam(4, 0.6)))
    elif hasattr(decoding, "compile_decode"):  # strategies named by strings
        greedy_fn, beam_fn = decoding.compile_decode(model, "greedy"), decoding.compile_decode(
            model, "beam")

        def greedy(src, n):
            return greedy_fn(src, tf.fill([src.shape[0]], n), tf.zeros([src.shape[0]], tf.bool))

        def beam(src, n):
            return beam_fn(src, tf.fill([src.shape[0]], n), tf.zeros([src.shape[0]], tf.bool),
                           tf.constant(4), tf.constant(0.6), tf.constant(1))
    else:  # the code before: compile_greedy_decode and compile_beam_search
        greedy_fn, beam_fn = decoding.compile_greedy_decode(model), decoding.compile_beam_search(
            model)

        def greedy(src, n):
            return greedy_fn(src, tf.constant(n), tf.constant(False),
                             tf.zeros([src.shape[0]], tf.bool))

        def beam(src, n):
            return beam_fn(src, tf.constant(n), tf.constant(4), tf.constant(0.6),
                           tf.zeros([src.shape[0]], tf.bool))

    def median_seconds(fn):
        fn()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return round(statistics.median(times), 4)

    rng = np.random.default_rng(0)
    result = {}
    for name, fn, batch in (("greedy_b1", greedy, 1), ("greedy_b32", greedy, 32),
                            ("beam4_b8", beam, 8)):
        src = rng.integers(4, 7765, (batch, 64))
        src[:, 0], src[:, -1] = 2, 3
        src = tf.constant(src)
        result[name] = median_seconds(lambda fn=fn, src=src: tf.nest.map_structure(
            lambda t: t.numpy(), fn(src, 64)))
    if run:
        from transformer.translate import Translator

        sources = [line.split("\t")[0] for line in
                   Path(tsv).read_text(encoding="utf-8").splitlines() if line.strip()]
        translator = Translator.from_run(run)
        result["translate_tsv"] = median_seconds(
            lambda: translator(sources, return_attention=False))
    result["load"] = round(os.getloadavg()[0], 1)
    print(json.dumps(result))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the code before")
    parser.add_argument("--run", default=None, help="a run directory written by train.py")
    parser.add_argument("--tsv", default=None, help="sentence pairs; the first column is read")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.run, args.tsv, args.repeats)
        return 0
    versions = {"before": str(Path(args.baseline).resolve()), "after": str(ROOT)}
    rows = {name: [] for name in versions}
    for round_ in range(args.rounds):
        for name, root in versions.items():
            command = [sys.executable, __file__, "--baseline", args.baseline, "--worker", root,
                       "--repeats", str(args.repeats)]
            if args.run:
                command += ["--run", args.run, "--tsv", args.tsv]
            done = subprocess.run(command, capture_output=True, text=True, cwd="/",
                                  check=True)
            rows[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {round_ + 1} {name:6s} {rows[name][-1]}", flush=True)
    print("\nmedian seconds over the rounds (after / before):")
    for key in rows["after"][0]:
        if key == "load":
            continue
        before = statistics.median(r[key] for r in rows["before"])
        after = statistics.median(r[key] for r in rows["after"])
        print(f"  {key:14s} before {before:7.3f}  after {after:7.3f}  ratio {after / before:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
