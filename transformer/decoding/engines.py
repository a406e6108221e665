"""A run's translation engines: TensorFlow's `Translator`, or its CTranslate2 export.

`translate.py`, `transformer-export` and `transformer-serve` load a run's
engine through this module, so that none of the library's modules needs
the command lines (`transformer.cli`):

- `tensorflow_translator(run_dir)`: `transformer.decoding.translator.Translator.from_run`;
- `ctranslate2_model(run_dir, quantization)`: the run's CTranslate2 model
  directory, `RUN/ctranslate2-<quantization>`, converted once and reused
  while it holds the run's present model file;
- `load_engine(run_dir, engine, quantization)`: either, as one callable
  `engine(sentences, search, max_length) -> results`, which the server's
  decoder thread calls.

Importing this module imports neither TensorFlow nor ctranslate2: TensorFlow
starts when a TensorFlow engine is loaded or a run is converted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from transformer import rundir  # standard library only
from transformer.constants import DEFAULT_MAX_OUTPUT_LENGTH
from transformer.decoding.ctranslate2_translator import (  # no TensorFlow, no ctranslate2 at import
    CTranslate2Translator,
    ctranslate2_module,
    run_export_dir,
    run_export_is_current,
)

__all__ = ["ENGINES", "Engine", "ctranslate2_model", "load_engine", "tensorflow_modules",
           "tensorflow_translator"]

ENGINES = ("tensorflow", "ctranslate2")

# `engine(sentences, search, max_length)`: one result per sentence (`.text`,
# `.score`), or a list of them for a strategy with several results per sentence.
Engine = Callable[[list, object, "int | None"], list]


def tensorflow_modules():
    """`(translator, saved_model, ctranslate2_export)` of `transformer.decoding`:
    TensorFlow, so imported only when a TensorFlow engine or an export is wanted
    (a command line checks its options first)."""
    from transformer.decoding import ctranslate2_export, saved_model, translator

    return translator, saved_model, ctranslate2_export


def tensorflow_translator(run_dir):
    """`transformer.decoding.translator.Translator.from_run(run_dir)` (imports TensorFlow)."""
    translator, _, _ = tensorflow_modules()
    return translator.Translator.from_run(run_dir)


def ctranslate2_model(run_dir, quantization: str = "float32", force: bool = False,
                      report: Callable[[str], None] | None = None) -> Path:
    """The run's CTranslate2 model directory of `quantization`, `RUN/ctranslate2-<q>`,
    converted first (atomically) unless it holds the run's present model file
    (or `force`).

    Args:
        run_dir: a run directory of train.py.
        quantization: the weights' type ("float32", "int8", ...).
        force: convert even when the directory is current.
        report: called with one line before a conversion (which takes a while).

    Raises:
        ImportError: without the ctranslate2 package, saying how to install it.
        transformer.rundir.RunDirError: a missing or incomplete run directory.
    """
    run_dir = rundir.check_run_dir(run_dir)
    ctranslate2_module()  # the install hint, before anything is loaded
    if force or not run_export_is_current(run_dir, quantization):
        if report is not None:
            report(f"converting {run_dir} to CTranslate2 ({quantization}) in "
                   f"{run_export_dir(run_dir, quantization)}")
        _, _, exporting = tensorflow_modules()
        exporting.export_run(run_dir, quantization=quantization)
    return run_export_dir(run_dir, quantization)


def load_engine(run_dir, engine: str = "tensorflow", quantization: str | None = None,
                report: Callable[[str], None] | None = None) -> Engine:
    """`engine(sentences, search, max_length)` of a run.

    Args:
        run_dir: a run directory of train.py.
        engine: "tensorflow" (the run's model) or "ctranslate2" (its export,
            converted once, which translates without TensorFlow).
        quantization: with "ctranslate2", the weights' type (default float32).
        report: see `ctranslate2_model`.

    Returns:
        A callable whose `max_length` None is each engine's default output cap;
        the TensorFlow engine decodes at most the model's `max_length` tokens.

    Raises:
        ValueError: an unknown engine, or a quantization without "ctranslate2".
    """
    if engine not in ENGINES:
        raise ValueError(f"Received an unknown engine {engine!r}, expected one of {ENGINES}.")
    if engine == "ctranslate2":
        translator = CTranslate2Translator(
            ctranslate2_model(run_dir, quantization or "float32", report=report))

        def decode(sentences, search, max_length):
            return translator.translate(list(sentences), search=search, max_length=(
                DEFAULT_MAX_OUTPUT_LENGTH if max_length is None else max_length))
        return decode
    if quantization is not None:
        raise ValueError("A quantization is for the ctranslate2 engine.")
    translator = tensorflow_translator(run_dir)
    model_length = int(translator.transformer.config.max_length)

    def decode(sentences, search, max_length):
        if max_length is not None:  # the model's own cap, without a warning per call
            max_length = min(max_length, model_length)
        return translator(list(sentences), max_length=max_length, return_attention=False,
                          search=search)
    return decode
