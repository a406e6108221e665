"""Adapting a trained run to new text: `--init-from RUN`.

A new run (its own directory, its own data) starts from the weights that
RUN delivered (`model.keras`: its moving average, or its best or averaged
weights, as RUN chose; `transformer.run.checkpoints.load_parent_weights`
loads them) and from RUN's tokenizers, with a fresh optimizer and
learning-rate schedule. The settings that make the model and its vocabulary
(`INHERITED_FIELDS` and the model's sizes) come from RUN's `config.json`; a
choice that contradicts them is refused in one line. Everything else (the
data, the schedule, the batches, the budget) is the new run's own, with the
recipe's defaults. RUN must be a finished run (`transformer.rundir.parent_run`),
and the new run's `config.json` names RUN and the fingerprints of RUN's
weights and data (`transformer.run.config.PARENT_KEY`).

Text outside RUN's vocabulary is tokenized as its tokenizer does with any
text: SentencePiece splits an unseen word into known pieces down to single
characters, and a character it never saw becomes the unknown piece.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformer import rundir
from transformer.model_config import TransformerConfig

# The settings a run started from RUN takes from RUN: its vocabulary and model.
INHERITED_FIELDS = ("preset", "tokenizer", "subword_model", "vocab_size", "shared_vocab",
                    "lower_case", "max_tokens")
# What RUN's config.json must hold to be adapted (`transformer.rundir.parent_run`).
PARENT_FIELDS = (*INHERITED_FIELDS, "model")


def _parent_settings(init_from) -> dict[str, Any]:
    """The inherited settings of the run `init_from` (its `config.json`), the
    model as a `TransformerConfig` and `max_tokens` as a number (None there is
    the model's `max_length`)."""
    record = rundir.parent_run(init_from, PARENT_FIELDS)
    settings = {name: record[name] for name in INHERITED_FIELDS}
    settings["model"] = TransformerConfig.from_dict(record["model"])
    if settings["max_tokens"] is None:
        settings["max_tokens"] = settings["model"].max_length
    return settings


def inherited_settings(config) -> dict[str, Any]:
    """The values `config` (a `RunConfig` being made, with `init_from`) takes
    from its parent run: every inherited field it leaves None, and the model.

    Raises:
        ValueError: `config` sets an inherited field, or a model size, to
            another value than the parent's (naming both).
    """
    parent = _parent_settings(config.init_from)
    inherited = {}
    for name in INHERITED_FIELDS:
        given, theirs = getattr(config, name), parent[name]
        if given is None:
            inherited[name] = theirs
        elif given != theirs:
            _refuse(config.init_from, name, theirs, given)
    model = config.model
    if isinstance(model, dict):
        model = TransformerConfig.from_dict(model)
    if model is not None and model != parent["model"]:
        ours, theirs = model.to_dict(), parent["model"].to_dict()
        name = next(key for key in theirs if ours.get(key) != theirs[key])
        _refuse(config.init_from, name, theirs[name], ours.get(name))
    inherited["model"] = parent["model"]
    return inherited


def parent_model(init_from, **overrides) -> TransformerConfig:
    """The parent's `TransformerConfig` with `overrides` (a model size given
    on the command line; `inherited_settings` refuses one that differs)."""
    return dataclasses.replace(_parent_settings(init_from)["model"], **overrides)


def _refuse(init_from, name: str, theirs, given) -> None:
    raise ValueError(
        f"--init-from {str(init_from)!r}: `{name}` comes from that run ({name}={theirs!r}); "
        f"received {name}={given!r}. Drop the option: an adapted run keeps its parent's "
        "model and vocabulary.")
