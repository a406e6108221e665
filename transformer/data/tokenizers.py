"""Building, saving and loading the source and target tokenizers of a translation task.

Two kinds of subword tokenizer, chosen by `build_tokenizers(..., kind=...)`:

- `"sentencepiece"` (`transformer.data.sentencepiece`, the default of every
  recipe: `DEFAULT_TOKENIZER`): reversible, keeps case, accents and
  punctuation, optionally one vocabulary shared by both languages as in
  section 3.4 of the paper.
- `"wordpiece"` (`transformer.data.wordpiece`, TensorFlow's subword tokenizer
  tutorial): a WordPiece vocabulary per language, learnt here from the
  words `word_counts` finds, and a `tensorflow_text.BertTokenizer` that
  lower-cases, strips accents, splits off punctuation and then splits words
  into word pieces ("gatinhos" -> "gat", "##inhos").

Token ids 0-3 are the reserved tokens `[PAD] [UNK] [START] [END]`
(`transformer.constants`), in both languages and both kinds.

The tokenizers are `tf.Module`s whose methods are `tf.function`s, so they save
as a SavedModel and load again without this module, without the training
corpus, and inside another SavedModel (the exported translator):

```python
tokenizers = build_tokenizers(corpus.train)
save_tokenizers(tokenizers, "runs/toy/tokenizers")
reloaded = load_tokenizers("runs/toy/tokenizers")
ids = reloaded.source.tokenize(tf.constant(["o gato preto"]))  # [[2, ..., 3]]
reloaded.source.detokenize(ids)  # [b"o gato preto"]
```
"""

from __future__ import annotations

import concurrent.futures
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from transformer.constants import (
    DEFAULT_TOKENIZER,
    DEFAULT_VOCAB_SIZE,
    RESERVED_TOKENS,
    TOKENIZER_KINDS,
)
from transformer.data.corpus import DataError, Pair
from transformer.data.sentencepiece import (
    SentencePieceTokenizer,
    learn_sentencepiece_model,
    write_sentencepiece_files,
)
from transformer.data.tokenizer_base import TokenizerBase
from transformer.data.wordpiece import WordPieceTokenizer, build_vocab, word_counts

logger = logging.getLogger(__name__)

SOURCE_VOCAB_FILE = "source_vocab.txt"
TARGET_VOCAB_FILE = "target_vocab.txt"


class TranslationTokenizers(tf.Module):
    """The source and target tokenizers of a translation task, saved together.

    Attributes:
        source: the tokenizer of the source language (Portuguese): a
            `WordPieceTokenizer` or a `SentencePieceTokenizer`.
        target: the tokenizer of the target language (English). With a
            shared vocabulary it is the same object as `source`, and stays so
            after saving and reloading.

    Example:

    ```python
    tokenizers = build_tokenizers(corpus.train, vocab_size=8000)
    tokenizers.source.get_vocab_size()  # e.g. 7765
    ```
    """

    def __init__(self, source: TokenizerBase, target: TokenizerBase):
        super().__init__()
        self.source = source
        self.target = target


