"""The run around the model: configuration, training, checkpoints and evaluation.

What `train.py` does, as a library; the paper's part of training (schedule,
loss, accuracy) is `transformer.training`, the run directory's layout is
`transformer.rundir`.

- `config`: `RunConfig` (what `config.json` holds) and the data-dependent defaults.
- `precision`: the Keras dtype policies and the default for this CPU.
- `distribute`: the `tf.distribute` strategies (one device, mirrored, multi-worker).
- `callbacks`: the Keras callbacks of a run (learning rate, NaN stop, time budget,
  checkpoints, summaries).
- `checkpoints`: what a checkpoint holds, resuming from it, averaging the last ones.
- `evaluation`: exact match, BLEU and token accuracy on sentence pairs.
- `train`: `train`, which runs all of it and writes the run directory.

Example:

```python
from transformer.run import RunConfig, train

result = train(RunConfig(output_dir="runs/toy"))
result.evaluation.exact_match, result.evaluation.bleu
```
"""

from transformer.run.callbacks import (
    CheckpointSaver,
    EpochSummary,
    LearningRateLogger,
    StopOnNaN,
    TrainingError,
    optimizer_step,
)
from transformer.run.config import (
    CONFIG_FORMAT_VERSION,
    CORPUS_DEFAULTS,
    DEFAULT_RUNS_DIR,
    RESUMABLE_FIELDS,
    TOY_DEFAULTS,
    RunConfig,
    dataset_defaults,
)
from transformer.run.distribute import STRATEGIES, make_strategy
from transformer.run.evaluation import Evaluation, evaluate, normalize_text, translate_all
from transformer.run.precision import (
    PRECISIONS,
    cpu_flags,
    default_precision,
    explain_default_precision,
)
from transformer.run.trainer import TrainResult, train, weights_fingerprint

__all__ = [
    "RunConfig",
    "RESUMABLE_FIELDS",
    "TOY_DEFAULTS",
    "CORPUS_DEFAULTS",
    "DEFAULT_RUNS_DIR",
    "CONFIG_FORMAT_VERSION",
    "dataset_defaults",
    "PRECISIONS",
    "cpu_flags",
    "default_precision",
    "explain_default_precision",
    "STRATEGIES",
    "make_strategy",
    "LearningRateLogger",
    "StopOnNaN",
    "CheckpointSaver",
    "EpochSummary",
    "optimizer_step",
    "normalize_text",
    "translate_all",
    "Evaluation",
    "evaluate",
    "train",
    "TrainResult",
    "TrainingError",
    "weights_fingerprint",
]
