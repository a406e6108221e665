"""One entry point that picks the corpus: the toy grammar, TFDS, or your TSV files."""

from __future__ import annotations

from transformer.data.corpus import Corpus, DataError
from transformer.data.splits import Reservoir
from transformer.data.streamed import stream_tsv_corpus
from transformer.data.tfds_ted import load_ted_hrlr
from transformer.data.toy import generate_toy_corpus
from transformer.data.tsv import load_tsv_corpus

TOY = "toy"
DATASETS = (TOY, "ted_hrlr_translate/pt_to_en")


def load_corpus(
    dataset: str = TOY,
    data=None,
    valid=None,
    test=None,
    source_column: int = 0,
    target_column: int = 1,
    skip_bad_lines: bool = False,
    seed: int = 0,
    data_dir=None,
    download: bool = False,
    n_train: int = 20000,
    n_valid: int = 1000,
    n_test: int = 1000,
) -> Corpus:
    """Loads the corpus that `train.py` was asked for.

    Your own TSV file (`data`) wins over `dataset`. Otherwise `dataset` is
    `"toy"` (the generated corpus, offline) or
    `"ted_hrlr_translate/pt_to_en"` (TFDS, downloaded only if `download`).

    Args:
        dataset: `"toy"` or `"ted_hrlr_translate/pt_to_en"`; ignored when
            `data` is given.
        data: a TSV file of `source<TAB>target` pairs (all pairs, or the
            training pairs if `valid`/`test` are given).
        valid: an optional TSV file of validation pairs (with `data`).
        test: an optional TSV file of test pairs (with `data`).
        source_column: the TSV column (from 0) of the source sentence.
        target_column: the TSV column (from 0) of the target sentence.
        skip_bad_lines: skip malformed TSV lines instead of stopping.
        seed: the seed of the toy grammar and of the TSV split.
        data_dir: the TFDS data directory (TFDS's default if None).
        download: let TFDS download a missing dataset.
        n_train: training pairs of the toy corpus.
        n_valid: validation pairs of the toy corpus.
        n_test: test pairs of the toy corpus.

    Returns:
        A `Corpus`.

    Raises:
        DataError: bad TSV files, an unknown dataset, or TFDS data that is
            missing (one line each).

    Example:

    ```python
    corpus = load_corpus()  # the toy corpus
    corpus = load_corpus(data="por.tsv", source_column=1, target_column=0)
    ```
    """
    if data is not None:
        return load_tsv_corpus(
            data,
            valid_path=valid,
            test_path=test,
            source_column=source_column,
            target_column=target_column,
            skip_bad_lines=skip_bad_lines,
            seed=seed,
        )
    if valid is not None or test is not None:
        raise DataError(
            "Validation or test files were given without a training file; pass the "
            "training pairs too (--data FILE.tsv)."
        )
    if dataset == TOY:
        return generate_toy_corpus(seed=seed, n_train=n_train, n_valid=n_valid, n_test=n_test)
    if dataset == "ted_hrlr_translate/pt_to_en":
        return load_ted_hrlr(data_dir=data_dir, download=download)
    raise DataError(
        f"Received an invalid value for argument `dataset`, expected one of {list(DATASETS)} "
        f"(or your own file with --data FILE.tsv). Received: dataset={dataset!r}"
    )


def training_corpus(config, download=None, record_dir=None) -> Corpus:
    """The corpus a run's config names: its dataset or TSV files, columns, seed,
    held-out limit (`max_held_out`) and vocabulary sample (`vocab_sample`).

    `config` is a `transformer.run.config.RunConfig` (or anything with its
    fields); `download` overrides `config.download` (None keeps it). A TSV
    corpus is streamed (`transformer.data.streamed.stream_tsv_corpus`, its
    scan recorded in `record_dir`), so that memory does not grow with it;
    the toy and TFDS corpora are lists, sampled for the vocabulary the same way.
    """
    if config.data is not None:
        return stream_tsv_corpus(
            config.data, config.valid, config.test, config.source_column,
            config.target_column, config.skip_bad_lines, config.seed,
            max_held_out=config.max_held_out, vocab_sample=config.vocab_sample,
            record_dir=record_dir)
    corpus = load_corpus(
        dataset=config.dataset,
        valid=config.valid,
        test=config.test,
        seed=config.seed,
        data_dir=config.tfds_data_dir,
        download=config.download if download is None else download,
    )
    sample = Reservoir(config.vocab_sample, config.seed)
    for pair in corpus.train:
        sample.add(pair)
    corpus.vocab_pairs = sample.items()
    return corpus
