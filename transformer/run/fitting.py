"""`model.fit` over a run's epochs: which calls, on which pairs, in which stream of batches.

A run fits in one call per range of epochs (`fit_calls`): an interrupted
epoch is finished first, so every epoch ends at a multiple of its steps.
Each call reads one seeded stream of token-budget or fixed-size batches from
its start step (`train_stream`); `Fitter` makes the calls and gathers their
history.

The pairs those streams read are tokenized once into the run's `tokens/`
directory: `training_tokens` tokenizes the training pairs in one streaming pass into
memory-mapped files (`transformer.data.batching.tokenize_pairs` with a
directory) and writes `tokens.json` last, naming what the files were made
from: the data's fingerprint, the tokenizers' files and `max_tokens`. A
resumed run whose `tokens.json` names the same opens the files and starts at
once; anything else (an interrupted write, other tokenizers) tokenizes again.
Subword sampling (`--subword-sampling`) draws its segmentations into the
same directory (`drawn_pairs`), anew in each session that reads them.

Subword regularisation pays only once a run overfits its pairs; in runs that
underfit it lowered BLEU (BENCHMARKS.md, "Tried and not adopted"). So the
first epoch always reads the pairs' best split, and at its end the run
decides once, from the passes it is on course to make, whether the later
passes read drawn segmentations (`recipes.samples_subwords`): its epochs, or
with a time budget the budget over the time the first epoch took. That plan
(`sampling_plan`) is the one part of a run decided after its config is
resolved; it is recorded beside `config.json` in `rundir.SAMPLING_FILE`, by
`record_sampling_plan` alone, so that a resumed run reads what the
interrupted one read. The segmentations are drawn then (`drawn_pairs`),
outside the budget, and only if they will be read.

Passes over token-budget batches differ in length: pass `p` makes
`batches_per_pass(..., pass_index=p)` batches, and the stream reads them one
after the other, so the pass that begins at a step is counted pass by pass
(`first_pass_from`), never as steps over the first pass's batches.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from transformer import rundir
from transformer.data.batching import (
    TokenizedPairs,
    batches_per_pass,
    budget_batches_from_tokens,
    fixed_batches_from_tokens,
    sample_pairs,
    tokenize_pairs,
)
from transformer.data.token_rows import open_rows
from transformer.run import recipes
from transformer.run.config import RunConfig, legacy_sampling_plan
from transformer.seams import distributed_fit_workaround

logger = logging.getLogger(__name__)

__all__ = ["Fitter", "create_metric_variables", "fit_calls", "sharding_options", "train_stream"]


def fit_calls(step: int, steps_per_epoch: int, epochs: int, first_alone=False) -> list:
    """The `fit` calls from `step` on, as `(first_epoch, last_epoch, steps, start_step)`:
    the rest of an interrupted epoch (or with `first_alone`, of the first) first,
    then the remaining epochs.

    >>> fit_calls(0, 10, 3)
    [(0, 3, 10, 0)]
    >>> fit_calls(14, 10, 3)
    [(1, 2, 6, 14), (2, 3, 10, 20)]
    >>> fit_calls(0, 10, 3, first_alone=True)
    [(0, 1, 10, 0), (1, 3, 10, 10)]
    """
    epoch, offset = divmod(step, steps_per_epoch)
    calls = []
    if offset or (first_alone and epoch == 0):
        calls.append((epoch, epoch + 1, steps_per_epoch - offset, step))
        epoch, step = epoch + 1, (epoch + 1) * steps_per_epoch
    if epoch < epochs:
        calls.append((epoch, epochs, steps_per_epoch, step))
    return calls


def sharding_options() -> tf.data.Options:
    """Each worker of a multi-worker run reads its share of every batch."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options


def train_stream(tokens: TokenizedPairs, batch_tokens: int, batch_size: int, seed: int,
                 start_step: int) -> tf.data.Dataset:
    """One seeded stream of shuffled passes over the training pairs, in batches of
    at most `batch_tokens` tokens (or with 0, of `batch_size` pairs); resuming
    skips what was seen.

    Pass `p`'s order is a function of `(seed, p)` for both kinds of batches, so
    the stream is the same however often it is built or iterated.
    """
    if batch_tokens:
        stream = budget_batches_from_tokens(tokens, batch_tokens, seed, start_step=start_step)
    else:
        stream = fixed_batches_from_tokens(tokens, batch_size, seed, start_step=start_step)
    return stream.with_options(sharding_options())


def create_metric_variables(model, batches: tf.data.Dataset) -> None:
    """Creates the compiled metrics' variables before `fit` traces its step.

    Keras creates them while it traces the first training step, and a
    `tf.function` that creates variables is traced twice, which delays the
    first step by a whole extra trace. Evaluating one batch creates them
    first (and traces the evaluation step, which validation traces anyway).
    """
    model.evaluate(batches.take(1), steps=1, verbose=0)


