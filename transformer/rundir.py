"""The run directory, in one place: its layout, its checks and its atomic writes.

`train.py` writes a run directory; `Translator.from_run`, `translate.py` and
the notebooks read it. Nothing else needs to know the file names::

    runs/<name>/
      config.json        model, data and training settings (RunConfig.to_dict())
      tokenizers/        the source and target tokenizers (a SavedModel)
      model.keras        the trained Transformer
      checkpoints/       training state for --resume (weights, optimizer, epoch)
      progress.json      the step of the latest checkpoint saved (kept out of checkpoints/)
      sampling.json      whether the passes after the first read drawn segmentations
      metrics.csv        one row per epoch
      metrics.json       the final evaluation
      logs/              TensorBoard logs (keras.callbacks.TensorBoard: train/, validation/)
      export/            the exported translator (a SavedModel: strings -> strings)

`check_run_dir` is what a translator checks; `prepare_run_dir` decides whether
`train` may start or resume in one and removes what an interrupted write left,
`check_data_unchanged` whether the data of a resume are the run's,
`parent_run` whether a new run may start from a finished one (`--init-from`);
every file is written through `replace_atomically`, so that an interruption at
any moment leaves it usable. Standard library only: `translate.py` reads it
before TensorFlow starts.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
# The key of config.json that holds the data's fingerprint (`check_data_unchanged`).
FINGERPRINT_KEY = "data_fingerprint"
TOKENIZERS_DIR = "tokenizers"
MODEL_FILE = "model.keras"
CHECKPOINTS_DIR = "checkpoints"
# The file of `checkpoints/` that names the latest checkpoint (tf.train.CheckpointManager).
CHECKPOINT_STATE_FILE = "checkpoint"
METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"
LOGS_DIR = "logs"
EXPORT_DIR = "export"
PROGRESS_FILE = "progress.json"
SAMPLING_FILE = "sampling.json"
# The training pairs tokenized once, memory-mapped (`transformer.run.fitting.training_tokens`),
# and the record of the corpus's scan (`transformer.data.streamed`).
TOKENS_DIR = "tokens"
# The suffix of files being written (`replace_atomically`).
TMP_SUFFIX = ".tmp"

# What a run needs before it can translate.
REQUIRED_FOR_TRANSLATION = (CONFIG_FILE, TOKENIZERS_DIR, MODEL_FILE)


class RunDirError(ValueError):
    """A run directory is missing or lacks a file; the message names what is missing."""


def check_run_dir(run_dir, required=REQUIRED_FOR_TRANSLATION) -> Path:
    """Returns `run_dir` as a Path, or raises `RunDirError` naming what is missing."""
    path = Path(run_dir)
    if not path.exists():
        raise RunDirError(f"Run directory {str(path)!r} does not exist.")
    if not path.is_dir():
        raise RunDirError(f"Run directory {str(path)!r} is not a directory.")
    missing = [name for name in required if not (path / name).exists()]
    if missing:
        raise RunDirError(
            f"Run directory {str(path)!r} is incomplete: missing {', '.join(missing)}. "
            "Was the training run finished? (train.py writes these at the end; "
            "continue an interrupted run with --resume.)"
        )
    return path


# Suffixes that Keras saves to only: a temporary file keeps them at its end.
_KERAS_SUFFIXES = (".weights.h5", ".keras")


def temporary_path(path) -> Path:
    """Where `replace_atomically` writes `path` first: `name.tmp`, or
    `stem.tmp.keras` for a `.keras` file and `stem.tmp.weights.h5` for a
    `.weights.h5` file (Keras saves only to those suffixes)."""
    path = Path(path)
    for suffix in _KERAS_SUFFIXES:
        if path.name.endswith(suffix):
            return path.with_name(path.name[:-len(suffix)] + TMP_SUFFIX + suffix)
    return path.with_name(path.name + TMP_SUFFIX)


def is_temporary(path) -> bool:
    """Whether `path` is a leftover of `replace_atomically` (see `temporary_path`)."""
    name = Path(path).name
    return name.endswith(TMP_SUFFIX) or any(name.endswith(TMP_SUFFIX + suffix)
                                            for suffix in _KERAS_SUFFIXES)


def replace_atomically(path, write: Callable[[Path], None]) -> None:
    """Writes `path` so that a crash leaves either the old file or the new one.

    `write(tmp)` writes the content to a temporary file (`temporary_path`),
    which is flushed to disk (`fsync`), renamed over `path`, and the
    directory is flushed too, so that the rename itself survives a power
    loss. A failure removes the temporary file; a kill leaves it, and the next
    `train` removes it (`remove_leftovers`).
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync(path.parent)


