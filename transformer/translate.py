"""Translating text with a trained Transformer: `Translator` and export.

- `Translator` maps text to text with the tokenizers and the decoding loops
  of `transformer.decoding` (cached greedy decoding, or beam search), and
  hands back the tokens, the score and, when asked for, every attention
  weight of the final output.
- `export_translator` writes a SavedModel that maps strings to strings with the
  tokenizers inside; it reloads with only `tensorflow` and `tensorflow_text`.
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import transformer.model  # noqa: F401 - registers the Keras classes that model.keras names
from transformer import rundir
from transformer._validation import check_int_at_least
from transformer.constants import (
    DEFAULT_MAX_OUTPUT_LENGTH,
    END_ID,
    PAD_ID,
    START_ID,
    TRANSLATE_BATCH_SIZE,
    TRANSLATE_FIRST_PASS_EXTRA,
)
from transformer.data.tokenizers import load_tokenizers
from transformer.decoding import (
    DEFAULT_ALPHA,
    DEFAULT_EXTRA_LENGTH,
    TOKENS_SPEC,
    beam_search_decode,
    cached_greedy_decode,
    compile_beam_search,
    compile_greedy_decode,
    length_penalty,
    output_lengths,
    output_limits,
    teacher_forced_pass,
)

logger = logging.getLogger(__name__)

__all__ = ["Translation", "Translator", "export_translator"]


def _tokenize_and_trim(tokenizer, sentences, max_input_length):
    """Tokenizes a batch of strings, trimming rows longer than `max_input_length`.

    A trimmed row keeps its first `max_input_length - 1` tokens and its
    `[END]`. Works eagerly and in graphs.

    Returns:
        `(encoder_tokens, raw_lengths, empty)`: int64 `(batch, input_len)` padded
        with 0, int64 `(batch,)` untrimmed lengths, and bool `(batch,)`, True for
        a sentence with no tokens between `[START]` and `[END]`.
    """
    ragged = tokenizer.tokenize(sentences)  # (batch, None): [START] ... [END]
    ragged = tf.cast(ragged, tf.int64)
    raw_lengths = ragged.row_lengths()  # (batch,)
    head = ragged[:, :-1][:, : max_input_length - 1]  # [START] and at most max - 2 tokens
    trimmed = tf.concat([head, ragged[:, -1:]], axis=1)  # ... and the final [END]
    encoder_tokens = trimmed.to_tensor(default_value=PAD_ID)  # (batch, input_len)
    return encoder_tokens, raw_lengths, raw_lengths <= 2


class Translation:
    """One translated sentence.

    Unpacks like the tutorial's result:
    `text, tokens, attention_weights = translator(sentence)`.

    Attributes:
        text: the translation (`""` for an empty sentence).
        tokens: the output's subword tokens: `[START]`, the generated tokens, and
            `[END]` when it was produced (empty for an empty sentence).
        attention_weights: for the final output, a dict with every layer's
            `encoder_layer{i}` `(heads, input_len, input_len)`,
            `decoder_layer{i}_block1` (masked self-attention,
            `(heads, output_len, output_len)`) and `decoder_layer{i}_block2`
            (encoder-decoder attention, `(heads, output_len, input_len)`) as
            float32 numpy arrays, where `input_len = len(input_tokens)` and
            `output_len = len(tokens) - 1`; row `i` is the prediction of
            `tokens[i + 1]`. Empty for an empty sentence, or when the call
            asked for none. Computed on first access (one teacher-forced pass
            of the full model for the whole batch of the call), so a caller
            that never reads them never pays for them.
        input_tokens: the source's subword tokens, `[START]` ... `[END]`, as fed to
            the model (after trimming).
        token_ids: int64 numpy array of the output ids (without `[START]`).
        score: `log P(Y | X) / lp(Y)` under the model, with the `alpha` of the
            call (0 for greedy decoding, i.e. the plain log-probability);
            `-inf` for an empty sentence.
        log_prob: `log P(Y | X)` under the model, as the decoding loop summed it.
    """

    def __init__(self, text, tokens, attention_weights, input_tokens, token_ids, score,
                 log_prob):
        self.text = text
        self.tokens = tokens
        # A dict, or a function of no arguments that computes it.
        self._attention_weights = attention_weights
        self.input_tokens = input_tokens
        self.token_ids = token_ids
        self.score = score
        self.log_prob = log_prob

    @property
    def attention_weights(self) -> dict[str, np.ndarray]:
        if callable(self._attention_weights):
            self._attention_weights = self._attention_weights()
        return self._attention_weights

    def __iter__(self):
        return iter((self.text, self.tokens, self.attention_weights))

    def __repr__(self):
        return (
            f"Translation(text={self.text!r}, tokens={self.tokens!r}, "
            f"score={self.score:.4f}, log_prob={self.log_prob:.4f})"
        )


class _BatchAttention:
    """The attention weights of one call's outputs, computed once, on first use.

    One teacher-forced pass of the full model over the batch's final outputs
    gives every layer's weights, exactly the model's (the decoding loop never
    materialises the weights of earlier positions).
    """

    def __init__(self, teacher_forced, encoder_tokens, output, lengths, in_lengths):
        self._args = (encoder_tokens, output, tf.constant(lengths))
        self._teacher_forced = teacher_forced
        self._lengths = lengths
        self._in_lengths = in_lengths
        self._weights = None

    def for_sentence(self, b):
        """A function of no arguments that returns sentence `b`'s weights."""
        return functools.partial(self._sentence, b)

    def _sentence(self, b):
        if self._weights is None:
            _, weights = self._teacher_forced(*self._args)
            self._weights = {name: w.numpy() for name, w in weights.items()}
        n, s = int(self._lengths[b]), int(self._in_lengths[b])
        attention = {}
        for name, w in self._weights.items():
            keys = s if name.startswith("encoder") or name.endswith("block2") else n
            queries = s if name.startswith("encoder") else n
            attention[name] = np.ascontiguousarray(w[b, :, :queries, :keys])
        return attention


