"""Tests of transformer.data.tsv: reading, writing and splitting your own corpus."""

from __future__ import annotations

import gzip
import logging

import pytest

from transformer.data.corpus import DataError
from transformer.data.source import CorpusSource
from transformer.data.tsv import (
    MAX_LINE_BYTES,
    load_tsv_corpus,
    read_tsv,
    read_tsv_with_stats,
    split_pairs,
    write_tsv,
)


def _write(tmp_path, content: bytes | str, name: str = "corpus.tsv"):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def test_reads_pairs_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, "o gato\tthe cat\n\n  \no cão preto\tthe black dog\n")
    assert read_tsv(path) == [("o gato", "the cat"), ("o cão preto", "the black dog")]
    pairs, stats = read_tsv_with_stats(path)
    assert (stats.lines, stats.pairs, stats.blank, stats.skipped) == (4, 2, 2, 0)


def test_crlf_bom_whitespace_and_no_final_newline(tmp_path):
    path = _write(tmp_path, b"\xef\xbb\xbfN\xc3\xa3o\tNo\r\n  um gato \t a cat  \r\nfim\tend")
    assert read_tsv(path) == [("Não", "No"), ("um gato", "a cat"), ("fim", "end")]


@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"])
def test_cr_only_crlf_and_lf_files_read_the_same_pairs(tmp_path, end):
    """Old Mac files end lines in a lone CR; 600 pairs are 600 pairs in any convention."""
    pairs = [(f"frase {i}", f"sentence {i}") for i in range(600)]
    path = _write(tmp_path, "".join(f"{s}\t{t}{end}" for s, t in pairs))
    read, stats = read_tsv_with_stats(path)
    assert read == pairs
    assert (stats.lines, stats.pairs) == (600, 600)


