"""The search strategies as objects: the `Strategy` contract, and `Greedy()`,
`Beam(size, alpha, n_best)`, `Sample(...)`.

A strategy is a subclass of `Strategy`, usually a frozen dataclass that
checks its own settings. The smallest is one method:

- `next_tokens(log_probs, tokens, settings)`: the next token of every row,
  given the step's log-probabilities `(rows, vocab)` and the tokens so far
  `(rows, step + 1)` (`[START]` first). The public loop
  `transformer.decoding.search.token_by_token` runs it, one row per
  sentence, until `[END]` or the sentence's limit.

Or, for a search that is not one token per row at a time (a beam), the
whole search:

- `search(settings, start, limits, initial_finished)`: TensorFlow ops over
  the model's next-token callback, returning a
  `transformer.decoding.search.SearchResult` (the loops of
  `transformer.decoding.search` help).

Everything else has a default, which a strategy overrides to declare more:

- `score(log_prob, length, settings)`: what a result reports as its score
  (and what a search ranks by): `log P(Y | X)` by default, `log P / lp(Y)`
  with the GNMT length penalty for `Beam`. The strategy owns it: the
  pipeline, `Translator` and the CTranslate2 engine all ask it.
- `SETTINGS` and `settings()`: the numbers its search takes as scalar tensor
  inputs, so that other numbers do not retrace a compiled pipeline; the
  dataclass fields that are not settings are static, part of
  `pipeline_key()`;
- `results_per_sentence`, `rows_per_sentence`: 1 unless it keeps or returns
  more (a beam);
- `TWO_PASSES`: False unless the class declares that a sentence's output does
  not depend on the batch it is decoded in (see `Strategy`);
- `NAME` (a class keyword, `class Mine(Strategy, name="mine")`): registers
  it by name, which `translate.py --search NAME`, the SavedModel's functions
  and `transformer-serve` read (`registered()`). A subclass without a name
  works through `Translator(..., search=Mine())` all the same.

Engine adapters are declared only by the strategies that run on that engine:

- `ctranslate2_options()`: CTranslate2's options that run the same search;
  by default `NotSupportedError` ("... cannot run on CTranslate2"), one line;
- `SAVED_MODEL`: the function of an exported SavedModel that runs it with
  some of its settings as inputs (`transformer.decoding.saved_model`), or
  None (the SavedModel's `__call__` still runs the export's own strategy).

This module is standard library only (no TensorFlow), so that `translate.py`
checks its options before TensorFlow starts; a strategy reaches
`transformer.decoding.search` when it searches. `run_strategy(run_dir)` is
how a run was evaluated.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import secrets
from pathlib import Path
from typing import ClassVar

from transformer import rundir  # standard library only
from transformer._validation import check_int_at_least
from transformer.constants import DEFAULT_ALPHA, DEFAULT_BEAM_SIZE

__all__ = ["BEAM_PATIENCE", "Beam", "Greedy", "NotSupportedError", "Sample",
           "SavedModelFunction", "Strategy", "as_strategy", "check_strategy",
           "evaluation_strategy", "registered", "run_strategy", "strategy_class"]


# CTranslate2's beam stops once round(beam size * BEAM_PATIENCE) hypotheses
# have finished (`transformer.decoding.ctranslate2_translator`). With 1 it stops before
# the project's search in a few sentences, which then differ; from 1.5 on, the
# beam-4 translations of the runs measured are the project's but for about
# one sentence in a thousand (BENCHMARKS.md, "Decoding engines"), and larger
# values cost time.
BEAM_PATIENCE = 1.5

# The registered strategy classes by name (`Strategy.__init_subclass__`).
_REGISTRY: dict[str, type] = {}


def _check_number(name, value, low, high, low_closed, high_closed=True):
    """A Keras-style ValueError unless `value` is a finite number in the interval."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and math.isfinite(value) and (value >= low if low_closed else value > low)
          and (value <= high if high_closed else value < high))
    if not ok:
        interval = f"{'[' if low_closed else '('}{low}, {high}{']' if high_closed else ')'}"
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a "
                         f"finite number in {interval}. Received: {name}={value!r}")


def _loops():
    """`transformer.decoding.search` (TensorFlow), imported when a strategy first
    searches: importing this module must not start TensorFlow."""
    from transformer.decoding import search

    return search


class NotSupportedError(ValueError):
    """A strategy that an engine (CTranslate2) cannot run."""


