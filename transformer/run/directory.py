"""The run directory of `train`: preparation, resume checks and atomic writes.

What a run directory holds is `transformer.rundir`; this module decides
whether `train` may start or resume in one, and writes its files so that an
interruption at any moment leaves them usable.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from transformer import rundir
from transformer.data.tokenizers import save_tokenizers
from transformer.run.config import RunConfig

logger = logging.getLogger(__name__)


def run_files(run_dir: Path) -> list[str]:
    """The names in `run_dir`, sorted (none if it does not exist)."""
    return sorted(entry.name for entry in run_dir.iterdir()) if run_dir.is_dir() else []


def prepare_run_dir(config: RunConfig, resume: bool, chief: bool) -> RunConfig | None:
    """Checks the output directory; returns the saved config when resuming one."""
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
    if has_config:
        return RunConfig.load(run_dir)
    ours = {
        rundir.TOKENIZERS_DIR, rundir.CHECKPOINTS_DIR, rundir.LOGS_DIR, rundir.METRICS_CSV,
    }
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


def check_resume(config: RunConfig, saved: RunConfig) -> RunConfig:
    """The saved config with the allowed changes of `config`; raises on the others."""
    changes = config.to_dict()
    changes.update(changes.pop("model"))
    # Fields sized from the corpus (None until then) take the saved values.
    for name in ("steps_per_epoch", "epochs", "batch_tokens"):
        if getattr(config, name) is None:
            changes.pop(name)
    return saved.for_resume(**changes)


def save_tokenizers_anew(tokenizers, directory: Path) -> None:
    # No rename dance is needed: config.json is written after the tokenizers,
    # and a directory without config.json is started anew on --resume.
    shutil.rmtree(directory, ignore_errors=True)
    save_tokenizers(tokenizers, directory)


def save_model_atomic(model, path: Path) -> None:
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)  # Keras wants the .keras suffix
    model.save(tmp)
    os.replace(tmp, path)


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
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, path)
