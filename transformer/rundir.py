"""The layout of a run directory, in one place.

`train.py` writes a run directory; `Translator.from_run`, `translate.py` and
the notebooks read it. Nothing else needs to know the file names::

    runs/<name>/
      config.json        model, data and training settings (RunConfig.to_dict())
      tokenizers/        the source and target tokenizers (a SavedModel)
      model.keras        the trained Transformer
      checkpoints/       training state for --resume (weights, optimizer, epoch)
      metrics.csv        one row per epoch
      metrics.json       the final evaluation
      logs/              TensorBoard logs (keras.callbacks.TensorBoard: train/, validation/)
      export/            the exported translator (a SavedModel: strings -> strings)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
TOKENIZERS_DIR = "tokenizers"
MODEL_FILE = "model.keras"
CHECKPOINTS_DIR = "checkpoints"
METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"
LOGS_DIR = "logs"
EXPORT_DIR = "export"

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


def write_json_atomic(path, data: dict[str, Any]) -> None:
    """Writes JSON to `path` through a temporary file and a rename, so a crash
    never leaves a half-written file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as err:
        raise RunDirError(f"{str(path)!r} does not exist.") from err
    except json.JSONDecodeError as err:
        raise RunDirError(f"{str(path)!r} is not valid JSON: {err}") from err