def build_tokenizers(
    pairs: Sequence[Pair],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lower_case: bool | None = None,
    vocab_dir=None,
    learn_params: dict | None = None,
    kind: str = DEFAULT_TOKENIZER,
    shared: bool = False,
) -> TranslationTokenizers:
    """Learns source and target vocabularies from sentence pairs and builds tokenizers.

    Args:
        pairs: `(source, target)` training pairs.
        vocab_size: the largest vocabulary per language (or shared), reserved
            tokens included (the tutorial uses 8000). A small corpus gives
            fewer (SentencePiece logs a warning when it has to).
        lower_case: WordPiece: lower-case and strip accents ("Não" -> "nao"),
            True if None. SentencePiece: False if None (text kept as it is);
            True lower-cases (`"nmt_nfkc_cf"` normalisation), keeping accents.
        vocab_dir: where to write the vocabulary files (`source_vocab.txt`
            and `target_vocab.txt`, or `source.model`/`.vocab` and
            `target.model`/`.vocab`, or `shared.model`/`.vocab`); a temporary
            directory (kept while the tokenizers live) if None.
        learn_params: extra arguments for the learner of that kind:
            `learn_wordpiece_vocab` or `learn_sentencepiece_model` (e.g.
            `{"model_type": "bpe"}`).
        kind: `"sentencepiece"` (`DEFAULT_TOKENIZER`, what every recipe
            of `train.py` uses) or `"wordpiece"` (the tutorial's).
        shared: learn one SentencePiece vocabulary from both languages' text,
            used as both `.source` and `.target` (section 3.4 of the paper
            shares it to tie the embeddings). SentencePiece only.

    Returns:
        A `TranslationTokenizers` with `.source` and `.target`.

    Raises:
        ValueError: for a bad `vocab_size`, `kind`, or `shared` with WordPiece.
        DataError: if there are no pairs or no text.

    Example:

    ```python
    corpus = generate_toy_corpus()
    tokenizers = build_tokenizers(corpus.train)  # SentencePiece, one model per language
    tokenizers.target.tokenize(tf.constant(["The black cat."]))
    tutorial = build_tokenizers(corpus.train, kind="wordpiece")  # lower-cases
    shared = build_tokenizers(corpus.train, shared=True)
    shared.source is shared.target  # True
    ```
    """
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or vocab_size <= len(RESERVED_TOKENS)
    ):
        raise ValueError(
            "Received an invalid value for argument `vocab_size`, expected an integer "
            f"larger than {len(RESERVED_TOKENS)}. Received: vocab_size={vocab_size!r}"
        )
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"kind must be one of {TOKENIZER_KINDS}, got {kind!r}.")
    if shared and kind != "sentencepiece":
        raise ValueError("A shared vocabulary (shared=True) needs kind='sentencepiece'.")
    if len(pairs) == 0:
        raise DataError("Cannot build tokenizers from an empty list of sentence pairs.")
    started = time.perf_counter()
    keep_alive = None
    if vocab_dir is None:
        keep_alive = tempfile.TemporaryDirectory(prefix="tokenizers-")
        vocab_dir = keep_alive.name
    vocab_dir = Path(vocab_dir)
    vocab_dir.mkdir(parents=True, exist_ok=True)
    if kind == "wordpiece":
        tokenizers = _build_wordpiece(
            pairs, vocab_size, True if lower_case is None else lower_case, vocab_dir, learn_params
        )
    else:
        tokenizers = _build_sentencepiece(
            pairs, vocab_size, bool(lower_case), vocab_dir, learn_params, shared
        )
    # Plain Python attributes (not tracked by tf.Module): the temporary
    # directory is deleted when the last of the tokenizers is.
    for module in (tokenizers, tokenizers.source, tokenizers.target):
        object.__setattr__(module, "_vocab_tempdir", keep_alive)
    logger.info(
        "Built %s%s tokenizers from %d pairs in %.1f s: %d source and %d target tokens.",
        "shared " if shared else "",
        kind,
        len(pairs),
        time.perf_counter() - started,
        int(tokenizers.source.get_vocab_size()),
        int(tokenizers.target.get_vocab_size()),
    )
    return tokenizers


def _build_wordpiece(pairs, vocab_size, lower_case, vocab_dir: Path, learn_params):
    """The tutorial's WordPiece vocabularies, one per language."""
    sources = [source for source, _ in pairs]
    targets = [target for _, target in pairs]
    # Splitting text into words is TensorFlow work that releases the GIL: the
    # target side is split in a thread while the source vocabulary is learnt.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        target_counts = pool.submit(word_counts, targets, lower_case)
        source_vocab = build_vocab(sources, vocab_size, lower_case, learn_params)
        target_vocab = build_vocab(
            targets, vocab_size, lower_case, learn_params, counts=target_counts.result()
        )
    source_path = _write_vocab(source_vocab, vocab_dir / SOURCE_VOCAB_FILE)
    target_path = _write_vocab(target_vocab, vocab_dir / TARGET_VOCAB_FILE)
    return TranslationTokenizers(
        WordPieceTokenizer(source_path, lower_case=lower_case),
        WordPieceTokenizer(target_path, lower_case=lower_case),
    )


