"""Exporting a translator as a SavedModel: strings to strings, without this package.

Unlike `transformer.decoding.translator.Translator` (Python objects, this package
needed), the SavedModel holds the tokenizers and the model, and its functions
are the pipeline `transformer.decoding.pipeline.translate_batch` that `Translator`
runs, with tensors in and out; it reloads with only `tensorflow` and
`tensorflow_text`.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import tensorflow as tf

from transformer import rundir
from transformer.decoding.pipeline import (
    DEFAULT_EXTRA_LENGTH,
    default_max_length,
    load_run,
    translate_batch,
)
from transformer.decoding.search import setting_specs, setting_tensors
from transformer.decoding.strategies import Strategy, check_strategy, registered, run_strategy
from transformer.seams import require_tensorflow

logger = logging.getLogger(__name__)

__all__ = ["export_translator"]

_SENTENCES = tf.TensorSpec(None, tf.string, name="sentences")
_MAX_LENGTH = tf.TensorSpec([], tf.int32, name="max_length")


class _ExportedTranslator(tf.Module):
    """Strings in, strings out, with the tokenizers inside (a SavedModel).

    - `__call__(sentences)`: the export's strategy (`search` of
      `export_translator`) with the default `max_length`;
    - one function per strategy that declares one (`Strategy.SAVED_MODEL`):
      the package's strategies' and the export's own, e.g.
      `greedy(sentences, max_length)`, `translate(sentences, max_length,
      beam_size, alpha)` (beam search; a beam of 1 gives greedy decoding's
      tokens) and `sample(sentences, max_length, seed, temperature, top_k,
      top_p)` (`top_k = 0` and `top_p = 1` keep every token).

    Each takes a string or strings of any shape and returns the best
    translations in that shape. Everything is traced without AutoGraph, so it
    exports from a Jupyter kernel too.
    """

    def __init__(self, tokenizers, transformer, max_length, extra_length, search):
        super().__init__(name="translator")
        self.tokenizers = tokenizers
        self.transformer = transformer
        self.max_length = tf.Variable(max_length, dtype=tf.int32, trainable=False,
                                      name="max_length")
        # None (no per-sentence limit) is the cap itself: no output is longer.
        self._extra_length = int(transformer.config.max_length if extra_length is None
                                 else extra_length)
        self._search = search
        # The package's strategies and the export's own: what the SavedModel
        # holds does not depend on what else the exporting process imported.
        kinds = dict.fromkeys([*(kind for kind in registered().values()
                                 if kind.__module__ == Strategy.__module__), type(search)])
        for kind in kinds:
            if kind.SAVED_MODEL is not None:
                self._add_function(kind)

    def _add_function(self, kind):
        """`kind.SAVED_MODEL`'s function: its inputs are settings, the others those
        of the class's default object."""
        declared = kind.SAVED_MODEL
        if hasattr(self, declared.name):
            raise ValueError(f"{kind.__qualname__}.SAVED_MODEL names {declared.name!r}, which "
                             "the exported translator has already.")
        search = kind()
        specs = setting_specs(search)
        inputs = [tf.TensorSpec([], specs[setting].dtype, name=name)
                  for name, setting in declared.inputs]

        def texts(sentences, max_length, *values):
            settings = setting_tensors(search)
            settings.update({setting: value for (_, setting), value
                             in zip(declared.inputs, values, strict=True)})
            return self._texts(sentences, max_length, search, settings)

        # The function's own argument names, so that the reloaded function takes keywords.
        texts.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for name in ("sentences", "max_length", *(name for name, _ in declared.inputs))])
        texts.__name__ = declared.name
        setattr(self, declared.name, tf.function(
            texts, input_signature=[_SENTENCES, _MAX_LENGTH, *inputs], autograph=False))

    def _texts(self, sentences, max_length, search, settings):
        """The best translation of every string of `sentences`, in its shape."""
        flat = tf.reshape(sentences, [-1])  # (batch,)
        output = translate_batch(self.tokenizers, self.transformer, flat, max_length,
                                 self._extra_length, search, settings)
        return tf.reshape(output.texts[:, 0], tf.shape(sentences))

    @tf.function(input_signature=[_SENTENCES], autograph=False)
    def __call__(self, sentences):
        return self._texts(sentences, self.max_length.read_value(), self._search,
                           setting_tensors(self._search))


def export_translator(translator_or_run_dir, export_dir=None, search=None):
    """Exports a translator as a SavedModel that maps strings to strings.

    The SavedModel holds the tokenizers and the model. Reload it with only
    TensorFlow and TensorFlow Text (whose ops the tokenizers use)::

        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        translator = tf.saved_model.load("runs/toy/export")
        translator(tf.constant("o gato preto come o bolo")).numpy().decode()
        translator.translate(tf.constant(["o gato"]), max_length=tf.constant(40),
                             beam_size=tf.constant(4), alpha=tf.constant(0.6))
        translator.sample(tf.constant(["o gato"]), max_length=tf.constant(40),
                          seed=tf.constant(1, tf.int64), temperature=tf.constant(0.8),
                          top_k=tf.constant(0), top_p=tf.constant(0.9))

    Args:
        translator_or_run_dir: a `transformer.decoding.translator.Translator`, or a run
            directory to load one from.
        export_dir: where to write; default `<run_dir>/export` when a run
            directory is given.
        search: the strategy of the SavedModel's `__call__` (default: the
            translator's own, or `transformer.decoding.strategies.run_strategy` of the
            run directory: as the run was evaluated). A `Sample` without a
            seed gets one drawn now.

    Returns:
        The export directory, as a `Path`.
    """
    require_tensorflow("The SavedModel export")
    if hasattr(translator_or_run_dir, "transformer"):  # a Translator
        translator = translator_or_run_dir
        if export_dir is None:
            raise ValueError(
                "Received no `export_dir`; it is required when exporting a `Translator` "
                "(only a run directory has a default, <run_dir>/export)."
            )
        module = _ExportedTranslator(translator.tokenizers, translator.transformer,
                                     translator.max_length, translator.extra_length,
                                     check_strategy(search or translator.search))
    else:
        tokenizers, model = load_run(translator_or_run_dir)
        if export_dir is None:
            export_dir = Path(translator_or_run_dir) / rundir.EXPORT_DIR
        module = _ExportedTranslator(tokenizers, model, default_max_length(model),
                                     DEFAULT_EXTRA_LENGTH,
                                     check_strategy(search or run_strategy(translator_or_run_dir)))
    export_dir = Path(export_dir)
    tf.saved_model.save(module, str(export_dir))
    logger.info("Exported the translator to %s", export_dir)
    return export_dir
