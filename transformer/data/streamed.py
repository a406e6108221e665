"""A TSV corpus of any size, read as a stream: memory does not grow with it.

`stream_tsv_corpus` reads the training file once (the scan) and keeps, per
pair, only the 8-byte key that places it in a split
(`transformer.data.splits`). In that one pass it also fingerprints the file
(SHA-256), draws the seeded sample the vocabulary is learnt from, and keeps
the few pairs that may be held out. The `Corpus` it returns holds the
validation and test pairs as lists (a few thousand at most) and the training
pairs as `SplitPairs`, which streams them from the file again whenever it is
iterated (to tokenize them once, or to draw subword segmentations), keeping
those whose mask (one byte a pair) says they train.

With a `record_dir`, the scan is recorded there (`corpus.json`, the
held-out pairs as `valid.tsv` and `test.tsv`, and which pairs of the file
train as a bit a pair, `train_pairs.npy`), and a later call on the same
file and settings (a resumed run) reads the record instead of scanning:
only the file's SHA-256 is computed again, to check that it is unchanged.
"""

from __future__ import annotations

import array
import functools
import hashlib
import logging
import os
import time
from pathlib import Path

import numpy as np

from transformer import rundir
from transformer.data.corpus import Corpus, Pair
from transformer.data.source import CorpusSource
from transformer.data.splits import Reservoir, held_out_limits, split_key
from transformer.data.tsv import (
    TsvFile,
    TsvStats,
    check_tsv_read,
    read_tsv_with_stats,
    warn_shared_sources,
    write_tsv,
)

logger = logging.getLogger(__name__)

# The record of a scan in `record_dir`, and its format.
RECORD_FILE = "corpus.json"
RECORD_FORMAT = 2
_HELD_OUT_FILES = {"valid": "valid.tsv", "test": "test.tsv"}
_NAMES = {"valid": "validation", "test": "test"}
_TRAIN_MASK_FILE = "train_pairs.npy"

_CHUNK_BYTES = 1 << 20
# The pairs kept while scanning, as candidates for the held-out splits: this many
# times the expected held-out pairs, and at least _MIN_CANDIDATES.
_CANDIDATE_MARGIN = 4
_MIN_CANDIDATES = 1000


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class SplitPairs:
    """The pairs of one split of a TSV file, streamed from the file on every
    iteration; `len` is their number.

    Args:
        tsv: the `TsvFile`.
        mask: bool `(pairs of the file,)`, True for the pairs of the split
            (one byte a pair); None for every pair, `count` of them.
        count: the number of pairs, when `mask` is None.
    """

    def __init__(self, tsv: TsvFile, mask: np.ndarray | None = None, count: int = 0):
        self.tsv, self.mask = tsv, mask
        self.count = int(mask.sum()) if mask is not None else count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        if self.mask is None:
            yield from self.tsv.pairs()
            return
        mask = self.mask
        for index, pair in enumerate(self.tsv.pairs()):
            if mask[index]:
                yield pair

    def identity(self) -> dict:
        """What these pairs are, for a cache of them: the scan's format and a
        digest of which pairs of the file they are."""
        mask = b"" if self.mask is None else np.packbits(self.mask).tobytes()
        return {"scan_format": RECORD_FORMAT, "pairs": self.count,
                "mask_sha256": hashlib.sha256(mask).hexdigest()}

    def __repr__(self) -> str:
        return f"SplitPairs({self.tsv.path!r}, {self.count} pairs)"


