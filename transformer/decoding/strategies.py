"""The search strategies as objects: `Greedy()`, `Beam(size, alpha, n_best)`, `Sample(...)`.

A strategy is a subclass of the abstract `Strategy`, usually a frozen
dataclass that checks its own settings. It declares everything its
consumers need, so that none of them asks which type it is:

- `search(settings, start, limits, initial_finished)`: how it decodes, in
  TensorFlow ops, over the model's next-token callback (`transformer.decoding.search`
  has the loops it may use);
- `SETTINGS` and `settings()`: the numbers its search takes as scalar tensor
  inputs, so that other numbers do not retrace a compiled pipeline; the
  dataclass fields that are not settings are static, part of
  `pipeline_key()`;
- `results_per_sentence`: how many translations it returns per sentence;
- `ctranslate2_options()`: CTranslate2's options that run the same search,
  or `NotSupportedError` through `not_supported`;
- `SAVED_MODEL`: the function of an exported SavedModel that runs it with
  some of its settings as inputs (`transformer.decoding.saved_model`), or None;
- `NAME` (a class keyword, `class Mine(Strategy, name="mine")`): registers
  it by name, which `translate.py --search NAME`, the SavedModel's functions
  and `transformer-serve` read (`registered()`). A subclass without a name
  works through `Translator(..., search=Mine())` all the same.

The methods a strategy must define are abstract: a subclass that lacks one
cannot be made. This module is standard library only (no TensorFlow), so
that `translate.py` checks its options before TensorFlow starts; the
built-in strategies reach `transformer.decoding.search` when they search.
`run_strategy(run_dir)` is how a run was evaluated.
"""

from __future__ import annotations

import abc
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
    """`transformer.decoding.search` (TensorFlow), imported when a built-in strategy first
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


class Strategy(abc.ABC):
    """A search strategy: what its consumers need of it, declared by the strategy.

    Class attributes:
        NAME: the registered name (the class keyword `name=`), or None.
        SETTINGS: `(name, dtype)` of the scalars its search takes
            (`settings()`); the SavedModel and the compiled pipelines take
            them as tensor inputs, so other numbers do not retrace.
        TWO_PASSES: whether a list may be decoded in two passes, a first at
            a short limit and then the sentences stopped there at their full
            one, with the results of one pass: true when a sentence's output
            does not depend on the batch it is decoded in.
        SAVED_MODEL: its function in an exported SavedModel, or None; like
            `NAME`, declared by each class itself, not inherited.
    """

    NAME: ClassVar[str | None] = None
    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = ()
    TWO_PASSES: ClassVar[bool] = True
    SAVED_MODEL: ClassVar[SavedModelFunction | None] = None

    def __init_subclass__(cls, name=None, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.NAME = name  # a subclass does not inherit its parent's name,
        if "SAVED_MODEL" not in vars(cls):  # nor its SavedModel function (the name is taken)
            cls.SAVED_MODEL = None
        if name is None:
            return
        known = _REGISTRY.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (
                cls.__module__, cls.__qualname__):
            raise ValueError(f"Received name={name!r} for {cls.__qualname__}: the name of "
                             f"{known.__module__}.{known.__qualname__} already.")
        _REGISTRY[name] = cls  # a class defined again (a module reloaded) replaces itself

    @abc.abstractmethod
    def search(self, settings, start, limits, initial_finished):
        """Decodes a batch, in TensorFlow ops (traced once per `pipeline_key()`).

        Args:
            settings: `settings()` as scalar tensors (`SETTINGS`' dtypes).
            start: `start(rows_per_sentence) -> (next_logits, cache)`: the
                model's callback and its initial cache with that many rows
                per sentence (see `transformer.decoding.search`).
            limits: int32 `(batch,)`, each sentence's most output tokens.
            initial_finished: bool `(batch,)`, sentences to skip (empty ones).

        Returns:
            `(tokens, scores, stopped)`: int64 `(batch, n, steps)` output
            tokens, best first, `[PAD]` after `[END]`; float32 `(batch, n)`
            what it ranks by, `log P / lp` with `penalty_alpha`'s `lp`; bool
            `(batch,)` the sentences whose limit stopped their search (the
            others have the output a higher limit gives). `n` is
            `results_per_sentence`. `transformer.decoding.search.one_row` makes them
            of a one-row search.
        """

    @property
    @abc.abstractmethod
    def results_per_sentence(self) -> int:
        """The translations it returns per sentence, best first."""

    @abc.abstractmethod
    def ctranslate2_options(self) -> dict:
        """The options of CTranslate2's `translate_batch` that run this search,
        `beam_size` and `length_penalty` (the exponent CTranslate2 divides its
        scores by) always among them; or `self.not_supported("CTranslate2")`."""

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

    @property
    def rows_per_sentence(self) -> int:
        """The hypotheses the search keeps per sentence (the cache's rows)."""
        return 1

    @classmethod
    def penalty_alpha(cls, settings) -> float:
        """The `alpha` of the length penalty `lp = ((5 + |Y|) / 6) ** alpha` that
        its score divides `log P(Y | X)` by, from `settings()` (0: the score is
        `log P`)."""
        return 0.0

    @property
    def score_alpha(self) -> float:
        """`penalty_alpha` of this object's settings."""
        return float(self.penalty_alpha(self.settings()))

    def random_seed(self) -> int | None:
        """The seed of a search that draws at random; None for one that does not."""
        return None


@dataclasses.dataclass(frozen=True)
class Greedy(Strategy, name="greedy"):
    """Greedy decoding: the most probable token at every step (the tutorial's).

    `Translation.score` is the plain `log P(Y | X)`.
    """

    SAVED_MODEL: ClassVar[SavedModelFunction | None] = SavedModelFunction("greedy")

    def search(self, settings, start, limits, initial_finished):
        loops = _loops()
        return loops.one_row(loops.greedy_search, settings, start, limits, initial_finished)

    @property
    def results_per_sentence(self):
        return 1

    def ctranslate2_options(self):
        return {"beam_size": 1, "length_penalty": 0.0}


@dataclasses.dataclass(frozen=True)
class Beam(Strategy, name="beam"):
    """Beam search (section 6.1 of the paper: a beam of 4, length penalty alpha = 0.6).

    Keeps `size` live hypotheses per sentence and returns the `n_best` best
    (at most `size`), ranked by `log P / lp` with `lp = ((5 + |Y|) / 6) ** alpha`,
    which is `Translation.score`. A beam of 1 gives greedy decoding's tokens.
    """

    size: int = DEFAULT_BEAM_SIZE
    alpha: float = DEFAULT_ALPHA
    n_best: int = 1

    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("size", "int32"), ("alpha", "float32"), ("n_best", "int32"))
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
        next_logits, cache = start(settings["size"])
        return _loops().beam_search(next_logits, cache, limits, settings["size"],
                                    settings["alpha"], settings["n_best"], initial_finished,
                                    return_stopped=True)

    @property
    def rows_per_sentence(self):
        return self.size

    @property
    def results_per_sentence(self):
        return self.n_best

    @classmethod
    def penalty_alpha(cls, settings):
        return settings["alpha"]

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
        return loops.one_row(loops.sample_search, settings, start, limits, initial_finished)

    @property
    def results_per_sentence(self):
        return 1

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