def _to_strings(values):
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class Translator:
    """Translates text with tokenizers and a trained `Transformer`.

    Greedy decoding by default, beam search with `beam_size > 1`; both run the
    model's own layers with their caches (`transformer.decoding`), in one
    compiled graph each (traced once for every batch size and length). The
    scores come from the decoding loop. The attention weights of the final
    output are computed when first read, by one teacher-forced pass of the
    full model over the call's batch, so they are exactly the model's.

    Args:
        tokenizers: an object with `.source` and `.target` tokenizers, each with
            `tokenize(strings)` (a ragged batch of ids, `[START]` ... `[END]`),
            `detokenize(ids)` and `lookup(ids)` (see `transformer.data.tokenizers`).
        transformer: a trained `Transformer`.
        max_length: default cap on output tokens (`[END]` included); at most the
            model's `max_length`.
        extra_length: each output also gets at most its input's length plus
            this many tokens (section 6.1 of the paper: input length + 50);
            None for no per-sentence limit.

    Call arguments:
        sentence_or_list: a string or a list of strings (a batch).
        max_length: the most output tokens (default: the translator's).
        beam_size: 1 for greedy decoding, more for beam search.
        alpha: the length penalty's exponent; `DEFAULT_ALPHA` (0.6) by default
            when `beam_size > 1`. Greedy decoding ignores it except for `score`.
        return_attention: give the attention weights (default True); they are
            computed on first access of `Translation.attention_weights`.
        batch_size: sentences decoded together (default `TRANSLATE_BATCH_SIZE`).
            A list is sorted by length and cut into batches, so that a batch
            of short sentences stops early; the results keep the list's
            order. Greedy decoding first stops every sentence at its input
            length + `TRANSLATE_FIRST_PASS_EXTRA` tokens, then decodes the
            few cut there without `[END]` again, in batches of their own, up
            to their full limit: a sentence that never emits `[END]` no
            longer holds up a whole batch, and the results are those of one
            pass.

    Returns:
        A `Translation` for a string, a list of them for a list.

    Example:

    >>> translator = Translator.from_run("runs/toy")
    >>> text, tokens, attention_weights = translator("o gato preto come o bolo")
    >>> results = translator(["o gato", "os meninos não dormem"], beam_size=4)
    """

    def __init__(
        self, tokenizers, transformer, max_length=DEFAULT_MAX_OUTPUT_LENGTH,
        extra_length=DEFAULT_EXTRA_LENGTH,
    ):
        for side in ("source", "target"):
            if not hasattr(tokenizers, side):
                raise ValueError(
                    "Received invalid `tokenizers`: expected an object with `.source` and "
                    f"`.target` tokenizers. Received: {type(tokenizers).__name__} without "
                    f"`.{side}`"
                )
        if not isinstance(transformer, keras.Model) or not hasattr(transformer, "decoder"):
            raise ValueError(
                "Received an invalid value for argument `transformer`, expected a "
                f"`transformer.Transformer`. Received: {type(transformer).__name__}"
            )
        check_int_at_least("max_length", max_length, 1)
        self.tokenizers = tokenizers
        self.transformer = transformer
        if extra_length is not None:
            check_int_at_least("extra_length", extra_length, 0)
        self.max_length = min(int(max_length), int(transformer.max_length))
        self.extra_length = extra_length
        self._greedy = compile_greedy_decode(transformer, return_log_probs=True, row_limits=True)
        self._beam = compile_beam_search(transformer, row_limits=True)
        # The teacher-forced pass that gives the attention weights, compiled once.
        self._attention_pass = tf.function(
            functools.partial(teacher_forced_pass, transformer, attention=True),
            input_signature=[
                TOKENS_SPEC, tf.TensorSpec([None, None], tf.int64),
                tf.TensorSpec([None], tf.int64),
            ],
            autograph=False,
        )

    @classmethod
    def from_run(cls, run_dir, **kwargs):
        """Loads the tokenizers and the model of a run directory written by train.py.

        Raises:
            transformer.rundir.RunDirError: a one-line message naming what is
                missing or unreadable.
        """
        path = rundir.check_run_dir(run_dir)
        rundir.read_json(path / rundir.CONFIG_FILE)  # a readable config marks a finished run
        try:
            tokenizers = load_tokenizers(path / rundir.TOKENIZERS_DIR)
        except Exception as err:  # noqa: BLE001 - any loading failure is reported in one line
            raise rundir.RunDirError(
                f"Could not load the tokenizers from {str(path / rundir.TOKENIZERS_DIR)!r}: "
                f"{_first_line(err)}"
            ) from err
        try:
            model = keras.saving.load_model(path / rundir.MODEL_FILE, compile=False)
        except Exception as err:  # noqa: BLE001
            raise rundir.RunDirError(
                f"Could not load the model from {str(path / rundir.MODEL_FILE)!r}: "
                f"{_first_line(err)}"
            ) from err
        return cls(tokenizers, model, **kwargs)

    @property
    def greedy_tracing_count(self):
        """How many times the compiled greedy loop was traced (stays 1)."""
        return self._greedy.experimental_get_tracing_count()

    @property
    def beam_tracing_count(self):
        """How many times the compiled beam search was traced (stays 1)."""
        return self._beam.experimental_get_tracing_count()

    def encode(self, sentences):
        """Tokenizes and trims a list of strings as the model will see them.

        Logs a warning for each sentence longer than the model's `max_length`.

        Returns:
            `(encoder_tokens, empty)`: int64 tensor `(batch, input_len)` and bool
            numpy `(batch,)`.
        """
        limit = int(self.transformer.max_length)
        encoder_tokens, raw_lengths, empty = _tokenize_and_trim(
            self.tokenizers.source, tf.constant(sentences, tf.string), limit
        )
        for i, length in enumerate(raw_lengths.numpy()):
            if length > limit:
                logger.warning(
                    "Sentence %d has %d tokens, more than the model's max_length=%d; "
                    "trimmed to its first %d tokens and [END].",
                    i + 1, length, limit, limit - 1,
                )
        return encoder_tokens, empty.numpy()

    def __call__(
        self, sentence_or_list, max_length=None, beam_size=1, alpha=None, return_attention=True,
        batch_size=TRANSLATE_BATCH_SIZE,
    ):
        single = isinstance(sentence_or_list, (str, bytes))
        sentences = [sentence_or_list] if single else sentence_or_list
        if not isinstance(sentences, (list, tuple)) or not all(
            isinstance(s, (str, bytes)) for s in sentences
        ):
            raise ValueError(
                "Received an invalid value for argument `sentence_or_list`, expected a "
                f"string or a list of strings. Received: {sentence_or_list!r:.80}"
            )
        sentences = _to_strings(sentences)
        max_length = self.max_length if max_length is None else max_length
        check_int_at_least("max_length", max_length, 1)
        check_int_at_least("beam_size", beam_size, 1)
        check_int_at_least("batch_size", batch_size, 1)
        if alpha is None:
            alpha = DEFAULT_ALPHA if beam_size > 1 else 0.0
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (
            math.isfinite(alpha) and alpha >= 0
        ):
            raise ValueError(
                "Received an invalid value for argument `alpha`, expected a finite "
                f"number >= 0. Received: alpha={alpha!r}"
            )
        if max_length > self.transformer.max_length:
            logger.warning(
                "max_length=%d is more than the model's max_length=%d; using %d.",
                max_length, self.transformer.max_length, self.transformer.max_length,
            )
            max_length = int(self.transformer.max_length)
        if not sentences:
            return []

        # Sorted by length (in characters) into batches; results in the list's order.
        # Greedy decoding stops a first pass short (TRANSLATE_FIRST_PASS_EXTRA) and
        # decodes the sentences cut there again, together, to their full limit.
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        results = [None] * len(sentences)
        first_pass = beam_size == 1
        for _ in range(2):
            again = []
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                batch, cut = self._translate([sentences[i] for i in indices], int(max_length),
                                             int(beam_size), float(alpha), return_attention,
                                             first_pass)
                for index, result, was_cut in zip(indices, batch, cut, strict=True):
                    results[index] = result
                    if was_cut:
                        again.append(index)
            if not again:
                break
            order, first_pass = again, False
        return results[0] if single else results

    def _translate(self, sentences, max_length, beam_size, alpha, return_attention,
                   first_pass=False):
        """Translations of one batch, and a bool numpy `(batch,)`: True for a
        sentence that a greedy `first_pass` cut short without `[END]`."""
        encoder_tokens, empty = self.encode(sentences)
        output, log_probs, limits, cut = self._decode(
            encoder_tokens, empty, max_length, beam_size, alpha, first_pass
        )
        # Up to [END], or to the sentence's own limit when it stopped there.
        lengths = tf.minimum(output_lengths(output), tf.cast(limits, tf.int64))
        lengths = tf.where(tf.constant(empty), tf.constant(0, tf.int64), lengths).numpy()
        width = int(lengths.max()) if lengths.size else 0
        output = output[:, :width]  # (batch, width); a beam pads to max_length
        in_output = tf.sequence_mask(lengths, width)
        output = tf.where(in_output, output, tf.constant(PAD_ID, tf.int64))  # (batch, width)
        if beam_size > 1:  # the loop's score is log P / lp: undo the penalty
            log_probs = log_probs * length_penalty(lengths, alpha)

        texts = _to_strings(self.tokenizers.target.detokenize(output).numpy())
        start = tf.fill([len(sentences), 1], tf.constant(START_ID, tf.int64))
        out_tokens = _rows(self.tokenizers.target.lookup(tf.concat([start, output], axis=1)))
        in_tokens = _rows(self.tokenizers.source.lookup(encoder_tokens))
        in_lengths = tf.reduce_sum(
            tf.cast(tf.not_equal(encoder_tokens, PAD_ID), tf.int64), axis=1
        ).numpy()
        attention = None
        if return_attention and width > 0:
            attention = _BatchAttention(
                self._attention_pass, encoder_tokens, output, lengths, in_lengths
            )
        results = []
        for b, sentence_empty in enumerate(empty):
            n, s = int(lengths[b]), int(in_lengths[b])
            log_prob = -math.inf if sentence_empty else float(log_probs[b])
            results.append(Translation(
                text="" if sentence_empty else texts[b],
                tokens=[] if sentence_empty else _to_strings(out_tokens[b][: n + 1]),
                attention_weights={} if attention is None or sentence_empty
                else attention.for_sentence(b),
                input_tokens=_to_strings(in_tokens[b][:s]),
                token_ids=output[b, :n].numpy(),
                score=log_prob / float(length_penalty(n, alpha)),
                log_prob=log_prob,
            ))
        return results, cut

    def _decode(self, encoder_tokens, empty, max_length, beam_size, alpha, first_pass=False):
        """Output tokens `(batch, steps)`, float64 numpy `(batch,)` scores (`log P`
        for greedy decoding, `log P / lp` for beam search), the sentences'
        output limits, int32 `(batch,)`, and which sentences a greedy
        `first_pass` cut short of their limit without `[END]`, bool numpy
        `(batch,)`.

        A greedy sentence's tokens do not depend on its limit up to that
        limit, so a sentence that ends within the first pass's shorter one
        has its final translation.
        """
        empty = tf.constant(empty)
        limits = output_limits(encoder_tokens, max_length, self.extra_length)  # (batch,)
        full_limits = limits
        if first_pass and beam_size == 1:
            limits = tf.minimum(limits, output_limits(
                encoder_tokens, max_length, TRANSLATE_FIRST_PASS_EXTRA))  # (batch,)
        max_length = tf.reduce_max(tf.concat([limits, [0]], axis=0))
        cut = np.zeros([len(empty)], bool)
        if beam_size == 1:
            output, scores = self._greedy(
                encoder_tokens, max_length, tf.constant(False), empty, limits
            )
            ended = tf.reduce_any(tf.equal(output, END_ID), axis=1)  # (batch,)
            cut = (~ended & (limits < full_limits) & ~empty).numpy()
        else:
            output, scores = self._beam(
                encoder_tokens, max_length, tf.constant(beam_size, tf.int32),
                tf.constant(alpha, tf.float32), empty, limits,
            )
        return output, scores.numpy().astype(np.float64), limits, cut


