"""The run around the model: configuration, training, checkpoints and evaluation.

What `train.py` does, as a library; the paper's part of training (schedule,
loss, accuracy) is `transformer.training`, the run directory is
`transformer.rundir`.

- `config`: `RunConfig`, the run's settings and their defaults (`config_checks`
  checks them), and its file `config.json`: its versions and what a resumed
  run may change.
- `recipes`: the dataset-dependent defaults, and `resolve`, which makes the run's
  one complete config from the settings and the corpus.
- `precision`: the Keras dtype policies and the default for this CPU.
- `distribute`: the `tf.distribute` strategies (one device, mirrored, multi-worker).
- `callbacks`: the Keras callbacks of a run (learning rate, NaN stop, time budget,
  checkpoints, summaries, the best weights by validation loss and early stopping).
- `checkpoints`: what a checkpoint holds, resuming from it, averaging the last ones.
- `adapt`: a run started from another's weights and vocabulary (`--init-from`).
- `allocator`: the memory allocators that keep a step's freed memory.
- `fitting`: the `model.fit` calls over a run's epochs and their batch streams: the
  training pairs tokenized once into `tokens/`, and the subword sampling plan.
- `evaluation`: exact match, BLEU and token accuracy on sentence pairs.
- `train`: `train`, which runs all of it and writes the run directory.

Example:

```python
from transformer.run import RunConfig, train

result = train(RunConfig(output_dir="runs/toy"))
result.evaluation.exact_match, result.evaluation.bleu
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer._lazy import lazy_exports
from transformer.constants import DISTRIBUTION_STRATEGIES
from transformer.run.config import (
    CONFIG_FORMAT_VERSION,
    DEFAULT_RUNS_DIR,
    RESUMABLE_FIELDS,
    RunConfig,
    load_config,
)
from transformer.run.precision import (
    PRECISIONS,
    cpu_flags,
    default_precision,
    explain_default_precision,
)
from transformer.run.recipes import (
    CORPUS_DEFAULTS,
    TOY_DEFAULTS,
    CorpusFacts,
    dataset_defaults,
    default_model,
    resolve,
    size_epochs_and_batches,
)

# Imported from their modules on first use, because they import TensorFlow:
# `train.py` imports `transformer.run.config` (and so this package) to parse
# its options, and must answer `--help` or a usage error before TensorFlow
# starts (tests/test_train_cli.py). The `TYPE_CHECKING` block at the end names
# them for readers and static tools (tests/test_structure.py checks that the
# two agree).
_LAZY = {
    "CheckpointSaver": "callbacks",
    "EpochSummary": "callbacks",
    "LearningRateLogger": "callbacks",
    "StopOnNaN": "callbacks",
    "TrainingError": "callbacks",
    "optimizer_step": "callbacks",
    "make_strategy": "distribute",
    "Evaluation": "evaluation",
    "evaluate": "evaluation",
    "normalize_text": "evaluation",
    "translate_all": "evaluation",
    "TrainResult": "trainer",
    "train": "trainer",
    "weights_fingerprint": "trainer",
}

__all__ = [
    "DEFAULT_RUNS_DIR", "RESUMABLE_FIELDS", "RunConfig", "CONFIG_FORMAT_VERSION", "load_config",
    "PRECISIONS", "cpu_flags", "default_precision", "explain_default_precision",
    "CORPUS_DEFAULTS", "TOY_DEFAULTS", "CorpusFacts", "dataset_defaults", "default_model",
    "resolve", "size_epochs_and_batches", "DISTRIBUTION_STRATEGIES", *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


if TYPE_CHECKING:  # the names of `_LAZY`, for readers and static tools
    from transformer.run.callbacks import (  # noqa: F401
        CheckpointSaver,
        EpochSummary,
        LearningRateLogger,
        StopOnNaN,
        TrainingError,
        optimizer_step,
    )
    from transformer.run.distribute import make_strategy  # noqa: F401
    from transformer.run.evaluation import (  # noqa: F401
        Evaluation,
        evaluate,
        normalize_text,
        translate_all,
    )
    from transformer.run.trainer import TrainResult, train, weights_fingerprint  # noqa: F401
