"""The format of `config.json`: its versions, their migrations, reading and writing it.

`config.json` holds a run's resolved `RunConfig` (`RunConfig.to_dict()`) and,
beside the settings, facts about the run: the vocabulary sizes, the data's
fingerprint (`transformer.run.fingerprint`) and the version of this format.
This module is the only one that knows the versions: `read_config` turns a
`config.json` of any version the current code resumes into a `RunConfig`, and
refuses one written by a newer version in one line naming that version.

The versions, and what an older file means for the fields it lacks:

1. the first; the run used WordPiece and batches of `batch_size` pairs.
2. `tokenizer`, `batch_tokens`, `eval_beam_size`.
3. `learning_rate`, `average_checkpoints` (older: the paper's schedule, the
   final weights).
4. `time_budget` (older: none, the field's default).
5. `shared_vocab`, `fit_warmup` (older: two vocabularies, the paper's warm-up).
6. `subword_model` (older: SentencePiece's unigram model).
7. `data_fingerprint` (older: none; resumed unchecked, with a warning).
8. `ema_momentum` (older: no moving average).
9. `subword_sampling` (older: none). A version-9 run that sampled read drawn
   segmentations from pass 9 on (`legacy_sampling_plan`).
10. the sampling plan is decided after the first pass and recorded beside
    `config.json` (`transformer.run.sampling`).
11. `decay` (older: the paper's inverse square root).
12. `max_held_out`, `vocab_sample`; held-out pairs are split off `--data` by
    a hash of their source (`transformer.data.splits`). An older run that
    split its validation or test pairs off `--data` held out other pairs, so
    it cannot be resumed; an older run with both files given resumes with the
    current defaults of both fields (its vocabulary is saved, its files whole).
13. `restore_best_weights`, `patience` (older: the last weights, no early
    stop), `init_from` and, for a run started from another, the record of
    it (`transformer.run.adapt.PARENT_KEY`).
14. `size_rule`, the record of the model the time budget chose
    (`transformer.run.sizing`; older: none, the model was given or the recipe's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer import rundir
from transformer.constants import PAPER_LEARNING_RATE
from transformer.data.source import VOCAB_SAMPLE_PAIRS
from transformer.data.splits import MAX_HELD_OUT
from transformer.run.adapt import PARENT_KEY
from transformer.run.config import RESOLVED_FIELDS, RESUMABLE_FIELDS, RunConfig
from transformer.run.fingerprint import FINGERPRINT_KEY
from transformer.run.sizing import AUTO_PRESET

CONFIG_FORMAT_VERSION = 14

# Keys of config.json that are facts about the run rather than settings.
FACT_KEYS = frozenset({"input_vocab_size", "target_vocab_size", "format_version",
                       FINGERPRINT_KEY, PARENT_KEY})

# Version -> the values an older file's missing fields had (files of a version
# below the key lack them).
_ADDED = (
    (2, {"tokenizer": "wordpiece", "batch_tokens": 0}),
    (3, {"learning_rate": PAPER_LEARNING_RATE}),
    (5, {"shared_vocab": False, "fit_warmup": False}),
    (6, {"subword_model": "unigram"}),
    (8, {"ema_momentum": 0.0}),
    (9, {"subword_sampling": 0.0}),
    (11, {"decay": "inverse_sqrt"}),
    (12, {"max_held_out": MAX_HELD_OUT, "vocab_sample": VOCAB_SAMPLE_PAIRS}),
    (13, {"restore_best_weights": False, "patience": 0, "init_from": None}),
    (14, {"size_rule": None}),
)


def format_version(record: dict) -> int:
    """The version that wrote `record` (1 when it does not say)."""
    version = record.get("format_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"format_version should be a positive integer. Received: {version!r}")
    return version


def config_from_record(record: dict[str, Any]) -> RunConfig:
    """The `RunConfig` of the content of a `config.json` of any version up to the current.

    Raises:
        ValueError: a newer version wrote it, or it is not a valid config.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object. Received: {type(record).__name__}")
    version = format_version(record)
    if version > CONFIG_FORMAT_VERSION:
        raise ValueError(
            f"it was written in config format {version}, by a newer version of this code, "
            f"which reads formats up to {CONFIG_FORMAT_VERSION}; update the code to resume it")
    for added_in, values in _ADDED:
        if version < added_in:
            record = {**values, **record}
    return RunConfig.from_dict({k: v for k, v in record.items() if k not in FACT_KEYS})


