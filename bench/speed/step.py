"""`bench/train_speed.py step`: the real-text training step, and what its parts cost.

Times `train.py`'s model on a real corpus (the defaults of `RunConfig(data=...)`:
one shared SentencePiece vocabulary, tied embeddings, pre-norm, no dropout,
Adam with a moving average of the weights, the precision it picks for the CPU)
on the token-budget batches it trains on, each variant in its own process (the
allocators are chosen per process), the variants alternating over `--rounds`
rounds so that the ratios are paired within the same minutes of a shared
machine:

- `default`: the step as `train.py` runs it: TensorFlow's memory pool for CPU
  tensors (`TF_CPU_ALLOCATOR_USE_BFC=true`), the loss without XLA;
- `broadcast-logits`: the tied output projection as `tf.matmul` of the 3-D
  decoder output with the table (a broadcast batch product), as it was before
  it became one 2-D product;
- `keras-adam`: Keras' own Adam update and moving average instead of
  `FusedAdam`'s kernels;
- `before`: both of the above, the step as it was;
- `onednn`: TensorFlow's oneDNN operations forced on (`TF_ENABLE_ONEDNN_OPTS=1`),
  which TensorFlow enables by itself only on CPUs with AVX-512;
- `malloc`: glibc's malloc (with `keep_freed_memory`'s thresholds) instead of
  the memory pool; `arena1`: the same with one malloc arena (`M_ARENA_MAX=1`);
- `xla-loss`: the loss compiled by XLA, once per new batch shape;
- `fixed-shapes`: every batch padded to a length that is a multiple of 8
  (`length_step` of `budget_batches_from_tokens`); `xla-step`: the same with
  the whole step compiled by XLA;
- `gather-loss`: the token losses by TensorFlow's automatic gradient of
  `training.token_losses` instead of `seams.token_losses`' written-out one.

Each worker also counts the timed steps' matrix FLOPs from their real batch
shapes (`timing.step_flops`) and reports the achieved GFLOP/s, the padded
share of the source and target tokens and the final projection's share of the
FLOPs. With `--ceiling` (the default), one more process times a plain
2048 x 2048 matmul in the same precision on the same core, and each variant's
GFLOP/s is also given as a share of that ceiling. `--profile N` profiles N
more steps of each variant with TensorFlow's profiler and records op time per
step by category and of the top op types in the results. `--preset` times
another size; run the command under `taskset -c 0` and `taskset -c 0,1` to
see which ops gain from a second core.

Each process learns the vocabulary from the training file, runs `--skip`
steps of the stream untimed (most batch shapes are then built; `--skip 5`
times the first steps instead), then times `--steps` steps. It reports wall
milliseconds per step and per 1,000 real (not padding) target tokens, and the
ratio of each variant's time per token to the first variant's.

Command (the development corpus), one core per process as `train.py
--time-budget` is measured:

    taskset -c 0 python bench/train_speed.py step --data ui-es-en/train.tsv \\
        --variants default before --rounds 2 --skip 100 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from common import RESULTS, machine, worker_json, write_json

from transformer.model_config import PRESETS  # plain Python
from transformer.run.allocator import BFC_ALLOCATOR_ENV  # standard library only

VARIANTS = ("default", "before", "broadcast-logits", "keras-adam", "onednn", "malloc",
            "arena1", "xla-loss", "fixed-shapes", "xla-step", "gather-loss")
TOKENS = "ms per 1000 target tokens"


def _broadcast_logits(self, x):
    """The tied projection as it was: a batch product of the 3-D `x` with the table."""
    import tensorflow as tf

    table = tf.cast(self._embedding.embeddings, self.compute_dtype)
    return tf.matmul(x, table, transpose_b=True)


def _keras_optimizer(config):
    """Keras' own Adam with the library's schedule and, with a momentum, the
    library's moving average by Keras' element-wise operations."""
    import keras

    from transformer.training import make_optimizer

    fused = make_optimizer(config.model.d_model, config.warmup_steps,
                           config.peak_learning_rate, None, config.ema_momentum)

    class KerasAveragingAdam(keras.optimizers.Adam):
        def _update_model_variables_moving_average(self, trainable_variables):
            from keras import ops

            step = ops.cast(self.iterations, "float32")
            momentum = ops.minimum(ops.cast(self.ema_momentum, "float32"),
                                   (1.0 + step) / (10.0 + step))
            momentum = ops.where(step > 0, momentum, 0.0)
            for var, average in zip(trainable_variables, self._model_variables_moving_average,
                                    strict=True):
                if average is not None:
                    m = ops.cast(momentum, var.dtype)
                    average.assign(m * average + (1.0 - m) * var)

        def finalize_variable_values(self, var_list):
            pass

    kwargs = dict(beta_1=fused.beta_1, beta_2=fused.beta_2, epsilon=fused.epsilon)
    if fused.use_ema:
        return KerasAveragingAdam(fused._learning_rate, use_ema=True,
                                  ema_momentum=fused.ema_momentum, **kwargs)
    return keras.optimizers.Adam(fused._learning_rate, **kwargs)


def _allocator(variant) -> None:
    """Sets this process's malloc as the variant asks (before TensorFlow allocates)."""
    from transformer.run import allocator

    allocator.keep_freed_memory()
    if variant == "arena1":
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX


