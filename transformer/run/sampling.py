"""When a run trains on random subword segmentations (`--subword-sampling`).

Subword regularisation pays only once a run overfits its pairs; in runs that
underfit it lowered BLEU (BENCHMARKS.md, "Subword regularisation"). So the
first pass over the training pairs always reads their best split, and at its
end the run decides once, from the passes it is on course to make, whether
the later passes read drawn segmentations (`recipes.samples_subwords`): its
epochs, or with a time budget the budget over the time the first pass took.
The segmentations are drawn then, outside the budget, and only if they will
be read. The decision is written to the run directory (`rundir.SAMPLING_FILE`),
so that a resumed run reads what the interrupted one read.
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformer import rundir
from transformer.data.batching import TokenizedPairs, sample_pairs
from transformer.run import recipes
from transformer.run.config import RunConfig

logger = logging.getLogger(__name__)


def expected_passes(config: RunConfig, step: int, seconds: float) -> float:
    """The passes a run is on course for after `step` updates in `seconds` of
    training: its epochs, or fewer when its time budget runs out first. Workers
    of a multi-worker run read one stream, so they decide on the epochs alone:
    their clocks differ."""
    if config.time_budget is None or seconds <= 0 or config.strategy == "multi-worker":
        return float(config.epochs)
    passes = step / config.steps_per_epoch * config.time_budget / seconds
    return min(float(config.epochs), passes)


def training_pairs(config: RunConfig, data, start_step: int, clock,
                   run_dir: Path) -> TokenizedPairs:
    """The tokenized pairs that `fit` reads from `start_step` on, with `clock`
    (a `TrainingClock`) at the training time so far: `data.train_tokens` (the
    best split) during the first pass or without sampling, else the pairs with
    their drawn segmentations if the run samples (decided here at the first
    call past the first pass, or read from `run_dir`)."""
    best = data.train_tokens
    if (not config.subword_sampling or start_step < config.steps_per_epoch
            or best.variants > 1):  # the best split, or already drawn
        return best
    path = Path(run_dir) / rundir.SAMPLING_FILE
    if path.is_file():
        decision = rundir.read_json(path)
        if not isinstance(decision, dict) or not isinstance(decision.get("samples"), bool):
            raise rundir.RunDirError(
                f"{str(path)!r} is not a record of subword sampling: expected a JSON object "
                f"with \"samples\": true or false. Received: {decision!r}")
    else:
        passes = expected_passes(config, start_step, float(clock.seconds.numpy()))
        decision = {"samples": recipes.samples_subwords(passes),
                    "expected_passes": round(passes, 2), "decided_at_step": start_step}
        rundir.write_json_atomic(path, decision)
        logger.info(
            "Subword sampling: the run is on course for %.1f passes over the training pairs, "
            "%s %d; %s.", passes, "at least" if decision["samples"] else "fewer than",
            recipes.SAMPLING_MIN_PASSES,
            "the passes from the second on read drawn segmentations" if decision["samples"]
            else "every pass reads the best split")
    if not decision["samples"]:
        return best
    return sample_pairs(data.corpus.train, data.tokenizers, config.resolved_max_tokens,
                        *recipes.subword_sampling_plan(config.subword_sampling, config.seed),
                        best=best)
