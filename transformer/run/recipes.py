"""The dataset recipes and the sizing rule: what a run uses when it is not told.

Every default of a run is here or on its field (`RunConfig`, `TransformerConfig`,
the `PRESETS`), and `train.py` and the Python API read the same ones.
Two recipes: the toy corpus (small and regular, learnt in a few passes) and a
real corpus (a TSV file or the tutorial's TFDS dataset). `RunConfig` fills its
unset fields from `recipe_defaults` when it is made (`dataset_defaults`, the
model of `default_model`); `resolve` then makes the run's complete, frozen
config from it and the facts of the corpus (`CorpusFacts`): `epochs` and
`batch_tokens` sized by `size_epochs_and_batches`, `steps_per_epoch` the
first pass's batches, and this CPU's fastest `precision`. The measurements
behind each choice are in BENCHMARKS.md ("The real-text defaults" lists them,
the sections after it measure them). Plain Python: no TensorFlow at import, so the train CLI can
print them in `--help`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from transformer.constants import DECAYS_TO_ZERO, PAPER_LEARNING_RATE
from transformer.model_config import PAPER_PRESETS, TransformerConfig
from transformer.run.adapt import INHERITED_FIELDS, inherited_settings
from transformer.run.precision import default_precision
from transformer.run.sizing import (
    AUTO_PRESET,
    REFERENCE_PRESET,
    candidate_model,
    reference_choice,
    size_rule,
    unmeasured,
)

TOY_DEFAULTS = {
    # The small `toy` model: the toy grammar needs no more.
    "preset": "toy",
    # Pairs per batch: the tutorial's batch size.
    "batch_size": 64,
    # Passes over the corpus: enough for the exact-match target, with a margin.
    "epochs": 4,
    # A short warm-up, since the whole run is about a thousand steps.
    "warmup_steps": 400,
    # The paper's schedule (section 5.3).
    "decay": "inverse_sqrt",
    # The paper's peak for that warm-up, (d_model * warmup_steps)^-0.5.
    "learning_rate": PAPER_LEARNING_RATE,
    # The largest vocabulary: the toy words are far fewer.
    "vocab_size": 8000,
    # Reversible subwords: translations keep case, accents and punctuation.
    "tokenizer": "sentencepiece",
    # Byte-pair merges make every toy word one piece (a unigram model of so small
    # a text spells words in letters), so attention maps read word by word.
    "subword_model": "bpe",
    # Two vocabularies, as in the tutorial.
    "shared_vocab": False,
    # Batches of `batch_size` pairs rather than token budgets.
    "batch_tokens": 0,
    # A run shorter than `warmup_steps` warms up over its whole length.
    "fit_warmup": True,
    # The paper's label smoothing (section 5.4).
    "label_smoothing": 0.1,
    # Greedy decoding: the toy corpus has one right translation.
    "eval_beam_size": 1,
    # The final weights: the toy grammar is learnt exactly.
    "ema_momentum": 0.0,
    # The best segmentation of every pair: the toy words are one piece each.
    "subword_sampling": 0.0,
}

CORPUS_DEFAULTS = {
    # The time budget chooses the model (`transformer.run.sizing`).
    "preset": AUTO_PRESET,
    # Half the tutorial's pairs per update: twice the updates in about the same time.
    "batch_size": 32,
    # A fifth of the paper's warm-up (section 5.3), to the peak of the paper's
    # (`PEAK_WARMUP_STEPS`): runs of a few thousand updates spend most of them at
    # a useful rate instead of rising all along. `fit_warmup` shortens it further
    # for runs shorter than that.
    "warmup_steps": 800,
    # The paper's decay: a cool-down to zero at the run's end (`--decay cooldown`)
    # gained less than the seeds' spread in 5-minute runs (BENCHMARKS.md, "Levers
    # at 5 minutes on the Intel Xeon").
    "decay": "inverse_sqrt",
    # One vocabulary for both languages of at most this many pieces.
    "vocab_size": 8000,
    # Reversible subwords: translations keep case, accents and punctuation.
    "tokenizer": "sentencepiece",
    # SentencePiece's own default model.
    "subword_model": "unigram",
    # One vocabulary for both languages, embeddings tied (section 3.4): learnt faster.
    "shared_vocab": True,
    # A run shorter than the warm-up rises to the peak at its last step
    # instead of stopping partway up (`CustomSchedule(total_steps=...)`).
    "fit_warmup": True,
    # No label smoothing: in runs of a few thousand steps it lowered BLEU.
    "label_smoothing": 0.0,
    # The paper's beam search (section 6.1) for the test split.
    "eval_beam_size": 4,
    # The trained model is a moving average of the weights: more BLEU than the
    # final weights in the same time, though keeping it costs some updates
    # (docs/design.md, "Math"; BENCHMARKS.md, "Levers at 5 minutes on the Intel Xeon").
    "ema_momentum": 0.999,
    # Random segmentations of the pairs (Kudo, 2018) in runs long enough to overfit
    # (SAMPLING_MIN_PASSES); shorter runs stay as they are. Unigram vocabularies only.
    "subword_sampling": 0.5,
}
# Not in CORPUS_DEFAULTS: `epochs` and `batch_tokens`, sized from the corpus
# (`size_epochs_and_batches`), and averaging, off for every dataset
# (`RunConfig.average_checkpoints`): in short runs still improving it lowered BLEU.

# The shared vocabulary of a real corpus: CORPUS_DEFAULTS' 8,000 pieces, or
# SHORT_RUN_VOCAB_SIZE for a run of at most SHORT_RUN_SECONDS of --time-budget.
# A short run makes few updates: with half the pieces each is seen about twice
# as often, and a step is cheaper (the tied output projection and its softmax
# are about a third of a step's products). A longer run sees each of the larger
# vocabulary's pieces often enough (BENCHMARKS.md, "The vocabulary and the
# budget").
SHORT_RUN_SECONDS = 600
SHORT_RUN_VOCAB_SIZE = 4000


def corpus_vocab_size(time_budget: float | None) -> int:
    """The largest vocabulary of a real corpus's run of `time_budget` seconds
    (None: no budget).

    >>> corpus_vocab_size(300), corpus_vocab_size(900), corpus_vocab_size(None)
    (4000, 8000, 8000)
    """
    if time_budget is not None and time_budget <= SHORT_RUN_SECONDS:
        return SHORT_RUN_VOCAB_SIZE
    return CORPUS_DEFAULTS["vocab_size"]


def vocab_size_is_default(config) -> bool:
    """Whether a real corpus's run has the vocabulary size the rule gave it
    (`corpus_vocab_size`): such a size grows to fit a text whose characters
    alone need more pieces (`learn_sentencepiece_model(grow_to_fit=True)`),
    where a size the user chose is an error that names the minimum."""
    return not _is_toy(config.dataset, config.data) and \
        config.vocab_size == corpus_vocab_size(config.time_budget)


# Real corpora rise to the paper's peak for a warm-up of this many steps,
# (d_model * PEAK_WARMUP_STEPS)^-0.5 (1.4e-3 at d_model 128), in their own
# shorter `warmup_steps`; `--learning-rate` sets another peak.
PEAK_WARMUP_STEPS = 4000


def corpus_peak_learning_rate(d_model: int) -> float:
    """The peak rate of a real corpus's run: the paper's for `PEAK_WARMUP_STEPS`.

    >>> round(corpus_peak_learning_rate(128), 7)
    0.0013975
    """
    return (d_model * PEAK_WARMUP_STEPS) ** -0.5


# Real corpora train without dropout: runs of a few thousand steps underfit
# (validation accuracy at or above training accuracy). `--dropout` sets it.
CORPUS_DROPOUT_RATE = 0.0

# Real corpora train pre-norm layers (Xiong et al., 2020), which learnt much
# faster than the paper's post-norm in short runs; the toy corpus keeps the
# paper's. `--normalize-first` / `--no-normalize-first` sets it either way.
CORPUS_NORMALIZE_FIRST = True

# The model fields that real corpora set over the preset's (`default_model`).
CORPUS_MODEL_DEFAULTS = {
    "dropout_rate": CORPUS_DROPOUT_RATE,
    "normalize_first": CORPUS_NORMALIZE_FIRST,
}

# The paper's label smoothing (section 5.4), which runs of the paper's own
# models (`PAPER_PRESETS`) keep on real corpora, with the paper's dropout.
PAPER_LABEL_SMOOTHING = 0.1

# Sizing a real corpus's run: enough passes to see about TARGET_PAIRS_SEEN
# sentence pairs, between MIN_EPOCHS and MAX_EPOCHS. The target was lowered when
# pre-norm layers made each step dearer, so that a run takes about as long as
# before (the git history of BENCHMARKS.md, "Real text: pre-norm").
TARGET_PAIRS_SEEN = 180_000
MIN_EPOCHS, MAX_EPOCHS = 2, 20

# With --subword-sampling, a run that is on course for at least
# SAMPLING_MIN_PASSES passes over the training pairs reads, from its second pass
# on, the next of SAMPLED_SEGMENTATIONS random segmentations of every pair in
# turn; a shorter run reads the best split throughout. A regulariser pays only
# once the model overfits the pairs, and how many passes a run makes is what
# brings that about, on any corpus and CPU. `transformer.run.fitting` decides
# at the end of the first pass, from the run's epochs or, with a time budget,
# from the time that pass took, and records the decision for a resume.
SAMPLED_SEGMENTATIONS = 8
SAMPLING_MIN_PASSES = 12


def samples_subwords(expected_passes: float) -> bool:
    """Whether a run on course for `expected_passes` passes reads drawn segmentations."""
    return expected_passes >= SAMPLING_MIN_PASSES


def _is_toy(dataset: str, data) -> bool:
    return data is None and dataset == "toy"


def default_model(preset: str, dataset: str = "toy", data=None,
                  **overrides: Any) -> TransformerConfig:
    """The preset's model with `overrides` (None values are not given); on real
    corpora `dropout_rate` defaults to `CORPUS_DROPOUT_RATE` and
    `normalize_first` to `CORPUS_NORMALIZE_FIRST` (`CORPUS_MODEL_DEFAULTS`).

    Example:

    >>> default_model("tutorial", data="pairs.tsv").dropout_rate
    0.0
    >>> default_model("tutorial", data="pairs.tsv").normalize_first
    True
    >>> from transformer.model_config import PRESETS
    >>> default_model("toy").dropout_rate == PRESETS["toy"].dropout_rate
    True
    >>> default_model("toy").normalize_first
    False
    """
    if preset == AUTO_PRESET:  # until the run is resolved (`transformer.run.sizing`)
        preset = REFERENCE_PRESET
    if not _is_toy(dataset, data):
        for field, value in CORPUS_MODEL_DEFAULTS.items():
            if overrides.get(field) is None and not (
                    field == "dropout_rate" and preset in PAPER_PRESETS):
                overrides[field] = value
    return TransformerConfig.from_preset(preset, **overrides)


def dataset_defaults(dataset: str = "toy", data=None) -> dict[str, Any]:
    """The settings that depend on the dataset, when not given.

    Example:

    >>> dataset_defaults("toy")["epochs"]
    4
    """
    return dict(TOY_DEFAULTS if _is_toy(dataset, data) else CORPUS_DEFAULTS)


def recipe_defaults(config) -> dict[str, Any]:
    """The values of the fields that the `RunConfig` `config` leaves to its
    dataset's recipe (None), and its model: the preset's, with the corpus'
    model defaults, its embeddings tied with one vocabulary."""
    defaults = dataset_defaults(config.dataset, config.data)
    filled: dict[str, Any] = {}
    if config.init_from and (config.model is None or any(
            getattr(config, name) is None for name in INHERITED_FIELDS)):
        filled.update(inherited_settings(config))  # the vocabulary and model of the parent

    def chosen(name):
        return filled.get(name, getattr(config, name))

    unigram = (chosen("tokenizer") or defaults["tokenizer"],
               chosen("subword_model") or defaults["subword_model"]) == ("sentencepiece", "unigram")
    if config.subword_sampling is None and not unigram:
        # Only a unigram model draws segmentations by their probability.
        filled["subword_sampling"] = 0.0
    if chosen("vocab_size") is None and not _is_toy(config.dataset, config.data):
        filled["vocab_size"] = corpus_vocab_size(config.time_budget)  # the budget decides
    if chosen("preset") is None and chosen("model") is not None:
        filled["preset"] = REFERENCE_PRESET  # a model given is not the rule's to change
    if chosen("preset") in PAPER_PRESETS and config.label_smoothing is None:
        filled["label_smoothing"] = PAPER_LABEL_SMOOTHING
    for name, value in defaults.items():
        if getattr(config, name) is None and name not in filled:
            if name == "shared_vocab":  # only SentencePiece learns one vocabulary
                tokenizer = chosen("tokenizer")
                value = value and tokenizer == "sentencepiece"
            if name == "ema_momentum" and ((isinstance(config.average_checkpoints, int)
                                            and config.average_checkpoints > 1)
                                           or (config.decay or defaults["decay"]) in DECAYS_TO_ZERO):
                # The averaging asked for replaces the default one. A fall to zero
                # does the average's work (Hägele et al., 2024), while an average
                # over a short run still holds weights from before the fall.
                value = 0.0
            filled[name] = value
    if chosen("lower_case") is None:
        filled["lower_case"] = chosen("tokenizer") == "wordpiece"
    model = chosen("model")
    if model is None:
        model = default_model(filled.get("preset", config.preset), config.dataset, config.data)
    elif isinstance(model, dict):
        model = TransformerConfig.from_dict(model)
    shared = chosen("shared_vocab")
    if model.tie_embeddings != shared:
        # Tied embeddings need the one vocabulary; one vocabulary ties them.
        model = dataclasses.replace(model, tie_embeddings=shared)
    if model is not config.model:
        filled["model"] = model
    if config.learning_rate is None and "learning_rate" not in filled \
            and chosen("preset") != AUTO_PRESET:  # else the chosen model's, when resolved
        filled["learning_rate"] = corpus_peak_learning_rate(model.d_model)
    return filled


@dataclasses.dataclass(frozen=True)
class CorpusFacts:
    """What `resolve` needs to know of the training pairs once they are read.

    Attributes:
        num_pairs: training pairs.
        mean_tokens: mean padded length of a pair (tokens of its longer side).
        pass_batches: `pass_batches(batch_tokens, batch_size)`, the batches of
            the first pass over the pairs (`transformer.data.batching.batches_per_pass`).
        vocab_size: the target vocabulary's size (for the size rule).
        measure_step: `measure_step(config, preset)`, the mean seconds of a
            training step of that size at the run's batches and precision on this
            machine (`transformer.run.calibration.measure_step`); None where the
            size rule must not measure (then a run of preset "auto" trains the
            reference preset).
    """

    num_pairs: int
    mean_tokens: float
    pass_batches: Callable[[int, int], int]
    vocab_size: int = 0
    measure_step: Callable[[Any, str], float] | None = None


def resolve(config, facts: CorpusFacts):
    """The run's complete configuration: `config` (a `RunConfig` of the user's
    choices and the recipe) with the fields it leaves None filled from the corpus
    (`size_epochs_and_batches`, `steps_per_epoch` = the first pass's batches)
    and this CPU's fastest precision (`default_precision`). The trainer resolves
    once, writes the result to `config.json`, and nothing changes it afterwards;
    a resolved config resolves to itself.

    Example (26,000 pairs of 9 tokens: 7 epochs of 288-token batches):

    >>> from transformer.run.config import RunConfig
    >>> facts = CorpusFacts(26_000, 9.0, lambda batch_tokens, batch_size: 815)
    >>> run = resolve(RunConfig(data="pairs.tsv", precision="float32"), facts)
    >>> run.epochs, run.batch_tokens, run.steps_per_epoch, run.resolved
    (7, 288, 815, True)
    """
    changes = size_epochs_and_batches(facts.num_pairs, facts.mean_tokens, config)
    if config.steps_per_epoch is None:
        changes["steps_per_epoch"] = facts.pass_batches(
            changes.get("batch_tokens", config.batch_tokens), config.batch_size)
    if config.precision is None:
        changes["precision"] = default_precision()
    config = config.replace(**changes) if changes else config
    if config.preset == AUTO_PRESET:
        config = _choose_model(config, facts)
    return config


def _choose_model(config, facts: CorpusFacts):
    """`config` with the model of `transformer.run.sizing.size_rule` and its record."""
    because = unmeasured(config, facts.measure_step is not None)
    if because:
        preset, record = reference_choice(because)
    else:
        preset, record = size_rule(config, lambda size: facts.measure_step(config, size),
                                   facts.vocab_size, facts.mean_tokens,
                                   round(facts.num_pairs * facts.mean_tokens))
    # The chosen sizes; the rest (its max_length, which sized the tokens) as it was.
    return config.replace(preset=preset, model=candidate_model(preset, config.model),
                          size_rule=record)


def size_epochs_and_batches(num_pairs: int, mean_tokens: float, config) -> dict:
    """The run's `epochs` and `batch_tokens` where they are None.

    Args:
        num_pairs: training pairs.
        mean_tokens: mean padded length of a pair (tokens of its longer side).
        config: the run's settings (a `RunConfig`); given values are kept.

    Returns:
        The values to set (only those that were None).

    Example (180,000 / 26,000 pairs rounds to 7 epochs; 32 pairs of 9 tokens):

    >>> from transformer.run.config import RunConfig
    >>> config = RunConfig(data="pairs.tsv", test="t.tsv")
    >>> size_epochs_and_batches(26_000, 9.0, config)
    {'epochs': 7, 'batch_tokens': 288}
    """
    sized = {}
    if config.epochs is None and config.time_budget is not None:
        sized["epochs"] = MAX_EPOCHS  # the budget decides; this is only the cap
    elif config.epochs is None:
        epochs = round(TARGET_PAIRS_SEEN / max(num_pairs, 1))
        sized["epochs"] = min(MAX_EPOCHS, max(MIN_EPOCHS, epochs))
    if config.batch_tokens is None:
        # As many real tokens per update as `batch_size` pairs of mean length,
        # without the padding. A distributed run splits each update's pairs
        # among its replicas, so it makes the updates one device makes.
        sized["batch_tokens"] = max(1, round(config.batch_size * mean_tokens))
    return sized
