"""The run around the model: configuration, training, checkpoints and evaluation.

What `train.py` does, as a library; the paper's part of training (schedule,
loss, accuracy) is `transformer.training`, the run directory is
`transformer.rundir`.

- `config`: `RunConfig`, the run's settings and their defaults (`config_checks`
  checks them).
- `recipes`: the dataset-dependent defaults, and `resolve`, which makes the run's
  one complete config from the settings and the corpus.
- `config_format`: `config.json`, its versions and what a resumed run may change.
- `precision`: the Keras dtype policies and the default for this CPU.
- `distribute`: the `tf.distribute` strategies (one device, mirrored, multi-worker).
- `callbacks`: the Keras callbacks of a run (learning rate, NaN stop, time budget,
  checkpoints, summaries).
- `checkpoints`: what a checkpoint holds, resuming from it, averaging the last ones.
- `best`: the best weights by validation loss, kept as they come; early stopping.
- `adapt`: a run started from another's weights and vocabulary (`--init-from`).
- `allocator`: the memory allocators that keep a step's freed memory.
- `fitting`: the `model.fit` calls over a run's epochs and their batch streams.
- `evaluation`: exact match, BLEU and token accuracy on sentence pairs.
- `train`: `train`, which runs all of it and writes the run directory.

Example:

```python
from transformer.run import RunConfig, train

result = train(RunConfig(output_dir="runs/toy"))
result.evaluation.exact_match, result.evaluation.bleu
```

The names below are imported on first use: importing a submodule that needs
no TensorFlow (`transformer.run.config`, `transformer.run.recipes`,
`transformer.run.precision`) does not import it, so that `train.py` parses its
options before TensorFlow starts.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "CheckpointSaver": "callbacks",
    "EpochSummary": "callbacks",
    "LearningRateLogger": "callbacks",
    "StopOnNaN": "callbacks",
    "TrainingError": "callbacks",
    "optimizer_step": "callbacks",
    "CONFIG_FORMAT_VERSION": "config_format",
    "load_config": "config_format",
    "CORPUS_DEFAULTS": "recipes",
    "CorpusFacts": "recipes",
    "resolve": "recipes",
    "DEFAULT_RUNS_DIR": "config",
    "RESUMABLE_FIELDS": "config",
    "TOY_DEFAULTS": "recipes",
    "RunConfig": "config",
    "dataset_defaults": "recipes",
    "default_model": "recipes",
    "size_epochs_and_batches": "recipes",
    "DISTRIBUTION_STRATEGIES": "distribute",
    "make_strategy": "distribute",
    "Evaluation": "evaluation",
    "evaluate": "evaluation",
    "normalize_text": "evaluation",
    "translate_all": "evaluation",
    "PRECISIONS": "precision",
    "cpu_flags": "precision",
    "default_precision": "precision",
    "explain_default_precision": "precision",
    "TrainResult": "trainer",
    "train": "trainer",
    "weights_fingerprint": "trainer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