def _fsync(path: Path) -> None:
    """Flushes a file or a directory to disk (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except (IsADirectoryError, PermissionError):  # Windows: directories cannot be opened
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_json_atomic(path, data: dict[str, Any]) -> None:
    """Writes JSON to `path` atomically and durably (`replace_atomically`)."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")

    replace_atomically(path, write)


def write_text_atomic(path, text: str) -> None:
    """Writes UTF-8 `text` to `path` atomically and durably (`replace_atomically`)."""
    replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json(path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as err:
        raise RunDirError(f"{str(path)!r} does not exist.") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunDirError(f"{str(path)!r} is not valid JSON: {err}") from err
    except OSError as err:
        raise RunDirError(f"Cannot read {str(path)!r}: {err}") from err


def parent_run(run_dir, needed=()) -> dict[str, Any]:
    """The `config.json` record of a finished run to start a new one from
    (`--init-from`, `transformer.run.adapt`), which holds the keys `needed`.

    Raises:
        RunDirError: `run_dir` is not a finished run (no config.json,
            model.keras or tokenizers), or its config.json predates the
            settings it hands on, in one line.
    """
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise RunDirError(
            f"--init-from {str(run_dir)!r}: not a run directory (it has no {CONFIG_FILE}).")
    for name in (MODEL_FILE, TOKENIZERS_DIR):
        if not (run_dir / name).exists():
            raise RunDirError(
                f"--init-from {str(run_dir)!r}: the run has no {name}, so it has not "
                "finished; finish it with --resume first.")
    record = read_json(run_dir / CONFIG_FILE)
    missing = [name for name in needed if name not in record]
    if missing:
        raise RunDirError(
            f"--init-from {str(run_dir)!r}: its {CONFIG_FILE} has no {missing}; it was "
            "written by an older version of this code, whose runs cannot be adapted.")
    return record


def run_files(run_dir: Path) -> list[str]:
    """The names in `run_dir`, sorted (none if it does not exist)."""
    return sorted(entry.name for entry in run_dir.iterdir()) if run_dir.is_dir() else []


def prepare_run_dir(run_dir, resume: bool, chief: bool) -> bool:
    """Checks the output directory `run_dir` of a run; returns whether it holds
    a run to resume (its `config.json`). On the chief, resuming removes what
    an interrupted write left (`remove_leftovers`).

    Raises:
        RunDirError: the directory cannot be used: not empty for a new run, or
            not a training run (nor empty) for a resumed one.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"Output directory {str(run_dir)!r} exists and is not a directory.")
    files = run_files(run_dir)
    has_config = (run_dir / CONFIG_FILE).is_file()
    if not resume:
        if files and chief:
            listing = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
            raise RunDirError(
                f"Output directory {str(run_dir)!r} is not empty (it holds {listing}). "
                "Continue that run with --resume, or choose another --output-dir."
            )
        return False
    ours = {
        TOKENIZERS_DIR, CHECKPOINTS_DIR, LOGS_DIR, METRICS_CSV,
        PROGRESS_FILE, SAMPLING_FILE, TOKENS_DIR,
    }
    if chief and (has_config or all(name in ours or is_temporary(name) for name in files)):
        remove_leftovers(run_dir)  # only in a directory of ours
        files = run_files(run_dir)
    if has_config:
        return True
    strangers = [name for name in files if name not in ours]
    if strangers:
        raise RunDirError(
            f"Cannot resume from {str(run_dir)!r}: it has no {CONFIG_FILE}, so it is "
            f"not a training run (it holds {', '.join(strangers[:4])})."
        )
    if not chief:
        raise RunDirError(
            f"Cannot resume: this worker cannot read {str(run_dir / CONFIG_FILE)!r}. "
            "A multi-worker run resumes only when every worker sees the chief's output "
            "directory (a shared filesystem at the same path)."
        )
    if files:
        logger.info("Nothing to resume in %s (the run stopped before it began); starting anew.",
                    run_dir)
    return False


def training_trace(run_dir: Path) -> str:
    """What in `run_dir` shows that the run trained past a checkpoint ('' if nothing)."""
    progress = run_dir / PROGRESS_FILE
    if progress.is_file():
        try:
            step = read_json(progress).get("checkpoint_step")
        except RunDirError:
            step = None
        return f"{PROGRESS_FILE} records a checkpoint saved at step {step}"
    for name in (MODEL_FILE, METRICS_JSON):
        if (run_dir / name).exists():
            return f"it holds {name}"
    metrics = run_dir / METRICS_CSV
    if metrics.is_file() and len(metrics.read_text(encoding="utf-8").splitlines()) > 1:
        return f"{METRICS_CSV} has rows"
    directory = run_dir / CHECKPOINTS_DIR
    if directory.is_dir() and any(p.name.startswith("ckpt-") for p in directory.iterdir()):
        return "checkpoint data without an index is left"
    return ""


def record_checkpoint(write_dir: Path, step: int) -> None:
    """Writes `progress.json` after a checkpoint was saved: its step and path.

    Kept outside `checkpoints/`, it shows that the run had checkpoints when
    they are gone (`resume_checkpoint`).
    """
    write_json_atomic(write_dir / PROGRESS_FILE, {
        "checkpoint_step": step,
        "checkpoint": f"{CHECKPOINTS_DIR}/ckpt-{step}",
    })


def remove_leftovers(run_dir: Path) -> None:
    """Removes what interrupted writes left in `run_dir`.

    The temporary files of `replace_atomically` (`*.tmp`,
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
    leftovers = [path for path in _entries(run_dir) if path.is_file() and is_temporary(path)]
    directory = run_dir / CHECKPOINTS_DIR
    for path in _entries(directory):
        name = path.name
        if name.startswith(CHECKPOINT_STATE_FILE + ".tmp") or (
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


def check_data_unchanged(run_dir: Path, saved: dict[str, dict] | None,
                         fingerprint: dict[str, dict]) -> None:
    """Refuses to resume the run in `run_dir` on other data than it was trained on.

    A resumed run continues the saved vocabulary, `steps_per_epoch` and
    position in the data stream, which mean nothing for other data, so
    `config.json` records a fingerprint of every input
    (`transformer.data.loading.data_fingerprint`) under `FINGERPRINT_KEY`. A
    `config.json` written before fingerprints were kept has none: such a run
    resumes as before, with a warning that its data were not checked, and its
    `config.json` then records the current fingerprint.

    Args:
        run_dir: the run directory, named in the messages.
        saved: the fingerprint its `config.json` holds (None if it has none).
        fingerprint: `data_fingerprint` of the data read now.

    Raises:
        transformer.rundir.RunDirError: an input differs; one line naming it,
            with what was saved and what was read.
    """
    if saved is None:
        logger.warning(
            "%s records no fingerprint of the run's data (it was written by an older "
            "version): resuming without checking that the data are unchanged.",
            run_dir / CONFIG_FILE)
        return
    for key in sorted(set(saved) | set(fingerprint)):
        before, now = saved.get(key), fingerprint.get(key)
        if before != now:
            raise RunDirError(
                f"Cannot resume {str(run_dir)!r}: {_name(key, before or now)} differs from "
                f"the data the run was trained on (then: {_describe(before)}; now: "
                f"{_describe(now)}). Resume with the original data, or start a new run in "
                "another --output-dir."
            )


def _name(key: str, entry: dict) -> str:
    if "path" in entry:
        return repr(entry["path"])
    if key == "toy":
        return f"the toy corpus (seed {entry.get('seed')})"
    return f"{entry.get('name')} split {entry.get('split')!r}"


def _describe(entry: dict | None) -> str:
    if entry is None:
        return "not an input"
    parts = [f"{entry['pairs']} pairs" if "pairs" in entry else ""]
    if "bytes" in entry:
        parts.append(f"{entry['bytes']:,} bytes")
    if entry.get("version"):
        parts.append(f"version {entry['version']}")
    if "sha256" in entry:
        parts.append(f"sha256 {entry['sha256'][:12]}")
    return ", ".join(part for part in parts if part)


def save_model_atomic(model, path: Path) -> None:
    """Saves `model` to `path` (a `.keras` file) atomically and durably."""
    replace_atomically(path, model.save)


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
        write_text_atomic(path, "".join(kept))
