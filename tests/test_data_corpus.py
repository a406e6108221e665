"""Tests of transformer.data.corpus and of the package's lazy exports."""

from __future__ import annotations

import pytest

import transformer.data as data
from transformer.data import Corpus, DataError


def test_corpus_type_and_error_type():
    corpus = Corpus(train=[("a", "b")] * 3, valid=[], test=[("c", "d")], name="x")
    assert corpus.sizes() == {"train": 3, "valid": 0, "test": 1}
    assert repr(corpus) == "Corpus(train=3, valid=0, test=1, name='x')"
    assert corpus.skipped_lines == 0
    assert issubclass(DataError, ValueError)


def test_package_exports_everything_it_lists():
    for name in data.__all__:
        assert getattr(data, name) is not None
    assert "make_batches" in dir(data)
    with pytest.raises(AttributeError):
        data.no_such_name  # noqa: B018
