"""Tests of transformer.data.sentencepiece: reversible SentencePiece tokenizers."""

from __future__ import annotations

import inspect
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf

from transformer.constants import (
    DEFAULT_TOKENIZER,
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
)
from transformer.data.corpus import DataError
from transformer.data.sentencepiece import (
    SentencePieceTokenizer,
    learn_sentencepiece_model,
    write_sentencepiece_files,
)
from transformer.data.tokenizers import (
    build_tokenizers,
    load_tokenizers,
    save_tokenizers,
    tokenizer_kind,
)

ROOT = Path(__file__).resolve().parents[1]
VOCAB_SIZE = 350

# Software-interface strings in the style of a Spanish -> English UI corpus:
# capitals, accents, apostrophes, attached punctuation, digits, quotes.
_ES_OBJECTS = ["el archivo", "la carpeta", "el menú", "la contraseña", "el módulo", "la sesión"]
_EN_OBJECTS = ["the file", "the folder", "the menu", "the password", "the module", "the session"]
_ES_VERBS = ["Mover", "Borrar", "Abrir", "Guardar", "Cerrar", "Añadir"]
_EN_VERBS = ["Move", "Delete", "Open", "Save", "Close", "Add"]
_ES_ENDINGS = ["a la papelera", "ahora", "otra vez", "sin preguntar", "en el disco"]
_EN_ENDINGS = ["to the trash", "now", "again", "without asking", "on the disk"]
_FIXED = [
    ("No se puede abrir «%s»: el archivo no existe.", "Can't open \"%s\": the file doesn't exist."),
    (
        "¿Está seguro de que quiere borrar %d elementos?",
        "Are you sure you want to delete %d items?",
    ),
    ("Él es el dueño; ella e Iván también.", "He's the owner; she and Iván too."),
    ("Opciones de la orden «-s».", "Options to the command '-s'."),
    ("La pelota del señor grande.", "The big man's balls."),
    ("Versión 2.4.1 (compilación 1999)", "Version 2.4.1 (build 1999)"),
]


