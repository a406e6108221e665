"""`CorpusSource`: which corpus to read and how, in one frozen value.

The loaders (`transformer.data.loading`, `tsv`, `streamed`) and a run's data
stage (`transformer.run.trainer`) take one `CorpusSource`, built once, instead
of a dozen arguments passed down from call to call: the dataset or the TSV
files, their columns, what to do with a bad line, the seed of the split and
of the vocabulary sample, and the limits of the held-out splits. Each of
these is named here, once, with its default. A run builds its source from its
config with `CorpusSource.of_config`.

>>> source = CorpusSource(data="por.tsv", source_column=1, target_column=0)
>>> source.is_tsv, source.valid_fraction, source.max_held_out
(True, 0.05, 2000)
"""

from __future__ import annotations

import dataclasses

from transformer.data.splits import MAX_HELD_OUT

TOY = "toy"
DATASETS = (TOY, "ted_hrlr_translate/pt_to_en")

# Pairs the vocabulary is learnt from, by default: a seeded sample of the training
# pairs (the whole of a smaller corpus). SentencePiece's time and memory grow
# with its text; past this many pairs its pieces barely change (BENCHMARKS.md,
# "Scaling up").
VOCAB_SAMPLE_PAIRS = 100_000


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """Which corpus to read, and how: every setting of the loaders, once.

    Attributes:
        dataset: `"toy"` (generated offline) or `"ted_hrlr_translate/pt_to_en"`
            (TFDS); ignored when `data` is given.
        data: a TSV file of `source<TAB>target` pairs: all pairs, or the
            training pairs when `valid` or `test` are given.
        valid: an optional TSV file of validation pairs (with `data`).
        test: an optional TSV file of test pairs (with `data`).
        source_column: the column (from 0) of the source sentence, in every file.
        target_column: the column (from 0) of the target sentence, in every file.
        skip_bad_lines: skip malformed TSV lines (counted in
            `Corpus.skipped_lines`) instead of stopping at the first.
        seed: the seed of the toy grammar, of the split of `data` and of the
            vocabulary sample.
        valid_fraction: the share of `data`'s distinct source sentences held
            out for validation when `valid` is not given.
        test_fraction: the same for the test split, when `test` is not given.
        max_held_out: the most source sentences of each split held out of
            `data`; 0 for no limit.
        vocab_sample: the most training pairs the vocabulary is learnt from,
            a seeded sample (`Corpus.vocab_pairs`); 0 for all of them.
        data_dir: the TFDS data directory (TFDS's default if None).
        download: let TFDS download a dataset that is not on disk.
        n_train: training pairs of the toy corpus.
        n_valid: validation pairs of the toy corpus.
        n_test: test pairs of the toy corpus.
    """

    dataset: str = TOY
    data: str | None = None
    valid: str | None = None
    test: str | None = None
    source_column: int = 0
    target_column: int = 1
    skip_bad_lines: bool = False
    seed: int = 0
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    max_held_out: int = MAX_HELD_OUT
    vocab_sample: int = VOCAB_SAMPLE_PAIRS
    data_dir: str | None = None
    download: bool = False
    n_train: int = 20000
    n_valid: int = 1000
    n_test: int = 1000

    @property
    def is_tsv(self) -> bool:
        """Whether the pairs come from the user's TSV files (`data`)."""
        return self.data is not None

    @classmethod
    def of_config(cls, config, download: bool | None = None) -> CorpusSource:
        """The source a run's config names (a `transformer.run.config.RunConfig`,
        or anything with its data fields); `download` overrides `config.download`
        (None keeps it). The toy corpus keeps its default sizes."""
        return cls(
            dataset=config.dataset, data=config.data, valid=config.valid, test=config.test,
            source_column=config.source_column, target_column=config.target_column,
            skip_bad_lines=config.skip_bad_lines, seed=config.seed,
            max_held_out=config.max_held_out, vocab_sample=config.vocab_sample,
            data_dir=config.tfds_data_dir,
            download=config.download if download is None else download,
        )
