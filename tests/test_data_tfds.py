"""Tests of transformer.data.tfds_ted: the tutorial's dataset, offline with mock data."""

from __future__ import annotations

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from transformer.data.corpus import DataError
from transformer.data.tfds_ted import ALTERNATIVE, TED_HRLR_PT_EN, load_ted_hrlr

# What the mock's split and language are, in each sentence, and how many.
SPLIT_SIZES = {"train": 3, "validation": 2, "test": 1}


def labelled_splits(builder, split, **kwargs):
    """An `as_dataset_fn` for `tfds.testing.mock_data`: every sentence names its
    language and its TFDS split, so a swap of either shows in the corpus."""
    name = str(split)
    count = SPLIT_SIZES[name]
    return tf.data.Dataset.from_tensor_slices(
        {
            "pt": [f"pt {name} {i}" for i in range(count)],
            "en": [f"en {name} {i}" for i in range(count)],
        }
    )


def failing_split(bad_split):
    """An `as_dataset_fn` whose `bad_split` fails while being read, as a corrupt
    prepared file would."""

    def as_dataset(builder, split, **kwargs):
        name = str(split)

        def examples():
            yield {"pt": f"pt {name}", "en": f"en {name}"}
            if name == bad_split:
                raise OSError("corrupt record in shard 3\nsecond line")

        spec = tf.TensorSpec([], tf.string)
        return tf.data.Dataset.from_generator(examples, output_signature={"pt": spec, "en": spec})

    return as_dataset


def test_loads_the_three_splits_as_strings_with_mock_data():
    # USE_CODE: mock_data builds random examples from the builder's own feature
    # description (its Python code in tfds), so neither downloaded data nor the
    # dataset_info.json metadata files are needed.
    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = load_ted_hrlr()
    assert corpus.sizes() == {"train": 12, "valid": 12, "test": 12}
    assert corpus.name == TED_HRLR_PT_EN
    for split in (corpus.train, corpus.valid, corpus.test):
        for source, target in split:
            assert isinstance(source, str) and isinstance(target, str)


def test_mock_data_goes_through_tfds_load_with_the_tutorial_arguments(monkeypatch):
    calls = []
    real_load = tfds.load

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(tfds, "load", spy)
    with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = load_ted_hrlr(data_dir="/nowhere", download=False)
    assert corpus.version == str(tfds.builder(TED_HRLR_PT_EN).info.version)  # for resuming
    ((args, kwargs),) = calls
    assert args == (TED_HRLR_PT_EN,)
    assert kwargs["split"] == ["train", "validation", "test"]
    assert kwargs["as_supervised"] is True
    assert kwargs["download"] is False
    assert kwargs["data_dir"] == "/nowhere"


def test_missing_data_is_a_one_line_error_naming_the_alternative(tmp_path):
    with pytest.raises(DataError) as error:
        load_ted_hrlr(data_dir=tmp_path, download=False)
    message = str(error.value)
    assert "\n" not in message
    assert "ted_hrlr_translate/pt_to_en is not available" in message
    assert str(tmp_path) in message
    assert "--data FILE.tsv" in message


def test_failed_download_is_a_one_line_error(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise ConnectionError("Failed to establish a new connection\nmore detail")

    monkeypatch.setattr(tfds, "load", offline)
    with pytest.raises(DataError) as error:
        load_ted_hrlr(data_dir=tmp_path, download=True)
    message = str(error.value)
    assert "\n" not in message
    assert "could not be downloaded" in message
    assert "ConnectionError: Failed to establish a new connection" in message
    assert "--data FILE.tsv" in message


def test_portuguese_is_the_source_and_each_tfds_split_lands_in_its_place():
    with tfds.testing.mock_data(
        policy=tfds.testing.MockPolicy.USE_CODE, as_dataset_fn=labelled_splits
    ):
        corpus = load_ted_hrlr()
    assert corpus.train == [(f"pt train {i}", f"en train {i}") for i in range(3)]
    assert corpus.valid == [(f"pt validation {i}", f"en validation {i}") for i in range(2)]
    assert corpus.test == [("pt test 0", "en test 0")]
    assert corpus.sizes() == {"train": 3, "valid": 2, "test": 1}


@pytest.mark.parametrize("bad_split", ["train", "validation", "test"])
def test_a_split_that_fails_while_read_is_a_one_line_error_naming_it(bad_split):
    with tfds.testing.mock_data(
        policy=tfds.testing.MockPolicy.USE_CODE, as_dataset_fn=failing_split(bad_split)
    ):
        with pytest.raises(DataError) as error:
            load_ted_hrlr(data_dir="/data/tfds")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        f"Dataset {TED_HRLR_PT_EN}: reading split {bad_split!r} from /data/tfds failed ("
    ), message
    # TensorFlow wraps the generator's error; its first line is kept, not the rest.
    assert "OSError: corrupt record in shard 3)" in message
    assert "second line" not in message
    assert message.endswith(f"; {ALTERNATIVE}.")