class Fitter:
    """Calls `model.fit` for a range of epochs and gathers the history of the calls."""

    def __init__(self, strategy: tf.distribute.Strategy, chief: bool, batch_tokens: int,
                 batch_size: int, seed: int, valid_batches, model, callbacks, verbose):
        self.strategy = strategy
        self.batches = (batch_tokens, batch_size, seed)
        self.model = model
        if verbose == "auto":  # a progress bar on a terminal only
            verbose = int(hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
        self.fit_args = dict(
            validation_data=valid_batches,
            callbacks=callbacks,
            verbose=int(verbose) if chief else 0,
        )
        self.history: dict[str, list[float]] = {}
        self._metric_variables_created = False

    def fit(self, tokens: TokenizedPairs, first_epoch: int, last_epoch: int, steps: int,
            start_step: int) -> None:
        """Epochs `first_epoch` to `last_epoch` (excluded) of `steps` steps over
        `tokens`' stream, from `start_step`."""
        stream = train_stream(tokens, *self.batches, start_step)
        with distributed_fit_workaround(self.model, self.strategy, tokens):
            if not self._metric_variables_created:  # once, even when a resume fits twice
                create_metric_variables(self.model, stream)
                self._metric_variables_created = True
            fitted = self.model.fit(
                stream,
                initial_epoch=first_epoch,
                epochs=last_epoch,
                steps_per_epoch=steps,
                shuffle=False,  # the stream is shuffled, seeded, by batches_from_tokens
                **self.fit_args,
            )
        for key, values in fitted.history.items():
            self.history.setdefault(key, []).extend(float(v) for v in values)

# --------------------------------------------------------------------------
# The training pairs, tokenized once into the run's `tokens/`
# --------------------------------------------------------------------------


MANIFEST = "tokens.json"
FORMAT = 1
_COUNTS = ("max_tokens", "num_trimmed", "num_trimmed_source", "num_trimmed_target",
           "variants", "sampled_from_pass")


def tokenizers_digest(tokenizers) -> str:
    """A SHA-256 of the tokenizers' vocabulary (and SentencePiece model) files."""
    digest = hashlib.sha256()
    for side in (tokenizers.source, tokenizers.target):
        paths = [side.get_vocab_path()]
        if hasattr(side, "get_model_path"):
            paths.append(side.get_model_path())
        for path in paths:
            digest.update(Path(path.numpy().decode("utf-8")).read_bytes())
    return digest.hexdigest()


def training_tokens(directory, pairs, tokenizers, max_tokens: int,
                    fingerprint: dict) -> TokenizedPairs:
    """The training `pairs` tokenized in `directory`: its files when their
    manifest names this data, these pairs of it (`SplitPairs.identity`), these
    tokenizers and `max_tokens`, else made now."""
    # A streamed split says which pairs of the file it holds; a list is the
    # fingerprinted data itself.
    pairs_identity = pairs.identity() if hasattr(pairs, "identity") else {"pairs": len(pairs)}
    key = {"format": FORMAT, "data": fingerprint, "pairs": pairs_identity,
           "tokenizers": tokenizers_digest(tokenizers), "max_tokens": max_tokens}
    return _made_or_opened(Path(directory), key, lambda: tokenize_pairs(
        pairs, tokenizers, max_tokens, directory=directory))


def _made_or_opened(directory: Path, key: dict, make) -> TokenizedPairs:
    manifest = directory / MANIFEST
    if manifest.is_file():
        record = rundir.read_json(manifest)
        if isinstance(record, dict) and record.get("key") == key:
            tokens = _opened(directory, record)
            logger.info("Opened %d tokenized training pairs in %s.", len(tokens), directory)
            return tokens
    manifest.unlink(missing_ok=True)  # the files below are rewritten
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tokens = make()
    disk = sum(path.stat().st_size for side in ("source", "target")
               for path in directory.glob(f"{side}.*"))
    logger.info("Tokenized %d training pairs in %.1f s into %s (%.1f MB).", len(tokens),
                time.perf_counter() - started, directory, disk / 1e6)
    record = {"key": key, "dtype": str(tokens.context.values.dtype),
              **{name: getattr(tokens, name) for name in _COUNTS}}
    rundir.write_json_atomic(manifest, record)
    return tokens


def _opened(directory: Path, record: dict) -> TokenizedPairs:
    dtype = np.dtype(record["dtype"])
    context, target = (open_rows(directory / f"{side}.ids", directory / f"{side}.splits", dtype)
                       for side in ("source", "target"))
    return TokenizedPairs(context=context, target=target,
                          **{name: record[name] for name in _COUNTS})

# --------------------------------------------------------------------------
# Subword sampling: the plan, recorded beside `config.json`, and the drawn pairs
# --------------------------------------------------------------------------


def _pass_batches(config: RunConfig, best: TokenizedPairs, pass_index: int) -> int:
    return batches_per_pass(best, config.batch_tokens, batch_size=config.batch_size,
                            seed=config.seed, pass_index=pass_index)


def expected_passes(config: RunConfig, best: TokenizedPairs, step: int,
                    seconds: float | None = None) -> float:
    """The passes over `best` a run is on course for after `step` updates in
    `seconds` of training: all its epochs' steps, or fewer when its time budget
    runs out first. The workers of a multi-worker run count the chief's
    seconds (`TrainingClock`), so they decide alike."""
    steps = config.epochs * config.steps_per_epoch
    if config.time_budget is not None:
        if not seconds:
            return 0.0
        steps = min(steps, step * config.time_budget / seconds)
    return steps / _pass_batches(config, best, 0)


def may_sample(config: RunConfig, best: TokenizedPairs) -> bool:
    """Whether the run could sample at all: then its first epoch is `fit` apart."""
    return bool(config.subword_sampling) and recipes.samples_subwords(
        config.epochs * config.steps_per_epoch / _pass_batches(config, best, 0))


def first_pass_from(config: RunConfig, best: TokenizedPairs, step: int) -> int:
    """The first pass over `best` that starts at or after `step`."""
    start = pass_index = 0
    while start < step:
        start += _pass_batches(config, best, pass_index)
        pass_index += 1
    return pass_index


def _read(path) -> dict:
    decision = rundir.read_json(path)
    if not (isinstance(decision, dict) and isinstance(decision.get("samples"), bool)
            and (not decision["samples"] or (isinstance(decision.get("from_pass"), int)
                                             and decision["from_pass"] >= 1))):
        raise rundir.RunDirError(
            f"{str(path)!r} is not a record of subword sampling: expected a JSON object with "
            "\"samples\": true or false (and with true, \"from_pass\": N >= 1). Delete it to let "
            f"the run decide again. Received: {decision!r}")
    logger.info("Subword sampling as recorded in %s: %s.", path,
                f"passes from pass {decision['from_pass'] + 1} on read drawn segmentations"
                if decision["samples"] else "every pass reads the best split")
    return decision


def _decide(config: RunConfig, best: TokenizedPairs, step: int, seconds: float) -> dict:
    passes = expected_passes(config, best, step, seconds)
    samples = recipes.samples_subwords(passes)
    decision = {"samples": samples, "expected_passes": round(passes, 2), "decided_at_step": step}
    if samples:
        decision["from_pass"] = first_pass_from(config, best, step)
    logger.info(
        "Subword sampling: the run is on course for %.1f passes over the training pairs "
        "(%s), %s %d; %s.", passes,
        "its epochs" if config.time_budget is None
        else f"{step} steps in {seconds:.0f} s of a {config.time_budget:.0f} s budget",
        "at least" if samples else "fewer than", recipes.SAMPLING_MIN_PASSES,
        f"the passes from pass {decision['from_pass'] + 1} on read drawn segmentations"
        if samples else "every pass reads the best split")
    return decision


def plan_needed(config: RunConfig, best: TokenizedPairs, start_step: int) -> bool:
    """Whether `fit` from `start_step` needs the sampling plan: the run samples,
    its first epoch is over and the segmentations are not drawn yet."""
    return bool(config.subword_sampling) and start_step >= config.steps_per_epoch \
        and best.variants == 1


def sampling_plan(config: RunConfig, best: TokenizedPairs, step: int, seconds: float,
                  run_dir) -> tuple[dict, bool]:
    """The run's sampling plan after `step` updates in `seconds` of training, and
    whether it is new: the one recorded in `run_dir` (which every worker of a
    resumed run shares), else decided now (`record_sampling_plan` records it)."""
    recorded = Path(run_dir) / rundir.SAMPLING_FILE
    if recorded.is_file():
        return _read(recorded), False
    return _decide(config, best, step, seconds), True


def record_sampling_plan(directory, plan: dict) -> None:
    """Writes the sampling plan to `directory`'s `rundir.SAMPLING_FILE`: the one
    writer of that file."""
    rundir.write_json_atomic(Path(directory) / rundir.SAMPLING_FILE, plan)


def record_legacy_sampling(run_dir, record: dict) -> None:
    """Records the sampling plan of a run whose `config.json` `record` predates
    the record (`transformer.run.config.legacy_sampling_plan`), unless one is recorded."""
    plan = legacy_sampling_plan(record)
    if plan is not None and not (Path(run_dir) / rundir.SAMPLING_FILE).exists():
        record_sampling_plan(run_dir, plan)


def drawn_pairs(config: RunConfig, pairs, tokenizers, best: TokenizedPairs,
                plan: dict, directory=None) -> TokenizedPairs:
    """The training `pairs` with their drawn segmentations after `best`, their
    best split, as the plan says (its `from_pass` on); `best` without sampling.
    With a `directory` (a run's `tokens/`), drawn into memory-mapped files there."""
    if not plan["samples"]:
        return best
    return sample_pairs(pairs, tokenizers, config.resolved_max_tokens, config.subword_sampling,
                        recipes.SAMPLED_SEGMENTATIONS, config.seed, plan["from_pass"], best,
                        directory=directory)
