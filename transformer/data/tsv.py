"""Your own parallel text: `source<TAB>target` files.

The format is one sentence pair per line, UTF-8, columns separated by tabs, as
in the Tatoeba/ManyThings downloads (`por.txt`: English, Portuguese, and an
attribution column). Which columns hold the source and the target is a
parameter; extra columns are ignored and blank lines are skipped.

A malformed line (too few columns, an empty sentence, bytes that are not
UTF-8) stops reading with a one-line `DataError` that names the file and the
line, e.g. ``corpus.tsv:17: expected at least 2 tab-separated columns, found
1``, unless `skip_bad_lines=True`: then bad lines are skipped, and their
number is logged and returned by `read_tsv_with_stats`. A missing file, a
directory, an empty file and a binary file are errors too.

Lines may end in `\\n`, `\\r\\n` or a lone `\\r` (old Mac files), mixed in one
file too, as Python's universal newlines read them; line numbers count them
so. Files are read in chunks, so a large corpus costs only the memory of its
sentence pairs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from transformer._validation import check_non_negative_int
from transformer.data.corpus import Corpus, DataError, Pair
from transformer.data.source import CorpusSource
from transformer.data.splits import MAX_HELD_OUT, held_out_limits, split_key

logger = logging.getLogger(__name__)

# A line longer than this is not a sentence pair; reading stops with an error
# (or skips the line) instead of loading it into memory.
MAX_LINE_BYTES = 1 << 20

# Bytes read at a time; lines are split from these chunks.
_READ_BYTES = 1 << 16
# A line ends in LF, CR LF or a lone CR.
_LINE_END = re.compile(rb"\r\n|\r|\n")

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"


@dataclasses.dataclass
class TsvStats:
    """What `read_tsv_with_stats` found in a file.

    Attributes:
        path: the file read.
        lines: lines read, blank ones included.
        pairs: sentence pairs returned.
        blank: blank lines skipped.
        skipped: bad lines skipped (only with `skip_bad_lines=True`).
        first_bad_line: a message about the first bad line skipped, if any.
    """

    path: str
    lines: int = 0
    pairs: int = 0
    blank: int = 0
    skipped: int = 0
    first_bad_line: str | None = None


def _open_checked(path: Path):
    """Opens `path` for binary reading, or raises a one-line DataError saying why not."""
    if not path.exists():
        raise DataError(f"{path}: no such file.")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a TSV file of source<TAB>target lines.")
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error}).") from None
    head = handle.read(4)
    handle.seek(0)
    if head.startswith(_GZIP_MAGIC):
        handle.close()
        raise DataError(f"{path}: is a gzip archive, not text; decompress it first (gunzip).")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        handle.close()
        raise DataError(
            f"{path}: is UTF-16 text (it starts with a UTF-16 byte-order mark); convert it "
            "to UTF-8, e.g. iconv -f UTF-16 -t UTF-8."
        )
    if head.startswith(_ZIP_MAGIC):
        handle.close()
        raise DataError(f"{path}: is a zip archive, not text; extract the .txt/.tsv file first.")
    return handle


def _raw_lines(handle, digest=None) -> Iterator[bytes | None]:
    """The lines of a binary file without their ends (`\\n`, `\\r\\n` or `\\r`).

    A line longer than `MAX_LINE_BYTES` is yielded as None, and never held
    in memory whole. `digest`, a `hashlib` hash, is fed every chunk read.
    """
    pending, too_long = b"", False
    while True:
        chunk = handle.read(_READ_BYTES)
        if digest is not None:
            digest.update(chunk)
        data = pending + chunk
        if b"\r" in data:
            # A CR that ends the chunk may be the first half of a CR LF: keep it.
            end = len(data) - 1 if chunk and data.endswith(b"\r") else len(data)
            start = 0
            for match in _LINE_END.finditer(data, 0, end):
                line = data[start : match.start()]
                yield None if too_long or len(line) > MAX_LINE_BYTES else line
                too_long, start = False, match.end()
            pending = data[start:]
        else:  # LF ends alone, the usual case: split in C
            lines = data.split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield None if too_long or len(line) > MAX_LINE_BYTES else line
                too_long = False
        if not chunk:
            if pending:
                yield None if too_long or len(pending) > MAX_LINE_BYTES else pending
            return
        if len(pending) > MAX_LINE_BYTES:  # drop the line's bytes, keep a last CR
            too_long, pending = True, pending[-1:] if pending.endswith(b"\r") else b""


def iter_tsv(path, source_column: int = 0, target_column: int = 1,
             skip_bad_lines: bool = False, stats: TsvStats | None = None,
             digest=None) -> Iterator[Pair]:
    """Streams the sentence pairs of a TSV file, one line at a time.

    What `read_tsv_with_stats` reads, without holding the pairs: memory is
    one chunk of the file, whatever its size. The checks that need the whole
    file (empty, no pairs) are `check_tsv_read`'s, once the stream is over.

    Args:
        path: the file (see `read_tsv_with_stats`).
        source_column: the column (from 0) holding the source sentence.
        target_column: the column (from 0) holding the target sentence.
        skip_bad_lines: skip malformed lines instead of raising.
        stats: a `TsvStats` to fill (lines, pairs, blank and skipped lines).
        digest: a `hashlib` hash that is fed every byte of the file, so that a
            run fingerprints its data in the pass that reads it.

    Yields:
        `(source, target)` pairs, stripped, in file order.

    Raises:
        DataError: as `read_tsv_with_stats`.
    """
    for name, column in (("source_column", source_column), ("target_column", target_column)):
        check_non_negative_int(name, column, error=DataError, note=" (columns count from 0)")
    if source_column == target_column:
        raise DataError(
            "Received invalid values for arguments `source_column` and `target_column`, "
            f"expected two different columns. Received: source_column={source_column}, "
            f"target_column={target_column}"
        )
    path = Path(os.fspath(path))
    stats = stats if stats is not None else TsvStats(path=str(path))
    needed = max(source_column, target_column) + 1

    def bad(number: int, message: str) -> None:
        full = f"{path}:{number}: {message}"
        if not skip_bad_lines:
            raise DataError(full)
        stats.skipped += 1
        if stats.first_bad_line is None:
            stats.first_bad_line = full

    with _open_checked(path) as handle:
        number = 0
        for raw in _raw_lines(handle, digest):
            number += 1
            stats.lines = number
            if raw is None:
                bad(number, f"line longer than {MAX_LINE_BYTES:,} bytes; is this a text corpus?")
                continue
            if b"\x00" in raw:
                bad(number, "contains NUL bytes; this looks like a binary file, not UTF-8 text")
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                bad(
                    number,
                    f"invalid UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of "
                    "the line); convert the file to UTF-8",
                )
                continue
            if number == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                stats.blank += 1
                continue
            columns = line.split("\t")
            if len(columns) < needed:
                bad(
                    number,
                    f"expected at least {needed} tab-separated columns, found {len(columns)}",
                )
                continue
            source = columns[source_column].strip()
            target = columns[target_column].strip()
            if not source or not target:
                side = "source" if not source else "target"
                column = source_column if not source else target_column
                bad(number, f"empty {side} sentence (column {column})")
                continue
            stats.pairs += 1
            yield source, target


def check_tsv_read(stats: TsvStats) -> None:
    """The checks of a whole file read by `iter_tsv`: a DataError for an empty
    file or one without pairs; a warning naming the skipped lines."""
    path = stats.path
    if stats.lines == 0:
        raise DataError(f"{path}: file is empty; expected lines of source<TAB>target.")
    if not stats.pairs:
        if stats.skipped:
            raise DataError(
                f"{path}: no valid sentence pairs; all {stats.skipped} non-blank lines are bad "
                f"(first: {stats.first_bad_line})."
            )
        raise DataError(f"{path}: no sentence pairs, only blank lines.")
    if stats.skipped:
        logger.warning(
            "Skipped %d bad line(s) of %s (first: %s).", stats.skipped, path, stats.first_bad_line
        )
    logger.info("Read %d pairs from %s.", stats.pairs, path)


def read_tsv_with_stats(
    path,
    source_column: int = 0,
    target_column: int = 1,
    skip_bad_lines: bool = False,
    digest=None,
) -> tuple[list[Pair], TsvStats]:
    """Reads sentence pairs from a TSV file and says what it skipped.

    Args:
        path: the file, UTF-8 (a byte-order mark is allowed), one
            `source<TAB>target` pair per line; `\\n`, `\\r\\n` or `\\r` line
            ends, mixed or not.
        source_column: the column (from 0) holding the source sentence.
        target_column: the column (from 0) holding the target sentence.
        skip_bad_lines: skip malformed lines (too few columns, an empty
            sentence, invalid UTF-8, NUL bytes, over-long lines) instead of
            raising; their number is logged and returned in the stats.
        digest: a `hashlib` hash fed every byte of the file (see `iter_tsv`).

    Returns:
        `(pairs, stats)`: the `(source, target)` pairs, stripped of
        surrounding whitespace, in file order, and a `TsvStats`.

    Raises:
        DataError: the file is missing, a directory, an archive, empty, holds
            no pairs, or has a bad line (without `skip_bad_lines`). The
            message is one line: ``corpus.tsv:17: expected at least 2
            tab-separated columns, found 1``.

    Example:

    ```python
    pairs, stats = read_tsv_with_stats("por.txt", source_column=1, target_column=0,
                                       skip_bad_lines=True)
    print(len(pairs), "pairs,", stats.skipped, "bad lines skipped")
    ```
    """
    stats = TsvStats(path=str(Path(os.fspath(path))))
    pairs = list(iter_tsv(path, source_column, target_column, skip_bad_lines, stats, digest))
    check_tsv_read(stats)
    return pairs, stats


@dataclasses.dataclass(frozen=True)
class TsvFile:
    """One TSV file of a corpus, read as its `CorpusSource` says (the columns,
    what to do with a bad line).

    Attributes:
        path: the file: the source's `data`, `valid` or `test`.
        source: the `CorpusSource` it belongs to.
    """

    path: str
    source: CorpusSource = CorpusSource()

    def pairs(self, stats: TsvStats | None = None, digest=None) -> Iterator[Pair]:
        """Streams the file's pairs (see `iter_tsv`)."""
        source = self.source
        return iter_tsv(self.path, source.source_column, source.target_column,
                        source.skip_bad_lines, stats, digest)

    def read(self, digest=None) -> tuple[list[Pair], TsvStats]:
        """All the file's pairs and what was skipped (see `read_tsv_with_stats`)."""
        source = self.source
        return read_tsv_with_stats(self.path, source.source_column, source.target_column,
                                   source.skip_bad_lines, digest)


