"""The run's configuration: `RunConfig`, its file `config.json`, what a resume may change.

A `RunConfig` is frozen. Made from the user's choices, it fills the
dataset-dependent defaults from the recipes at once and checks itself
(`transformer.run.config_checks`); the fields that the corpus or the machine
decide (`epochs`, `batch_tokens`, `steps_per_epoch`, `precision`) stay None
until `transformer.run.recipes.resolve` makes the complete config of the run,
which `config.json` holds and nothing changes afterwards.

`config.json` holds a run's resolved `RunConfig` (`RunConfig.to_dict()`) and,
beside the settings, facts about the run: the vocabulary sizes, the data's
fingerprint (`transformer.data.loading.data_fingerprint`) and the version of its format.
This module is the only one that knows the versions: `read_config` turns a
`config.json` of any version the current code resumes into a `RunConfig`, and
refuses one written by a newer version in one line naming that version.
What a resumed run may change is `for_resume`, the one rule.

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
    `config.json` (`transformer.run.fitting`).
11. `decay` (older: the paper's inverse square root).
12. `max_held_out`, `vocab_sample`; held-out pairs are split off `--data` by
    a hash of their source (`transformer.data.splits`). An older run that
    split its validation or test pairs off `--data` held out other pairs, so
    it cannot be resumed; an older run with both files given resumes with the
    current defaults of both fields (its vocabulary is saved, its files whole).
13. `restore_best_weights`, `patience` (older: the last weights, no early
    stop), `init_from` and, for a run started from another, the record of
    it (`PARENT_KEY`).
14. `size_rule`, the record of the model the time budget chose
    (`transformer.run.sizing`; older: none, the model was given or the recipe's).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from transformer import rundir, settings
from transformer.constants import (
    DECAYS,
    DEFAULT_ALPHA,
    DISTRIBUTION_STRATEGIES,
    PAPER_LEARNING_RATE,
    SENTENCEPIECE_MODEL_TYPES,
    TOKENIZER_KINDS,
)
from transformer.data.source import DATASETS, VOCAB_SAMPLE_PAIRS
from transformer.data.splits import MAX_HELD_OUT
from transformer.model_config import PRESETS, TransformerConfig
from transformer.run.adapt import PARENT_FIELDS
from transformer.run.config_checks import check_config
from transformer.run.precision import PRECISIONS, explain_default_precision
from transformer.run.recipes import (
    MAX_EPOCHS,
    SAMPLED_SEGMENTATIONS,
    SAMPLING_MIN_PASSES,
    SHORT_RUN_SECONDS,
    SHORT_RUN_VOCAB_SIZE,
    recipe_defaults,
)
from transformer.run.sizing import AUTO_PRESET
from transformer.rundir import FINGERPRINT_KEY
from transformer.settings import setting

DEFAULT_RUNS_DIR = "runs"

# The fields that `transformer.run.recipes.resolve` fills when they are None:
# the corpus sizes the first three, the machine picks the precision.
RESOLVED_FIELDS = ("epochs", "batch_tokens", "steps_per_epoch", "precision")

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
        "restore_best_weights",
        "patience",
        "num_examples",
        "output_dir",
        "download",
        "tfds_data_dir",
    }
)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a training run; `config.json` holds `to_dict()`.

    The fields come in the sections of `transformer.settings.SECTIONS` (data,
    model, schedule, batches, run, performance, scale). Each one states its
    meaning once, in its `setting(...)` below: `python train.py --help`
    prints those texts with the defaults, and `RunConfig.describe(name)`
    returns one. `train.py` makes the same `RunConfig` of its options as the
    Python API of the same choices. A default of None is filled when the
    config is made, from the dataset's recipe
    (`transformer.run.recipes.dataset_defaults`, where each default is given
    with its reason); `epochs`, `batch_tokens`, `steps_per_epoch` and
    `precision` are filled by `transformer.run.recipes.resolve` once the corpus
    is read; `max_tokens` None means the model's `max_length`.

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
    max_held_out: int = setting(
        MAX_HELD_OUT, "without --valid or --test, a twentieth of the distinct source sentences "
        "of --data is held out for each, at most N each (so evaluation costs the same on any "
        "corpus size); 0 for no limit", section="data", kind="non_negative_int", metavar="N")
    vocab_sample: int = setting(
        VOCAB_SAMPLE_PAIRS, "learn the vocabulary from a seeded sample of at most N "
        "training pairs, drawn in the one pass that reads the corpus; 0 for every pair",
        section="data", kind="non_negative_int", metavar="N")
    max_tokens: int | None = setting(
        None, "longest sentence in tokens; longer ones are trimmed, keeping [END]",
        section="data", kind="positive_int", metavar="N",
        default_help="the model's max_length, {toy_preset.max_length} for toy, "
        "{tutorial_preset.max_length} for tutorial")
    vocab_size: int | None = setting(
        None, "largest subword vocabulary: the one both languages share with --shared-vocab "
        "(the default on real corpora), else each language's", section="data",
        kind="positive_int", metavar="N",
        default_help="{toy[vocab_size]} for the toy corpus, {corpus[vocab_size]} otherwise, "
        f"or {SHORT_RUN_VOCAB_SIZE} with a --time-budget of at most "
        f"{SHORT_RUN_SECONDS // 60} minutes")
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
        None, "model size, a name of transformer.model_config.PRESETS, or auto: with a "
        "--time-budget, the largest size the budget can train on enough tokens on this "
        "machine (measured at the start; transformer.run.sizing), else tutorial",
        section="model", kind="choice", choices=(AUTO_PRESET, *sorted(PRESETS)),
        default_help="{toy[preset]} for the toy corpus, {corpus[preset]} otherwise; "
        "{presets}")
    init_from: str | None = setting(
        None, "adapt a trained run: start from the weights RUN delivered and its "
        "vocabulary, with a fresh optimizer and schedule, on --data; the model and "
        "vocabulary settings come from RUN (another value is an error)", section="model",
        metavar="RUN")
    # The preset's `TransformerConfig` with the model options applied
    # (`default_model`); its fields are options of their own.
    model: TransformerConfig | None = setting(None, "the model's sizes", section="model",
                                              flag="")
    # How the time budget chose the model (`transformer.run.sizing.size_rule`):
    # the preset, the reason, the step times measured and every candidate's figures.
    size_rule: dict | None = setting(None, "the record of the size rule's choice",
                                     section="model", flag="")
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
        "otherwise; the paper's is 4000")
    learning_rate: float | str | None = setting(
        None, "the schedule's peak, reached after the warm-up and then decaying as --decay "
        "says; 'paper' for the paper's (d_model * warmup)^-0.5, "
        "which grows as the warm-up shrinks", section="schedule", kind="learning_rate",
        metavar="PEAK", default_help="'paper' for the toy corpus; otherwise the paper's peak "
        "for a {peak_warmup_steps}-step warm-up, (d_model * {peak_warmup_steps})^-0.5, "
        "reached in --warmup-steps")
    decay: str | None = setting(
        None, "how the rate falls after the warm-up: inverse_sqrt is the paper's 1/sqrt(step), "
        "which never ends; linear, cosine and cooldown reach zero when the run ends (its "
        "--epochs, or its --time-budget, whichever comes first), with a warm-up of at most "
        "four fifths of the run: linear and cosine fall from the peak, cooldown stays at the "
        "peak until the last fifth of the run", section="schedule", kind="choice", choices=DECAYS,
        default_help="{toy[decay]} for the toy corpus, {corpus[decay]} otherwise")
    fit_warmup: bool | None = setting(
        None, "a run shorter than --warmup-steps (by --epochs, or by --time-budget) warms "
        "up over its whole length to the same peak, so that it ends at the peak; "
        "--no-fit-warmup keeps the whole --warmup-steps, which such a run never finishes",
        section="schedule", kind="switch")
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
    restore_best_weights: bool = setting(
        False, "end the run with the weights of its lowest validation loss (of their moving "
        "average, with --ema-momentum) instead of its last; either way the best are kept in "
        "best.weights.h5 of the run directory", section="schedule", kind="switch")
    patience: int = setting(
        0, "stop training after N epochs without a lower validation loss; 0 never stops "
        "early", section="schedule", kind="non_negative_int", metavar="N")
    ema_momentum: float | None = setting(
        None, "the trained model is an exponential moving average of the weights, "
        "updated after every step as average = m * average + (1 - m) * weights with "
        "m = min(M, (1 + step) / (10 + step)); 0 keeps the final weights",
        section="schedule", kind="rate", metavar="M",
        default_help="{toy[ema_momentum]} for the toy corpus, {corpus[ema_momentum]} "
        "otherwise, 0 with --average-checkpoints or with a --decay that falls to zero")
    # -- batches -------------------------------------------------------------
    batch_size: int | None = setting(
        None, "sentence pairs per step, over all devices; with token budgets "
        "(--batch-tokens) it sizes the budget; on real text twice the updates of the "
        "tutorial's 64 learnt more in the same time, see BENCHMARKS.md", section="batches",
        kind="positive_int", metavar="N")
    batch_tokens: int | None = setting(
        None, "batch pairs of about equal length, at most N padded tokens per batch and "
        "side (section 5.1), so that almost no padding is computed; 0 for batches of "
        "--batch-size pairs; with --strategy mirrored or multi-worker, each replica "
        "takes its share of every batch's pairs", section="batches", kind="non_negative_int",
        metavar="N", default_help="{toy[batch_tokens]} for the toy corpus; otherwise "
        "--batch-size times the mean padded pair length")
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
    precision: str | None = setting(
        None, "dtype policy; by default mixed_bfloat16 where bfloat16 trains faster (CPUs "
        "with AMX, AMD CPUs with AVX-512 BF16), float32 elsewhere "
        "(`transformer.run.precision.default_precision`)",
        section="performance", kind="choice", choices=PRECISIONS,
        default_help=explain_default_precision)
    jit_compile: bool = setting(
        False, "compile the train step with XLA; it recompiles for every new batch shape, "
        "which is slow with variable sentence lengths", section="performance", kind="flag")
    # -- scale ---------------------------------------------------------------
    strategy: str = setting(
        "default", "default: one device; mirrored: all GPUs (or --cpu-devices) of this "
        "machine; multi-worker: several machines, from TF_CONFIG", section="scale",
        kind="choice", choices=DISTRIBUTION_STRATEGIES)
    cpu_devices: int | None = setting(
        None, "split the CPU into N logical devices, to try --strategy mirrored without "
        "GPUs", section="scale", kind="positive_int", metavar="N", default_help="1")

    def __post_init__(self):
        for name, value in recipe_defaults(self).items():
            object.__setattr__(self, name, value)  # while the frozen config is being made
        self.validate()

    def validate(self) -> None:
        """Raises a Keras-style `ValueError` naming the first invalid field."""
        check_config(self)

    @staticmethod
    def describe(name: str) -> str:
        """The meaning of the setting `name`, as `train.py --help` states it."""
        return settings.describe(RunConfig, name)

    @property
    def resolved(self) -> bool:
        """Whether every field that the corpus or the machine decide is set."""
        return None not in (getattr(self, name) for name in RESOLVED_FIELDS)

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
        """The config of `to_dict()`'s output; `config.json`, of any version, is
        `read_config`'s."""
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"Unknown RunConfig fields: {unknown}")
        return cls(**data)

    def replace(self, **changes) -> RunConfig:
        """A copy with `changes`; model fields (`num_layers`, `d_model`, ...) go to the model."""
        model_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        model_changes = {k: changes.pop(k) for k in list(changes) if k in model_fields}
        model = changes.pop("model", self.model)
        model = dataclasses.replace(model, **model_changes) if model_changes else model
        return dataclasses.replace(self, model=model, **changes)

