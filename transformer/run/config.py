"""The run's configuration: what `config.json` holds, its defaults and its checks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from transformer import options, rundir
from transformer._validation import (
    check_learning_rate,
    check_max_tokens,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from transformer.constants import (
    DEFAULT_ALPHA,
    PAPER_LEARNING_RATE,
    SENTENCEPIECE_MODEL_TYPES,
    STRATEGIES,
    TOKENIZER_KINDS,
)
from transformer.data.loading import DATASETS
from transformer.model_config import PRESETS, TransformerConfig
from transformer.options import setting
from transformer.run.fingerprint import FINGERPRINT_KEY
from transformer.run.precision import PRECISIONS, default_precision, explain_default_precision
from transformer.run.recipes import (
    MAX_EPOCHS,
    SAMPLED_SEGMENTATIONS,
    SAMPLING_MIN_PASSES,
    dataset_defaults,
    default_model,
)

DEFAULT_RUNS_DIR = "runs"
# The version of the config.json layout, written next to the settings. Version 2
# added `tokenizer`, `batch_tokens` and `eval_beam_size`; version 3
# `learning_rate` and `average_checkpoints` (older files load with their
# defaults: the paper's schedule and the final weights); version 4
# `time_budget` (older files: none); version 5 `shared_vocab` and
# `fit_warmup` (older files: two vocabularies and the paper's warm-up); version
# 6 `subword_model` (older files: SentencePiece's unigram model); version 7
# `data_fingerprint`, what the run was trained on (older files: none, resumed
# unchecked with a warning; `transformer.run.fingerprint`); version 8
# `ema_momentum` (older files: no moving average); version 9
# `subword_sampling` (older files: none); version 10 decides it after the
# first epoch and records the decision in the run directory (a version-9 run
# with it read drawn segmentations from pass 9 on:
# `transformer.run.directory.record_legacy_sampling`).
CONFIG_FORMAT_VERSION = 10

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

    The fields come in the sections of `transformer.options.SECTIONS` (data,
    model, schedule, batches, run, performance, scale). Each one states its
    meaning once, in its `setting(...)` below: `python train.py --help`
    prints those texts with the defaults, and `RunConfig.describe(name)`
    returns one. A default of None is resolved when the config is made:
    from the dataset's recipe (`transformer.run.recipes.dataset_defaults`,
    where each default is given with its reason), or, for `epochs`,
    `batch_tokens` and `steps_per_epoch`, from the corpus once it is read
    (the trainer's data stage makes the sized config, once); `max_tokens`
    None means the model's `max_length`.

    Example:

    >>> config = RunConfig(output_dir="runs/tiny", preset="toy", epochs=1)
    >>> RunConfig.from_dict(config.to_dict()) == config
    True
    >>> RunConfig.describe("seed")
    'fixes the corpus, the tokenizers, the initial weights and the data order'
    """

    # -- data ----------------------------------------------------------------
    dataset: str = setting(
        "toy", "corpus when no --data is given: toy is generated offline; "
        "ted_hrlr_translate/pt_to_en is the tutorial's, via TFDS",
        section="data", kind="choice", choices=DATASETS)
    data: str | None = setting(
        None, "train on tab-separated sentence pairs", section="data", metavar="FILE.tsv")
    valid: str | None = setting(
        None, "validation pairs", section="data", metavar="FILE.tsv",
        default_help="split off --data")
    test: str | None = setting(
        None, "test pairs", section="data", metavar="FILE.tsv",
        default_help="split off --data")
    source_column: int = setting(
        0, "TSV column of the source sentence, from 0", section="data",
        kind="non_negative_int", metavar="N")
    target_column: int = setting(
        1, "TSV column of the target sentence", section="data", kind="non_negative_int",
        metavar="N")
    skip_bad_lines: bool = setting(
        False, "skip malformed TSV lines instead of stopping", section="data", kind="flag",
        default_help="stop")
    download: bool = setting(
        False, "let TFDS download --dataset ted_hrlr_translate/pt_to_en if it is not on disk",
        section="data", kind="flag", default_help="never download")
    tfds_data_dir: str | None = setting(
        None, "TFDS data directory", section="data", metavar="DIR",
        default_help="TFDS' own, ~/tensorflow_datasets")
    max_tokens: int | None = setting(
        None, "longest sentence in tokens; longer ones are trimmed, keeping [END]",
        section="data", kind="positive_int", metavar="N",
        default_help="the model's max_length, {toy_preset.max_length} for toy, "
        "{tutorial_preset.max_length} for tutorial")
    vocab_size: int = setting(
        8000, "largest subword vocabulary: the one both languages share with --shared-vocab "
        "(the default on real corpora), else each language's", section="data",
        kind="positive_int", metavar="N")
    tokenizer: str | None = setting(
        None, "subword tokenizer: sentencepiece keeps case, accents and punctuation, so "
        "translations read as written text; wordpiece is the tutorial's BertTokenizer, "
        "which lower-cases, strips accents and splits punctuation off (the boy ' s book)",
        section="data", kind="choice", choices=TOKENIZER_KINDS)
    subword_model: str | None = setting(
        None, "what sentencepiece learns: bpe makes every toy word one piece, unigram is "
        "SentencePiece's own default", section="data", kind="choice",
        choices=SENTENCEPIECE_MODEL_TYPES)
    subword_sampling: float | None = setting(
        None, "subword regularisation (Kudo, 2018): a run on course for at least "
        f"{SAMPLING_MIN_PASSES} passes (its epochs, or its time budget over its first "
        "pass's time) trains its later passes on segmentations drawn at random from the "
        "unigram model, sharpened by ALPHA (smaller draws odder splits; "
        f"{SAMPLED_SEGMENTATIONS} draws of every pair, read in turn, one per pass); "
        "evaluation and translation keep the best split; 0 for none. Needs sentencepiece",
        section="data", kind="rate", metavar="ALPHA",
        default_help="{corpus[subword_sampling]} with a sentencepiece unigram vocabulary on "
        "real corpora; 0 for the toy corpus, bpe and wordpiece")
    lower_case: bool | None = setting(
        None, "lower-case text (and, for WordPiece, strip accents) before tokenizing",
        section="data", flag="", default_help="yes for wordpiece, no for sentencepiece")
    shared_vocab: bool | None = setting(
        None, "one SentencePiece vocabulary for both languages, with the two embeddings and "
        "the pre-softmax weights tied (section 3.4); on real text it learnt much faster "
        "than two vocabularies, see BENCHMARKS.md", section="data", kind="switch",
        default_help="yes with sentencepiece on real corpora; no for the toy corpus and for "
        "wordpiece")
    # -- model ---------------------------------------------------------------
    preset: str | None = setting(
        None, "model size, a name of transformer.model_config.PRESETS", section="model",
        kind="choice", choices=tuple(sorted(PRESETS)),
        default_help="{toy[preset]} for the toy corpus, {corpus[preset]} otherwise; "
        "{presets}")
    # The preset's `TransformerConfig` with the model options applied
    # (`default_model`); its fields are options of their own.
    model: TransformerConfig | None = setting(None, "the model's sizes", section="model",
                                              flag="")
    # -- schedule ------------------------------------------------------------
    epochs: int | None = setting(
        None, "epochs to train; may grow on --resume", section="schedule",
        kind="positive_int", metavar="N",
        default_help="{toy[epochs]} for the toy corpus; otherwise sized from the corpus: "
        "enough to see about {target_pairs_seen:,} pairs, {min_epochs} to {max_epochs} "
        "epochs")
    time_budget: float | None = setting(
        None, "stop training after this much time (600, 600s, 10m, 1h30m; validation "
        "included, the final evaluation not), counted over --resume, or after --epochs, "
        f"whichever comes first; without --epochs the cap is {MAX_EPOCHS} epochs. With "
        "--fit-warmup the warm-up ends when the budget does, if that comes first",
        section="schedule", kind="duration", metavar="DURATION")
    warmup_steps: int | None = setting(
        None, "learning-rate warm-up of the paper's schedule; see --fit-warmup for runs "
        "shorter than that", section="schedule", kind="positive_int", metavar="N",
        default_help="{toy[warmup_steps]} for the toy corpus, {corpus[warmup_steps]} "
        "otherwise, as in the paper")
    learning_rate: float | str = setting(
        PAPER_LEARNING_RATE, "the schedule's peak, reached after the warm-up and then "
        "decaying as the inverse square root of the step; 'paper' for the paper's "
        "(d_model * warmup)^-0.5, which grows as the warm-up shrinks", section="schedule",
        kind="learning_rate", metavar="PEAK")
    fit_warmup: bool | None = setting(
        None, "a run shorter than --warmup-steps (by --epochs, or by --time-budget) warms "
        "up over its whole length to the same peak, so that it ends at the peak; on real "
        "text that learnt faster than stopping partway up, and than a shorter warm-up "
        "followed by the decay (BENCHMARKS.md); --no-fit-warmup keeps the paper's warm-up, "
        "which such a run never finishes", section="schedule", kind="switch")
    label_smoothing: float | None = setting(
        None, "label smoothing (section 5.4), 0 for none; in runs of a few thousand steps "
        "on real text it lowered BLEU, see BENCHMARKS.md", section="schedule", kind="rate",
        metavar="EPS")
    seed: int = setting(
        0, "fixes the corpus, the tokenizers, the initial weights and the data order",
        section="schedule", kind="non_negative_int", metavar="N")
    average_checkpoints: int = setting(
        1, "the trained model is the mean of the weights of the last N checkpoints "
        "(section 6.1 of the paper; in short runs that were still improving it lowered "
        "BLEU, see BENCHMARKS.md); 1 keeps the final weights", section="schedule",
        kind="positive_int", metavar="N")
    ema_momentum: float | None = setting(
        None, "the trained model is an exponential moving average of the weights, "
        "updated after every step as average = m * average + (1 - m) * weights with "
        "m = min(M, (1 + step) / (10 + step)); 0 keeps the final weights",
        section="schedule", kind="rate", metavar="M",
        default_help="{toy[ema_momentum]} for the toy corpus, {corpus[ema_momentum]} "
        "otherwise, 0 with --average-checkpoints")
    # -- batches -------------------------------------------------------------
    batch_size: int | None = setting(
        None, "sentence pairs per step, over all devices; with token budgets "
        "(--batch-tokens) it sizes the budget; on real text twice the updates of the "
        "tutorial's 64 learnt more in the same time, see BENCHMARKS.md", section="batches",
        kind="positive_int", metavar="N")
    batch_tokens: int | None = setting(
        None, "batch pairs of about equal length, at most N padded tokens per batch and "
        "side (section 5.1), so that almost no padding is computed; 0 for batches of "
        "--batch-size pairs", section="batches", kind="non_negative_int", metavar="N",
        default_help="{toy[batch_tokens]} for the toy corpus; otherwise --batch-size times "
        "the mean padded pair length, with one device")
    steps_per_epoch: int | None = setting(
        None, "updates per epoch", section="batches", kind="positive_int", metavar="N",
        default_help="one pass over the training pairs")
    # -- run -----------------------------------------------------------------
    output_dir: str | None = setting(
        None, "run directory; must be empty unless --resume", section="run", metavar="DIR",
        default_help="runs/<name>: runs/toy, runs/ted_hrlr_pt_to_en, or runs/<stem of --data>")
    checkpoint_every: int = setting(
        200, "save the training state every N steps, and after every epoch", section="run",
        kind="positive_int", metavar="N")
    eval_batch_size: int = setting(
        128, "sentences per batch when translating the test split", section="run", flag="")
    eval_beam_size: int | None = setting(
        None, "beam size of the final evaluation's translations; 1 is greedy, more is the "
        f"paper's beam search with alpha {DEFAULT_ALPHA}", section="run", kind="positive_int",
        flag="--eval-beam", metavar="N")
    num_examples: int = setting(
        5, "example translations to print", section="run", kind="non_negative_int",
        flag="--examples", metavar="N")
    # -- performance ---------------------------------------------------------
    precision: str = setting(
        "float32", "dtype policy; train.py's default is mixed_bfloat16 where bfloat16 "
        "trains faster (CPUs with AMX, AMD CPUs with AVX-512 BF16), float32 elsewhere",
        section="performance", kind="choice",
        choices=PRECISIONS, cli_default=default_precision,
        default_help=explain_default_precision)
    jit_compile: bool = setting(
        False, "compile the train step with XLA; it recompiles for every new batch shape, "
        "which is slow with variable sentence lengths", section="performance", kind="flag")
    # -- scale ---------------------------------------------------------------
    strategy: str = setting(
        "default", "default: one device; mirrored: all GPUs (or --cpu-devices) of this "
        "machine; multi-worker: several machines, from TF_CONFIG", section="scale",
        kind="choice", choices=STRATEGIES)
    cpu_devices: int | None = setting(
        None, "split the CPU into N logical devices, to try --strategy mirrored without "
        "GPUs", section="scale", kind="positive_int", metavar="N", default_help="1")

    def __post_init__(self):
        defaults = dataset_defaults(self.dataset, self.data)
        unigram = (self.tokenizer or defaults["tokenizer"],
                   self.subword_model or defaults["subword_model"]) == ("sentencepiece", "unigram")
        if self.subword_sampling is None and not unigram:
            self.subword_sampling = 0.0  # only a unigram model draws by the splits' probability
        for name, value in defaults.items():
            if getattr(self, name) is None:
                if name == "shared_vocab":  # only SentencePiece learns one vocabulary
                    value = value and self.tokenizer == "sentencepiece"
                if (name == "ema_momentum" and isinstance(self.average_checkpoints, int)
                        and self.average_checkpoints > 1):
                    value = 0.0  # the averaging asked for replaces the default one
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

    @staticmethod
    def describe(name: str) -> str:
        """The meaning of the setting `name`, as `train.py --help` states it."""
        return options.describe(RunConfig, name)

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
        if version < 8:
            # Written before the moving average of the weights.
            data = {"ema_momentum": 0.0, **data}
        if version < 9:
            # Written before subword regularisation.
            data = {"subword_sampling": 0.0, **data}
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
        return cls.from_record(rundir.read_json(path), path)

    @classmethod
    def from_record(cls, record: dict, path) -> RunConfig:
        """The config of `record`, the content of the `config.json` at `path`;
        a `RunDirError` naming `path` when it is not a valid one."""
        try:
            return cls.from_dict(record)
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

    def resumed_with(self, config: RunConfig) -> RunConfig:
        """This (saved) config with the settings of `config` that a resumed run
        may change (`for_resume`; the others must be equal or unset). The
        fields that `config` leaves to the corpus (None) keep their saved values."""
        changes = config.to_dict()
        changes.update(changes.pop("model"))
        for name in ("steps_per_epoch", "epochs", "batch_tokens"):
            if getattr(config, name) is None:
                changes.pop(name)
        return self.for_resume(**changes)