def read_tsv(
    path,
    source_column: int = 0,
    target_column: int = 1,
    skip_bad_lines: bool = False,
) -> list[Pair]:
    """Reads `(source, target)` pairs from a TSV file.

    The same as `read_tsv_with_stats` without the stats; skipped lines are
    logged (a warning with their number and the first one).

    Args:
        path: the UTF-8 file, one `source<TAB>target` pair per line.
        source_column: the column (from 0) holding the source sentence.
        target_column: the column (from 0) holding the target sentence.
        skip_bad_lines: skip malformed lines instead of raising `DataError`.

    Returns:
        The list of `(source, target)` pairs.

    Example:

    ```python
    pairs = read_tsv("corpus.tsv")
    pairs[0]  # ('o gato preto', 'the black cat')
    ```
    """
    pairs, _ = read_tsv_with_stats(path, source_column, target_column, skip_bad_lines)
    return pairs


def write_tsv(pairs: Iterable[Pair], path) -> None:
    """Writes `(source, target)` pairs as UTF-8 `source<TAB>target` lines.

    Args:
        pairs: the sentence pairs. A tab or newline inside a sentence would
            break the format, so it is a `DataError`.
        path: the file to write (its directory must exist).

    Example:

    ```python
    write_tsv([("o gato", "the cat")], "tiny.tsv")
    ```
    """
    path = Path(os.fspath(path))
    lines = []
    for index, pair in enumerate(pairs):
        if len(pair) != 2:
            raise DataError(f"pair {index}: expected (source, target), got {len(pair)} items.")
        for side in pair:
            if not isinstance(side, str):
                raise DataError(f"pair {index}: expected strings, got {type(side).__name__}.")
            if "\t" in side or "\n" in side or "\r" in side:
                raise DataError(
                    f"pair {index}: a sentence contains a tab or a line break, which TSV "
                    f"cannot hold: {side!r}"
                )
        lines.append(f"{pair[0]}\t{pair[1]}\n")
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(lines)
    except OSError as error:
        raise DataError(f"{path}: cannot be written ({error.strerror or error}).") from None