# --------------------------------------------------------------------------
# config.json: its versions, reading and writing it, what a resume may change
# --------------------------------------------------------------------------


CONFIG_FORMAT_VERSION = 14

# The key of config.json that records the run a run started from (`init_from`).
PARENT_KEY = "init_from_run"
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
                 fingerprint: dict) -> None:
    """Writes `config.json` once, when the run's config is resolved: the settings,
    the vocabulary sizes, the data's fingerprint, the format version and, for a
    run started from another (`init_from`), the record of that one (`PARENT_KEY`).

    Raises:
        transformer.rundir.RunDirError: `init_from` is not a finished run.
    """
    record = config.to_dict()
    record.update(input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                  format_version=CONFIG_FORMAT_VERSION)
    record[FINGERPRINT_KEY] = fingerprint
    if config.init_from:
        record[PARENT_KEY] = _parent_record(config.init_from)
    rundir.write_json_atomic(Path(run_dir) / rundir.CONFIG_FILE, record)


def _parent_record(init_from) -> dict[str, Any]:
    """What config.json records of the run a run started from: its directory,
    the fingerprint of the weights it delivered and of its data."""
    parent = rundir.parent_run(init_from, PARENT_FIELDS)
    metrics_path = Path(init_from) / rundir.METRICS_JSON
    metrics = rundir.read_json(metrics_path) if metrics_path.is_file() else {}
    return {"run_dir": str(init_from), "weights_sha256": metrics.get("weights_sha256"),
            FINGERPRINT_KEY: parent.get(FINGERPRINT_KEY)}


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
