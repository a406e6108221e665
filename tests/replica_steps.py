"""A few training steps of a tiny Transformer under a distribution strategy.

Run as a script, in a fresh process (logical CPUs and `TF_CONFIG` must act
before TensorFlow initialises)::

    python tests/replica_steps.py STRATEGY OUT.npz [--cpu-devices N]
        [--lengths equal|unequal] [--optimizer sgd|averaging-adam] [--steps N]
        [--batch N]

or, to pay TensorFlow's start once for several runs, runs separated by
`--`, each with its own output and options, under one strategy or, in turn,
under several (the logical CPUs are split once, before either is built, and
each run's output names its strategy where it holds `{strategy}`)::

    python tests/replica_steps.py STRATEGY [STRATEGY ...] [--cpu-devices N] -- A.npz [...] -- B.npz [...]

It builds the strategy with `transformer.run.distribute.make_strategy`, compiles
the library's model with `MaskedLoss` as `transformer.run.train` does
(dropout 0, seed 0) but with plain SGD, fits `STEPS` steps of fixed, unshuffled batches of
`--batch` pairs (`GLOBAL_BATCH`), and saves the weights and the per-step losses to
OUT.npz (only the chief writes it). The same global batches go to every
strategy, so one device and N replicas must end with the same weights.
SGD rather than the library's Adam: Adam's first updates are about
`learning_rate * sign(gradient)`, so a gradient scaled by the replica count
would leave them almost unchanged, while SGD's updates scale with it.

`--optimizer averaging-adam`: the optimizer `train` uses instead, from
`transformer.training.make_optimizer` (the paper's Adam with
`CustomSchedule`, a peak rate of `ADAM_PEAK` after `ADAM_WARMUP` steps,
and a moving average of the weights with momentum `EMA_MOMENTUM`). OUT.npz
then also holds each step's trainable weights (`s{step}_{index}`) and, last,
the average (`a{index}`, read with `use_moving_average`), and the trainable
weights' paths (`names`).

`--lengths equal`: in every global batch, each half (what each of two
replicas gets) has the same number of real target tokens, so the mean over
each replica's tokens, averaged over replicas, is the mean over all tokens.
`--lengths unequal`: the halves hold very different numbers of real tokens.
`--batch 3`: the replicas of a two-way strategy hold two pairs and one, as
they do with batches of a token budget.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GLOBAL_BATCH = 4
STEPS = 3
ADAM_WARMUP = 2
ADAM_PEAK = 1e-2
EMA_MOMENTUM = 0.9
VOCAB = 24
# Target lengths (with [START] and [END]) of the pairs, GLOBAL_BATCH per step.
# Labels hold length - 1 real tokens; the batch pads to its longest row.
TARGET_LENGTHS = {
    # real tokens per half: 5+3 | 4+4, 6+2 | 3+5, 4+4 | 7+1
    "equal": [6, 4, 5, 5, 7, 3, 4, 6, 5, 5, 8, 2],
    # 7+7 | 1+1, 1+2 | 6+7, 7+6 | 2+1
    "unequal": [8, 8, 2, 2, 2, 3, 7, 8, 8, 7, 3, 2],
}


def _run_parser() -> argparse.ArgumentParser:
    """The options of one run (its output first)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--lengths", choices=sorted(TARGET_LENGTHS), default="equal")
    parser.add_argument("--optimizer", choices=("sgd", "averaging-adam"), default="sgd")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--batch", type=int, default=GLOBAL_BATCH)
    return parser