@dataclasses.dataclass(frozen=True)
class SavedModelFunction:
    """The function of an exported SavedModel that runs a strategy.

    Attributes:
        name: the function's name, `translator.<name>(sentences, max_length, ...)`.
        inputs: `(input name, setting name)` of the settings that are its
            inputs, in its order; the others keep the values of the class's
            default object (`cls()`), which an exported strategy must allow.
    """

    name: str
    inputs: tuple[tuple[str, str], ...] = ()


class Strategy:
    """A search strategy: one method, and what else its consumers need, declared by it.

    Define `next_tokens` (the smallest strategy: one token per row at each
    step, on the public loop) or `search` (a whole search, such as a beam); a
    class that defines neither cannot be made. The rest has defaults (see the
    module docstring).

    Class attributes:
        NAME: the registered name (the class keyword `name=`), or None.
        SETTINGS: `(name, dtype)` of the scalars its search takes
            (`settings()`); the SavedModel and the compiled pipelines take
            them as tensor inputs, so other numbers do not retrace.
        TWO_PASSES: whether a sentence's output does not depend on the batch
            it is decoded in (nor on its row there), so that a list may be
            sorted by length, decoded in two passes (a first at a short
            limit, then the sentences stopped there at their full one) and
            batched with other requests, with the results of one pass. False
            by default, the safe answer (a sampler's draws depend on the
            row): one pass, in the list's order, alone. A class that defines
            `next_tokens` or `search` declares it (and `ctranslate2_options`)
            itself; one that changes neither (a new `score`) keeps its
            parent's. A class that defines `next_tokens` searches with it.
        SAVED_MODEL: its function in an exported SavedModel, or None; like
            `NAME`, declared by each class itself, not inherited.

    Example (a strategy of one method; `tf` is TensorFlow)::

        class NoRepeats(Strategy, name="no_repeats"):
            # Greedy decoding that never picks a token already in the output.
            def next_tokens(self, log_probs, tokens, settings):
                vocab = tf.range(tf.shape(log_probs)[-1], dtype=tokens.dtype)
                seen = tf.reduce_any(tf.equal(tokens[:, :, None], vocab), axis=1)
                return tf.argmax(tf.where(seen, -1e9, log_probs), axis=-1)  # (rows,)
    """

    NAME: ClassVar[str | None] = None
    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = ()
    TWO_PASSES: ClassVar[bool] = False
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = None

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.NAME = name  # a subclass does not inherit its parent's name,
        if "SAVED_MODEL" not in vars(cls):  # nor its SavedModel function (the name is taken),
            cls.SAVED_MODEL = None
        # A class with a search of its own declares what depends on the search
        # itself: whether it depends on the batch, and the engines that run it
        # (its parent's CTranslate2 options would run the parent's search).
        own = vars(cls)
        if "next_tokens" in own and "search" not in own and cls.search is not Strategy.search:
            cls.search = Strategy.search  # its one method is its search
        if "next_tokens" in own or "search" in own:
            if "TWO_PASSES" not in own and cls.TWO_PASSES:
                cls.TWO_PASSES = False
            if ("ctranslate2_options" not in own
                    and cls.ctranslate2_options is not Strategy.ctranslate2_options):
                cls.ctranslate2_options = Strategy.ctranslate2_options
        if name is None:
            return
        known = _REGISTRY.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (
                cls.__module__, cls.__qualname__):
            raise ValueError(f"Received name={name!r} for {cls.__qualname__}: the name of "
                             f"{known.__module__}.{known.__qualname__} already.")
        _REGISTRY[name] = cls  # a class defined again (a module reloaded) replaces itself

    def __new__(cls, *args, **kwargs):
        if cls.next_tokens is Strategy.next_tokens and cls.search is Strategy.search:
            raise TypeError(f"Can't instantiate {cls.__qualname__} without an implementation "
                            "of the abstract method 'next_tokens' (or of 'search', for a "
                            "whole search).")
        return super().__new__(cls)

    def next_tokens(self, log_probs, tokens, settings):
        """The next token of every row: the one method of the smallest strategy.

        Runs in TensorFlow ops, traced once per `pipeline_key()`, inside the
        public loop `transformer.decoding.search.token_by_token`, which
        feeds each chosen token back to the model, stops a row at `[END]` or
        at its limit (then `[PAD]`), and sums `log P(Y | X)` of the chosen
        tokens for `score`.

        Args:
            log_probs: float32 `(rows, vocab)`: `log P(token | X, tokens)`,
                the model's log-softmax at this step, one row per sentence.
            tokens: int64 `(rows, step + 1)`: the tokens so far, `[START]`
                first (`step` counts the output tokens chosen before).
            settings: `settings()` as scalar tensors (`SETTINGS`' dtypes);
                read a setting from here, not from `self`, or a compiled
                pipeline keeps the value it was traced with.

        Returns:
            int `(rows,)`: the next token of each row.
        """
        raise NotImplementedError(f"{type(self).__qualname__} defines neither next_tokens "
                                  "nor search.")

    def search(self, settings, start, limits, initial_finished):
        """Decodes a batch, in TensorFlow ops (traced once per `pipeline_key()`).

        By default `next_tokens` on the public loop, one row per sentence
        (`transformer.decoding.search.next_token_search`); a strategy that
        keeps several rows per sentence, such as a beam, defines its own.

        Args:
            settings: `settings()` as scalar tensors (`SETTINGS`' dtypes).
            start: `start(rows_per_sentence) -> (next_logits, cache)`: the
                model's callback and its initial cache with that many rows
                per sentence (see `transformer.decoding.search`).
            limits: int32 `(batch,)`, each sentence's most output tokens.
            initial_finished: bool `(batch,)`, sentences to skip (empty ones).

        Returns:
            A `transformer.decoding.search.SearchResult`: int64
            `(batch, n, steps)` output tokens, best first, `[PAD]` after
            `[END]`; float32 `(batch, n)` their `score` and their
            `log P(Y | X)`; bool `(batch,)` the sentences whose limit stopped
            their search (the others have the output a higher limit gives).
            `n` is `results_per_sentence`. `transformer.decoding.search.one_row`
            makes one of a one-row search.
        """
        return _loops().next_token_search(self, settings, start, limits, initial_finished)

    def score(self, log_prob, length, settings):
        """What a result reports as its score, and what a search ranks by.

        Written with arithmetic operators, it serves both sides: in the
        pipeline `log_prob` and `length` are float32 tensors `(batch,)` and
        `settings` holds scalar tensors; in `Translator`'s results and the
        CTranslate2 engine they are Python floats and `settings()`.

        Args:
            log_prob: `log P(Y | X)` of an output.
            length: its output tokens, `[END]` included (at least 1).
            settings: the strategy's settings (see `next_tokens`).

        Returns:
            `log_prob` here; `Beam` divides it by the GNMT length penalty.
        """
        return log_prob

    @property
    def results_per_sentence(self) -> int:
        """The translations it returns per sentence, best first."""
        return 1

    @property
    def rows_per_sentence(self) -> int:
        """The hypotheses the search keeps per sentence (the cache's rows)."""
        return 1

    def ctranslate2_options(self) -> dict:
        """The options of CTranslate2's `translate_batch` that run this search,
        `beam_size` and `length_penalty` (the exponent CTranslate2 divides its
        scores by) always among them. Declared by a strategy that runs on
        CTranslate2; the others raise `NotSupportedError`, in one line."""
        return self.not_supported("CTranslate2")

    def not_supported(self, engine):
        """Raises `NotSupportedError`: this strategy has no equivalent on `engine`."""
        raise NotSupportedError(f"{self!r} cannot run on {engine}; translate with the "
                                "TensorFlow engine.")

    def settings(self) -> dict:
        """The settings as the search takes them, by name: the fields of `SETTINGS`."""
        return {name: getattr(self, name) for name, _ in self.SETTINGS}

    def pipeline_key(self) -> tuple:
        """What a compiled pipeline of this strategy is cached by: its class and
        the values of its fields (a dataclass's, and its attributes) that are
        not `SETTINGS`, which the pipeline holds as constants. Those values must
        be hashable (a tuple, not a list)."""
        dynamic = {name for name, _ in self.SETTINGS}
        values = ({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
                  if dataclasses.is_dataclass(self) else {})
        values.update(getattr(self, "__dict__", {}))  # and a plain subclass's attributes
        key = (type(self), *sorted((name, value) for name, value in values.items()
                                   if name not in dynamic))
        try:
            hash(key)
        except TypeError as err:
            raise ValueError(f"{self!r}: the fields that are not SETTINGS key its compiled "
                             f"pipeline and must be hashable ({err}).") from None
        return key

    def random_seed(self) -> int | None:
        """The seed of a search that draws at random; None for one that does not
        (an engine that draws by its own generator, CTranslate2, is seeded with it)."""
        return None

    def __repr__(self):
        """`Name()`; a dataclass's own `repr` shows its fields."""
        return f"{type(self).__name__}()"


@dataclasses.dataclass(frozen=True)
class Greedy(Strategy, name="greedy"):
    """Greedy decoding: the most probable token at every step (the tutorial's).

    `Translation.score` is the plain `log P(Y | X)`; a subclass that defines
    only `score` reports its own (a length-normalised greedy decoding, say)
    and keeps the rest, `TWO_PASSES` and the engines included.
    """

    # The arg-max of a row depends on that row alone.
    TWO_PASSES: ClassVar[bool] = True
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = SavedModelFunction("greedy")

    def search(self, settings, start, limits, initial_finished):
        """`greedy_search` on the model's logits (the arg-max of the logits is
        the arg-max of the log-probabilities; no log-softmax per step)."""
        loops = _loops()
        return loops.one_row(loops.greedy_search, settings, start, limits, initial_finished,
                             score=self.score)

    def ctranslate2_options(self):
        return {"beam_size": 1, "length_penalty": 0.0}


@dataclasses.dataclass(frozen=True)
class Beam(Strategy, name="beam"):
    """Beam search (section 6.1 of the paper: a beam of 4, length penalty alpha = 0.6).

    Keeps `size` live hypotheses per sentence and returns the `n_best` best
    (at most `size`), ranked by `log P / lp` with `lp = ((5 + |Y|) / 6) ** alpha`,
    which is its `score` and `Translation.score`. A beam of 1 gives greedy
    decoding's tokens.
    """

    size: int = DEFAULT_BEAM_SIZE
    alpha: float = DEFAULT_ALPHA
    n_best: int = 1

    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("size", "int32"), ("alpha", "float32"), ("n_best", "int32"))
    # A sentence's hypotheses compete with each other only.
    TWO_PASSES: ClassVar[bool] = True
    # `translate(sentences, max_length, beam_size, alpha)`: the best of the beam.
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = SavedModelFunction(
        "translate", (("beam_size", "size"), ("alpha", "alpha")))

    def __post_init__(self):
        check_int_at_least("size", self.size, 1)
        _check_number("alpha", self.alpha, 0, math.inf, True, False)
        check_int_at_least("n_best", self.n_best, 1)
        if self.n_best > self.size:
            raise ValueError(f"Received n_best={self.n_best} and size={self.size}: the n-best "
                             "list comes from the beam, expected size >= n_best.")

    def settings(self):
        """`{"size", "alpha", "n_best"}` as numbers."""
        return {"size": self.size, "alpha": float(self.alpha), "n_best": self.n_best}

    def search(self, settings, start, limits, initial_finished):
        """`beam_search`, which ranks by `score` as it goes; `log P` is its score
        times the penalty at each output's length."""
        loops = _loops()
        next_logits, cache = start(settings["size"])
        tokens, scores, stopped = loops.beam_search(
            next_logits, cache, limits, settings["size"], settings["alpha"],
            settings["n_best"], initial_finished, return_stopped=True)
        lengths = loops.output_lengths(tokens, limits)  # (batch, n_best)
        log_probs = scores * loops.length_penalty(lengths, settings["alpha"])
        return loops.SearchResult(tokens, scores, log_probs, stopped)

    def score(self, log_prob, length, settings):
        """`log P / lp(Y)` with the GNMT penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha`
        (Wu et al., 2016; `transformer.decoding.search.length_penalty`)."""
        return log_prob / ((5.0 + length) / 6.0) ** settings["alpha"]

    @property
    def rows_per_sentence(self):
        return self.size

    @property
    def results_per_sentence(self):
        return self.n_best

    def ctranslate2_options(self):
        """A beam of 1 is greedy decoding; a wider one searches with
        `BEAM_PATIENCE`, keeping that many times `size` finished hypotheses
        for the project's re-ranking by `log P / lp`."""
        if self.size == 1:
            return Greedy().ctranslate2_options()
        return {"beam_size": self.size, "length_penalty": float(self.alpha),
                "patience": BEAM_PATIENCE,
                "num_hypotheses": max(self.n_best, round(self.size * BEAM_PATIENCE))}