def ceiling_worker() -> dict:
    """A plain matmul's GFLOP/s in this CPU's precision for `train.py`: the ceiling."""
    from speed.timing import matmul_ceiling_fn
    from transformer.run.precision import default_precision

    precision = default_precision()
    run, flops = matmul_ceiling_fn(precision)
    for _ in range(3):
        run()
    seconds = []
    for _ in range(15):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return {"GFLOP/s": round(flops / statistics.median(seconds) / 1e9, 1),
            "precision": precision}


def _shape_facts(batches, model_config, vocab) -> dict:
    """Matrix FLOPs, real target tokens, padded shares and the final
    projection's share of `batches`."""
    import tensorflow as tf

    from speed.timing import step_flops

    flops = {"train_step": 0.0, "final_projection": 0.0}
    slots = {"source": 0, "target": 0}
    real = {"source": 0, "target": 0}
    for (context, _), labels in batches:
        batch, source_len = context.shape
        target_len = labels.shape[1]
        counted = step_flops(model_config, batch, source_len, target_len, vocab)
        for key in flops:
            flops[key] += counted[key]
        for side, tokens in (("source", context), ("target", labels)):
            slots[side] += int(tf.size(tokens))
            real[side] += int(tf.math.count_nonzero(tokens))
    return {"flops": flops["train_step"], "target tokens": real["target"],
            "final projection share of FLOPs": round(flops["final_projection"]
                                                     / flops["train_step"], 3),
            **{f"padded share, {side}": round(1 - real[side] / slots[side], 3)
               for side in slots}}


