"""Tests of transformer.data.loading: load_corpus picks toy, TSV or TFDS."""

from __future__ import annotations

import pytest

import transformer.data as data
from transformer.data import DataError, load_corpus
from transformer.data.source import CorpusSource


def test_default_is_the_toy_corpus():
    corpus = load_corpus(CorpusSource(n_train=100, n_valid=10, n_test=10, seed=3))
    assert corpus.sizes() == {"train": 100, "valid": 10, "test": 10}
    assert corpus.name == "toy(seed=3)"
    assert corpus.test == data.generate_toy_corpus(3, 100, 10, 10).test


def test_tsv_file_wins_over_dataset(tmp_path):
    path = tmp_path / "mine.tsv"
    path.write_text("".join(f"en {i}\tpt {i}\tattribution\n" for i in range(100)), "utf-8")
    corpus = load_corpus(CorpusSource(dataset="toy", data=path, source_column=1, target_column=0,
                                      seed=2))
    assert corpus.sizes() == {"train": 90, "valid": 5, "test": 5}
    assert corpus.train[0][0].startswith("pt ")
    valid = tmp_path / "valid.tsv"
    valid.write_text("a\tb\tc\n", "utf-8")
    corpus = load_corpus(CorpusSource(data=path, valid=valid, source_column=1, target_column=0))
    assert corpus.valid == [("b", "a")]


def test_errors():
    with pytest.raises(
        DataError, match=r"`dataset`, expected one of \['toy', 'ted_hrlr_translate/pt_to_en'\]"
    ):
        load_corpus(CorpusSource(dataset="wmt99"))
    with pytest.raises(DataError, match="without a training file"):
        load_corpus(CorpusSource(valid="v.tsv"))
    with pytest.raises(DataError, match="nope.tsv: no such file"):
        load_corpus(CorpusSource(data="nope.tsv"))


def test_ted_without_data_names_the_alternative(tmp_path):
    with pytest.raises(DataError, match="--data FILE.tsv"):
        load_corpus(CorpusSource(dataset="ted_hrlr_translate/pt_to_en", data_dir=tmp_path))
