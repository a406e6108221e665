"""The checks of `RunConfig.validate`, in the order they run: each raises a
Keras-style `ValueError` naming the field, what was expected and what was received."""

from __future__ import annotations

import math

from transformer._validation import (
    check_choice,
    check_learning_rate,
    check_max_tokens,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from transformer.constants import (
    DECAYS,
    DISTRIBUTION_STRATEGIES,
    PAPER_LEARNING_RATE,
    SENTENCEPIECE_MODEL_TYPES,
    TOKENIZER_KINDS,
)
from transformer.data.source import DATASETS
from transformer.model_config import PRESETS
from transformer.run.precision import PRECISIONS
from transformer.run.sizing import AUTO_PRESET


def check_config(config) -> None:
    """Raises a `ValueError` naming the first invalid field of the `RunConfig` `config`."""
    _check_choices(config)
    _check_numbers(config)
    _check_max_tokens(config.max_tokens, config.model.max_length)
    _check_files(config)


def _check_choices(config) -> None:
    """`dataset` (without `data`), `preset`, `precision`, `strategy` and the tokenizer."""
    if config.data is None:
        check_choice("dataset", config.dataset, DATASETS)
    check_choice("preset", config.preset, [AUTO_PRESET, *PRESETS])
    if config.precision is not None:  # None: this CPU's fastest, when the run is resolved
        check_choice("precision", config.precision, PRECISIONS)
    check_choice("strategy", config.strategy, DISTRIBUTION_STRATEGIES)
    check_choice("tokenizer", config.tokenizer, TOKENIZER_KINDS)
    check_choice("subword_model", config.subword_model, SENTENCEPIECE_MODEL_TYPES)
    check_choice("decay", config.decay, DECAYS)
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


def _check_numbers(config) -> None:
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
    if config.learning_rate != PAPER_LEARNING_RATE and not (
            config.learning_rate is None and config.preset == AUTO_PRESET):  # the model's, later
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


def _check_files(config) -> None:
    """`valid` and `test` files go only with a `data` file."""
    if (config.valid or config.test) and not config.data:
        raise ValueError(
            "Received `valid` or `test` files without `data`: they only go with a "
            "training file (--data FILE.tsv)."
        )
