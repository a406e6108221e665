"""The layout of a run directory, in one place.

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
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
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


def temporary_path(path) -> Path:
    """Where `replace_atomically` writes `path` first: `name.tmp`, or
    `stem.tmp.keras` for a `.keras` file (Keras saves only to that suffix)."""
    path = Path(path)
    if path.suffix == ".keras":
        return path.with_name(path.stem + TMP_SUFFIX + path.suffix)
    return path.with_name(path.name + TMP_SUFFIX)


def is_temporary(path) -> bool:
    """Whether `path` is a leftover of `replace_atomically` (see `temporary_path`)."""
    name = Path(path).name
    return name.endswith(TMP_SUFFIX) or name.endswith(TMP_SUFFIX + ".keras")


def replace_atomically(path, write: Callable[[Path], None]) -> None:
    """Writes `path` so that a crash leaves either the old file or the new one.

    `write(tmp)` writes the content to a temporary file (`temporary_path`),
    which is flushed to disk (`fsync`), renamed over `path`, and the
    directory is flushed too, so that the rename itself survives a power
    loss. A failure removes the temporary file; a kill leaves it, and the next
    `train` removes it (`transformer.run.directory.remove_leftovers`).
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
