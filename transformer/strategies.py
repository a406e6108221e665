"""The search strategies as objects: `Greedy()`, `Beam(size, alpha, n_best)`, `Sample(...)`.

What to search, not how: each is a frozen dataclass that checks its own
settings and hands them over as a dict of numbers (`settings()`), whose
names and dtypes (`SETTINGS`) are the scalar inputs of the compiled search
of its type. Each answers what its consumers need to know of it through the
`Strategy` protocol (rows and results per sentence, what its score divides
`log P` by, whether a list may be decoded in two passes, CTranslate2's
options), so that no consumer asks which type it is. The search that runs
each type on a model is `transformer.search.run_search`.
This module is standard library only (no TensorFlow), unlike `search.py`,
so that `translate.py` checks its options before TensorFlow starts;
`transformer.translate.Translator`, the SavedModel of `transformer.export`
and `translate.py` all take these objects. `run_strategy(run_dir)` is how a
run was evaluated.
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

__all__ = ["BEAM_PATIENCE", "SEARCH_STRATEGIES", "Beam", "Greedy", "Sample", "Strategy",
           "check_strategy", "evaluation_strategy", "run_strategy"]


# CTranslate2's beam stops once round(beam size * BEAM_PATIENCE) hypotheses
# have finished (`transformer.ctranslate2_translator`). With 1 it stops before
# the project's search in a few sentences, which then differ; from 1.5 on, the
# beam-4 translations of the runs measured are the project's but for about
# one sentence in a thousand (BENCHMARKS.md, "Decoding engines"), and larger
# values cost time.
BEAM_PATIENCE = 1.5


def _check_number(name, value, low, high, low_closed, high_closed=True):
    """A Keras-style ValueError unless `value` is a finite number in the interval."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and math.isfinite(value) and (value >= low if low_closed else value > low)
          and (value <= high if high_closed else value < high))
    if not ok:
        interval = f"{'[' if low_closed else '('}{low}, {high}{']' if high_closed else ')'}"
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a "
                         f"finite number in {interval}. Received: {name}={value!r}")


class Strategy:
    """What every search strategy answers, so that no consumer asks for its type.

    Class attributes:
        SETTINGS: `(name, dtype)` of the scalars its compiled search takes
            (`settings()`); the SavedModel and the compiled pipelines take
            them as inputs, so other numbers do not retrace.
        TWO_PASSES: whether a list may be decoded in two passes, a first at
            a short limit and then the sentences stopped there at their full
            one, with the results of one pass: true when a sentence's output
            does not depend on the batch it is decoded in.
    """

    SETTINGS: ClassVar[tuple[tuple[str, str], ...]] = ()
    TWO_PASSES: ClassVar[bool] = True

    def settings(self) -> dict:
        """The settings as the compiled search takes them, by name."""
        return {}

    @property
    def rows_per_sentence(self) -> int:
        """The hypotheses the search keeps per sentence (the cache's rows)."""
        return 1

    @property
    def results_per_sentence(self) -> int:
        """The translations it returns per sentence, best first."""
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

    def ctranslate2_options(self) -> dict:
        """The options of CTranslate2's `translate_batch` that run this search,
        `beam_size` and `length_penalty` (the exponent CTranslate2 divides its
        scores by) always among them."""
        return {"beam_size": 1, "length_penalty": 0.0}

    def random_seed(self) -> int | None:
        """The seed of a search that draws at random; None for one that does not."""
        return None


@dataclasses.dataclass(frozen=True)
class Greedy(Strategy):
    """Greedy decoding: the most probable token at every step (the tutorial's).

    `Translation.score` is the plain `log P(Y | X)`.
    """


@dataclasses.dataclass(frozen=True)
class Beam(Strategy):
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
            return super().ctranslate2_options()
        return {"beam_size": self.size, "length_penalty": float(self.alpha),
                "patience": BEAM_PATIENCE,
                "num_hypotheses": max(self.n_best, round(self.size * BEAM_PATIENCE))}


@dataclasses.dataclass(frozen=True)
class Sample(Strategy):
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

    def ctranslate2_options(self):
        settings = self.settings()
        return {"beam_size": 1, "length_penalty": 0.0, "sampling_topk": settings["top_k"],
                "sampling_topp": settings["top_p"],
                "sampling_temperature": settings["temperature"]}

    def random_seed(self):
        """The seed (a missing one drawn afresh, as `settings()` does)."""
        return self.settings()["seed"]


SEARCH_STRATEGIES = (Greedy, Beam, Sample)


def check_strategy(search, name="search"):
    """Raises a Keras-style ValueError unless `search` is a strategy object."""
    if not isinstance(search, Strategy):
        raise ValueError(f"Received an invalid value for argument `{name}`, expected "
                         f"Greedy(), Beam(...) or Sample(...). Received: {name}={search!r}")
    return search


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