def _rows(tokens):
    """A (possibly ragged) batch of string tokens -> list of numpy rows."""
    if isinstance(tokens, tf.RaggedTensor):
        return [row.numpy() for row in tokens]
    return list(tokens.numpy())


def _first_line(err):
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# ---------------------------------------------------------------------------
# Export.


class _ExportedTranslator(tf.Module):
    """Strings in, strings out, with the tokenizers inside (a SavedModel).

    `__call__(sentences)` translates a string or a batch of strings (any shape)
    greedily with the default `max_length`; `translate(sentences, max_length,
    beam_size, alpha)` chooses the decoding (beam search for `beam_size > 1`).
    Both return strings of the input's shape. Everything is traced without
    AutoGraph, so it exports from a Jupyter kernel too.
    """

    def __init__(self, tokenizers, transformer, max_length, extra_length):
        super().__init__(name="translator")
        self.tokenizers = tokenizers
        self.transformer = transformer
        self.max_length = tf.Variable(max_length, dtype=tf.int32, trainable=False,
                                      name="max_length")
        model_max_length = int(transformer.max_length)

        def translate(sentences, max_length, beam_size, alpha):
            shape = tf.shape(sentences)
            flat = tf.reshape(sentences, [-1])  # (batch,)
            encoder_tokens, _, empty = _tokenize_and_trim(
                self.tokenizers.source, flat, model_max_length
            )
            limits = output_limits(
                encoder_tokens, tf.minimum(max_length, model_max_length), extra_length
            )  # (batch,)
            max_length = tf.reduce_max(tf.concat([limits, [0]], axis=0))

            def greedy():
                return cached_greedy_decode(
                    self.transformer, encoder_tokens, max_length, False, empty,
                    row_limits=limits,
                )

            def beam():
                tokens, _ = beam_search_decode(
                    self.transformer, encoder_tokens, max_length, beam_size, alpha, empty,
                    row_limits=limits,
                )
                return tokens

            output = tf.cond(beam_size > 1, beam, greedy)  # (batch, steps)
            in_output = tf.sequence_mask(output_lengths(output), tf.shape(output)[1])
            output = tf.where(in_output & ~empty[:, tf.newaxis], output,
                              tf.constant(PAD_ID, tf.int64))
            text = self.tokenizers.target.detokenize(output)  # (batch,)
            return tf.reshape(text, shape)

        self.translate = tf.function(
            translate,
            input_signature=[
                tf.TensorSpec(None, tf.string, name="sentences"),
                tf.TensorSpec([], tf.int32, name="max_length"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.float32, name="alpha"),
            ],
            autograph=False,
        )

    @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="sentences")],
                 autograph=False)
    def __call__(self, sentences):
        return self.translate(
            sentences, self.max_length.read_value(), tf.constant(1, tf.int32),
            tf.constant(0.0, tf.float32),
        )