def main(argv=None):
    groups = [[]]
    for arg in sys.argv[1:] if argv is None else argv:
        if arg == "--":
            groups.append([])
        else:
            groups[-1].append(arg)
    first, *more = groups
    strategy_parser = argparse.ArgumentParser()
    strategy_parser.add_argument("strategy", nargs="+" if more else None)
    strategy_parser.add_argument("--cpu-devices", type=int, default=None)
    if more:
        args = strategy_parser.parse_args(first)
        names = args.strategy
        runs = [_run_parser().parse_args(part) for part in more]
    else:
        args, rest = strategy_parser.parse_known_args(first)
        names = [args.strategy]
        runs = [_run_parser().parse_args(rest)]

    from transformer.run.distribute import configure_cpu_devices, make_strategy

    configure_cpu_devices(args.cpu_devices)  # before any other TF op
    for name in names:
        strategy = make_strategy(name, args.cpu_devices)
        for run in runs:
            train_and_save(strategy, argparse.Namespace(
                **{**vars(run), "out": run.out.replace("{strategy}", name)}))


def train_and_save(strategy, args):
    """One run of `args` (`_run_parser`'s) under `strategy`, saved to `args.out`."""
    import keras
    import numpy as np
    import tensorflow as tf

    from transformer.data.batching import TokenizedPairs, batches_from_tokens
    from transformer.kernels.multiworker import distributed_fit_workaround
    from transformer.kernels.optimizers import use_moving_average
    from transformer.model import build_model
    from transformer.model_config import TransformerConfig
    from transformer.run.distribute import is_chief
    from transformer.run.fitting import sharding_options
    from transformer.training import MaskedLoss, make_optimizer, masked_accuracy

    keras.backend.clear_session()  # each run names its layers afresh
    keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(0)
    lengths = TARGET_LENGTHS[args.lengths]

    def rows(row_lengths):
        # [START]=2 ... [END]=3 around random ids from 4.
        return tf.ragged.constant(
            [[2, *rng.integers(4, VOCAB, size=n - 2).tolist(), 3] for n in row_lengths],
            dtype=tf.int32,
        )

    tokenized = TokenizedPairs(
        context=rows([int(n) for n in rng.integers(3, 8, size=len(lengths))]),
        target=rows(lengths),
        max_tokens=8,
    )
    dataset = batches_from_tokens(tokenized, args.batch, shuffle=False)
    dataset = dataset.repeat().with_options(sharding_options())

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = build_model(TransformerConfig(
            num_layers=1, d_model=16, num_heads=2, dff=32, dropout_rate=0.0, max_length=16
        ), VOCAB, VOCAB)
        if args.optimizer == "sgd":
            optimizer = keras.optimizers.SGD(learning_rate=1.0)
        else:
            optimizer = make_optimizer(16, ADAM_WARMUP, ADAM_PEAK, ema_momentum=EMA_MOMENTUM)
        model.compile(
            optimizer=optimizer,
            loss=MaskedLoss(0.0),
            metrics=[masked_accuracy],
        )

    losses, steps = [], []

    class StepLoss(keras.callbacks.Callback):
        # Keras reports the running mean over the epoch's steps; keep each step's.
        def on_train_batch_end(self, batch, logs=None):
            total = float(np.asarray(logs["loss"]).reshape(-1)[0]) * (batch + 1)
            losses.append(total - sum(losses))
            steps.append([keras.ops.convert_to_numpy(w) for w in model.trainable_weights])

    with distributed_fit_workaround(model, strategy, tokenized):
        model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=args.steps,
            shuffle=False,
            verbose=0,
            callbacks=[StepLoss()],
        )

    weights = [keras.ops.convert_to_numpy(w) for w in model.weights]
    arrays = {f"w{i:03d}": w for i, w in enumerate(weights)}
    if args.optimizer == "averaging-adam":
        for step, trainable in enumerate(steps):
            arrays.update({f"s{step:02d}_{i:03d}": w for i, w in enumerate(trainable)})
        use_moving_average(model)
        average = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
        arrays.update({f"a{i:03d}": w for i, w in enumerate(average)})
        arrays["names"] = np.array([w.path for w in model.trainable_weights])
    print(f"replicas {strategy.num_replicas_in_sync}; losses {losses}")
    if is_chief(strategy):
        np.savez(args.out, losses=np.array(losses), **arrays)


if __name__ == "__main__":
    main()
