"""Runs JoeyNMT 2.3 (`python -m joeynmt MODE CONFIG ...`) on one CPU thread, with
the shim it needs on current PyTorch and a wall-clock budget for training.

Run by the peer benchmark (`bench/peer_joeynmt/run.py`) with the Python of the
peer's own virtual environment, never with the project's. JoeyNMT's files are
not changed; everything below is applied in this process only:

- `torch.set_num_threads(1)` and `torch.set_num_interop_threads(1)`, so that a
  run pinned to one core with `taskset` does not oversubscribe it.
- `ReduceLROnPlateau`: JoeyNMT 2.3 passes `verbose=False`, an argument that
  PyTorch 2.7 removed (TypeError: unexpected keyword argument 'verbose'). The
  shim is a subclass that drops `verbose` and is put in place of the class in
  `torch.optim.lr_scheduler` and in `joeynmt.builders` (which imported it by
  name). It is applied only when the installed class has no `verbose`.
- `--budget-seconds S` (train mode): the wall clock starts at the first
  training batch (data loading, vocabulary and model building are not
  counted; `process_seconds` includes them) and, once S seconds have passed, the next batch raises
  `KeyboardInterrupt`, which JoeyNMT's trainer handles as a user's Ctrl-C: it
  logs the step and saves the current weights as `latest.ckpt`. By default
  the budget counts the training batches only, as `train.py --time-budget`
  counts its own training and not its final evaluation: JoeyNMT's
  validations run on top of it, so its best-checkpoint choice costs it no
  updates. With `--budget-counts-validations` they count towards it (what
  they cost a user in wall time); one that starts before the budget ends
  runs to its end.
- A config given as JSON (`CONFIG.json`) is written as YAML beside it
  (`CONFIG.yaml`, with PyYAML, which reads `1e-05` in JSON as a string) and
  that file is passed to JoeyNMT.
- `--stats-json FILE` (train mode): updates, target tokens (JoeyNMT's
  `batch.ntokens`: non-padding target tokens, the end token included), seconds in
  training batches and in validations, and the number of validations.

Example (from the repository root, after `bash bench/peer_joeynmt/setup_venv.sh`):

    taskset -c 1 bench/peer_joeynmt/.venv/bin/python bench/peer_joeynmt/launch.py \\
        --budget-seconds 600 --stats-json stats.json train config.yaml --skip-test
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time


def _install_scheduler_shim() -> bool:
    """Replaces `ReduceLROnPlateau` by a subclass that accepts `verbose=`."""
    import torch.optim.lr_scheduler as lr_scheduler

    original = lr_scheduler.ReduceLROnPlateau
    if "verbose" in inspect.signature(original.__init__).parameters:
        return False

    class ReduceLROnPlateau(original):
        """`torch.optim.lr_scheduler.ReduceLROnPlateau` that ignores `verbose`."""

        def __init__(self, optimizer, *args, verbose=None, **kwargs):
            del verbose  # removed in PyTorch 2.7; JoeyNMT 2.3 passes False
            super().__init__(optimizer, *args, **kwargs)

    lr_scheduler.ReduceLROnPlateau = ReduceLROnPlateau
    import joeynmt.builders

    joeynmt.builders.ReduceLROnPlateau = ReduceLROnPlateau
    return True


def _as_yaml(json_path: str) -> str:
    """Writes the JSON config `json_path` as YAML beside it; returns that path."""
    import yaml

    with open(json_path, encoding="utf-8") as f:
        config = json.load(f)
    yaml_path = json_path[: -len(".json")] + ".yaml"
    with open(yaml_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, allow_unicode=True, sort_keys=False)
    return yaml_path


class _TrainingClock:
    """Counts updates, tokens and seconds; stops training after the budget."""

    def __init__(self, budget_seconds: float | None, counts_validations: bool = False):
        self.budget_seconds = budget_seconds
        self.counts_validations = counts_validations
        self.started = None
        self.stopped = None
        self.batches = 0
        self.target_tokens = 0
        self.validations = 0
        self.validation_seconds = 0.0
        self.stopped_by_budget = False

    def install(self) -> None:
        from joeynmt.training import TrainManager

        train_step, validate = TrainManager._train_step, TrainManager._validate
        clock = self

        def timed_train_step(manager, batch):
            now = time.monotonic()
            if clock.started is None:
                clock.started = now
            elif clock.budget_seconds is not None and clock.spent(now) >= clock.budget_seconds:
                clock.stopped_by_budget = True
                clock.stopped = now
                raise KeyboardInterrupt(f"training budget of {clock.budget_seconds:g} s")
            result = train_step(manager, batch)
            clock.batches += 1
            clock.target_tokens += int(batch.ntokens)
            clock.stopped = time.monotonic()
            return result

        def timed_validate(manager, valid_data):
            begin = time.monotonic()
            try:
                return validate(manager, valid_data)
            finally:
                clock.validations += 1
                clock.validation_seconds += time.monotonic() - begin
                clock.stopped = time.monotonic()

        TrainManager._train_step = timed_train_step
        TrainManager._validate = timed_validate

    def spent(self, now: float) -> float:
        """Seconds of the budget spent at `now`."""
        wall = now - self.started
        return wall if self.counts_validations else wall - self.validation_seconds

    def to_dict(self) -> dict:
        wall = (self.stopped - self.started) if self.started is not None else 0.0
        step_seconds = max(wall - self.validation_seconds, 1e-9)
        return {
            "budget_seconds": self.budget_seconds,
            "budget_counts": "training and validations" if self.counts_validations
                             else "training batches only",
            "stopped_by_budget": self.stopped_by_budget,
            "training_wall_seconds": round(wall, 2),
            "validation_seconds": round(self.validation_seconds, 2),
            "validations": self.validations,
            "batches": self.batches,
            "target_tokens": self.target_tokens,
            "target_tokens_per_second": round(self.target_tokens / step_seconds, 1),
            "target_tokens_per_wall_second": round(self.target_tokens / max(wall, 1e-9), 1),
        }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-seconds", type=float, default=None)
    parser.add_argument("--budget-counts-validations", action="store_true",
                        help="validations count towards --budget-seconds (default: "
                             "training batches only)")
    parser.add_argument("--stats-json", default=None)
    parser.add_argument("--threads", type=int, default=1)
    args, joeynmt_args = parser.parse_known_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    shimmed = _install_scheduler_shim()
    clock = _TrainingClock(args.budget_seconds, args.budget_counts_validations)
    clock.install()

    from joeynmt.__main__ import main as joeynmt_main

    joeynmt_args = [_as_yaml(arg) if arg.endswith(".json") else arg for arg in joeynmt_args]

    process_start = time.monotonic()
    sys.argv = ["joeynmt", *joeynmt_args]
    try:
        joeynmt_main()
    finally:
        if args.stats_json:
            stats = clock.to_dict()
            stats["process_seconds"] = round(time.monotonic() - process_start, 2)
            stats["torch"] = torch.__version__
            stats["torch_threads"] = torch.get_num_threads()
            stats["reduce_lr_on_plateau_shim"] = shimmed
            with open(args.stats_json, "w", encoding="utf-8") as f:
                json.dump(stats, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