def _build_sentencepiece(pairs, vocab_size, lower_case, vocab_dir: Path, learn_params, shared):
    """SentencePiece models, one per language or one shared (`shared.model`)."""
    params = dict(learn_params or {})
    if lower_case:
        params.setdefault("normalization", "nmt_nfkc_cf")

    def learn(stem: str, sentences) -> SentencePieceTokenizer:
        proto = learn_sentencepiece_model(sentences, vocab_size, **params)
        files = write_sentencepiece_files(proto, vocab_dir, stem)
        return SentencePieceTokenizer(files.model, files.vocab)

    sources = [source for source, _ in pairs]
    targets = [target for _, target in pairs]
    if shared:
        tokenizer = learn("shared", sources + targets)
        return TranslationTokenizers(tokenizer, tokenizer)
    return TranslationTokenizers(learn("source", sources), learn("target", targets))


def _write_vocab(vocab: list[str], path: Path) -> str:
    path.write_text("".join(token + "\n" for token in vocab), encoding="utf-8")
    return str(path)


def tokenizer_kind(tokenizer) -> str:
    """`"sentencepiece"` or `"wordpiece"`, for a built or reloaded tokenizer."""
    return "sentencepiece" if hasattr(tokenizer, "get_model_path") else "wordpiece"


def save_tokenizers(tokenizers, directory) -> Path:
    """Saves tokenizers as a SavedModel, with their vocabulary files beside it.

    Args:
        tokenizers: a `TranslationTokenizers` (built or reloaded).
        directory: the SavedModel directory to write (created if needed).

    Returns:
        The directory, as a `Path`. It holds `saved_model.pb`, `variables/`,
        `assets/` (the files the SavedModel uses) and, for people to read,
        `source_vocab.txt` / `target_vocab.txt` (WordPiece) or
        `source.model` / `source.vocab` / `target.model` / `target.vocab`
        (`shared.model` / `shared.vocab` if shared) for SentencePiece.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(tokenizers, str(directory))
    for tokenizer, name in (
        (tokenizers.source, SOURCE_VOCAB_FILE),
        (tokenizers.target, TARGET_VOCAB_FILE),
    ):
        if tokenizer_kind(tokenizer) == "sentencepiece":
            paths = [tokenizer.get_model_path(), tokenizer.get_vocab_path()]
            paths = [Path(path.numpy().decode("utf-8")) for path in paths]
            copies = [(path, directory / path.name) for path in paths]
        else:
            copies = [(Path(tokenizer.get_vocab_path().numpy().decode("utf-8")), directory / name)]
        for source, destination in copies:
            if source.resolve() != destination.resolve():
                shutil.copyfile(source, destination)
    logger.info("Saved tokenizers to %s", directory)
    return directory


def load_tokenizers(directory):
    """Loads tokenizers saved by `save_tokenizers`; needs neither corpus nor this module.

    Args:
        directory: the SavedModel directory.

    Returns:
        The restored object, with `.source` and `.target` offering
        `tokenize`, `detokenize`, `lookup`, `get_vocab_size`,
        `get_vocab_path` and `get_reserved_tokens` (and `get_model_path`
        for SentencePiece, see `tokenizer_kind`). Directories written before
        SentencePiece existed load as they did.

    Raises:
        DataError: if the directory is missing or holds no SavedModel.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"Cannot load tokenizers: {str(directory)!r} is not a directory.")
    if not (directory / "saved_model.pb").is_file():
        raise DataError(
            f"Cannot load tokenizers: {str(directory)!r} holds no SavedModel (saved_model.pb "
            "is missing); save them with save_tokenizers()."
        )
    return tf.saved_model.load(str(directory))
