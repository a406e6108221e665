"""When a run trains on random subword segmentations (`--subword-sampling`).

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

import logging
from pathlib import Path

from transformer import rundir
from transformer.data.batching import TokenizedPairs, batches_per_pass, sample_pairs
from transformer.run import recipes
from transformer.run.config import RunConfig, legacy_sampling_plan

logger = logging.getLogger(__name__)


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
