"""Tests of a corpus larger than every chunk, buffer and sample the code has:
transformer.data.splits, transformer.data.streamed, transformer.data.token_rows
and the run's token files (transformer.run.fitting.training_tokens).

The corpus here has 20,000 pairs: more than a tokenizer chunk (8,192 pairs),
several read chunks of the file (64 KiB), a vocabulary sample of 3,000 pairs
and a held-out limit of 300 sentences, with sources that repeat (several
translations of one sentence), so that a bug that only shows on a big corpus
fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer.data import streamed
from transformer.data.batching import (
    budget_batches_from_tokens,
    fixed_batches_from_tokens,
    tokenize_pairs,
)
from transformer.data.corpus import DataError
from transformer.data.source import CorpusSource
from transformer.data.splits import Reservoir, held_out_limits, split_key
from transformer.data.token_rows import Rows, RowsWriter
from transformer.data.tokenizers import build_tokenizers
from transformer.data.tsv import load_tsv_corpus, write_tsv
from transformer.run import fitting

PAIRS = 20_000
SAMPLE = 3_000
HELD_OUT = 300
WORDS = ["gato", "perro", "casa", "libro", "rojo", "verde", "come", "lee", "grande", "el", "la"]


def _pairs(n: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    pairs = []
    for i in range(n):
        source = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 3 + i % 7))
        if i % 10 == 3:  # a second translation of an earlier sentence
            source = pairs[i - 3][0]
        pairs.append((source, f"{source.upper()} {i % 13}"))
    return pairs


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.tsv"
    write_tsv(_pairs(PAIRS), path)
    assert path.stat().st_size > 4 * (1 << 16)  # several read chunks
    return path


@pytest.fixture(scope="module")
def tokenizers():
    return build_tokenizers(_pairs(2000), vocab_size=200, kind="sentencepiece", shared=True)


def _stream(path, record_dir=None, **kwargs):
    source = CorpusSource(data=path, seed=1, max_held_out=HELD_OUT, vocab_sample=SAMPLE, **kwargs)
    return streamed.stream_tsv_corpus(source, record_dir=record_dir)


def test_held_out_limits_cap_each_split_and_keep_groups_whole():
    keys = np.array([split_key(f"s{i % 5000}", 3) for i in range(20_000)], np.uint64)
    limits = held_out_limits(keys, 0.05, 0.05, max_held_out=100)
    splits = np.array([limits.split_of(int(k)) for k in keys])
    # 100 source sentences each (5% of 5,000 is 250, over the limit), 4 pairs each.
    assert (splits == "test").sum() == (splits == "valid").sum() == 400
    assert limits.counts == {"test": 400, "valid": 400}
    for split in ("test", "valid", "train"):
        sources = {int(k) for k in keys[splits == split]}
        assert all(split == limits.split_of(k) for k in sources)
    # Without a limit, the fractions of the distinct sentences.
    free = held_out_limits(keys, 0.05, 0.1, max_held_out=0)
    assert free.counts == {"test": 2000, "valid": 1000}
    with pytest.raises(DataError, match="keep any for training"):
        held_out_limits(keys[:4], 0.4, 0.4, max_held_out=0)


def test_reservoir_is_seeded_ordered_and_bounded():
    def draw(seed):
        sample = Reservoir(100, seed)
        for item in range(10_000):
            sample.add(item)
        return sample.items()

    first = draw(0)
    assert len(first) == 100 and first == sorted(first) and first == draw(0)
    assert first != draw(1)
    assert max(first) > 5000  # late items are drawn too
    # Every item is as likely to be drawn: 100 items, samples of 10, 2,000 seeds.
    counts = np.zeros(100)
    for seed in range(2000):
        sample = Reservoir(10, seed)
        for item in range(100):
            sample.add(item)
        assert len(set(sample.items())) == 10
        counts[sample.items()] += 1
    assert 140 < counts.min() and counts.max() < 260  # 200 each expected, sd about 13
    everything = Reservoir(0, 0)
    for item in range(50):
        everything.add(item)
    assert everything.items() == list(range(50))


def test_streamed_corpus_splits_as_the_in_memory_loader(corpus_file):
    stream = _stream(corpus_file)
    memory = load_tsv_corpus(CorpusSource(data=corpus_file, seed=1, max_held_out=HELD_OUT))
    assert stream.valid == memory.valid and stream.test == memory.test
    assert len(stream.train) == len(memory.train)
    assert list(stream.train) == memory.train  # streamed from the file, every time
    assert list(stream.train) == memory.train
    # The held-out limit counts source sentences; some have two translations.
    assert HELD_OUT <= len(stream.test) < 2 * HELD_OUT
    assert not {s for s, _ in stream.test} & {s for s, _ in memory.train}
    # The vocabulary sample: training pairs only, at most SAMPLE, in file order.
    train = memory.train
    assert len(stream.vocab_pairs) <= SAMPLE and len(stream.vocab_pairs) > SAMPLE * 0.9
    positions = [train.index(pair) for pair in stream.vocab_pairs[:50]]
    assert positions == sorted(positions)
    assert stream.file_sha256[str(corpus_file)] == streamed.file_sha256(corpus_file)


def test_held_out_pairs_are_found_when_the_candidates_miss_them(corpus_file, monkeypatch):
    monkeypatch.setattr(streamed, "_candidate_bound", lambda *args: 0)  # no candidate kept
    again = _stream(corpus_file)
    memory = load_tsv_corpus(CorpusSource(data=corpus_file, seed=1, max_held_out=HELD_OUT))
    assert again.valid == memory.valid and again.test == memory.test


def test_a_recorded_scan_is_read_and_a_changed_file_scanned_again(corpus_file, tmp_path,
                                                                  monkeypatch):
    first = _stream(corpus_file, record_dir=tmp_path)
    assert (tmp_path / streamed.RECORD_FILE).is_file()

    def no_scan(*args, **kwargs):
        raise AssertionError("scanned again")

    with monkeypatch.context() as patch:
        patch.setattr(streamed, "_scan", no_scan)
        again = _stream(corpus_file, record_dir=tmp_path)
    assert (again.valid, again.test, len(again.train)) == (first.valid, first.test,
                                                            len(first.train))
    assert list(again.train) == list(first.train)
    assert again.file_sha256 == first.file_sha256
    # Other settings, or other bytes, are scanned anew.
    other = streamed.stream_tsv_corpus(
        CorpusSource(data=corpus_file, seed=2, max_held_out=HELD_OUT), record_dir=tmp_path)
    assert other.test != first.test
    changed = tmp_path / "changed.tsv"
    write_tsv(_pairs(PAIRS), changed)
    record = _stream(changed, record_dir=tmp_path / "c")
    write_tsv(_pairs(PAIRS)[::-1], changed)  # same size, other bytes
    assert _stream(changed, record_dir=tmp_path / "c").file_sha256 != record.file_sha256


def test_rows_pad_and_write_to_files_as_in_memory(tmp_path):
    rng = np.random.default_rng(2)
    rows = [rng.integers(4, 300, rng.integers(2, 20)).tolist() for _ in range(1000)]
    writers = [RowsWriter(np.uint16, directory, "side") for directory in (None, tmp_path)]
    for start in range(0, 1000, 300):
        chunk = Rows.from_lists(rows[start:start + 300])
        for writer in writers:
            writer.append(chunk.values, chunk.lengths)
    memory, mapped = (writer.finish() for writer in writers)
    assert isinstance(mapped.values, np.memmap)
    assert memory.to_list() == mapped.to_list() == rows
    indices = np.array([5, 999, 0, 17])
    want = np.zeros((4, max(len(rows[i]) for i in indices)), np.int64)
    for row, index in enumerate(indices):
        want[row, : len(rows[index])] = rows[index]
    np.testing.assert_array_equal(mapped.padded(indices), want)
    assert mapped[3:6].to_list() == rows[3:6]
    assert Rows.concat([mapped[:10], memory[10:]]).to_list() == rows


def test_tokenizing_into_files_matches_memory_over_many_chunks(corpus_file, tokenizers,
                                                               tmp_path):
    corpus = _stream(corpus_file)
    on_disk = tokenize_pairs(corpus.train, tokenizers, max_tokens=10, directory=tmp_path)
    in_memory = tokenize_pairs(list(corpus.train), tokenizers, max_tokens=10)
    assert len(on_disk) == len(corpus.train) > 2 * 8192
    assert on_disk.context.to_list() == in_memory.context.to_list()
    assert on_disk.target.to_list() == in_memory.target.to_list()
    assert on_disk.num_trimmed == in_memory.num_trimmed > on_disk.num_trimmed_source > 0
    assert max(on_disk.context.lengths) == 10 and max(on_disk.target.lengths) == 11
    # In order: the last pair is the file's last training pair, tokenized alone.
    last = tokenize_pairs([list(corpus.train)[-1]], tokenizers, max_tokens=10)
    assert on_disk.target[len(on_disk) - 1].tolist() == last.target[0].tolist()


@pytest.mark.parametrize("budget", [0, 150])
def test_a_stream_started_at_a_step_is_the_rest_of_the_stream(corpus_file, tokenizers, budget):
    tokens = tokenize_pairs(list(_stream(corpus_file).train)[:3000], tokenizers, 12)

    def stream(start_step):
        if budget:
            return budget_batches_from_tokens(tokens, budget, seed=4, start_step=start_step)
        return fixed_batches_from_tokens(tokens, 64, seed=4, start_step=start_step)

    whole = [batch[0][0].numpy() for batch in stream(0).take(120)]
    later = [batch[0][0].numpy() for batch in stream(70).take(50)]
    for want, got in zip(whole[70:], later, strict=True):
        np.testing.assert_array_equal(want, got)


def test_token_files_are_reused_only_for_the_same_data_and_tokenizers(corpus_file, tokenizers,
                                                                       tmp_path, monkeypatch):
    corpus = _stream(corpus_file)
    fingerprint = {"data": {"sha256": corpus.file_sha256[str(corpus_file)]}}
    made = fitting.training_tokens(tmp_path, corpus.train, tokenizers, 12, fingerprint)
    made_rows = made.target.to_list()

    def refuse(*args, **kwargs):
        raise AssertionError("tokenized again")

    with monkeypatch.context() as patch:
        patch.setattr(fitting, "tokenize_pairs", refuse)
        opened = fitting.training_tokens(tmp_path, corpus.train, tokenizers, 12, fingerprint)
    assert isinstance(opened.context.values, np.memmap)
    assert opened.target.to_list() == made_rows
    assert opened.num_trimmed == made.num_trimmed
    other = build_tokenizers(_pairs(2000), vocab_size=200, lower_case=True, kind="sentencepiece",
                             shared=True)  # another model: the targets are lower-cased
    remade = fitting.training_tokens(tmp_path, corpus.train, other, 12, fingerprint)
    assert remade.target.to_list() != made_rows
    assert made.target.to_list() == made_rows  # rows mapped before stay as they were
