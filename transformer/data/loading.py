"""One entry point that picks the corpus: the toy grammar, TFDS, or your TSV files,
and the fingerprint of what a run read (`data_fingerprint`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from transformer.data.corpus import Corpus, DataError, Pair
from transformer.data.source import DATASETS, TOY, CorpusSource
from transformer.data.splits import Reservoir
from transformer.data.streamed import file_sha256, stream_tsv_corpus
from transformer.data.tfds_ted import load_ted_hrlr
from transformer.data.toy import generate_toy_corpus
from transformer.data.tsv import load_tsv_corpus

__all__ = ["DATASETS", "TOY", "data_fingerprint", "load_corpus", "read_training_corpus",
           "training_corpus"]


def load_corpus(source: CorpusSource | None = None) -> Corpus:
    """Loads the corpus a `CorpusSource` names, into memory.

    Your own TSV file (`source.data`) wins over `source.dataset`. Otherwise
    `source.dataset` is `"toy"` (the generated corpus, offline) or
    `"ted_hrlr_translate/pt_to_en"` (TFDS, downloaded only if
    `source.download`).

    Args:
        source: the corpus and how to read it; `CorpusSource()` (the toy
            corpus) if None.

    Returns:
        A `Corpus`.

    Raises:
        DataError: bad TSV files, an unknown dataset, or TFDS data that is
            missing (one line each).

    Example:

    ```python
    corpus = load_corpus()  # the toy corpus
    corpus = load_corpus(CorpusSource(data="por.tsv", source_column=1, target_column=0))
    ```
    """
    source = CorpusSource() if source is None else source
    if source.is_tsv:
        return load_tsv_corpus(source)
    if source.valid is not None or source.test is not None:
        raise DataError(
            "Validation or test files were given without a training file; pass the "
            "training pairs too (--data FILE.tsv)."
        )
    if source.dataset == TOY:
        return generate_toy_corpus(seed=source.seed, n_train=source.n_train,
                                   n_valid=source.n_valid, n_test=source.n_test)
    if source.dataset == "ted_hrlr_translate/pt_to_en":
        return load_ted_hrlr(data_dir=source.data_dir, download=source.download)
    raise DataError(
        f"Received an invalid value for argument `dataset`, expected one of {list(DATASETS)} "
        f"(or your own file with --data FILE.tsv). Received: dataset={source.dataset!r}"
    )


def read_training_corpus(source: CorpusSource, record_dir=None) -> Corpus:
    """The corpus a run trains on: `source`'s dataset or TSV files, with its
    held-out limit (`max_held_out`) and vocabulary sample (`vocab_sample`).

    A TSV corpus is streamed (`transformer.data.streamed.stream_tsv_corpus`,
    its scan recorded in `record_dir`), so that memory does not grow with it;
    the toy and TFDS corpora are lists, sampled for the vocabulary the same way.
    """
    if source.is_tsv:
        return stream_tsv_corpus(source, record_dir=record_dir)
    corpus = load_corpus(source)
    sample = Reservoir(source.vocab_sample, source.seed)
    for pair in corpus.train:
        sample.add(pair)
    corpus.vocab_pairs = sample.items()
    return corpus


def training_corpus(config, download=None, record_dir=None) -> Corpus:
    """`read_training_corpus` of the source a run's config names
    (`CorpusSource.of_config`); `download` overrides `config.download` (None
    keeps it)."""
    return read_training_corpus(CorpusSource.of_config(config, download), record_dir)


def pairs_sha256(pairs: list[Pair]) -> str:
    """The SHA-256 of sentence pairs as UTF-8 `source<TAB>target<LF>` lines."""
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(f"{source}\t{target}\n".encode())
    return digest.hexdigest()


def data_fingerprint(source, corpus: Corpus) -> dict[str, dict]:
    """The fingerprint of a run's inputs, one entry per input, which `config.json`
    keeps so that a resume on other data is refused
    (`transformer.rundir.check_data_unchanged`):

    - a TSV file: its path, size in bytes, the pairs read from it and the SHA-256
      of its content;
    - a TFDS dataset: its name, and for each split its name, the dataset's
      version, the pairs read and the SHA-256 of those pairs;
    - the toy corpus: its seed, the pairs of each split and their SHA-256 (a
      change of the generator changes it too).

    Args:
        source: the run's `transformer.data.source.CorpusSource`, or anything
            with its `data`, `valid`, `test`, `dataset` and `seed` (a `RunConfig`).
        corpus: the `Corpus` read from those inputs.

    Returns:
        A JSON-serializable dict: input -> its fingerprint.
    """
    if source.data:
        # Validation and test pairs given in no file of their own were read from `data`.
        read = {
            "data": len(corpus.train) + (0 if source.valid else len(corpus.valid))
            + (0 if source.test else len(corpus.test)),
            "valid": len(corpus.valid),
            "test": len(corpus.test),
        }
        # The files' digests were computed in the pass that read them, when it did.
        return {
            role: {"path": str(path), "bytes": Path(path).stat().st_size, "pairs": read[role],
                   "sha256": corpus.file_sha256.get(str(path)) or file_sha256(path)}
            for role, path in (("data", source.data), ("valid", source.valid),
                               ("test", source.test))
            if path
        }
    splits = {"train": corpus.train, "validation": corpus.valid, "test": corpus.test}
    if source.dataset == "toy":
        every = [pair for pairs in splits.values() for pair in pairs]
        return {"toy": {"seed": source.seed, "pairs": len(every),
                        "split_pairs": [len(pairs) for pairs in splits.values()],
                        "sha256": pairs_sha256(every)}}
    return {
        split: {"name": source.dataset, "split": split, "version": corpus.version,
                "pairs": len(pairs), "sha256": pairs_sha256(pairs)}
        for split, pairs in splits.items()
    }
