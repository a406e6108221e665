"""Tests of transformer.data.tokenizers with WordPiece tokenizers: build, save and reload."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from transformer.data.corpus import DataError
from transformer.data.tokenizers import (
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    build_tokenizers,
    load_tokenizers,
    save_tokenizers,
)
from transformer.data.toy import generate_toy_corpus

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["o gato preto do menino não come a maçã", "Os Cães DORMEM na casa"]


@pytest.fixture(scope="module")
def corpus():
    return generate_toy_corpus(seed=0, n_train=2000, n_valid=10, n_test=10)


@pytest.fixture(scope="module")
def tokenizers(corpus):
    return build_tokenizers(corpus.train, vocab_size=8000, kind="wordpiece")


@pytest.fixture(scope="module")
def saved(tokenizers, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizers")
    save_tokenizers(tokenizers, directory)
    return directory


@pytest.fixture(scope="module")
def reloaded(saved):
    return load_tokenizers(saved)


def _bert_normalize(text: str) -> str:
    """Lower-case, strip accents, split off punctuation: what a round trip gives."""
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    text = "".join(f" {c} " if unicodedata.category(c).startswith("P") else c for c in text)
    return " ".join(text.split())


def _texts(tensor) -> list[str]:
    return [t.decode("utf-8") for t in tensor.numpy()]


def test_reserved_tokens_have_the_pinned_ids(tokenizers):
    for tokenizer in (tokenizers.source, tokenizers.target):
        assert _texts(tokenizer.get_reserved_tokens()) == list(RESERVED_TOKENS)
        ids = tf.constant([[PAD_ID, UNK_ID, START_ID, END_ID]], tf.int64)
        assert _texts(tokenizer.lookup(ids)[0]) == ["[PAD]", "[UNK]", "[START]", "[END]"]
        vocab = Path(tokenizer.get_vocab_path().numpy().decode()).read_text("utf-8").split("\n")
        assert vocab[:4] == list(RESERVED_TOKENS)
        assert int(tokenizer.get_vocab_size()) == len(vocab) - 1  # trailing newline


def test_small_corpus_gives_a_small_vocabulary(tokenizers):
    # The toy grammar has ~100 Portuguese and ~70 English words; with every
    # character alone and as a continuation the vocabularies stay small.
    assert 100 <= int(tokenizers.source.get_vocab_size()) <= 250
    assert 80 <= int(tokenizers.target.get_vocab_size()) <= 200


def test_tokenize_adds_start_and_end(tokenizers):
    ids = tokenizers.source.tokenize(tf.constant(SENTENCES))
    assert isinstance(ids, tf.RaggedTensor)
    assert ids.dtype == tf.int64
    for row in ids.to_list():
        assert row[0] == START_ID and row[-1] == END_ID
        assert START_ID not in row[1:-1] and END_ID not in row[1:-1]
        assert PAD_ID not in row and UNK_ID not in row
    words = _texts(tokenizers.source.lookup(ids)[0])
    assert words == [
        "[START]",
        "o",
        "gato",
        "preto",
        "do",
        "menino",
        "nao",
        "come",
        "a",
        "maca",
        "[END]",
    ]


def test_round_trip_gives_lower_cased_text_without_accents(tokenizers):
    ids = tokenizers.source.tokenize(tf.constant(SENTENCES))
    assert _texts(tokenizers.source.detokenize(ids)) == [
        "o gato preto do menino nao come a maca",
        "os caes dormem na casa",
    ]
    english = ["The boy's black cat does not eat the apple."]
    # Punctuation is split off; "." is not in the toy vocabulary, so it is [UNK].
    ids = tokenizers.target.tokenize(tf.constant(english))
    assert _texts(tokenizers.target.detokenize(ids)) == [
        "the boy ' s black cat does not eat the apple [UNK]"
    ]


def test_every_training_sentence_round_trips(tokenizers, corpus):
    for side, tokenizer in ((0, tokenizers.source), (1, tokenizers.target)):
        sentences = [pair[side] for pair in corpus.train[:500]]
        ids = tokenizer.tokenize(tf.constant(sentences))
        assert UNK_ID not in ids.flat_values.numpy()
        back = _texts(tokenizer.detokenize(ids))
        assert back == [_bert_normalize(s) for s in sentences]


def test_unknown_words_become_unk_and_never_crash(tokenizers):
    strange = ["o zyxwq gato", "日本語 😀 \u200b", "", "   ", "x" * 500, "o\tgato\npreto"]
    ids = tokenizers.source.tokenize(tf.constant(strange))
    rows = ids.to_list()
    assert rows[0] == [START_ID, rows[0][1], UNK_ID, rows[0][3], END_ID]
    assert UNK_ID in rows[1]
    assert rows[2] == [START_ID, END_ID] and rows[3] == [START_ID, END_ID]
    assert rows[4] == [START_ID, UNK_ID, END_ID]
    assert _texts(tokenizers.source.detokenize(ids))[0] == "o [UNK] gato"


def test_word_pieces_split_unseen_words(tokenizers):
    # "gatos" and "meninos" are known; an unseen word made of known pieces
    # splits into word pieces instead of becoming [UNK], if the pieces exist.
    ids = tokenizers.source.tokenize(tf.constant(["gatosmeninos"]))
    pieces = _texts(tokenizers.source.lookup(ids)[0])
    assert pieces[0] == "[START]" and pieces[-1] == "[END]"
    assert all(p.startswith("##") for p in pieces[2:-1])
    assert "".join(p.removeprefix("##") for p in pieces[1:-1]) == "gatosmeninos"
    assert _texts(tokenizers.source.detokenize(ids)) == ["gatosmeninos"]


def test_detokenize_drops_reserved_tokens_and_stops_at_end(tokenizers):
    tokenizer = tokenizers.target
    ids = tokenizer.tokenize(tf.constant(["the black cat", "a dog"])).to_tensor()  # PAD-filled
    the_black_cat = ids[0].numpy().tolist()
    # Dense int64 with padding, dense int32, ragged int32: all the same text.
    for tokens in (
        ids,
        tf.cast(ids, tf.int32),
        tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32), padding=0),
    ):
        assert _texts(tokenizer.detokenize(tokens)) == ["the black cat", "a dog"]
    # Tokens after [END] (e.g. from batched decoding) are ignored.
    after_end = tf.constant([the_black_cat[:-1] + [END_ID] + the_black_cat[1:3]], tf.int64)
    assert _texts(tokenizer.detokenize(after_end)) == ["the black cat"]
    # Ids outside the vocabulary count as [UNK] instead of failing.
    size = int(tokenizer.get_vocab_size())
    odd = tf.constant([[START_ID, size, -5, END_ID]], tf.int64)
    assert _texts(tokenizer.detokenize(odd)) == ["[UNK] [UNK]"]
    assert _texts(tokenizer.lookup(odd)[0]) == ["[START]", "[UNK]", "[UNK]", "[END]"]


def test_same_corpus_same_vocabulary(corpus, tokenizers):
    again = build_tokenizers(corpus.train, vocab_size=8000, kind="wordpiece")
    for a, b in ((again.source, tokenizers.source), (again.target, tokenizers.target)):
        assert (
            Path(a.get_vocab_path().numpy().decode()).read_text()
            == Path(b.get_vocab_path().numpy().decode()).read_text()
        )


def test_vocab_size_limits_the_vocabulary(corpus):
    small = build_tokenizers(corpus.train[:500], vocab_size=60, kind="wordpiece")
    assert int(small.source.get_vocab_size()) <= 60
    assert int(small.target.get_vocab_size()) <= 60
    # Still no unknowns: words split into characters.
    ids = small.source.tokenize(tf.constant([corpus.train[0][0]]))
    assert UNK_ID not in ids.flat_values.numpy()


def test_save_writes_saved_model_and_vocab_files(saved, tokenizers):
    assert (saved / "saved_model.pb").is_file()
    for name, tokenizer in (
        (SOURCE_VOCAB_FILE, tokenizers.source),
        (TARGET_VOCAB_FILE, tokenizers.target),
    ):
        original = Path(tokenizer.get_vocab_path().numpy().decode()).read_text("utf-8")
        assert (saved / name).read_text("utf-8") == original
        assert (saved / "assets" / name).read_text("utf-8") == original


def test_reloaded_tokenizers_behave_the_same(tokenizers, reloaded, corpus):
    sentences = tf.constant([p[0] for p in corpus.valid] + SENTENCES + ["o zyxwq"])
    targets = tf.constant([p[1] for p in corpus.valid])
    for original, loaded, text in (
        (tokenizers.source, reloaded.source, sentences),
        (tokenizers.target, reloaded.target, targets),
    ):
        ids = original.tokenize(text)
        assert loaded.tokenize(text).to_list() == ids.to_list()
        assert _texts(loaded.detokenize(ids)) == _texts(original.detokenize(ids))
        assert _texts(loaded.detokenize(ids.to_tensor())) == _texts(original.detokenize(ids))
        assert loaded.lookup(ids).to_list() == original.lookup(ids).to_list()
        assert int(loaded.get_vocab_size()) == int(original.get_vocab_size())
        assert _texts(loaded.get_reserved_tokens()) == list(RESERVED_TOKENS)
        assert Path(loaded.get_vocab_path().numpy().decode()).is_file()


def test_reloading_needs_neither_corpus_nor_python_class(saved, tmp_path):
    # A fresh process that never imports `transformer` (only tensorflow_text,
    # for its ops), from a copy in a new place.
    import shutil

    copy = tmp_path / "copied"
    shutil.copytree(saved, copy)
    script = textwrap.dedent(
        f"""
        import tensorflow as tf
        import tensorflow_text  # registers the ops the SavedModel uses
        import sys
        loaded = tf.saved_model.load({str(copy)!r})
        ids = loaded.source.tokenize(tf.constant(["o gato preto"]))
        print(ids.to_list()[0][0], ids.to_list()[0][-1])
        print(loaded.source.detokenize(ids).numpy()[0].decode())
        print(loaded.target.detokenize(loaded.target.tokenize(["the black cat"])).numpy()[0].decode())
        assert "transformer" not in sys.modules
        """
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:3] == [
        f"{START_ID} {END_ID}",
        "o gato preto",
        "the black cat",
    ]


def test_save_a_reloaded_model_again(reloaded, tmp_path):
    directory = save_tokenizers(reloaded, tmp_path / "again")
    twice = load_tokenizers(directory)
    ids = twice.source.tokenize(tf.constant(SENTENCES))
    np.testing.assert_array_equal(
        ids.flat_values.numpy(),
        reloaded.source.tokenize(tf.constant(SENTENCES)).flat_values.numpy(),
    )
    assert (directory / SOURCE_VOCAB_FILE).is_file()


def test_bad_arguments(corpus, tmp_path):
    with pytest.raises(ValueError, match="`vocab_size`.*Received: vocab_size=4"):
        build_tokenizers(corpus.train[:10], vocab_size=4)
    with pytest.raises(DataError, match="empty list"):
        build_tokenizers([], kind="wordpiece")
    with pytest.raises(DataError, match="no words"):
        build_tokenizers([("   ", " ")], kind="wordpiece")
    with pytest.raises(DataError, match="is not a directory"):
        load_tokenizers(tmp_path / "nowhere")
    with pytest.raises(DataError, match="saved_model.pb"):
        load_tokenizers(tmp_path)


TATOEBA_STYLE = [
    ("Go.", "Vai."),
    ("Hi.", "Olá."),
    ("Run!", "Corra!"),
    ("Who?", "Quem?"),
    ("I'm OK.", "Eu estou bem."),
    ("Tom isn't here.", "O Tom não está aqui."),
    ("Where's the café?", "Onde fica o café?"),
    ("It's 5 o'clock.", "São 5 horas."),
    ("Don't touch that!", "Não toque nisso!"),
    ('She said: "Yes".', 'Ela disse: "Sim".'),
]


@pytest.mark.parametrize("lower_case", [True, False])
def test_real_text_with_case_accents_and_punctuation(tmp_path, lower_case):
    from transformer.data.tsv import read_tsv, write_tsv

    path = tmp_path / "por.txt"
    write_tsv(TATOEBA_STYLE * 3, path)
    pairs = read_tsv(path, source_column=1, target_column=0)  # Portuguese -> English
    tokenizers = build_tokenizers(pairs, vocab_size=500, lower_case=lower_case, kind="wordpiece")
    portuguese = [p for p, _ in pairs[:10]]
    ids = tokenizers.source.tokenize(tf.constant(portuguese))
    assert UNK_ID not in ids.flat_values.numpy()
    back = _texts(tokenizers.source.detokenize(ids))
    if lower_case:
        assert back[5] == "o tom nao esta aqui ."
        assert back == [_bert_normalize(p) for p in portuguese]
    else:
        assert back[5] == "O Tom não está aqui ."
        assert back[9] == 'Ela disse : " Sim " .'
    english = _texts(tokenizers.target.detokenize(tokenizers.target.tokenize(["It's 5 o'clock."])))
    assert english == (["it ' s 5 o ' clock ."] if lower_case else ["It ' s 5 o ' clock ."])
