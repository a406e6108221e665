"""The Python API of translation: `Translator` (text in, `Translation`s out).

Not the command line (`transformer/cli/translate.py`, which the script
`translate.py` runs and which uses this module): `Translator` maps text to
text with the pipeline of `transformer.decoding.pipeline.translate_batch` (tokenize,
encode, search, cut at `[END]`, detokenize), compiled once per strategy of
`transformer.decoding.strategies` (`Strategy.pipeline_key`): `Greedy()`, `Beam(size,
alpha, n_best)`, `Sample(temperature, top_k, top_p, seed)` or any other
`Strategy` object, a user's own subclass included. It hands back the text, the
tokens, the score and, when asked for, every attention weight of the final
output. `export_translator` (from `transformer.decoding.saved_model`) writes the same
pipeline as a SavedModel.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from transformer._validation import check_int_at_least
from transformer.constants import (
    DEFAULT_MAX_OUTPUT_LENGTH,
    PAD_ID,
    START_ID,
    TRANSLATE_BATCH_SIZE,
    TRANSLATE_FIRST_PASS_EXTRA,
)
from transformer.decoding.pipeline import (
    DEFAULT_EXTRA_LENGTH,
    TOKENS_SPEC,
    compile_pipeline,
    default_max_length,
    load_run,
    output_limits,
    teacher_forced_pass,
    tokenize_and_trim,
)
from transformer.decoding.saved_model import export_translator
from transformer.decoding.search import setting_tensors
from transformer.decoding.strategies import (
    Beam,
    Greedy,
    Sample,
    as_strategy,
    check_strategy,
    run_strategy,
)
from transformer.seams import require_tensorflow

logger = logging.getLogger(__name__)

# What needs the TensorFlow backend here, for `require_tensorflow`'s message.
_TENSORFLOW_ONLY = "The Translator (translate.py, transformer-serve)"

__all__ = ["Beam", "Greedy", "Sample", "Translation", "Translator", "export_translator"]


class _LazyAttention(Mapping):
    """A sentence's attention weights, computed on first access (see `_BatchAttention`)."""

    def __init__(self, compute):
        self._compute = compute
        self._weights = None

    def _get(self):
        if self._weights is None:
            self._weights = self._compute()
        return self._weights

    def __getitem__(self, name):
        return self._get()[name]

    def __iter__(self):
        return iter(self._get())

    def __len__(self):
        return len(self._get())

    def __repr__(self):
        return "<attention weights, computed on first access>" if self._weights is None \
            else repr(self._weights)


@dataclasses.dataclass
class Translation:
    """One translated sentence (or one of its n-best hypotheses).

    Unpacks like the tutorial's result:
    `text, tokens, attention_weights = translator(sentence)`.

    Attributes:
        text: the translation (`""` for an empty sentence).
        tokens: the output's subword tokens: `[START]`, the generated tokens, and
            `[END]` when it was produced (empty for an empty sentence).
        input_tokens: the source's subword tokens, `[START]` ... `[END]`, as fed
            to the model (after trimming).
        token_ids: int64 numpy array of the output ids (without `[START]`).
        score: the strategy's own `score` of the output, what it ranks by:
            `log P(Y | X) / lp(Y)` with the beam's `alpha` for `Beam`, the
            plain `log P(Y | X)` for `Greedy` and `Sample`; `-inf` for an
            empty sentence.
        log_prob: `log P(Y | X)` under the model, as the decoding loop summed it.
        attention_weights: for the final output, a mapping with every layer's
            `encoder_layer{i}` `(heads, input_len, input_len)`,
            `decoder_layer{i}_block1` (masked self-attention,
            `(heads, output_len, output_len)`) and `decoder_layer{i}_block2`
            (encoder-decoder attention, `(heads, output_len, input_len)`) as
            float32 numpy arrays, where `input_len = len(input_tokens)` and
            `output_len = len(tokens) - 1`; row `i` is the prediction of
            `tokens[i + 1]`. Empty for an empty sentence, or when the call
            asked for none. Computed on first access (one teacher-forced pass
            of the full model for the whole batch of the call).
    """

    text: str
    tokens: list[str]
    input_tokens: list[str]
    token_ids: np.ndarray = dataclasses.field(compare=False)
    score: float
    log_prob: float
    attention_weights: Mapping[str, np.ndarray] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    def __iter__(self):
        return iter((self.text, self.tokens, self.attention_weights))