def split_pairs(
    pairs: list[Pair],
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
    max_held_out: int = MAX_HELD_OUT,
) -> Corpus:
    """Splits pairs into training, validation and test sets, deterministically.

    Pairs are grouped by source sentence, and a group is never split, so a
    source sentence with several translations (common in Tatoeba) never shows
    up in two splits. Each split gets `round(fraction * distinct source
    sentences)` of them, at least one when the fraction is positive and at
    most `max_held_out`, chosen by a seeded hash of the sentence
    (`transformer.data.splits`): the same pairs and seed give the same split,
    and a file streamed by `transformer.data.streamed` splits the same way.

    Args:
        pairs: `(source, target)` pairs.
        valid_fraction: share of source sentences for validation, in [0, 1).
        test_fraction: share of source sentences for the test, in [0, 1).
        seed: the seed of the hash.
        max_held_out: the most source sentences of each held-out split; 0
            for no limit.

    Returns:
        A `Corpus`. Within each split, pairs keep their order in `pairs`.

    Example:

    >>> corpus = split_pairs([(f"s{i}", f"t{i}") for i in range(100)], 0.1, 0.1)
    >>> corpus.sizes()
    {'train': 80, 'valid': 10, 'test': 10}
    """
    keys = np.fromiter((split_key(source, seed) for source, _ in pairs), np.uint64, len(pairs))
    limits = held_out_limits(keys, valid_fraction, test_fraction, max_held_out)
    corpus = Corpus(train=[], valid=[], test=[])
    for key, pair in zip(keys.tolist(), pairs, strict=True):
        getattr(corpus, limits.split_of(key)).append(pair)
    return corpus