def read_config(run_dir) -> tuple[RunConfig, dict[str, Any]]:
    """The config of a run directory and the whole record of its `config.json`.

    Raises:
        transformer.rundir.RunDirError: one line naming the file when it is
            missing, not JSON, of a newer format or not a valid config.
    """
    path = Path(run_dir) / rundir.CONFIG_FILE
    record = rundir.read_json(path)
    try:
        return config_from_record(record), record
    except (TypeError, ValueError) as err:
        raise rundir.RunDirError(f"{str(path)!r} is not a valid run config: {err}") from err


def check_resumable(run_dir, record: dict) -> None:
    """Refuses, in one line, to resume a run whose held-out pairs this code
    would choose otherwise: one of a format before 12 that split its
    validation or test pairs off `--data` (see the module docstring)."""
    version = format_version(record)
    if version < 12 and record.get("data") and not (record.get("valid") and record.get("test")):
        raise rundir.RunDirError(
            f"Cannot resume {str(run_dir)!r}: it was written in config format {version}, whose "
            "runs split their validation and test pairs off --data in another way, so this "
            "code would train it on other pairs. Start a new run in another --output-dir.")


def load_config(run_dir) -> RunConfig:
    """The config of a run directory (its `config.json`), of any readable version."""
    return read_config(run_dir)[0]


def write_config(run_dir, config: RunConfig, input_vocab_size: int, target_vocab_size: int,
                 fingerprint: dict, parent: dict | None = None) -> None:
    """Writes `config.json` once, when the run's config is resolved: the settings,
    the vocabulary sizes, the data's fingerprint, the format version and, for a
    run started from another, the record of that one (`parent`)."""
    record = config.to_dict()
    record.update(input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                  format_version=CONFIG_FORMAT_VERSION)
    record[FINGERPRINT_KEY] = fingerprint
    if parent is not None:
        record[PARENT_KEY] = parent
    rundir.write_json_atomic(Path(run_dir) / rundir.CONFIG_FILE, record)


def legacy_sampling_plan(record: dict) -> dict | None:
    """The subword sampling plan of a version-9 run, whose format predates the
    record of it: with sampling, its passes read drawn segmentations from pass 9
    on. None for other versions, which record their own."""
    if record.get("format_version") == 9 and record.get("subword_sampling"):
        return {"samples": True, "from_pass": 8, "decided_at_step": 0}
    return None


def resume_config(run_dir, changes: dict[str, Any]) -> RunConfig | None:
    """The saved config of `run_dir` with `changes` (`RunConfig.for_resume`, the
    one rule of what a resumed run may change); None when nothing is saved yet."""
    if not (Path(run_dir) / rundir.CONFIG_FILE).is_file():
        return None
    return for_resume(load_config(run_dir), **changes)


def for_resume(saved: RunConfig, **changes) -> RunConfig:
    """The `saved` config with the changes a resumed run may make: the one rule.

    Args:
        **changes: new values; those equal to the saved ones are ignored, and
            only `RESUMABLE_FIELDS` may differ.

    Raises:
        ValueError: naming a field that cannot change, with both values.
    """
    current = saved.to_dict()
    flat = {**current, **current["model"]}
    for key, value in changes.items():
        if key not in flat:
            raise ValueError(f"Unknown RunConfig field: {key!r}")
        if key not in RESUMABLE_FIELDS and value != flat[key]:
            raise ValueError(
                f"Cannot change `{key}` when resuming: the run was started with "
                f"{key}={flat[key]!r}, received {key}={value!r}. Drop the option, or "
                "start a new run in another output directory."
            )
    return saved.replace(**{k: v for k, v in changes.items() if k in RESUMABLE_FIELDS})


def resumed_with(saved: RunConfig, config: RunConfig) -> RunConfig:
    """The `saved` config with the settings of `config` that a resumed run
    may change (`for_resume`; the others must be equal or unset). The
    fields that `config` leaves to `resolve` (None) keep their saved values."""
    changes = config.to_dict()
    model = changes.pop("model")
    if config.preset == AUTO_PRESET:  # the model is the one the size rule chose then
        changes.pop("preset")
    else:
        changes.update(model)
    for name in (*RESOLVED_FIELDS, "learning_rate", "size_rule"):
        if getattr(config, name) is None:
            changes.pop(name)
    return for_resume(saved, **changes)
