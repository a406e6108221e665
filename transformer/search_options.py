"""How a translator searches: `SearchOptions`, checked in one place.

Standard library only (no TensorFlow), so that the command line checks its
options before it imports TensorFlow; `transformer.translate.Translator`
takes the same settings.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import secrets

from transformer._validation import check_int_at_least
from transformer.constants import DEFAULT_ALPHA, DEFAULT_BEAM_SIZE

__all__ = ["SearchOptions"]


def _check_number(name, value, low, high, low_closed, high_closed=True):
    """A Keras-style ValueError unless `value` is a finite number in the interval."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
          and math.isfinite(value) and (value >= low if low_closed else value > low)
          and (value <= high if high_closed else value < high))
    if not ok:
        interval = f"{'[' if low_closed else '('}{low}, {high}{']' if high_closed else ')'}"
        raise ValueError(f"Received an invalid value for argument `{name}`, expected a "
                         f"finite number in {interval}. Received: {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How a `Translator` searches for its outputs; None leaves a setting unset.

    - Greedy decoding when nothing is set.
    - Beam search (section 6.1) when `beam_size > 1` or `n_best > 1`: the
      `n_best` best hypotheses of a beam of `beam_size` (default
      `max(DEFAULT_BEAM_SIZE, n_best)`, at least `n_best`), ranked by
      `log P / lp` with exponent `alpha` (default `DEFAULT_ALPHA`, 0.6).
    - Sampling when any of `temperature` (> 0, default 1), `top_k` (>= 1: the
      k most probable tokens), `top_p` (in (0, 1]: the nucleus) or `seed` (an
      integer; default a fresh random one) is set; `top_k=1` is greedy
      decoding. Sampling and beam search exclude each other.
    """

    beam_size: int | None = None
    alpha: float | None = None
    n_best: int = 1
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self):
        check_int_at_least("n_best", self.n_best, 1)
        if self.beam_size is not None:
            check_int_at_least("beam_size", self.beam_size, 1)
        if self.alpha is not None:
            _check_number("alpha", self.alpha, 0, math.inf, True, False)
        if self.temperature is not None:
            _check_number("temperature", self.temperature, 0, math.inf, False, False)
        if self.top_k is not None:
            check_int_at_least("top_k", self.top_k, 1)
        if self.top_p is not None:
            _check_number("top_p", self.top_p, 0, 1, False)
        if self.seed is not None:
            check_int_at_least("seed", self.seed, 0)
        beam = self.beam_size if self.beam_size is not None else self._default_beam()
        if self.n_best > beam:
            raise ValueError(f"Received n_best={self.n_best} and beam_size={beam}: the n-best "
                             "list comes from the beam, expected beam_size >= n_best.")
        if self.sampling and beam > 1:
            raise ValueError(f"Received beam_size={beam} with sampling (temperature, top_k, "
                             "top_p or seed): sampling draws one output per sentence, "
                             "expected beam_size=1 and n_best=1.")

    @property
    def sampling(self):
        return any(v is not None for v in (self.temperature, self.top_k, self.top_p, self.seed))

    def _default_beam(self):
        return 1 if self.n_best == 1 else max(DEFAULT_BEAM_SIZE, self.n_best)

    def resolve(self):
        """`(search, settings, alpha)`: the strategy of `transformer.decoding.decode`,
        its settings as Python numbers, and the `alpha` of `Translation.score`."""
        beam = self.beam_size if self.beam_size is not None else self._default_beam()
        if beam > 1:
            alpha = DEFAULT_ALPHA if self.alpha is None else self.alpha
            return "beam", (beam, alpha, self.n_best), alpha
        alpha = 0.0 if self.alpha is None else self.alpha
        if self.sampling:
            seed = secrets.randbits(31) if self.seed is None else self.seed
            return "sample", (seed, 1.0 if self.temperature is None else self.temperature,
                              self.top_k or 0, 1.0 if self.top_p is None else self.top_p), alpha
        return "greedy", (), alpha