def load_tsv_corpus(source: CorpusSource) -> Corpus:
    """Loads a corpus from TSV files into memory, splitting off what is not given.

    With only `source.data`, validation and test pairs are split from it by
    `split_pairs`. With `source.valid` but no `source.test`, only a test split
    is taken from the training file, and the other way round. A corpus too
    large for memory is read by `transformer.data.streamed.stream_tsv_corpus`,
    which splits it the same way.

    Args:
        source: the files (`data`, `valid`, `test`), how to read them
            (columns, `skip_bad_lines`, counted in `Corpus.skipped_lines`) and
            how to split (`seed`, `valid_fraction`, `test_fraction`,
            `max_held_out`).

    Returns:
        A `Corpus` named after `source.data`.

    Example:

    ```python
    corpus = load_tsv_corpus(CorpusSource(data="por.txt", source_column=1, target_column=0))
    ```
    """
    skipped = 0

    def read(path) -> list[Pair]:
        nonlocal skipped
        pairs, stats = TsvFile(path, source).read()
        skipped += stats.skipped
        return pairs

    train = read(source.data)
    valid = read(source.valid) if source.valid is not None else None
    test = read(source.test) if source.test is not None else None
    corpus = split_pairs(
        train,
        valid_fraction=0 if valid is not None else source.valid_fraction,
        test_fraction=0 if test is not None else source.test_fraction,
        seed=source.seed,
        max_held_out=source.max_held_out,
    )
    if valid is not None:
        corpus.valid = valid
    if test is not None:
        corpus.test = test
    warn_shared_sources(corpus.train, {"validation": valid, "test": test})
    corpus.name = str(source.data)
    corpus.skipped_lines = skipped
    return corpus


def warn_shared_sources(train: Iterable[Pair], given: dict) -> None:
    """Warns when pairs of the given validation or test files (`given`: name ->
    pairs or None) have a source sentence that is also in `train`. Holds the
    given files' sources only, so `train` may be streamed."""
    given = {name: pairs for name, pairs in given.items() if pairs}
    if not given:
        return
    sources = {source for pairs in given.values() for source, _ in pairs}
    in_train = {source for source, _ in train if source in sources}
    for name, pairs in given.items():
        shared = sum(1 for source, _ in pairs if source in in_train)
        if shared:
            logger.warning(
                "%d of %d %s pairs have a source sentence that is also in the training "
                "data; scores on them will be optimistic.", shared, len(pairs), name)
