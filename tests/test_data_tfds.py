"""Tests of transformer.data.tfds_ted: the tutorial's dataset, offline with mock data."""

from __future__ import annotations

import pytest
import tensorflow_datasets as tfds

from transformer.data.corpus import DataError
from transformer.data.tfds_ted import TED_HRLR_PT_EN, load_ted_hrlr


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
        load_ted_hrlr(data_dir="/nowhere", download=False)
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