def _real_looking_pairs(n: int = 300, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        if i % 3 == 0:
            es, en = _FIXED[rng.randrange(len(_FIXED))]
            if "%s" in es:
                name = rng.choice(["notas.txt", "Fotos", "README.md"])
                es, en = es % name, en % name
            elif "%d" in es:
                number = rng.randrange(2, 5000)
                es, en = es % number, en % number
        else:
            v, o, e = rng.randrange(6), rng.randrange(6), rng.randrange(5)
            es = f"{_ES_VERBS[v]} {_ES_OBJECTS[o]} {_ES_ENDINGS[e]}"
            en = f"{_EN_VERBS[v]} {_EN_OBJECTS[o]} {_EN_ENDINGS[e]}"
            if rng.random() < 0.5:
                es, en = es + "...", en + "..."
        pairs.append((es, en))
    return pairs


HARD = [
    "The big man's balls",
    "Move files to the trash",
    "Él es alto y ella e Iván",
    'Can\'t open "notas.txt": 3 files, 2.5 MB!',
    "café ñandú, ¿qué? 5",
]
UNSEEN = "☕ 😀 日本語 €"  # characters that no training sentence holds
# Every character the tests round-trip is in the training text (a tokenizer
# without byte fallback turns an unseen character into [UNK]).
PAIRS = _real_looking_pairs() + [(text, text) for text in [*HARD, "Now. 1⁄2", "Sesión"]]


def _texts(tensor) -> list[str]:
    return [t.decode("utf-8") for t in tensor.numpy()]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sp")
    return build_tokenizers(PAIRS, VOCAB_SIZE, vocab_dir=directory, kind="sentencepiece")


@pytest.fixture(scope="module")
def shared():
    return build_tokenizers(PAIRS, VOCAB_SIZE, shared=True)  # SentencePiece: the default kind


def test_sentencepiece_is_the_default_of_build_tokenizers_and_of_every_recipe(shared):
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS

    assert tokenizer_kind(shared.source) == "sentencepiece"  # built without `kind`
    assert inspect.signature(build_tokenizers).parameters["kind"].default == DEFAULT_TOKENIZER
    assert TOY_DEFAULTS["tokenizer"] == CORPUS_DEFAULTS["tokenizer"] == DEFAULT_TOKENIZER


def test_reserved_tokens_have_the_pinned_ids(tokenizers):
    for tokenizer in (tokenizers.source, tokenizers.target):
        assert tokenizer_kind(tokenizer) == "sentencepiece"
        assert _texts(tokenizer.get_reserved_tokens()) == list(RESERVED_TOKENS)
        ids = tf.constant([[PAD_ID, UNK_ID, START_ID, END_ID]], tf.int64)
        assert _texts(tokenizer.lookup(ids)[0]) == list(RESERVED_TOKENS)
        vocab = Path(tokenizer.get_vocab_path().numpy().decode()).read_text("utf-8").splitlines()
        assert int(tokenizer.get_vocab_size()) == len(vocab) <= VOCAB_SIZE
        assert [line.split("\t")[0] for line in vocab[:4]] == list(RESERVED_TOKENS)
        assert Path(tokenizer.get_model_path().numpy().decode()).stat().st_size > 0


def test_tokenize_adds_start_and_end(tokenizers):
    ids = tokenizers.target.tokenize(tf.constant(HARD + ["", "   "]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int64
    rows = ids.to_list()
    for row in rows:
        assert row[0] == START_ID and row[-1] == END_ID
        assert not {PAD_ID, UNK_ID, START_ID, END_ID} & set(row[1:-1])
    assert rows[-2:] == [[START_ID, END_ID], [START_ID, END_ID]]


def test_round_trip_keeps_case_accents_apostrophes_and_punctuation(tokenizers):
    for tokenizer in (tokenizers.source, tokenizers.target):
        assert _texts(tokenizer.detokenize(tokenizer.tokenize(tf.constant(HARD)))) == HARD
    for side, tokenizer in ((0, tokenizers.source), (1, tokenizers.target)):
        sentences = [pair[side] for pair in PAIRS]
        ids = tokenizer.tokenize(tf.constant(sentences))
        assert _texts(tokenizer.detokenize(ids)) == sentences
        assert _texts(tokenizer.detokenize(ids.to_tensor())) == sentences


def test_accented_and_plain_letters_are_different_tokens(tokenizers):
    tokenizer = tokenizers.source
    ids = tokenizer.tokenize(tf.constant(["é", "e", "Él", "el"])).to_list()
    assert ids[0] != ids[1] and ids[2] != ids[3]


def test_unseen_characters_become_unk_and_the_rest_survives(tokenizers):
    tokenizer = tokenizers.target
    ids = tokenizer.tokenize(tf.constant([f"Open {UNSEEN} now"])).to_list()[0]
    assert UNK_ID in ids
    text = _texts(tokenizer.detokenize(tf.constant([ids])))[0]
    assert text.startswith("Open") and text.endswith("now")


def test_tokenizer_survives_keras_set_random_seed(tokenizers):
    # tensorflow_text.SentencepieceTokenizer keeps its model in a kernel-owned
    # resource that clearing TensorFlow's kernel cache (which set_random_seed
    # does) frees; the tokenizer here holds no such resource.
    import keras

    sentences = tf.constant(HARD)
    before = tokenizers.source.tokenize(sentences).to_list()
    keras.utils.set_random_seed(1)
    assert tokenizers.source.tokenize(sentences).to_list() == before
    assert _texts(tokenizers.source.detokenize(tokenizers.source.tokenize(sentences))) == HARD


def test_normalisation_composes_accents_and_spaces(tokenizers):
    # "nmt_nfkc": a decomposed accent is the composed letter, "…" is "...",
    # and runs of spaces are one space. Case is kept.
    tokenizer = tokenizers.source
    decomposed, composed = "Sesio\u0301n", "Sesión"
    ids = tokenizer.tokenize(tf.constant([decomposed, composed, "  Abrir   ahora…  ", "½"]))
    assert ids[0].numpy().tolist() == ids[1].numpy().tolist()
    assert _texts(tokenizer.detokenize(ids))[2:] == ["Abrir ahora...", "1⁄2"]


def test_detokenize_drops_reserved_tokens_and_stops_at_end(tokenizers):
    tokenizer = tokenizers.target
    ids = tokenizer.tokenize(tf.constant(["Move the file", "Now."])).to_tensor()  # PAD-filled
    for tokens in (
        ids,
        tf.cast(ids, tf.int32),
        tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32), padding=0),
    ):
        assert _texts(tokenizer.detokenize(tokens)) == ["Move the file", "Now."]
    row = ids[0].numpy().tolist()  # [START] ... [END]
    after_end = tf.constant([[PAD_ID] + row + row[1:3] + [START_ID]], tf.int64)
    assert _texts(tokenizer.detokenize(after_end)) == ["Move the file"]
    odd = tf.constant([[START_ID, VOCAB_SIZE, -5, END_ID]], tf.int64)
    assert _texts(tokenizer.lookup(odd)[0]) == ["[START]", "[UNK]", "[UNK]", "[END]"]
    assert _texts(tokenizer.detokenize(odd))[0].strip() == "⁇  ⁇"  # two [UNK]s


def test_training_is_deterministic():
    english = [target for _, target in PAIRS]
    first = learn_sentencepiece_model(english, VOCAB_SIZE)
    assert learn_sentencepiece_model(list(english), VOCAB_SIZE) == first
    bpe = learn_sentencepiece_model(english, VOCAB_SIZE, model_type="bpe")
    assert bpe != first and learn_sentencepiece_model(english, VOCAB_SIZE, model_type="bpe") == bpe


def test_shared_vocabulary_serves_both_languages(shared, tmp_path):
    assert shared.source is shared.target
    both = [PAIRS[1][0], PAIRS[1][1], "Él e Iván"]
    ids = shared.source.tokenize(tf.constant(both))
    assert _texts(shared.target.detokenize(ids)) == both
    directory = save_tokenizers(shared, tmp_path / "shared")
    assert (directory / "shared.model").is_file() and (directory / "shared.vocab").is_file()
    reloaded = load_tokenizers(directory)
    assert reloaded.source is reloaded.target
    assert reloaded.target.tokenize(tf.constant(both)).to_list() == ids.to_list()


def test_lower_case_folds_case_but_keeps_accents():
    tokenizers = build_tokenizers(PAIRS[:100], VOCAB_SIZE, lower_case=True, kind="sentencepiece")
    ids = tokenizers.source.tokenize(tf.constant(["Él ABRIÓ la Sesión"]))
    assert _texts(tokenizers.source.detokenize(ids)) == ["él abrió la sesión"]


def test_save_then_load_in_a_fresh_process(tokenizers, tmp_path):
    # Source and target must keep their own models.
    directory = save_tokenizers(tokenizers, tmp_path / "saved")
    for name in ("source.model", "source.vocab", "target.model", "target.vocab"):
        assert (directory / name).is_file() and (directory / "assets" / name).is_file()
    sentences = HARD + [pair[0] for pair in PAIRS[:5]]
    expected = {
        side: {
            "ids": tokenizer.tokenize(tf.constant(sentences)).to_list(),
            "text": _texts(tokenizer.detokenize(tokenizer.tokenize(tf.constant(sentences)))),
        }
        for side, tokenizer in (("source", tokenizers.source), ("target", tokenizers.target))
    }
    script = textwrap.dedent(
        f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the ops the SavedModel uses
        loaded = tf.saved_model.load({str(directory)!r})
        sentences = tf.constant(json.loads(sys.stdin.read()))
        result = {{}}
        for side in ("source", "target"):
            tokenizer = getattr(loaded, side)
            ids = tokenizer.tokenize(sentences)
            text = [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]
            result[side] = {{"ids": ids.to_list(), "text": text}}
        assert "transformer" not in sys.modules and "sentencepiece" not in sys.modules
        print(json.dumps(result))
        """
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(sentences),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_too_large_vocab_size_is_capped_and_logged(caplog, tmp_path):
    english = [target for _, target in PAIRS[:50]]
    with caplog.at_level(logging.INFO, logger="transformer.data.sentencepiece"):
        proto = learn_sentencepiece_model(english, 5000)
    assert "vocab_size=5000 is more than" in caplog.text
    files = write_sentencepiece_files(proto, tmp_path, "capped")
    size = int(SentencePieceTokenizer(files.model).get_vocab_size())
    assert 4 < size < 5000  # reserved tokens, characters and some pieces
    assert f"learning a {size}-piece" in caplog.text


def test_clear_errors(tmp_path):
    with pytest.raises(DataError, match="hold no text"):
        learn_sentencepiece_model([])
    with pytest.raises(DataError, match="hold no text"):
        build_tokenizers([("", "  ")], kind="sentencepiece")
    with pytest.raises(ValueError, match=r"vocab_size=50 is too small .* at least \d+"):
        learn_sentencepiece_model([target for _, target in PAIRS], 50)
    with pytest.raises(ValueError, match="model_type"):
        learn_sentencepiece_model(["a b"], model_type="wordpiece")
    with pytest.raises(ValueError, match="shared=True.*sentencepiece"):
        build_tokenizers(PAIRS, shared=True, kind="wordpiece")
    with pytest.raises(ValueError, match="kind must be one of"):
        build_tokenizers(PAIRS, kind="bytes")
    (tmp_path / "bad.model").write_bytes(b"not a model")
    (tmp_path / "bad.vocab").write_text("")
    with pytest.raises(Exception, match="(?i)pars|model"):
        SentencePieceTokenizer(tmp_path / "bad.model")


def test_tokenizers_saved_before_sentencepiece_still_load():
    # Written by the WordPiece-only code (a toy Portuguese -> English run), when
    # the class was named `SubwordTokenizer`: a SavedModel names no Python class.
    tokenizers = load_tokenizers(ROOT / "tests" / "fixtures" / "run_v1" / "tokenizers")
    assert tokenizer_kind(tokenizers.source) == "wordpiece"
    ids = tokenizers.target.tokenize(tf.constant(["the black cat"]))
    assert ids.to_list()[0][0] == START_ID and ids.to_list()[0][-1] == END_ID
    assert _texts(tokenizers.target.detokenize(ids)) == ["the black cat"]


def test_bpe_words_are_one_piece_in_tensorflow(tmp_path):
    # TensorFlow Text segments every model the unigram way; a BPE model keeps its
    # whole-word pieces only because they are rescored by use (the module docstring).
    english = [target for _, target in PAIRS]
    proto = learn_sentencepiece_model(english, VOCAB_SIZE, model_type="bpe")
    files = write_sentencepiece_files(proto, tmp_path, "bpe")
    tokenizer = SentencePieceTokenizer(files.model)
    pieces = set(Path(files.vocab).read_text(encoding="utf-8").split())
    words = sorted({w for s in english for w in s.split() if "▁" + w in pieces})
    assert len(words) > 20
    for word in words:
        assert _texts(tokenizer.lookup(tokenizer.tokenize(tf.constant([word])))[0]) == [
            "[START]", "▁" + word, "[END]"], word
    assert _texts(tokenizer.detokenize(tokenizer.tokenize(tf.constant(english[:20])))) == [
        " ".join(s.split()) for s in english[:20]]


def test_a_default_size_grows_to_fit_text_in_many_scripts(caplog):
    # About 400 distinct characters from many scripts, more than 100 pieces hold.
    rng = random.Random(0)
    letters = [chr(c) for block in (0x0400, 0x0530, 0x0590, 0x0900, 0x3040, 0x4E00)
               for c in range(block, block + 70)]
    sentences = ["".join(rng.choice(letters) for _ in range(12)) + " ok" for _ in range(3000)]
    with pytest.raises(ValueError, match=r"vocab_size=100 is too small .* at least (\d+)") as err:
        learn_sentencepiece_model(sentences, 100)
    needed = int(str(err.value).split("at least ")[1].split()[0])
    assert needed > 300
    with caplog.at_level(logging.INFO, logger="transformer.data.sentencepiece"):
        proto = learn_sentencepiece_model(sentences, 100, grow_to_fit=True)
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    assert needed < processor.get_piece_size() <= needed + 100
    assert f"learning {needed + 100} pieces instead" in caplog.text