def stream_tsv_corpus(source: CorpusSource, record_dir=None) -> Corpus:
    """Loads a TSV corpus of any size in one streaming pass (see the module docstring).

    The splits are those of `transformer.data.tsv.load_tsv_corpus` for the
    same source; the training pairs stay in the file.

    Args:
        source: the `CorpusSource`, as for `load_tsv_corpus`; its
            `vocab_sample` is the most training pairs in `Corpus.vocab_pairs`,
            a seeded sample (0 for all of them, in memory).
        record_dir: where to record the scan, and to find a record of it.

    Returns:
        A `Corpus` whose `train` is a `SplitPairs`, with `vocab_pairs` (None
        when read from a record) and `file_sha256`.

    Raises:
        DataError: as `load_tsv_corpus`.
    """
    tsv = TsvFile(str(source.data), source)
    given = {}
    sha256 = {}
    for split, path in (("valid", source.valid), ("test", source.test)):
        if path is not None:
            digest = hashlib.sha256()
            given[split], _ = TsvFile(path, source).read(digest)
            sha256[str(path)] = digest.hexdigest()
    fractions = {"valid": 0 if "valid" in given else source.valid_fraction,
                 "test": 0 if "test" in given else source.test_fraction}
    # What the record of a scan is checked against: its format is RECORD_FORMAT's.
    settings = {"format": RECORD_FORMAT, "path": tsv.path, "bytes": os.path.getsize(tsv.path),
                "columns": [source.source_column, source.target_column],
                "skip_bad_lines": source.skip_bad_lines, "seed": source.seed,
                "fractions": fractions, "max_held_out": source.max_held_out}
    record = _read_record(record_dir, settings)
    if record is not None:
        corpus = _corpus_of_record(tsv, record, record_dir)
    else:
        corpus = _scan(tsv, settings, given)
        if record_dir is not None:
            _write_record(record_dir, settings, corpus)
    for split, pairs in given.items():
        setattr(corpus, split, pairs)
    corpus.file_sha256.update(sha256)
    corpus.name = tsv.path
    return corpus


def _scan(tsv: TsvFile, settings: dict, given: dict) -> Corpus:
    """The one pass over the training file: keys, fingerprint, sample, candidates."""
    started = time.perf_counter()
    vocab_sample = tsv.source.vocab_sample
    fractions, seed = settings["fractions"], settings["seed"]
    splitting = any(fractions.values())
    bound = _candidate_bound(tsv.path, fractions, settings["max_held_out"]) if splitting else 0
    stats, digest = TsvStats(path=tsv.path), hashlib.sha256()
    keys = array.array("Q")
    sample = Reservoir(vocab_sample, seed)
    candidates: list[tuple[int, Pair]] = []
    given_sources = {source for pairs in given.values() for source, _ in pairs}
    shared_sources = set()
    for pair in tsv.pairs(stats, digest):
        key = split_key(pair[0], seed) if splitting else None
        if splitting:
            keys.append(key)
            if key < bound:
                candidates.append((key, pair))
        if given_sources and pair[0] in given_sources:
            shared_sources.add(pair[0])
        sample.add((key, pair))
    check_tsv_read(stats)
    warn_shared_sources([(source, "") for source in shared_sources],
                        {_NAMES[split]: pairs for split, pairs in given.items()})
    limits = train = None
    held = {"valid": [], "test": []}
    if splitting:
        keys = np.frombuffer(keys, np.uint64)
        limits = held_out_limits(keys, fractions["valid"], fractions["test"],
                                 settings["max_held_out"])
        # Keys are below 2**64 - 1 in practice; a limit of 2**64 would hold out every pair.
        train = keys >= np.uint64(min(limits.valid_below, (1 << 64) - 1))
        if limits.valid_below <= bound:
            for key, pair in candidates:
                split = limits.split_of(key)
                if split != "train":
                    held[split].append(pair)
        else:  # more pairs share source sentences than the bound allowed for: read again
            tests = keys < np.uint64(limits.test_below)
            held["test"] = list(SplitPairs(tsv, tests))
            held["valid"] = list(SplitPairs(tsv, ~train & ~tests))
        del keys
    vocab_pairs = [pair for key, pair in sample.items()
                   if limits is None or limits.split_of(key) == "train"]
    held_out = ", ".join(
        f"{len(held[split])} {_NAMES[split]} pairs held out" for split in held
        if fractions[split]) or "nothing held out"
    logger.info(
        "Scanned %s in %.1f s: %d pairs, %s (at most %d source sentences each); the "
        "vocabulary is learnt from %d training pairs%s.", tsv.path, time.perf_counter() - started,
        stats.pairs, held_out, settings["max_held_out"], len(vocab_pairs),
        " (a seeded sample)" if vocab_sample and sample.seen > vocab_sample else "")
    return Corpus(train=SplitPairs(tsv, train, stats.pairs), valid=held["valid"],
                  test=held["test"], skipped_lines=stats.skipped, vocab_pairs=vocab_pairs,
                  file_sha256={tsv.path: digest.hexdigest()})