def test_mixed_line_ends_and_a_cr_lf_split_across_reads(tmp_path, monkeypatch):
    from transformer.data import tsv

    content = "a\tb\rc\td\r\ne\tf\n\r\rg\th\r"
    path = _write(tmp_path, content)
    expected = [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h")]
    for read_bytes in (1, 2, 3, 5, 1 << 16):  # every CR LF straddles a read somewhere
        monkeypatch.setattr(tsv, "_READ_BYTES", read_bytes)
        pairs, stats = read_tsv_with_stats(path)
        assert pairs == expected, read_bytes
        assert (stats.lines, stats.blank) == (6, 2), read_bytes


@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_line_numbers_of_errors_count_cr_and_cr_lf_line_ends(tmp_path, end):
    path = _write(tmp_path, end.join(["o gato\tthe cat", "", "a\tb", "só uma coluna", "c\td"]))
    with pytest.raises(DataError, match=r"corpus.tsv:4: expected at least 2 tab-separated"):
        read_tsv(path)
    pairs, stats = read_tsv_with_stats(path, skip_bad_lines=True)
    assert len(pairs) == 3 and stats.first_bad_line.startswith(f"{path}:4: ")


def test_extra_columns_and_chosen_columns(tmp_path):
    # The Tatoeba/ManyThings layout: English, Portuguese, attribution.
    path = _write(tmp_path, "Go.\tVai.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n")
    assert read_tsv(path) == [("Go.", "Vai.")]
    assert read_tsv(path, source_column=1, target_column=0) == [("Vai.", "Go.")]
    assert read_tsv(path, source_column=2, target_column=1)[0][1] == "Vai."


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "o gato\tthe cat\nsó uma coluna\n",
            "corpus.tsv:2: expected at least 2 tab-separated columns, found 1",
        ),
        ("o gato\tthe cat\n\nx\t\n", "corpus.tsv:3: empty target sentence (column 1)"),
        ("\tthe cat\n", "corpus.tsv:1: empty source sentence (column 0)"),
        (
            b"o gato\tthe cat\nma\xe7\xe3\tapple\n",
            "corpus.tsv:2: invalid UTF-8 (byte 0xe7 at byte 3 of the line)",
        ),
        (
            b"a\tb\n\x00\x01\x02\tc\n",
            "corpus.tsv:2: contains NUL bytes; this looks like a binary file",
        ),
    ],
)
def test_bad_line_errors_name_file_and_line(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(DataError) as error:
        read_tsv(path)
    text = str(error.value)
    assert message in text
    assert text.startswith(str(path))
    assert "\n" not in text


def test_column_count_follows_the_chosen_columns(tmp_path):
    path = _write(tmp_path, "a\tb\n")
    with pytest.raises(
        DataError, match=r"corpus.tsv:1: expected at least 3 tab-separated columns, found 2"
    ):
        read_tsv(path, source_column=2, target_column=0)


def test_skip_bad_lines_counts_and_logs(tmp_path, caplog):
    content = b"o gato\tthe cat\nbad\n\tno source\nma\xe7\xe3\tapple\nos gatos\tthe cats\n\n"
    path = _write(tmp_path, content)
    with caplog.at_level(logging.WARNING, logger="transformer.data.tsv"):
        pairs, stats = read_tsv_with_stats(path, skip_bad_lines=True)
    assert pairs == [("o gato", "the cat"), ("os gatos", "the cats")]
    assert stats.skipped == 3 and stats.blank == 1
    assert stats.first_bad_line.endswith(
        "corpus.tsv:2: expected at least 2 tab-separated columns, found 1"
    )
    assert "Skipped 3 bad line(s)" in caplog.text
    assert read_tsv(path, skip_bad_lines=True) == pairs


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: tmp / "missing.tsv", "missing.tsv: no such file."),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: _write(tmp, ""), "corpus.tsv: file is empty"),
        (lambda tmp: _write(tmp, "\n \n\t\n"), "corpus.tsv: no sentence pairs, only blank lines."),
        (
            lambda tmp: _write(tmp, gzip.compress(b"a\tb\n"), "c.tsv.gz"),
            "c.tsv.gz: is a gzip archive",
        ),
        (lambda tmp: _write(tmp, b"PK\x03\x04rest"), "is a zip archive"),
        (lambda tmp: _write(tmp, "a\tb\n".encode("utf-16")), "is UTF-16 text"),
    ],
)
def test_file_errors(tmp_path, make, message):
    with pytest.raises(DataError) as error:
        read_tsv(make(tmp_path))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_binary_file_is_an_error_even_when_skipping(tmp_path):
    path = _write(tmp_path, bytes(range(256)) * 50)
    with pytest.raises(DataError, match="corpus.tsv:1: "):
        read_tsv(path)
    with pytest.raises(
        DataError, match=r"no valid sentence pairs; all \d+ non-blank lines are bad"
    ):
        read_tsv(path, skip_bad_lines=True)


def test_over_long_line(tmp_path):
    path = tmp_path / "long.tsv"
    with open(path, "wb") as handle:
        handle.write(b"a\tb\n")
        handle.write(b"x" * (MAX_LINE_BYTES + 10) + b"\ty\n")
        handle.write(b"c\td\n")
    with pytest.raises(DataError, match=r"long.tsv:2: line longer than 1,048,576 bytes"):
        read_tsv(path)
    pairs, stats = read_tsv_with_stats(path, skip_bad_lines=True)
    assert pairs == [("a", "b"), ("c", "d")] and stats.skipped == 1 and stats.lines == 3


def test_over_long_line_with_cr_line_ends(tmp_path):
    path = _write(tmp_path, b"a\tb\r" + b"x" * (MAX_LINE_BYTES + 10) + b"\ty\r\nc\td\r")
    with pytest.raises(DataError, match=r"corpus.tsv:2: line longer than 1,048,576 bytes"):
        read_tsv(path)
    pairs, stats = read_tsv_with_stats(path, skip_bad_lines=True)
    assert pairs == [("a", "b"), ("c", "d")] and stats.skipped == 1 and stats.lines == 3


def test_large_file(tmp_path):
    path = tmp_path / "big.tsv"
    pairs = [(f"frase número {i}", f"sentence number {i}") for i in range(200_000)]
    write_tsv(pairs, path)
    assert read_tsv(path) == pairs


def test_bad_column_arguments(tmp_path):
    path = _write(tmp_path, "a\tb\n")
    with pytest.raises(DataError, match="`source_column`.*Received: source_column=-1"):
        read_tsv(path, source_column=-1)
    with pytest.raises(DataError, match="two different columns"):
        read_tsv(path, source_column=1, target_column=1)