def resume_config(run_dir, changes: dict[str, Any]) -> RunConfig | None:
    """The saved config of `run_dir` with `changes` (`RunConfig.for_resume`, the
    one rule of what a resumed run may change); None when nothing is saved yet."""
    if not (Path(run_dir) / rundir.CONFIG_FILE).is_file():
        return None
    return RunConfig.load(run_dir).for_resume(**changes)


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
    if config.subword_sampling and config.tokenizer != "sentencepiece":
        raise ValueError(
            "Received `subword_sampling` > 0 with the wordpiece tokenizer, expected "
            "tokenizer='sentencepiece': only SentencePiece draws segmentations. Received: "
            f"subword_sampling={config.subword_sampling}"
        )
    if config.subword_sampling and config.subword_model != "unigram":
        raise ValueError(
            "Received `subword_sampling` > 0 with subword_model='bpe', expected "
            "subword_model='unigram': a unigram model draws segmentations by their "
            "probability, sharpened by alpha (for BPE, SentencePiece reads alpha as a "
            f"dropout rate instead). Received: subword_sampling={config.subword_sampling}"
        )
    if config.shared_vocab and config.tokenizer != "sentencepiece":
        raise ValueError(
            "Received `shared_vocab=True` with the wordpiece tokenizer, expected "
            "tokenizer='sentencepiece': only SentencePiece learns one vocabulary for "
            "both languages."
        )


def _check_numbers(config: RunConfig) -> None:
    """Counts, columns, `label_smoothing` and `ema_momentum`."""
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
    check_rate("subword_sampling", config.subword_sampling)
    check_rate("ema_momentum", config.ema_momentum)
    if config.ema_momentum and config.average_checkpoints > 1:
        raise ValueError(
            "Received `ema_momentum` and `average_checkpoints` > 1, expected one of them: "
            "both average the weights. Received: "
            f"ema_momentum={config.ema_momentum}, "
            f"average_checkpoints={config.average_checkpoints}"
        )
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
