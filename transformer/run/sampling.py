"""When a run trains on random subword segmentations (`--subword-sampling`).

Subword regularisation pays only once a run overfits its pairs; in runs that
underfit it lowered BLEU (BENCHMARKS.md, "Subword regularisation"). So the
first epoch always reads the pairs' best split, and at its end the run
decides once, from the passes it is on course to make, whether the later
passes read drawn segmentations (`recipes.samples_subwords`): its epochs, or
with a time budget the budget over the time the first epoch took. The
segmentations are drawn then, outside the budget, and only if they will be
read. The decision and the first pass that reads a draw are written to the
run directory (`rundir.SAMPLING_FILE`), so that a resumed run reads what the
interrupted one read.
"""

from __future__ import annotations

import logging

from transformer import rundir
from transformer.data.batching import TokenizedPairs, batches_per_pass, sample_pairs
from transformer.run import recipes
from transformer.run.config import RunConfig

logger = logging.getLogger(__name__)


def _pass_batches(config: RunConfig, best: TokenizedPairs, pass_index: int) -> int:
    return batches_per_pass(best, config.batch_tokens, batch_size=config.batch_size,
                            seed=config.seed, pass_index=pass_index)


def expected_passes(config: RunConfig, best: TokenizedPairs, step: int,
                    seconds: float | None = None) -> float:
    """The passes over `best` a run is on course for after `step` updates in
    `seconds` of training: all its epochs' steps, or fewer when its time budget
    runs out first. The workers of a multi-worker run read one stream but
    keep their own clocks, so with a budget they count none: no sampling."""
    steps = config.epochs * config.steps_per_epoch
    if config.time_budget is not None:
        if config.strategy == "multi-worker" or not seconds:
            return 0.0
        steps = min(steps, step * config.time_budget / seconds)
    return steps / _pass_batches(config, best, 0)


def may_sample(config: RunConfig, best: TokenizedPairs) -> bool:
    """Whether the run could sample at all: then its first epoch is `fit` apart."""
    return bool(config.subword_sampling) and recipes.samples_subwords(
        config.epochs * config.steps_per_epoch / _pass_batches(config, best, 0))


def _first_pass_from(config: RunConfig, best: TokenizedPairs, step: int) -> int:
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
        decision["from_pass"] = _first_pass_from(config, best, step)
    logger.info(
        "Subword sampling: the run is on course for %.1f passes over the training pairs "
        "(%s), %s %d; %s.", passes,
        "its epochs" if config.time_budget is None
        else f"{step} steps in {seconds:.0f} s of a {config.time_budget:.0f} s budget",
        "at least" if samples else "fewer than", recipes.SAMPLING_MIN_PASSES,
        f"the passes from pass {decision['from_pass'] + 1} on read drawn segmentations"
        if samples else "every pass reads the best split")
    return decision


def training_pairs(session, data, start_step: int, clock) -> TokenizedPairs:
    """The tokenized pairs that `fit` reads from `start_step` on, with `clock`
    (a `TrainingClock`) at the training time so far: `data.train_tokens` (the
    best split) during the first epoch or without sampling, else the pairs with
    their drawn segmentations if the run samples. Decided at the first call past
    the first epoch and written to `session.write_dir`, or read from the run
    directory (`session.run_dir`, which every worker of a resumed run shares)."""
    config, best = session.config, data.train_tokens
    if (not config.subword_sampling or start_step < config.steps_per_epoch
            or best.variants > 1):  # the best split, or already drawn
        return best
    recorded = session.run_dir / rundir.SAMPLING_FILE
    if recorded.is_file():
        decision = _read(recorded)
    else:
        decision = _decide(config, best, start_step, float(clock.seconds.numpy()))
        rundir.write_json_atomic(session.write_dir / rundir.SAMPLING_FILE, decision)
    if not decision["samples"]:
        return best
    return sample_pairs(data.corpus.train, data.tokenizers, config.resolved_max_tokens,
                        config.subword_sampling, recipes.SAMPLED_SEGMENTATIONS, config.seed,
                        decision["from_pass"], best=best)