def test_write_then_read_round_trip(tmp_path):
    pairs = [("Não, obrigado!", "No, thanks!"), ("日本", "Japan"), ("a  b", "c")]
    write_tsv(pairs, tmp_path / "out.tsv")
    assert read_tsv(tmp_path / "out.tsv") == pairs


def test_write_rejects_what_tsv_cannot_hold(tmp_path):
    with pytest.raises(DataError, match="pair 1: a sentence contains a tab"):
        write_tsv([("a", "b"), ("c\td", "e")], tmp_path / "x.tsv")
    with pytest.raises(DataError, match="pair 0: expected strings"):
        write_tsv([("a", 3)], tmp_path / "x.tsv")
    with pytest.raises(DataError, match="cannot be written"):
        write_tsv([("a", "b")], tmp_path / "no" / "dir" / "x.tsv")


def test_split_is_deterministic_and_disjoint():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    corpus = split_pairs(pairs, valid_fraction=0.1, test_fraction=0.05, seed=7)
    assert corpus.sizes() == {"train": 850, "valid": 100, "test": 50}
    again = split_pairs(pairs, valid_fraction=0.1, test_fraction=0.05, seed=7)
    assert (again.train, again.valid, again.test) == (corpus.train, corpus.valid, corpus.test)
    other = split_pairs(pairs, valid_fraction=0.1, test_fraction=0.05, seed=8)
    assert other.test != corpus.test
    assert sorted(corpus.train + corpus.valid + corpus.test) == sorted(pairs)
    assert corpus.train == [p for p in pairs if p in set(corpus.train)]  # file order kept


def test_split_keeps_translations_of_one_source_together():
    pairs = [(f"s{i // 3}", f"t{i}") for i in range(300)]  # 3 translations per source
    corpus = split_pairs(pairs, 0.1, 0.1, seed=0)
    sources = [{s for s, _ in split} for split in (corpus.train, corpus.valid, corpus.test)]
    assert (
        not (sources[0] & sources[1])
        and not (sources[0] & sources[2])
        and not (sources[1] & sources[2])
    )
    assert len(corpus.valid) == len(corpus.test) == 30


def test_split_errors():
    pairs = [("a", "b"), ("c", "d")]
    with pytest.raises(DataError, match="Cannot split 2 pairs"):
        split_pairs(pairs, 0.1, 0.1)
    with pytest.raises(DataError, match="`valid_fraction`.*Received: valid_fraction=1.5"):
        split_pairs(pairs, 1.5, 0.1)
    with pytest.raises(DataError, match="expected a sum below 1"):
        split_pairs(pairs, 0.5, 0.5)
    assert split_pairs(pairs, 0, 0).train == pairs


def test_load_tsv_corpus(tmp_path, caplog):
    train = _write(tmp_path, "".join(f"s{i}\tt{i}\n" for i in range(200)) + "bad\n", "train.tsv")
    valid = _write(tmp_path, "v1\tw1\nv2\tw2\n", "valid.tsv")
    test = _write(tmp_path, "s3\tt3\nx\ty\n", "test.tsv")  # s3 is also in train

    corpus = load_tsv_corpus(CorpusSource(data=train, skip_bad_lines=True, seed=1))
    assert corpus.sizes() == {"train": 180, "valid": 10, "test": 10}
    assert corpus.skipped_lines == 1 and corpus.name == str(train)

    corpus = load_tsv_corpus(CorpusSource(data=train, valid=valid, skip_bad_lines=True))
    assert corpus.valid == [("v1", "w1"), ("v2", "w2")]
    assert corpus.sizes() == {"train": 190, "valid": 2, "test": 10}

    with caplog.at_level(logging.WARNING, logger="transformer.data.tsv"):
        corpus = load_tsv_corpus(
            CorpusSource(data=train, valid=valid, test=test, skip_bad_lines=True))
    assert corpus.sizes() == {"train": 200, "valid": 2, "test": 2}
    assert (
        "1 of 2 test pairs have a source sentence that is also in the training data" in caplog.text
    )

    with pytest.raises(DataError, match="train.tsv:201: expected at least 2"):
        load_tsv_corpus(CorpusSource(data=train))
