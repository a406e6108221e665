"""The two types every data module shares: `DataError` and `Corpus`.

A corpus is three lists of `(source, target)` sentence pairs: the training,
validation and test splits. Every loader in `transformer.data` (the toy
grammar, TSV files, TFDS) returns one, and every user-facing problem with data
(a missing file, a malformed line, a dataset that is not downloaded) is a
`DataError` whose message is a single line naming the file and line.
"""

from __future__ import annotations

import dataclasses

Pair = tuple[str, str]


class DataError(ValueError):
    """A problem with the user's data; the message is one line naming file and line.

    It subclasses `ValueError`, so code that catches `ValueError` catches it too.
    Command-line tools print the message and exit non-zero without a traceback.

    Example:

    ```python
    try:
        pairs = read_tsv("corpus.tsv")
    except DataError as error:
        print(error)  # corpus.tsv:17: expected at least 2 tab-separated columns, found 1
    ```
    """


@dataclasses.dataclass
class Corpus:
    """A parallel corpus split into training, validation and test pairs.

    Attributes:
        train: `(source, target)` string pairs to train on.
        valid: `(source, target)` pairs for validation during training.
        test: `(source, target)` pairs held out for the final evaluation.
        name: a short human-readable description of where the pairs came from,
            e.g. `"toy(seed=0)"` or `"data/por.tsv"`; informational only.
        skipped_lines: how many malformed lines were skipped while reading
            (only non-zero for TSV files read with `skip_bad_lines=True`).
        version: the dataset's version (TFDS datasets), or "".
        vocab_pairs: the pairs to learn the vocabulary from, a seeded sample
            of `train` (`transformer.data.splits.Reservoir`); None: `train`.
        file_sha256: the SHA-256 of each file read (path -> hex digest),
            computed in the pass that read it, for the run's fingerprint.

    `train` may be any sized iterable of pairs: a list, or pairs streamed
    from a file (`transformer.data.streamed`); `valid` and `test` are lists.

    Example:

    >>> corpus = Corpus(train=[("o gato", "the cat")], valid=[], test=[])
    >>> corpus.sizes()
    {'train': 1, 'valid': 0, 'test': 0}
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    name: str = ""
    skipped_lines: int = 0
    version: str = ""
    vocab_pairs: list[Pair] | None = None
    file_sha256: dict[str, str] = dataclasses.field(default_factory=dict)

    def pairs_for_vocabulary(self):
        """The pairs to learn the vocabulary from: `vocab_pairs`, else `train`."""
        return self.train if self.vocab_pairs is None else self.vocab_pairs

    def sizes(self) -> dict[str, int]:
        """Returns the number of pairs in each split, as `{"train": n, ...}`."""
        return {"train": len(self.train), "valid": len(self.valid), "test": len(self.test)}

    def __repr__(self) -> str:  # The default repr would print every pair.
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes().items())
        return f"Corpus({sizes}, name={self.name!r})"