@dataclasses.dataclass(frozen=True)
class Sample(Strategy, name="sample"):
    """Sampling: every token drawn from the model's distribution, reshaped.

    The logits are divided by `temperature` (> 0; below 1 sharper), cut to
    the `top_k` most probable tokens (None: all; 1 is greedy decoding) and to
    the nucleus of probability `top_p` (in (0, 1]; None: all). The same
    `seed` (an integer >= 0) gives the same translation of the same sentence;
    None draws a fresh seed for every call. `Translation.score` is
    `log P(Y | X)` under the model itself.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("seed", "int64"), ("temperature", "float32"), ("top_k", "int32"),
        ("top_p", "float32"))
    # A draw depends on the sentence's row in its batch: one pass, in the list's order.
    TWO_PASSES: ClassVar[bool] = False
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = SavedModelFunction(
        "sample", tuple((name, name) for name, _ in SETTINGS))

    def __post_init__(self):
        _check_number("temperature", self.temperature, 0, math.inf, False, False)
        if self.top_k is not None:
            check_int_at_least("top_k", self.top_k, 1)
        if self.top_p is not None:
            _check_number("top_p", self.top_p, 0, 1, False)
        if self.seed is not None:
            check_int_at_least("seed", self.seed, 0)

    def settings(self):
        """The four numbers of the search: `top_k = 0` and `top_p = 1` keep every
        token, and a missing seed is drawn afresh."""
        return {"seed": secrets.randbits(31) if self.seed is None else self.seed,
                "temperature": float(self.temperature), "top_k": self.top_k or 0,
                "top_p": 1.0 if self.top_p is None else float(self.top_p)}

    def search(self, settings, start, limits, initial_finished):
        loops = _loops()
        return loops.one_row(loops.sample_search, settings, start, limits, initial_finished,
                             score=self.score)

    def ctranslate2_options(self):
        settings = self.settings()
        return {"beam_size": 1, "length_penalty": 0.0, "sampling_topk": settings["top_k"],
                "sampling_topp": settings["top_p"],
                "sampling_temperature": settings["temperature"]}

    def random_seed(self):
        """The seed (a missing one drawn afresh, as `settings()` does)."""
        return self.settings()["seed"]


def registered() -> dict:
    """The registered strategy classes by name (`Strategy`'s class keyword `name=`)."""
    return dict(_REGISTRY)


def strategy_class(name):
    """The registered strategy class `name`; a ValueError naming the known ones."""
    if name not in _REGISTRY:
        raise ValueError(f"Received an unknown search strategy {name!r}, expected one of "
                         f"{sorted(_REGISTRY)}.")
    return _REGISTRY[name]


def check_strategy(search, name="search"):
    """Raises a Keras-style ValueError unless `search` is a strategy object."""
    if not isinstance(search, Strategy):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected "
                         f"Greedy(), Beam(...), Sample(...) or another Strategy object. "
                         f"Received: {name}={search!r}")
    return search


