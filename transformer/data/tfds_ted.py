"""The tutorial's dataset: TED talk transcripts, Portuguese to English, through TFDS.

`ted_hrlr_translate/pt_to_en` has about 51,800 training, 1,190 validation and
1,800 test pairs (Qi et al., 2018). TFDS reads it from its data directory
(`~/tensorflow_datasets` by default) and downloads it only when asked to.
When the data is neither there nor downloadable (no network, or the upstream
archive gone), `load_ted_hrlr` raises a one-line `DataError` that says so and
names the alternative: your own corpus with `--data FILE.tsv`.
"""

from __future__ import annotations

import logging
import os

from transformer.data.corpus import Corpus, DataError, Pair

logger = logging.getLogger(__name__)

TED_HRLR_PT_EN = "ted_hrlr_translate/pt_to_en"
ALTERNATIVE = "use your own parallel text instead with --data FILE.tsv (source<TAB>target lines)"


def _default_data_dir() -> str:
    return os.environ.get(
        "TFDS_DATA_DIR", os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
    )


def _one_line(error: BaseException) -> str:
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def load_tfds_translation(
    name: str = TED_HRLR_PT_EN,
    data_dir=None,
    download: bool = False,
    splits: tuple[str, str, str] = ("train", "validation", "test"),
) -> Corpus:
    """Loads a TFDS translation dataset with `as_supervised=True` as a `Corpus`.

    Args:
        name: the TFDS name, e.g. `"ted_hrlr_translate/pt_to_en"`.
        data_dir: the TFDS data directory; TFDS's default if None.
        download: download and prepare the data if it is missing (needs
            network access). Nothing is downloaded otherwise.
        splits: the TFDS splits that become train, valid and test.

    Returns:
        A `Corpus` of `(source, target)` strings, in the order of the
        dataset's supervised keys (Portuguese, English for pt_to_en).

    Raises:
        DataError: the data is not there and not downloaded, or the download
            failed; the one-line message names `--data FILE.tsv`.
    """
    import tensorflow_datasets as tfds

    where = os.fspath(data_dir) if data_dir is not None else _default_data_dir()
    try:
        datasets, info = tfds.load(
            name,
            split=list(splits),
            as_supervised=True,
            data_dir=None if data_dir is None else os.fspath(data_dir),
            download=download,
            with_info=True,
        )
    except Exception as error:  # TFDS raises many types: AssertionError, OSError, ...
        if not download:
            raise DataError(
                f"Dataset {name} is not available: no prepared data in {where} and downloading "
                f"was not asked for (download=True needs network access); {ALTERNATIVE}."
            ) from None
        raise DataError(
            f"Dataset {name} could not be downloaded to {where} ({_one_line(error)}); "
            f"{ALTERNATIVE}."
        ) from None

    splits_pairs: list[list[Pair]] = []
    for split, dataset in zip(splits, datasets, strict=True):
        pairs: list[Pair] = []
        try:
            for sources, targets in tfds.as_numpy(dataset.batch(4096)):
                pairs.extend(
                    (source.decode("utf-8"), target.decode("utf-8"))
                    for source, target in zip(sources, targets, strict=True)
                )
        except Exception as error:
            raise DataError(
                f"Dataset {name}: reading split {split!r} from {where} failed "
                f"({_one_line(error)}); {ALTERNATIVE}."
            ) from None
        splits_pairs.append(pairs)
    train, valid, test = splits_pairs
    logger.info("Loaded %s: %d/%d/%d pairs.", name, len(train), len(valid), len(test))
    return Corpus(train=train, valid=valid, test=test, name=name, version=str(info.version))


def load_ted_hrlr(data_dir=None, download: bool = False) -> Corpus:
    """Loads the tutorial's `ted_hrlr_translate/pt_to_en` (Portuguese to English).

    Args:
        data_dir: the TFDS data directory; TFDS's default
            (`~/tensorflow_datasets`) if None.
        download: download it if missing (needs network access).

    Returns:
        A `Corpus` of `(portuguese, english)` pairs: TFDS's train,
        validation and test splits.

    Raises:
        DataError: the data is missing and not downloaded, or the download
            failed; the message names `--data FILE.tsv` as the alternative.

    Example:

    ```python
    corpus = load_ted_hrlr()  # DataError on a machine without the data
    corpus.train[0]  # ('e quando melhoramos a procura , ...', 'and when you improve ...')
    ```
    """
    return load_tfds_translation(TED_HRLR_PT_EN, data_dir=data_dir, download=download)