class _BatchAttention:
    """The attention weights of one call's outputs, computed once, on first use.

    One teacher-forced pass of the full model over the batch's final outputs
    gives every layer's weights, exactly the model's (the decoding loop never
    materialises the weights of earlier positions).
    """

    def __init__(self, teacher_forced, encoder_tokens, output, lengths, in_lengths):
        self._args = (tf.constant(encoder_tokens), tf.constant(output), tf.constant(lengths))
        self._teacher_forced = teacher_forced
        self._lengths = lengths
        self._in_lengths = in_lengths
        self._weights = None

    def for_row(self, row):
        """Row `row`'s weights, as a mapping computed on first access."""
        return _LazyAttention(functools.partial(self._row, row))

    def _row(self, row):
        if self._weights is None:
            _, weights = self._teacher_forced(*self._args)
            self._weights = {name: w.numpy() for name, w in weights.items()}
        n, s = int(self._lengths[row]), int(self._in_lengths[row])
        attention = {}
        for name, w in self._weights.items():
            keys = s if name.startswith("encoder") or name.endswith("block2") else n
            queries = s if name.startswith("encoder") else n
            attention[name] = np.ascontiguousarray(w[row, :, :queries, :keys])
        return attention


def _to_strings(values):
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class Translator:
    """Translates text with tokenizers and a trained `Transformer`.

    The search is one strategy object (`transformer.decoding.strategies`): `Greedy()`
    (the default), `Beam(size=4, alpha=0.6, n_best=1)` (with `n_best > 1`,
    the `n_best` best hypotheses of each sentence) or `Sample(temperature,
    top_k, top_p, seed)`, or any other `Strategy` object. All run the
    model's own layers with their caches, in one compiled pipeline per
    strategy (per `Strategy.pipeline_key`: its class and static fields)
    whose settings are tensor inputs (traced once for every batch size,
    length and setting), made on first use. The
    log-probabilities come from the decoding loop, and each strategy scores
    them (`Strategy.score`). The attention weights of the final
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
        search: the default strategy of every call (default `Greedy()`).

    Call arguments:
        sentence_or_list: a string or a list of strings (a batch).
        max_length: the most output tokens (default: the translator's).
        return_attention: give the attention weights (default True); they are
            computed on first access of `Translation.attention_weights`.
        batch_size: sentences decoded together (default `TRANSLATE_BATCH_SIZE`).
            With a strategy that declares `TWO_PASSES` (greedy and beam
            search), a list is sorted by length and cut into batches, so that
            a batch of short sentences stops early, and a first pass stops
            every sentence at its input length + `TRANSLATE_FIRST_PASS_EXTRA`
            tokens; the few their limit stopped are searched again, in
            batches of their own, up to their full limit: a sentence that
            never emits `[END]` no longer holds up a whole batch, and the
            results are those of one pass. Any other strategy (sampling,
            whose draws depend on the row) decodes in one pass, in the list's
            order. The results keep the list's order.
        search: this call's strategy (default: the translator's).

    Returns:
        A `Translation` for a string, a list of them for a list; for a
        strategy with `results_per_sentence > 1` (a beam's `n_best > 1`), a
        list of that many `Translation`s, best first, in place of each.

    Example (a run that `python train.py` wrote)::

        translator = Translator.from_run("runs/toy")
        text, tokens, attention_weights = translator("o gato preto come o bolo")
        results = translator(["o gato", "os meninos não dormem"], search=Beam(4))
        best_three = translator("o gato", search=Beam(n_best=3))  # beam of 4, best first
        sampled = translator("o gato", search=Sample(top_p=0.9, seed=1))  # same seed, same sample
    """

    def __init__(self, tokenizers, transformer, max_length=DEFAULT_MAX_OUTPUT_LENGTH,
                 extra_length=DEFAULT_EXTRA_LENGTH, *,
                 search=Greedy()):  # noqa: B008 - a frozen object, safe to share
        require_tensorflow(_TENSORFLOW_ONLY)
        for side in ("source", "target"):
            if not hasattr(tokenizers, side):
                raise ValueError(
                    "Received invalid `tokenizers`: expected an object with `.source` and "
                    f"`.target` tokenizers. Received: {type(tokenizers).__name__} without "
                    f"`.{side}`"
                )
        if not isinstance(transformer, keras.Model) or not hasattr(transformer, "decode_step"):
            raise ValueError(
                "Received an invalid value for argument `transformer`, expected a "
                f"`transformer.Transformer`. Received: {type(transformer).__name__}"
            )
        check_int_at_least("max_length", max_length, 1)
        if extra_length is not None:
            check_int_at_least("extra_length", extra_length, 0)
        self.tokenizers = tokenizers
        self.transformer = transformer
        self.max_length = default_max_length(transformer, max_length)
        self.extra_length = extra_length
        self.search = check_strategy(search)
        self._pipelines = {}  # by `Strategy.pipeline_key()`, made on first use
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
        """The translator of a run directory written by train.py, decoding as the
        run was evaluated, exactly as `translate.py --run RUN_DIR` does.

        The tokenizers and the model are loaded as saved (the model in the
        precision it was saved with, as translate.py loads it); the default
        `search` is `transformer.decoding.strategies.run_strategy(run_dir)`: the beam of
        the run's evaluation (`eval_beam_size` in config.json, alpha 0.6), or
        `Greedy()` for a beam of 1 or none. Other arguments are the
        constructor's.

        Raises:
            transformer.rundir.RunDirError: a one-line message naming what is
                missing or unreadable.
        """
        require_tensorflow(_TENSORFLOW_ONLY)
        tokenizers, model = load_run(run_dir)
        if "search" not in kwargs:
            kwargs["search"] = run_strategy(run_dir)
        return cls(tokenizers, model, **kwargs)

    def tracing_count(self, search):
        """How many times the compiled pipeline of a strategy object (or of a
        strategy class's default object) was traced: stays 1 once used, 0 before."""
        pipeline = self._pipelines.get(as_strategy(search, "search").pipeline_key())
        return 0 if pipeline is None else pipeline.experimental_get_tracing_count()

    def _pipeline(self, search):
        """The compiled pipeline of `search`'s `pipeline_key()`, made on first use."""
        key = search.pipeline_key()
        if key not in self._pipelines:
            self._pipelines[key] = compile_pipeline(self.tokenizers, self.transformer, search)
        return self._pipelines[key]

    def encode(self, sentences):
        """Tokenizes and trims a list of strings as the model will see them.

        Returns:
            `(encoder_tokens, empty)`: int64 tensor `(batch, input_len)` and bool
            numpy `(batch,)`.
        """
        encoder_tokens, _, empty = tokenize_and_trim(
            self.tokenizers.source, tf.constant(sentences, tf.string),
            int(self.transformer.config.max_length),
        )
        return encoder_tokens, empty.numpy()

    def __call__(self, sentence_or_list, max_length=None, return_attention=True,
                 batch_size=TRANSLATE_BATCH_SIZE, *, search=None):
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
        check_int_at_least("batch_size", batch_size, 1)
        search = self.search if search is None else check_strategy(search)
        if max_length > self.transformer.config.max_length:
            logger.warning(
                "max_length=%d is more than the model's max_length=%d; using %d.",
                max_length, self.transformer.config.max_length, self.transformer.config.max_length,
            )
            max_length = int(self.transformer.config.max_length)
        if not sentences:
            return []
        results = self._schedule(sentences, int(max_length), search, return_attention,
                                 batch_size)
        return results[0] if single else results

    def _schedule(self, sentences, max_length, search, return_attention, batch_size):
        """Sorts the sentences by length (in characters) into batches and
        translates them; the results are in the list's order.

        A strategy whose output does not depend on its batch
        (`Strategy.TWO_PASSES`: greedy and beam search) stops a first pass
        short (`TRANSLATE_FIRST_PASS_EXTRA`) and decodes the sentences
        stopped there again, together, to their full limit. A sentence whose
        search ends within the first pass's shorter limit (greedy: at
        `[END]`; beam: once no live hypothesis can beat the finished ones)
        has the translation a higher limit gives. Any other strategy
        (sampling) decodes in one pass, in the list's own order: a draw
        depends on the sentence's row in its batch, so a list of at most
        `batch_size` sentences is sampled as the SavedModel
        (`transformer.decoding.saved_model`) samples it, in one batch.
        """
        settings = setting_tensors(search)  # a Sample's missing seed is drawn once
        full_extra = self._extra_length()
        first_pass = search.TWO_PASSES
        order = list(range(len(sentences)))
        if first_pass:
            order.sort(key=lambda i: len(sentences[i]))
        results = [None] * len(sentences)
        while order:
            extra = min(full_extra, TRANSLATE_FIRST_PASS_EXTRA) if first_pass else full_extra
            again = []
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                batch, cut = self._translate(
                    [sentences[i] for i in indices], max_length, extra, search, settings,
                    return_attention, full_extra if first_pass else None,
                )
                for index, result, was_cut in zip(indices, batch, cut, strict=True):
                    results[index] = result
                    if was_cut:
                        again.append(index)
            order, first_pass = again, False
        return results

    def _extra_length(self):
        """`extra_length` as the pipeline takes it: None (no per-sentence limit)
        becomes the model's `max_length`, which no output exceeds."""
        if self.extra_length is None:
            return int(self.transformer.config.max_length)
        return int(self.extra_length)

    def _translate(self, sentences, max_length, extra_length, search, settings,
                   return_attention, full_extra=None):
        """Translations of one batch, and a bool numpy `(batch,)`: True for a
        sentence whose search its limit stopped where `full_extra` would have
        allowed it more tokens (None: no sentence is cut)."""
        out = self._pipeline(search)(
            tf.constant(sentences, tf.string), tf.constant(max_length, tf.int32),
            tf.constant(extra_length, tf.int32), settings,
        )
        limit = int(self.transformer.config.max_length)
        for i, length in enumerate(out.input_lengths.numpy()):
            if length > limit:
                logger.warning(
                    "Sentence %r has %d tokens, more than the model's max_length=%d; "
                    "trimmed to its first %d tokens and [END].",
                    sentences[i][:40], length, limit, limit - 1,
                )
        tokens, empty = out.tokens.numpy(), out.empty.numpy()
        cut = np.zeros(len(sentences), bool)
        if full_extra is not None:
            full = output_limits(out.encoder_tokens, max_length, full_extra).numpy()
            cut = out.stopped.numpy() & (out.limits.numpy() < full) & ~empty
        if tokens.shape[1] != search.results_per_sentence:
            raise ValueError(f"{search!r} returned {tokens.shape[1]} results per sentence; its "
                             f"results_per_sentence says {search.results_per_sentence}.")
        return self._results(out, tokens, empty, search, return_attention), cut

    def _results(self, out, tokens, empty, search, return_attention):
        """`Translation`s of a batch's `TranslationOutput` (lists with n-best),
        each scored by the strategy's own `score` of its `log P` and length."""
        batch, n = tokens.shape[:2]
        lengths = out.lengths.numpy().reshape(-1)  # (batch * n,)
        width = int(lengths.max()) if lengths.size else 0
        flat = tokens.reshape(batch * n, -1)[:, :width]  # (batch * n, width)
        encoder_tokens = np.repeat(out.encoder_tokens.numpy(), n, axis=0)
        in_lengths = (encoder_tokens != PAD_ID).sum(axis=1)
        texts = _to_strings(out.texts.numpy().reshape(-1))
        start = np.full([batch * n, 1], START_ID, np.int64)
        out_tokens = _rows(self.tokenizers.target.lookup(
            tf.constant(np.concatenate([start, flat], axis=1))))
        in_tokens = _rows(self.tokenizers.source.lookup(out.encoder_tokens))
        log_probs = out.log_probs.numpy().reshape(-1)
        settings = search.settings()  # as numbers, for `score`
        attention = None
        if return_attention and width > 0:
            attention = _BatchAttention(self._attention_pass, encoder_tokens, flat, lengths,
                                        in_lengths)
        results = []
        for b in range(batch):
            hypotheses = []
            for row in range(b * n, (b + 1) * n):
                length = int(lengths[row])
                log_prob = -math.inf if empty[b] else float(log_probs[row])
                score = -math.inf if empty[b] else float(
                    search.score(log_prob, float(length), settings))
                hypotheses.append(Translation(
                    text="" if empty[b] else texts[row],
                    tokens=[] if empty[b] else _to_strings(out_tokens[row][: length + 1]),
                    input_tokens=_to_strings(in_tokens[b][: in_lengths[row]]),
                    token_ids=flat[row, :length],
                    score=score,
                    log_prob=log_prob,
                    attention_weights={} if attention is None or empty[b]
                    else attention.for_row(row),
                ))
            results.append(hypotheses[0] if n == 1 else hypotheses)  # n: results_per_sentence
        return results


def _rows(tokens: Any):
    """A (possibly ragged) batch of string tokens -> list of numpy rows."""
    if isinstance(tokens, tf.RaggedTensor):
        return [row.numpy() for row in tokens]
    return list(tokens.numpy())