def as_strategy(search, name="kind"):
    """A strategy object, or a strategy class's default object (`Beam` -> `Beam()`),
    which callers that pass the settings as tensors use for its search only."""
    if isinstance(search, type):
        if not issubclass(search, Strategy):
            raise ValueError(f"Received an invalid value for argument `{name}`, expected a "
                             f"subclass of Strategy. Received: {name}={search!r}")
        return search()
    return check_strategy(search, name)


def evaluation_strategy(beam_size, alpha=DEFAULT_ALPHA):
    """How a run evaluates with `eval_beam_size = beam_size`: greedy decoding
    for a beam of 1, else the paper's beam search with `alpha`."""
    return Greedy() if beam_size == 1 else Beam(size=beam_size, alpha=alpha)


def run_strategy(run_dir):
    """The strategy a run directory was evaluated with, from its config.json:
    `evaluation_strategy(eval_beam_size)`, greedy when the record has none.

    Raises:
        transformer.rundir.RunDirError: an unreadable config.json or a bad beam.
    """
    path = Path(run_dir) / rundir.CONFIG_FILE
    record = rundir.read_json(path)
    beam = record.get("eval_beam_size") if isinstance(record, dict) else None
    if beam is None:
        return Greedy()
    if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
        raise rundir.RunDirError(f"{str(path)!r}: eval_beam_size should be a positive "
                                 f"integer, got {beam!r}.")
    return evaluation_strategy(beam)
