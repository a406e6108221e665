"""The run directory of `train`: preparation, resume checks and its writes.

What a run directory holds is `transformer.rundir`; this module decides
whether `train` may start or resume in one, removes what an interrupted write
left, and writes its files through `transformer.rundir.replace_atomically`,
so that an interruption at any moment leaves them usable.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

from transformer import rundir
from transformer.run.checkpoints import latest_checkpoint
from transformer.run.config import RunConfig
from transformer.run.fingerprint import FINGERPRINT_KEY

logger = logging.getLogger(__name__)


def run_files(run_dir: Path) -> list[str]:
    """The names in `run_dir`, sorted (none if it does not exist)."""
    return sorted(entry.name for entry in run_dir.iterdir()) if run_dir.is_dir() else []


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """A run to continue, as its `config.json` describes it.

    Attributes:
        config: the saved config with the changes the resumed run makes
            (`RunConfig.resumed_with`).
        data_fingerprint: the fingerprint of the data it was trained on
            (`transformer.run.fingerprint`); None in a `config.json` written
            before fingerprints were kept.
    """

    config: RunConfig
    data_fingerprint: dict | None


def prepare_run_dir(config: RunConfig, resume: bool, chief: bool) -> SavedRun | None:
    """Checks the output directory; returns the saved run when resuming one.

    Raises:
        transformer.rundir.RunDirError: the directory cannot be used, or
            `config` changes a setting that a resumed run must keep.
    """
    run_dir = config.run_dir
    if run_dir.exists() and not run_dir.is_dir():
        raise rundir.RunDirError(f"Output directory {str(run_dir)!r} exists and is not a directory.")
    files = run_files(run_dir)
    has_config = (run_dir / rundir.CONFIG_FILE).is_file()
    if not resume:
        if files and chief:
            listing = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
            raise rundir.RunDirError(
                f"Output directory {str(run_dir)!r} is not empty (it holds {listing}). "
                "Continue that run with --resume, or choose another --output-dir."
            )
        return None
    ours = {
        rundir.TOKENIZERS_DIR, rundir.CHECKPOINTS_DIR, rundir.LOGS_DIR, rundir.METRICS_CSV,
        rundir.PROGRESS_FILE, rundir.SAMPLING_FILE,
    }
    if chief and (has_config or all(name in ours or rundir.is_temporary(name) for name in files)):
        remove_leftovers(run_dir)  # only in a directory of ours
        files = run_files(run_dir)
    if has_config:
        path = run_dir / rundir.CONFIG_FILE
        record = rundir.read_json(path)
        saved = RunConfig.from_record(record, path)
        if chief:
            record_legacy_sampling(run_dir, record)
        return SavedRun(saved.resumed_with(config), record.get(FINGERPRINT_KEY))
    strangers = [name for name in files if name not in ours]
    if strangers:
        raise rundir.RunDirError(
            f"Cannot resume from {str(run_dir)!r}: it has no {rundir.CONFIG_FILE}, so it is "
            f"not a training run (it holds {', '.join(strangers[:4])})."
        )
    if not chief:
        raise rundir.RunDirError(
            f"Cannot resume: this worker cannot read {str(run_dir / rundir.CONFIG_FILE)!r}. "
            "A multi-worker run resumes only when every worker sees the chief's output "
            "directory (a shared filesystem at the same path)."
        )
    if files:
        logger.info("Nothing to resume in %s (the run stopped before it began); starting anew.",
                    run_dir)
    return None


def resume_checkpoint(run_dir: Path) -> str | None:
    """The checkpoint a resumed run continues from, or None to start it anew.

    None only when the run stopped before its first checkpoint (this is logged):
    nothing in `run_dir` shows that it trained.

    Raises:
        transformer.rundir.RunDirError: the run trained, but its checkpoints
            directory holds no checkpoint to continue from.
    """
    directory = run_dir / rundir.CHECKPOINTS_DIR
    latest = latest_checkpoint(directory)
    if latest:
        return latest
    trace = _training_trace(run_dir)
    if trace:
        raise rundir.RunDirError(
            f"Cannot resume {str(run_dir)!r}: {str(directory)!r} holds no checkpoint to "
            f"continue from (deleted, or its `checkpoint` file unreadable), yet the run "
            f"trained ({trace}). Restore the checkpoints, or start a new run in another "
            "--output-dir."
        )
    logger.warning("%s stopped before its first checkpoint: there is nothing to continue; "
                   "starting the run anew.", run_dir)
    return None


def _training_trace(run_dir: Path) -> str:
    """What in `run_dir` shows that the run trained past a checkpoint ('' if nothing)."""
    progress = run_dir / rundir.PROGRESS_FILE
    if progress.is_file():
        try:
            step = rundir.read_json(progress).get("checkpoint_step")
        except rundir.RunDirError:
            step = None
        return f"{rundir.PROGRESS_FILE} records a checkpoint saved at step {step}"
    for name in (rundir.MODEL_FILE, rundir.METRICS_JSON):
        if (run_dir / name).exists():
            return f"it holds {name}"
    metrics = run_dir / rundir.METRICS_CSV
    if metrics.is_file() and len(metrics.read_text(encoding="utf-8").splitlines()) > 1:
        return f"{rundir.METRICS_CSV} has rows"
    directory = run_dir / rundir.CHECKPOINTS_DIR
    if directory.is_dir() and any(p.name.startswith("ckpt-") for p in directory.iterdir()):
        return "checkpoint data without an index is left"
    return ""


def record_checkpoint(write_dir: Path, step: int) -> None:
    """Writes `progress.json` after a checkpoint was saved: its step and path.

    Kept outside `checkpoints/`, it shows that the run had checkpoints when
    they are gone (`resume_checkpoint`).
    """
    rundir.write_json_atomic(write_dir / rundir.PROGRESS_FILE, {
        "checkpoint_step": step,
        "checkpoint": f"{rundir.CHECKPOINTS_DIR}/ckpt-{step}",
    })


def remove_leftovers(run_dir: Path) -> None:
    """Removes what interrupted writes left in `run_dir`.

    The temporary files of `rundir.replace_atomically` (`*.tmp`,
    `model.tmp.keras`), and in `checkpoints/` TensorFlow's temporary files
    and directories (`checkpoint.tmp*`, `ckpt-<step>_temp/`) and the data of
    checkpoints whose index, written last, is missing.
    """
    removed = _leftovers(run_dir)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if removed:
        logger.info("Removed what an interrupted write left in %s: %s.", run_dir,
                    ", ".join(str(path.relative_to(run_dir)) for path in removed))


def _leftovers(run_dir: Path) -> list[Path]:
    leftovers = [path for path in _entries(run_dir) if path.is_file() and rundir.is_temporary(path)]
    directory = run_dir / rundir.CHECKPOINTS_DIR
    for path in _entries(directory):
        name = path.name
        if name.startswith(rundir.CHECKPOINT_STATE_FILE + ".tmp") or (
            path.is_dir() and name.startswith("ckpt-") and name.endswith("_temp")
        ):
            leftovers.append(path)
        elif name.startswith("ckpt-") and ".data-" in name:
            index = directory / (name.split(".data-", 1)[0] + ".index")
            if not index.exists():
                leftovers.append(path)
    return leftovers


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.is_dir() else []


def save_model_atomic(model, path: Path) -> None:
    """Saves `model` to `path` (a `.keras` file) atomically and durably."""
    rundir.replace_atomically(path, model.save)


def truncate_metrics_csv(path: Path, first_epoch: int) -> None:
    """Drops the rows of epochs >= `first_epoch` (0-based), which will be written again."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if not lines:
        return
    kept = [lines[0]]
    for line in lines[1:]:
        epoch = line.split(",", 1)[0]
        if epoch.isdigit() and int(epoch) < first_epoch:
            kept.append(line)
    if len(kept) != len(lines):
        rundir.write_text_atomic(path, "".join(kept))


def record_legacy_sampling(run_dir: Path, record: dict) -> None:
    """Writes the subword sampling record (`transformer.run.sampling`) of a run
    whose config.json `record` is of format 9, which predates it: with
    sampling, that run's passes read drawn segmentations from pass 9 on."""
    path = run_dir / rundir.SAMPLING_FILE
    if record.get("format_version") == 9 and record.get("subword_sampling") and not path.exists():
        rundir.write_json_atomic(path, {"samples": True, "from_pass": 8, "decided_at_step": 0})
