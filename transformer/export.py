"""Exporting a translator as a SavedModel: strings to strings, without this package.

Unlike `transformer.translate.Translator` (Python objects, this package
needed), the SavedModel holds the tokenizers and the model, and its functions
are the pipeline `transformer.decoding.translate_batch` that `Translator`
runs, with tensors in and out; it reloads with only `tensorflow` and
`tensorflow_text`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import tensorflow as tf

from transformer import rundir
from transformer.decoding import (
    DEFAULT_EXTRA_LENGTH,
    default_max_length,
    load_run,
    translate_batch,
)
from transformer.search import setting_specs, setting_tensors
from transformer.strategies import Beam, Greedy, Sample, check_strategy, run_strategy

logger = logging.getLogger(__name__)

__all__ = ["export_translator"]

_SENTENCES = tf.TensorSpec(None, tf.string, name="sentences")
_MAX_LENGTH = tf.TensorSpec([], tf.int32, name="max_length")


class _ExportedTranslator(tf.Module):
    """Strings in, strings out, with the tokenizers inside (a SavedModel).

    - `__call__(sentences)`: the export's strategy (`search` of
      `export_translator`) with the default `max_length`;
    - `translate(sentences, max_length, beam_size, alpha)`: beam search for
      `beam_size > 1`, greedy decoding otherwise;
    - `sample(sentences, max_length, seed, temperature, top_k, top_p)`:
      sampling (`top_k = 0` and `top_p = 1` keep every token).

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
        beam, sample = setting_specs(Beam), setting_specs(Sample)
        self.translate = tf.function(
            self._translate,
            input_signature=[_SENTENCES, _MAX_LENGTH, beam["size"], beam["alpha"]],
            autograph=False,
        )
        self.sample = tf.function(
            self._sample,
            input_signature=[_SENTENCES, _MAX_LENGTH, *(sample[name] for name, _ in
                                                        Sample.SETTINGS)],
            autograph=False,
        )

    def _texts(self, sentences, max_length, kind, settings):
        """The best translation of every string of `sentences`, in its shape."""
        flat = tf.reshape(sentences, [-1])  # (batch,)
        output = translate_batch(self.tokenizers, self.transformer, flat, max_length,
                                 self._extra_length, kind, settings)
        return tf.reshape(output.texts[:, 0], tf.shape(sentences))

    def _translate(self, sentences, max_length, beam_size, alpha):
        beam = {"size": beam_size, "alpha": alpha, "n_best": tf.constant(1, tf.int32)}
        return tf.cond(
            beam_size > 1,
            lambda: self._texts(sentences, max_length, Beam, beam),
            lambda: self._texts(sentences, max_length, Greedy, {}),
        )

    def _sample(self, sentences, max_length, seed, temperature, top_k, top_p):
        settings = {"seed": seed, "temperature": temperature, "top_k": top_k, "top_p": top_p}
        return self._texts(sentences, max_length, Sample, settings)

    @tf.function(input_signature=[_SENTENCES], autograph=False)
    def __call__(self, sentences):
        return self._texts(sentences, self.max_length.read_value(), type(self._search),
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
        translator_or_run_dir: a `transformer.translate.Translator`, or a run
            directory to load one from.
        export_dir: where to write; default `<run_dir>/export` when a run
            directory is given.
        search: the strategy of the SavedModel's `__call__` (default: the
            translator's own, or `transformer.strategies.run_strategy` of the
            run directory: as the run was evaluated). A `Sample` without a
            seed gets one drawn now.

    Returns:
        The export directory, as a `Path`.
    """
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
