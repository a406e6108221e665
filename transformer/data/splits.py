"""Held-out splits and vocabulary samples that cost a few bytes a pair.

A corpus of millions of pairs cannot be shuffled in memory to split off its
validation and test pairs, nor handed whole to SentencePiece. Both are
decided here in one streaming pass:

- **Held-out splits by hash.** Every pair gets the key `split_key(source,
  seed)`, a 64-bit hash of its source sentence. The test split is the pairs
  of the `n_test` smallest distinct keys, the validation split those of the
  next `n_valid`, so a source sentence with several translations (common in
  Tatoeba) is never in two splits, and only the keys (8 bytes a pair) are
  held while the file is read. `n_test` and `n_valid` are a fraction of the
  distinct source sentences, at most `max_held_out` each, so evaluation costs
  the same on a corpus of 30,000 pairs and of 5 million (`held_out_limits`).
- **A seeded sample** (`Reservoir`, Vitter's algorithm R) of at most
  `size` items, in the order they were read; a corpus no larger than the
  sample is taken whole.

>>> limits = held_out_limits(np.array([5, 1, 9, 1, 7, 3], np.uint64), 0.2, 0.2)
>>> limits.test_below, limits.valid_below, limits.counts
(2, 4, {'test': 2, 'valid': 1})
>>> [limits.split_of(key) for key in (1, 3, 5)]
['test', 'valid', 'train']
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random

import numpy as np

from transformer._validation import check_rate
from transformer.data.corpus import DataError

# The most validation and test source sentences split off a corpus each, by default.
MAX_HELD_OUT = 2000


def split_key(source: str, seed: int) -> int:
    """The 64-bit key that places a pair in a split: a seeded hash of its source."""
    # The seed as BLAKE2b's salt: a keyed hash costs a key block per call.
    digest = hashlib.blake2b(source.encode("utf-8"), digest_size=8,
                             salt=int(seed).to_bytes(16, "little", signed=False))
    return int.from_bytes(digest.digest(), "little")


@dataclasses.dataclass(frozen=True)
class HeldOutLimits:
    """Where the held-out splits end: a pair whose key is below `test_below`
    is a test pair, below `valid_below` a validation pair, else a training pair.

    Attributes:
        test_below: one more than the largest test key (0: no test split).
        valid_below: one more than the largest validation key (`test_below`: none).
        counts: the pairs of each held-out split.
    """

    test_below: int
    valid_below: int
    counts: dict

    def split_of(self, key: int) -> str:
        """`"test"`, `"valid"` or `"train"`: the split of a pair with this key."""
        if key < self.test_below:
            return "test"
        return "valid" if key < self.valid_below else "train"


def held_out_limits(keys: np.ndarray, valid_fraction: float, test_fraction: float,
                    max_held_out: int = MAX_HELD_OUT) -> HeldOutLimits:
    """The held-out splits of pairs with `keys` (`split_key` of each pair).

    Args:
        keys: uint64 `(num_pairs,)`.
        valid_fraction: share of distinct source sentences for validation, in [0, 1).
        test_fraction: share of distinct source sentences for the test, in [0, 1).
        max_held_out: the most source sentences of each split; 0 for no limit.

    Returns:
        A `HeldOutLimits`. Each split has `round(fraction * distinct sources)`
        source sentences, at least one when its fraction is positive, at most
        `max_held_out`.

    Raises:
        DataError: bad fractions, or no pair would be left for training.
    """
    check_rate("valid_fraction", valid_fraction, error=DataError)
    check_rate("test_fraction", test_fraction, error=DataError)
    if valid_fraction + test_fraction >= 1:
        raise DataError(
            "Received invalid values for arguments `valid_fraction` and `test_fraction`, "
            f"expected a sum below 1. Received: valid_fraction={valid_fraction}, "
            f"test_fraction={test_fraction}"
        )
    distinct, pairs_per_key = np.unique(keys, return_counts=True)  # sorted ascending
    n = len(distinct)

    def size(fraction: float) -> int:
        wanted = max(1, round(fraction * n)) if fraction > 0 else 0
        return min(wanted, max_held_out) if max_held_out else wanted

    n_test, n_valid = size(test_fraction), size(valid_fraction)
    if n_valid + n_test >= n:
        raise DataError(
            f"Cannot split {len(keys)} pairs ({n} distinct source sentences) into "
            f"{n_valid} validation and {n_test} test sentences and keep any for training; "
            "give more pairs or smaller fractions."
        )

    def below(count: int) -> int:
        return int(distinct[count - 1]) + 1 if count else 0

    test_below = below(n_test)
    valid_below = below(n_test + n_valid) if n_valid else test_below
    counts = {"test": int(pairs_per_key[:n_test].sum()),
              "valid": int(pairs_per_key[n_test : n_test + n_valid].sum())}
    return HeldOutLimits(test_below, valid_below, counts)


class Reservoir:
    """A seeded uniform sample of at most `size` items of a stream, kept in the
    order the items came; `size` 0 keeps every item.

    Li's algorithm L (1994): once the sample is full, the index of the next
    item to take is drawn ahead, so the items passed over cost one
    comparison each, not a random draw.

    >>> sample = Reservoir(3, seed=0)
    >>> for item in range(10):
    ...     sample.add(item)
    >>> len(sample.items()), sample.seen, sample.items() == sorted(sample.items())
    (3, 10, True)
    """

    def __init__(self, size: int, seed: int):
        self.size = size
        self.seen = 0
        self._rng = random.Random(seed)
        self._kept: list[tuple[int, object]] = []
        self._weight = 1.0
        self._next = size

    def add(self, item) -> None:
        """Offers the next item of the stream."""
        index, self.seen = self.seen, self.seen + 1
        if not self.size or index < self.size:
            self._kept.append((index, item))
            if index + 1 == self.size:
                self._draw_next(index)
            return
        if index == self._next:
            self._kept[self._rng.randrange(self.size)] = (index, item)
            self._draw_next(index)

    def _draw_next(self, index: int) -> None:
        self._weight *= math.exp(math.log(self._random()) / self.size)
        skip = math.floor(math.log(self._random()) / math.log1p(-self._weight))
        self._next = index + skip + 1

    def _random(self) -> float:
        return self._rng.random() or 1e-300  # never log(0)

    def items(self) -> list:
        """The sample, in the order the items came."""
        return [item for _, item in sorted(self._kept, key=lambda kept: kept[0])]