def _candidate_bound(path: str, fractions: dict, max_held_out: int) -> int:
    """A key below which the held-out pairs almost surely fall, from the lines the
    file's first megabyte suggests it has (a wrong guess costs a second pass)."""
    with open(path, "rb") as handle:
        head = handle.read(_CHUNK_BYTES)
    line_bytes = len(head) / max(1, head.count(b"\n"), head.count(b"\r"))
    lines = max(1.0, os.path.getsize(path) / max(line_bytes, 1.0))
    expected = sum(min(fraction * lines, max_held_out or lines) if fraction else 0
                   for fraction in fractions.values())
    share = max(_CANDIDATE_MARGIN * expected, _MIN_CANDIDATES) / lines
    return min(1 << 64, int(share * (1 << 64)))


def _read_record(record_dir, settings: dict) -> dict | None:
    """The recorded scan in `record_dir` if it is of this file (same bytes) and settings."""
    if record_dir is None or not (Path(record_dir) / RECORD_FILE).is_file():
        return None
    record = rundir.read_json(Path(record_dir) / RECORD_FILE)
    if not isinstance(record, dict) or record.get("settings") != settings:
        return None
    started = time.perf_counter()
    if file_sha256(settings["path"]) != record.get("sha256"):
        logger.info("%s changed since it was scanned: scanning it again.", settings["path"])
        return None
    logger.info("Read the scan of %s from %s (its SHA-256 checked in %.1f s).",
                settings["path"], record_dir, time.perf_counter() - started)
    return record


def _write_record(record_dir, settings: dict, corpus: Corpus) -> None:
    record_dir = Path(record_dir)
    record_dir.mkdir(parents=True, exist_ok=True)
    for split, name in _HELD_OUT_FILES.items():  # replaced, never written into: a
        # worker of a multi-worker run may hold the chief's files as hard links
        rundir.replace_atomically(record_dir / name,
                                  functools.partial(write_tsv, getattr(corpus, split)))
    mask = corpus.train.mask
    if mask is not None:  # a bit a pair
        def write(path):
            with open(path, "wb") as handle:  # a handle: np.save would add ".npy" to a name
                np.save(handle, np.packbits(mask))

        rundir.replace_atomically(record_dir / _TRAIN_MASK_FILE, write)
    rundir.write_json_atomic(record_dir / RECORD_FILE, {
        "settings": settings,
        "sha256": corpus.file_sha256[settings["path"]],
        "pairs": len(corpus.train) + len(corpus.valid) + len(corpus.test),
        "train_pairs": len(corpus.train),
        "skipped_lines": corpus.skipped_lines,
        "split": mask is not None,
    })


def _corpus_of_record(tsv: TsvFile, record: dict, record_dir) -> Corpus:
    held = {}
    for split, name in _HELD_OUT_FILES.items():
        path = Path(record_dir) / name
        held[split] = read_tsv_with_stats(path)[0] if path.stat().st_size else []
    mask = None
    if record["split"]:
        bits = np.load(Path(record_dir) / _TRAIN_MASK_FILE)
        mask = np.unpackbits(bits, count=record["pairs"]).astype(bool)
    return Corpus(train=SplitPairs(tsv, mask, record["train_pairs"]), valid=held["valid"],
                  test=held["test"], skipped_lines=record["skipped_lines"],
                  file_sha256={tsv.path: record["sha256"]})
