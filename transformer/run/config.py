"""The run's configuration: what `config.json` holds, its defaults and its checks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from transformer import rundir
from transformer._validation import (
    check_learning_rate,
    check_max_tokens,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from transformer.constants import (
    PAPER_LEARNING_RATE,
    SENTENCEPIECE_MODEL_TYPES,
    STRATEGIES,
    TOKENIZER_KINDS,
)
from transformer.data.loading import DATASETS
from transformer.model_config import PRESETS, TransformerConfig
from transformer.run.fingerprint import FINGERPRINT_KEY
from transformer.run.precision import PRECISIONS
from transformer.run.recipes import dataset_defaults, default_model

DEFAULT_RUNS_DIR = "runs"
# The version of the config.json layout, written next to the settings. Version 2
# added `tokenizer`, `batch_tokens` and `eval_beam_size`; version 3
# `learning_rate` and `average_checkpoints` (older files load with their
# defaults: the paper's schedule and the final weights); version 4
# `time_budget` (older files: none); version 5 `shared_vocab` and
# `fit_warmup` (older files: two vocabularies and the paper's warm-up); version
# 6 `subword_model` (older files: SentencePiece's unigram model); version 7
# `data_fingerprint`, what the run was trained on (older files: none, resumed
# unchecked with a warning; `transformer.run.fingerprint`).
CONFIG_FORMAT_VERSION = 7

# Fields that may change when a run is resumed; every other one is fixed by the
# run's config.json (changing the model, the data or the batches would make the
# checkpoint meaningless or the data order different).
RESUMABLE_FIELDS = frozenset(
    {
        "epochs",
        "time_budget",
        "checkpoint_every",
        "strategy",
        "cpu_devices",
        "jit_compile",
        "eval_batch_size",
        "eval_beam_size",
        "average_checkpoints",
        "num_examples",
        "output_dir",
        "download",
        "tfds_data_dir",
    }
)


@dataclasses.dataclass
class RunConfig:
    """Everything that defines a training run; `config.json` holds `to_dict()`.

    "None: the dataset's default" below means the value of
    `transformer.run.recipes.dataset_defaults`, where each default is stated
    with its reason.

    Data:
        dataset: `"toy"` (generated, offline) or `"ted_hrlr_translate/pt_to_en"`
            (TFDS); ignored when `data` is given.
        data, valid, test: tab-separated files of sentence pairs. Without
            `valid`/`test`, validation and test pairs are split off `data`.
        source_column, target_column: the TSV columns (from 0).
        skip_bad_lines: skip malformed TSV lines instead of stopping.
        download: let TFDS download a dataset that is not on disk yet.
        tfds_data_dir: TFDS' data directory (its default when None).
        max_tokens: longest source in tokens (longer pairs are trimmed, keeping
            `[END]`); None means the model's `max_length`.
        vocab_size: the largest subword vocabulary: the one shared by both
            languages with `shared_vocab` (the default on real corpora), else
            each language's.
        tokenizer: `"sentencepiece"` (reversible: translations keep case,
            accents and punctuation) or `"wordpiece"` (the tutorial's
            `BertTokenizer`: lower-cases, strips accents, splits punctuation).
        subword_model: what SentencePiece learns, one of
            `transformer.constants.SENTENCEPIECE_MODEL_TYPES`: `"unigram"` (real
            corpora) or `"bpe"` (the toy corpus: one piece per word); ignored
            by WordPiece. None: the dataset's default.
        lower_case: lower-case text (and, for WordPiece, strip accents) before
            tokenizing; None means True for WordPiece, False for SentencePiece.
        shared_vocab: one SentencePiece vocabulary learnt from both languages,
            with the source embedding, the target embedding and the
            pre-softmax weights tied (section 3.4; sets the model's
            `tie_embeddings`). None: the dataset's default.

    Model:
        preset: a name of `transformer.model_config.PRESETS`. None: the
            dataset's default (`transformer.run.recipes`).
        model: a `TransformerConfig`; the preset's when None (`default_model`:
            without dropout and with pre-norm layers on real corpora).

    Training:
        batch_size: global batch size (split across replicas); with token
            budgets it sizes their budget (`size_epochs_and_batches`). None:
            the dataset's default.
        epochs: epochs to train. None: the dataset's default, or sized from
            the corpus by `size_epochs_and_batches` (`MAX_EPOCHS` with a
            `time_budget`).
        time_budget: seconds of training (validation included, evaluation
            and export not), counted over resumed sessions: training stops at
            the first step past it, or after `epochs`, whichever comes first.
            None trains all `epochs`. With `fit_warmup`, a warm-up longer
            than the budget ends when the budget does (`TrainingClock`).
        steps_per_epoch: updates per epoch; None means one pass over the
            training pairs. `config.json` stores the resolved number.
        batch_tokens: the most (padded) tokens per batch and side: pairs of
            about equal length are batched together (section 5.1), so almost
            no padding is computed; 0 means batches of `batch_size` pairs.
            None: sized by `size_epochs_and_batches`.
        warmup_steps: `CustomSchedule`'s warm-up. None: the dataset's default.
        learning_rate: `CustomSchedule`'s peak, or `"paper"` (the default) for
            the paper's `(d_model * warmup_steps)^-0.5`.
        fit_warmup: a run shorter than `warmup_steps` (in steps, or by its
            `time_budget`) warms up over its whole length to the same peak
            (`CustomSchedule`'s `total_steps`); False keeps the paper's
            warm-up, which such a run never finishes. None: the dataset's
            default.
        label_smoothing: `eps` of section 5.4 (0.1 in the paper). None: the
            dataset's default.
        seed: fixes the corpus, the tokenizers, the initial weights and the
            data order.
        checkpoint_every: save the training state every this many updates (and
            at the end of every epoch).
        average_checkpoints: the trained model is the mean of the weights of
            the last this many checkpoints (section 6.1); 1 keeps the final
            weights.

    Performance and scale:
        precision: a Keras dtype policy, one of `PRECISIONS`.
        jit_compile: compile the train step with XLA (recompiles for every new
            batch shape).
        strategy: one of `transformer.run.distribute.STRATEGIES`.
        cpu_devices: split the CPU into this many logical devices.

    Evaluation:
        eval_batch_size: sentences per batch when translating the test split.
        num_examples: example translations kept in the result.

    Example:

    >>> config = RunConfig(output_dir="runs/tiny", preset="toy", epochs=1)
    >>> RunConfig.from_dict(config.to_dict()) == config
    True
    """

    output_dir: str | None = None
    # Data.
    dataset: str = "toy"
    data: str | None = None
    valid: str | None = None
    test: str | None = None
    source_column: int = 0
    target_column: int = 1
    skip_bad_lines: bool = False
    download: bool = False
    tfds_data_dir: str | None = None
    max_tokens: int | None = None
    vocab_size: int = 8000
    tokenizer: str | None = None
    subword_model: str | None = None
    lower_case: bool | None = None
    shared_vocab: bool | None = None
    # Model.
    preset: str | None = None
    model: TransformerConfig | None = None
    # Training.
    batch_size: int | None = None
    epochs: int | None = None
    time_budget: float | None = None
    steps_per_epoch: int | None = None
    batch_tokens: int | None = None
    warmup_steps: int | None = None
    learning_rate: float | str = PAPER_LEARNING_RATE
    fit_warmup: bool | None = None
    label_smoothing: float | None = None
    seed: int = 0
    checkpoint_every: int = 200
    # Performance and scale.
    precision: str = "float32"
    jit_compile: bool = False
    strategy: str = "default"
    cpu_devices: int | None = None
    # Evaluation.
    eval_batch_size: int = 128
    eval_beam_size: int | None = None
    average_checkpoints: int = 1
    num_examples: int = 5

    def __post_init__(self):
        for name, value in dataset_defaults(self.dataset, self.data).items():
            if getattr(self, name) is None:
                if name == "shared_vocab":  # only SentencePiece learns one vocabulary
                    value = value and self.tokenizer == "sentencepiece"
                setattr(self, name, value)
        if self.lower_case is None:
            self.lower_case = self.tokenizer == "wordpiece"
        if self.model is None:
            self.model = default_model(self.preset, self.dataset, self.data)
        elif isinstance(self.model, dict):
            self.model = TransformerConfig.from_dict(self.model)
        if self.model.tie_embeddings != self.shared_vocab:
            # Tied embeddings need the one vocabulary; one vocabulary ties them.
            self.model = dataclasses.replace(self.model, tie_embeddings=self.shared_vocab)
        self.validate()

    def validate(self) -> None:
        """Raises a Keras-style `ValueError` naming the first invalid field."""
        _check_choices(self)
        _check_numbers(self)
        _check_max_tokens(self.max_tokens, self.model.max_length)
        _check_files(self)

    # -- derived values ----------------------------------------------------

    @property
    def peak_learning_rate(self) -> float | None:
        """`learning_rate` as `CustomSchedule` takes it: None for the paper's formula."""
        return None if self.learning_rate == PAPER_LEARNING_RATE else self.learning_rate

    @property
    def tokenizer_learn_params(self) -> dict | None:
        """`build_tokenizers`' `learn_params`: SentencePiece's `model_type`."""
        return {"model_type": self.subword_model} if self.tokenizer == "sentencepiece" else None

    @property
    def resolved_max_tokens(self) -> int:
        """`max_tokens`, or the model's `max_length` when it is None."""
        return self.max_tokens if self.max_tokens is not None else self.model.max_length

    @property
    def name(self) -> str:
        """A short name for the run: the data file's stem, or the dataset's name."""
        if self.data:
            return Path(self.data).stem or "data"
        return self.dataset.replace("/", "_").replace("_translate", "")

    @property
    def run_dir(self) -> Path:
        """`output_dir`, or `runs/<name>` by default."""
        return Path(self.output_dir) if self.output_dir else Path(DEFAULT_RUNS_DIR) / self.name

    # -- serialization -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["model"] = self.model.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        version = data.get("format_version", 1)
        if version < 2:
            # Written before the tokenizer and batching choices existed: the
            # run used WordPiece and batches of `batch_size` pairs.
            data = {"tokenizer": "wordpiece", "batch_tokens": 0, **data}
        if version < 5:
            # Written before shared vocabularies and warm-ups fitted to the run.
            data = {"shared_vocab": False, "fit_warmup": False, **data}
        if version < 6:
            # Written before the toy corpus learnt byte-pair merges.
            data = {"subword_model": "unigram", **data}
        # Information written next to the settings (vocabulary sizes, ...).
        data = {key: value for key, value in data.items() if key not in _DERIVED_KEYS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Unknown RunConfig fields: {unknown}")
        return cls(**data)

    @classmethod
    def load(cls, run_dir) -> RunConfig:
        """The config of a run directory (its `config.json`)."""
        path = Path(run_dir) / rundir.CONFIG_FILE
        try:
            return cls.from_dict(rundir.read_json(path))
        except (TypeError, ValueError) as err:
            if isinstance(err, rundir.RunDirError):
                raise
            raise rundir.RunDirError(f"{str(path)!r} is not a valid run config: {err}") from err

    def replace(self, **changes) -> RunConfig:
        """A copy with `changes`; model fields (`num_layers`, `d_model`, ...) go to the model."""
        model_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        model_changes = {k: changes.pop(k) for k in list(changes) if k in model_fields}
        model = dataclasses.replace(self.model, **model_changes) if model_changes else self.model
        return dataclasses.replace(self, model=model, **changes)

    def for_resume(self, **changes) -> RunConfig:
        """This (saved) config with the changes a resumed run may make.

        Args:
            **changes: new values; those equal to the saved ones are ignored, and
                only `RESUMABLE_FIELDS` may differ.

        Raises:
            ValueError: naming a field that cannot change, with both values.
        """
        current = self.to_dict()
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
        return self.replace(**{k: v for k, v in changes.items() if k in RESUMABLE_FIELDS})



# Keys of config.json that are facts about the run rather than settings.
_DERIVED_KEYS = frozenset(
    {"input_vocab_size", "target_vocab_size", "format_version", FINGERPRINT_KEY}
)


# --------------------------------------------------------------------------
# The checks of `RunConfig.validate`, in the order they run
# --------------------------------------------------------------------------


def _check_choice(name: str, value, options) -> None:
    if value not in options:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected one of "
            f"{list(options)}. Received: {name}={value!r}"
        )


def _check_choices(config: RunConfig) -> None:
    """`dataset` (without `data`), `preset`, `precision`, `strategy` and the tokenizer."""
    if config.data is None:
        _check_choice("dataset", config.dataset, DATASETS)
    _check_choice("preset", config.preset, list(PRESETS))
    _check_choice("precision", config.precision, PRECISIONS)
    _check_choice("strategy", config.strategy, STRATEGIES)
    _check_choice("tokenizer", config.tokenizer, TOKENIZER_KINDS)
    _check_choice("subword_model", config.subword_model, SENTENCEPIECE_MODEL_TYPES)
    if config.shared_vocab and config.tokenizer != "sentencepiece":
        raise ValueError(
            "Received `shared_vocab=True` with the wordpiece tokenizer, expected "
            "tokenizer='sentencepiece': only SentencePiece learns one vocabulary for "
            "both languages."
        )


def _check_numbers(config: RunConfig) -> None:
    """Counts, columns and `label_smoothing`."""
    for name in ("batch_size", "vocab_size", "checkpoint_every", "eval_batch_size",
                 "eval_beam_size", "average_checkpoints", "warmup_steps"):
        check_positive_int(name, getattr(config, name))
    # None: sized from the corpus once it is read.
    for name in ("steps_per_epoch", "cpu_devices", "epochs"):
        if getattr(config, name) is not None:
            check_positive_int(name, getattr(config, name))
    if config.batch_tokens is not None:
        check_non_negative_int("batch_tokens", config.batch_tokens)
    for name in ("source_column", "target_column", "num_examples", "seed"):
        check_non_negative_int(name, getattr(config, name))
    check_rate("label_smoothing", config.label_smoothing)
    budget = config.time_budget
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                               or not 0 < budget < math.inf):
        raise ValueError(
            "Received an invalid value for argument `time_budget`, expected a positive "
            f"number of seconds or None. Received: time_budget={budget!r}"
        )
    if config.learning_rate != PAPER_LEARNING_RATE:
        check_learning_rate(config.learning_rate)
    if config.source_column == config.target_column:
        raise ValueError(
            "Received the same column for source and target. Received: "
            f"source_column={config.source_column}, target_column={config.target_column}"
        )


def _check_max_tokens(max_tokens, max_length: int) -> None:
    """None, or room for [START] and [END] within the model's positional encoding."""
    if max_tokens is None:
        return
    check_max_tokens(max_tokens)
    if max_tokens > max_length:
        raise ValueError(
            "Received an invalid value for argument `max_tokens`, expected at most "
            f"the model's max_length={max_length} (the rows of its "
            f"positional encoding). Received: max_tokens={max_tokens}"
        )


def _check_files(config: RunConfig) -> None:
    """`valid` and `test` files go only with a `data` file."""
    if (config.valid or config.test) and not config.data:
        raise ValueError(
            "Received `valid` or `test` files without `data`: they only go with a "
            "training file (--data FILE.tsv)."
        )