def export_translator(translator_or_run_dir, export_dir=None):
    """Exports a translator as a SavedModel that maps strings to strings.

    The SavedModel holds the tokenizers and the model. Reload it with only
    TensorFlow and TensorFlow Text (whose ops the tokenizers use)::

        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        translator = tf.saved_model.load("runs/toy/export")
        translator(tf.constant("o gato preto come o bolo")).numpy().decode()
        translator.translate(tf.constant(["o gato"]), max_length=tf.constant(40),
                             beam_size=tf.constant(4), alpha=tf.constant(0.6))

    Args:
        translator_or_run_dir: a `Translator`, or a run directory to load one from.
        export_dir: where to write; default `<run_dir>/export` when a run
            directory is given.

    Returns:
        The export directory, as a `Path`.
    """
    if isinstance(translator_or_run_dir, Translator):
        translator = translator_or_run_dir
        if export_dir is None:
            raise ValueError(
                "Received no `export_dir`; it is required when exporting a `Translator` "
                "(only a run directory has a default, <run_dir>/export)."
            )
    else:
        translator = Translator.from_run(translator_or_run_dir)
        if export_dir is None:
            export_dir = Path(translator_or_run_dir) / rundir.EXPORT_DIR
    module = _ExportedTranslator(
        translator.tokenizers, translator.transformer, translator.max_length,
        translator.extra_length,
    )
    export_dir = Path(export_dir)
    tf.saved_model.save(module, str(export_dir))
    logger.info("Exported the translator to %s", export_dir)
    return export_dir