def worker(args) -> dict:
    """One variant in this process; returns wall ms per step and per 1,000 target
    tokens, and its GFLOP/s."""
    variant = args.variant
    if variant == "ceiling":
        return ceiling_worker()
    _allocator(variant)
    import keras

    from transformer import model as model_module
    from transformer import training
    from transformer.data import CorpusSource, load_corpus
    from transformer.data.batching import budget_batches_from_tokens, tokenize_pairs
    from transformer.data.tokenizers import build_tokenizers
    from transformer.run import RunConfig
    from transformer.run.precision import default_precision
    from transformer.training import make_optimizer

    if variant in ("before", "broadcast-logits"):
        model_module.TiedOutputProjection.call = _broadcast_logits
    if variant == "gather-loss":
        from transformer import seams

        seams.token_losses = training.token_losses
    config = RunConfig(data=args.data, precision=default_precision(),  # train.py's choice here
                       preset=args.preset)
    keras.mixed_precision.set_global_policy(config.precision)
    corpus = load_corpus(CorpusSource(data=args.data, seed=0))
    tokenizers = build_tokenizers(corpus.train, config.vocab_size, config.lower_case,
                                  kind=config.tokenizer, shared=config.shared_vocab,
                                  learn_params=config.tokenizer_learn_params)
    tokens = tokenize_pairs(corpus.train, tokenizers, config.model.max_length)
    keras.utils.set_random_seed(0)
    model = model_module.build_model(config.model, int(tokenizers.source.get_vocab_size()),
                                     int(tokenizers.target.get_vocab_size()))
    if variant in ("before", "keras-adam"):
        optimizer = _keras_optimizer(config)
    else:
        optimizer = make_optimizer(config.model.d_model, config.warmup_steps,
                                   config.peak_learning_rate, None, config.ema_momentum)
    model.compile(optimizer=optimizer,
                  loss=training.MaskedLoss(config.label_smoothing,
                                           jit_compile=variant == "xla-loss"),
                  metrics=[training.masked_accuracy], jit_compile=variant == "xla-step")
    length_step = 8 if variant in ("fixed-shapes", "xla-step") else 1
    stream = budget_batches_from_tokens(tokens, args.batch_tokens, 0, length_step=length_step)
    model.fit(stream.take(args.skip), verbose=0)
    part = stream.skip(args.skip).take(args.steps)
    facts = _shape_facts(part, config.model, int(tokenizers.target.get_vocab_size()))
    real = facts.pop("target tokens")
    start = time.perf_counter()
    model.fit(part, verbose=0)
    seconds = time.perf_counter() - start
    result = {"ms per step": round(seconds / args.steps * 1000, 1),
              TOKENS: round(seconds / real * 1e6, 1),
              "GFLOP/s": round(facts.pop("flops") / seconds / 1e9, 1), **facts,
              "optimizer": type(model.optimizer).__name__, "precision": config.precision,
              "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "TensorFlow's choice")}
    if args.profile:
        from speed.timing import profile_ops

        more = stream.skip(args.skip + args.steps).take(args.profile)
        profile = profile_ops(lambda: model.fit(more, verbose=0), args.profile)
        if profile is not None:
            _, by_category, by_op = profile
            result["op ms per step"] = {name: round(value * 1000, 2)
                                        for name, value in by_category.most_common()}
            result["op ms per step, top op types"] = {
                name: round(value * 1000, 2) for name, value in by_op.most_common(12)}
    return result


def environment(variant) -> dict:
    """The worker's environment: the memory pool unless the variant times malloc."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", BFC_ALLOCATOR_ENV: "true"}
    if variant in ("malloc", "arena1"):
        del env[BFC_ALLOCATOR_ENV]
    if variant == "onednn":
        env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    return env


def add_arguments(parser) -> None:
    parser.add_argument("--data", required=True, help="a TSV of training pairs")
    parser.add_argument("--steps", type=int, default=300, help="timed steps")
    parser.add_argument("--skip", type=int, default=300, help="untimed steps before them")
    parser.add_argument("--batch-tokens", type=int, default=357,
                        help="the token budget train.py sizes for the development corpus")
    parser.add_argument("--preset", default=None, choices=sorted(PRESETS),
                        help="the model's preset (default: the real-text model without a "
                        "time budget)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["default", "before"])
    parser.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=True,
                        help="also time a plain matmul, the ceiling of the GFLOP/s")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile N more steps of each variant (op time by category)")
    parser.add_argument("--variant", choices=(*VARIANTS, "ceiling"), help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(RESULTS / "step_kernels.json"))


def run(args, parser=None) -> int:
    """A worker (`--variant`), or the rounds of every variant and their medians."""
    if args.variant:
        print(json.dumps(worker(args)))
        return 0
    before = machine()
    arguments = ["--data", args.data, "--steps", str(args.steps), "--skip", str(args.skip),
                 "--batch-tokens", str(args.batch_tokens), "--profile", str(args.profile),
                 *(["--preset", args.preset] if args.preset else [])]
    runs = {variant: [] for variant in args.variants}
    for round_index in range(args.rounds):
        for variant in args.variants:
            command = [sys.executable, args.entry, "step", *arguments, "--variant", variant]
            runs[variant].append(worker_json(command, environment(variant), f"step {variant}"))
            print(f"round {round_index + 1} {variant}: {runs[variant][-1]}", flush=True)
    ceiling = None
    if args.ceiling:
        command = [sys.executable, args.entry, "step", "--data", args.data, "--variant", "ceiling"]
        ceiling = worker_json(command, environment("default"), "the matmul ceiling")
        print(f"ceiling: {ceiling['GFLOP/s']} GFLOP/s ({ceiling['precision']})", flush=True)
    summary = {v: {key: statistics.median(r[key] for r in results)
                   for key in ("ms per step", TOKENS, "GFLOP/s")}
               for v, results in runs.items()}
    reference = args.variants[0]
    print("\nmedians over rounds:")
    for variant, values in summary.items():
        values["time / " + reference] = round(values[TOKENS] / summary[reference][TOKENS], 3)
        if ceiling:
            values["of ceiling"] = round(values["GFLOP/s"] / ceiling["GFLOP/s"], 3)
        print(f"  {variant:17s} {values['ms per step']:7.1f} ms per step, "
              f"{values[TOKENS]:7.1f} ms per 1,000 target tokens, "
              f"{values['time / ' + reference]:.3f}x {reference}'s time, "
              f"{values['GFLOP/s']:.1f} GFLOP/s"
              + (f" ({100 * values['of ceiling']:.0f}% of the ceiling)" if ceiling else ""))
    write_json(args.output, {"machine_before": before, "machine_after": machine(),
                             "precision": runs[reference][0]["precision"],
                             "args": {k: v for k, v in vars(args).items() if k != "entry"},
                             "ceiling": ceiling, "runs": runs, "summary": summary})
    return 0
