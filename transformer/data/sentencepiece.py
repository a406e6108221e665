"""The default tokenizer, `SentencePieceTokenizer`, and the learning of its model.

Reversible: text keeps its case, accents and punctuation. The tutorial's
WordPiece tokenizer (`transformer.data.wordpiece`) lower-cases, strips accents
and splits punctuation off words, so its translations read
"the big man ' s balls" and Portuguese "é" (is) and "e" (and) become one
token. SentencePiece (Kudo and Richardson, 2018) treats the text as a raw
sequence of characters, with the space as the piece "▁", so that decoding the
pieces gives the text back: "the big man's balls". The paper's section 3.4
subword units ("byte-pair encodings ... shared source-target vocabulary")
are what SentencePiece learns; here the default is its unigram language model
(Kudo, 2018), with BPE available through `model_type` (the toy corpus uses it:
`transformer.run.config`).

Choices, all fixed so that the same text always gives the same model bytes:

- Normalisation `"nmt_nfkc"`: Unicode NFKC plus SentencePiece's NMT rules
  (control characters removed, every kind of space made a plain space).
  Case and accents are kept. NFKC composes decomposed accents ("o" + U+0301
  -> "ó"; 91 Spanish lines of the ui-es-en corpus are decomposed, which
  `"identity"` would tokenise differently from the same words composed) and
  rewrites compatibility characters ("…" -> "...", "²" -> "2", "º" -> "o";
  8 of its 26,349 English lines). Pass `normalization="identity"` to keep
  every character as it is.
- `character_coverage=1.0`: every character of the training text gets a
  piece; a character never seen in training becomes `[UNK]` (shown as
  " ⁇ "). The in-graph tokenizer (below) has no byte fallback, so the
  models are learnt without it.
- `num_threads=1`: the EM steps of the unigram trainer sum per-thread
  statistics, so the model depends on the number of threads (not on the
  machine); one thread is also the fastest on a busy 2-core machine.
- Ids 0-3 are `[PAD] [UNK] [START] [END]` (`transformer.constants`).
- BPE vocabularies are stored as unigram models (`_score_as_unigram`):
  `FastSentencepieceTokenizer` segments every model the unigram way, taking
  the pieces whose scores sum highest, and BPE's scores are merge ranks, so it
  split "come" into "▁co" "me". Each BPE piece is scored instead by the log of
  how often BPE itself uses it in the training text; a word BPE keeps whole is
  then one piece again, and a word never seen is spelled in smaller pieces.

Learning needs the `sentencepiece` package; the tokenizer itself runs
`tensorflow_text.FastSentencepieceTokenizer`, which holds the model as a
constant tensor of the graph, so a saved tokenizer (or a translator exported
with it) loads with only `tensorflow` and `tensorflow_text`. (The older
`tensorflow_text.SentencepieceTokenizer` keeps its model in a resource owned
by an op kernel: TensorFlow frees it whenever it clears its kernel cache, as
`tf.random.set_seed` and `keras.utils.set_random_seed` do, and the tokenizer
then fails with "Resource ... does not exist".)

```python
proto = learn_sentencepiece_model(english_sentences, vocab_size=8000)
paths = write_sentencepiece_files(proto, "runs/x/tokenizers", "target")
tokenizer = SentencePieceTokenizer(paths.model)
tokenizer.detokenize(tokenizer.tokenize(tf.constant(["Move files to the Trash…"])))
# [b"Move files to the Trash..."]
```
"""

from __future__ import annotations

import collections
import io
import itertools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text as text

from transformer.constants import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    SENTENCEPIECE_MODEL_TYPES,
    START_ID,
    UNK_ID,
)
from transformer.data.corpus import DataError
from transformer.data.tokenizer_base import TokenizerBase, tokenizer_function

logger = logging.getLogger(__name__)

__all__ = [
    "SentencePieceTokenizer",
    "SentencePieceFiles",
    "learn_sentencepiece_model",
    "write_sentencepiece_files",
    "MODEL_TYPES",
    "NORMALIZATIONS",
]

MODEL_TYPES = SENTENCEPIECE_MODEL_TYPES
NORMALIZATIONS = ("nmt_nfkc", "identity", "nfkc", "nmt_nfkc_cf", "nfkc_cf")
DEFAULT_MODEL_TYPE = "unigram"
DEFAULT_NORMALIZATION = "nmt_nfkc"
DEFAULT_CHARACTER_COVERAGE = 1.0
UNK_SURFACE = "[UNK]"

_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")

SentencePieceFiles = collections.namedtuple("SentencePieceFiles", ["model", "vocab"])
SentencePieceFiles.__doc__ = "Paths of a `.model` file and its `.vocab` text file."


def learn_sentencepiece_model(
    sentences: Iterable[str],
    vocab_size: int = 8000,
    model_type: str = DEFAULT_MODEL_TYPE,
    character_coverage: float = DEFAULT_CHARACTER_COVERAGE,
    normalization: str = DEFAULT_NORMALIZATION,
    byte_fallback: bool = False,
    num_threads: int = 1,
    extra_options: dict | None = None,
    grow_to_fit: bool = False,
) -> bytes:
    """Learns a SentencePiece model from text held in memory.

    Training is deterministic: the same sentences and arguments give the
    same bytes (all sentences are used, none sampled, on a fixed number of
    threads). If `vocab_size` is more than the text supports (a unigram model
    of a small corpus), the largest size SentencePiece allows is used instead,
    and logged.

    Args:
        sentences: the training text, one sentence per string.
        vocab_size: pieces wanted, the reserved tokens and (with
            `byte_fallback`) the 256 byte pieces included.
        model_type: `"unigram"` (default), `"bpe"`, `"char"` or `"word"`.
        character_coverage: the share of characters covered by pieces; the
            rest become bytes (or `[UNK]` without `byte_fallback`).
        normalization: a SentencePiece rule name, see the module docstring.
        byte_fallback: encode characters outside the vocabulary as bytes.
        num_threads: training threads; the model depends on this number.
        extra_options: more `SentencePieceTrainer.train` arguments.
        grow_to_fit: when `vocab_size` cannot hold every required character
            (a text in many scripts), learn that many pieces more than the
            characters need, and log it, instead of raising: for a size the
            user did not choose.

    Returns:
        The serialized `ModelProto`.

    Raises:
        DataError: if the sentences hold no text.
        ValueError: for a bad argument, or a `vocab_size` too small to hold
            every required character (the message names the minimum).
    """
    import sentencepiece as spm

    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}.")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}.")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise ValueError(f"vocab_size must be an integer, got {vocab_size!r}.")
    # SentencePiece reads one sentence per item and cannot take newlines in one.
    sentences = [" ".join(s.splitlines()) for s in sentences]
    if not any(s.strip() for s in sentences):
        raise DataError(
            f"Cannot learn a SentencePiece model: the {len(sentences)} training sentences "
            "hold no text (every one is empty or whitespace)."
        )
    options = dict(
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name=normalization,
        byte_fallback=byte_fallback,
        num_threads=num_threads,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        pad_piece=RESERVED_TOKENS[PAD_ID],
        unk_piece=RESERVED_TOKENS[UNK_ID],
        bos_piece=RESERVED_TOKENS[START_ID],
        eos_piece=RESERVED_TOKENS[END_ID],
        unk_surface=UNK_SURFACE,
        input_sentence_size=0,  # every sentence, no random sample
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    options.update(extra_options or {})

    def train(size: int) -> bytes:
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=size, **options
        )
        return model.getvalue()

    proto = _learn_or_shrink(train, vocab_size, len(sentences), grow_to_fit)
    return _score_as_unigram(proto, sentences) if model_type == "bpe" else proto


def _learn_or_shrink(train, vocab_size: int, num_sentences: int, grow_to_fit=False) -> bytes:
    """`train(vocab_size)`, or the largest size the text allows when that is too
    many; with `grow_to_fit`, `vocab_size` more than the characters need when
    that is too few."""
    try:
        return train(vocab_size)
    except RuntimeError as error:
        too_high = _TOO_HIGH.search(str(error))
        too_low = _TOO_LOW.search(str(error))
        if too_low and grow_to_fit:
            needed = int(too_low.group(2))
            logger.info(
                "vocab_size=%d is too small for this text, whose characters alone need %d "
                "pieces: learning %d pieces instead, %d more than the characters need.",
                vocab_size, needed, needed + vocab_size, vocab_size)
            return _learn_or_shrink(train, needed + vocab_size, num_sentences)
        if too_low:
            raise ValueError(
                f"vocab_size={vocab_size} is too small for this text: it needs at least "
                f"{too_low.group(2)} pieces (reserved tokens, byte pieces and every "
                "covered character). Increase vocab_size or lower character_coverage."
            ) from error
        if not too_high:
            raise
        largest = int(too_high.group(2))
    logger.info(
        "vocab_size=%d is more than %d sentences of training text support; "
        "learning a %d-piece SentencePiece model, the largest they allow.",
        vocab_size,
        num_sentences,
        largest,
    )
    return train(largest)


def _score_as_unigram(bpe_proto: bytes, sentences: list[str]) -> bytes:
    """A BPE model rewritten as a unigram model with the same pieces.

    Every normal piece is scored `log(uses / all uses)`, counting how often
    BPE's own segmentation of `sentences` uses it; pieces BPE never uses (the
    steps of its merges) get one score below every used piece. See the module
    docstring for why.
    """
    import math

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    processor = spm.SentencePieceProcessor(model_proto=bpe_proto)
    uses = collections.Counter(i for ids in processor.encode(sentences) for i in ids)
    total = sum(uses.values())
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(bpe_proto)
    unused = math.log(0.5 / total)
    for i, piece in enumerate(model.pieces):
        if piece.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL:
            piece.score = math.log(uses[i] / total) if uses[i] else unused
    model.trainer_spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    return model.SerializeToString()


def write_sentencepiece_files(model_proto: bytes, directory, stem: str) -> SentencePieceFiles:
    """Writes `<stem>.model` and a `<stem>.vocab` text file for people to read.

    The `.vocab` file is SentencePiece's own format: line `i` is piece `i`,
    a tab, and its score (log probability for unigram pieces).

    Args:
        model_proto: a serialized model from `learn_sentencepiece_model`.
        directory: where to write (created if needed).
        stem: file name without suffix, e.g. `"source"`.

    Returns:
        The two paths, as a `SentencePieceFiles(model, vocab)`.
    """
    import sentencepiece as spm

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    model_path = directory / f"{stem}.model"
    vocab_path = directory / f"{stem}.vocab"
    model_path.write_bytes(model_proto)
    lines = (
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
        for i in range(processor.get_piece_size())
    )
    vocab_path.write_text("".join(lines), encoding="utf-8")
    return SentencePieceFiles(str(model_path), str(vocab_path))


class SentencePieceTokenizer(TokenizerBase):
    """A SentencePiece tokenizer with the interface of `WordPieceTokenizer`.

    Wraps `tensorflow_text.FastSentencepieceTokenizer` and frames every
    sentence with `[START]` and `[END]` (the model's BOS and EOS pieces). All methods are
    `tf.function`s traced for fixed signatures, so they survive
    `tf.saved_model.save` and work on the reloaded object without this class
    or the `sentencepiece` package. Decoding is exact up to normalisation:
    `detokenize(tokenize(s))` is `s` after NFKC, with runs of spaces made one
    and leading or trailing spaces removed.

    Args:
        model_path: a `.model` file (serialized SentencePiece `ModelProto`)
            whose pieces 0-3 are `reserved_tokens`.
        vocab_path: its `.vocab` text file; `model_path` with the suffix
            `.vocab` if None. Kept as an asset for `get_vocab_path`.
        reserved_tokens: the special tokens, `[PAD] [UNK] [START] [END]`.

    Example:

    ```python
    tokenizer = SentencePieceTokenizer("target.model")
    ids = tokenizer.tokenize(tf.constant(["The man's café."]))  # int64 RaggedTensor
    tokenizer.lookup(ids)  # [[b"[START]", b"▁The", b"▁man", b"'", b"s", ...]]
    tokenizer.detokenize(ids)  # [b"The man's café."]
    ```
    """

    def __init__(self, model_path, vocab_path=None, reserved_tokens=RESERVED_TOKENS):
        super().__init__()
        model_path = os.fspath(model_path)
        vocab_path = (
            os.fspath(vocab_path) if vocab_path else str(Path(model_path).with_suffix(".vocab"))
        )
        if not Path(vocab_path).is_file():
            raise DataError(f"{vocab_path}: missing vocabulary file beside {model_path}.")
        model = Path(model_path).read_bytes()
        # No kernel-owned resource (see the module docstring): the model is a
        # constant of every traced function.
        self.tokenizer = text.FastSentencepieceTokenizer(model)
        pieces = [line.split("\t", 1)[0] for line in _read_lines(vocab_path)]
        reserved_tokens = list(reserved_tokens)
        if pieces[: len(reserved_tokens)] != reserved_tokens:
            raise DataError(
                f"{model_path}: pieces 0-{len(reserved_tokens) - 1} must be the reserved tokens "
                f"{reserved_tokens}, found {pieces[: len(reserved_tokens)]}."
            )
        if len(pieces) != int(self.tokenizer.vocab_size()):
            raise DataError(
                f"{vocab_path}: {len(pieces)} pieces, but the model {model_path} has "
                f"{int(self.tokenizer.vocab_size())}."
            )
        self._pieces = tf.constant(pieces)
        self._reserved_tokens = reserved_tokens
        self._model_file = model_path  # for `sample`; a plain string, not saved
        self._model_path = tf.saved_model.Asset(model_path)
        self._vocab_path = tf.saved_model.Asset(vocab_path)

        self._trace_signatures(self.get_model_path)

    def _split(self, strings):
        """Piece ids `(batch, (tokens))`, int64, for `tokenize` to frame."""
        return tf.cast(self.tokenizer.tokenize(strings), tf.int64)

    def sample(self, sentences: Sequence[str], alpha: float, seed: int) -> tf.RaggedTensor:
        """Splits sentences into piece ids the way `tokenize` does, but each
        segmentation drawn at random: subword regularisation (Kudo, 2018).

        Each sentence's segmentation is drawn from the unigram model's
        distribution over all of its segmentations, sharpened by `alpha`
        (`P(x)^alpha`): small `alpha` draws odd splits often ("▁la" "s" for
        "▁las"), large `alpha` mostly the best one. Runs eagerly through the
        `sentencepiece` package (the in-graph tokenizer cannot sample), on
        one thread, so the same `seed` gives the same ids.

        Args:
            sentences: the sentences, Python strings.
            alpha: the sharpness, > 0.
            seed: the draw's seed.

        Returns:
            An int64 `tf.RaggedTensor` `(batch, (tokens))`, every row
            `[START, ..., END]`, like `tokenize`'s.
        """
        import sentencepiece as spm

        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha!r}.")
        processor = spm.SentencePieceProcessor(model_file=self._model_file)
        spm.set_random_generator_seed(int(seed) % (2**32 - 1) + 1)
        rows = processor.encode(list(sentences), out_type=int, enable_sampling=True,
                                alpha=float(alpha), nbest_size=-1, num_threads=1)
        lengths = np.fromiter((len(row) + 2 for row in rows), np.int64, len(rows))
        values = np.fromiter(
            itertools.chain.from_iterable((START_ID, *row, END_ID) for row in rows),
            np.int64, int(lengths.sum()))
        return tf.RaggedTensor.from_row_lengths(values, lengths)

    def _join(self, ids):
        """Kept ids `(batch, (tokens))` to text with its original spacing and
        case, for `detokenize`; `[UNK]` shows as " ⁇ "."""
        return self.tokenizer.detokenize(tf.cast(ids, tf.int32))  # (batch,)

    @tokenizer_function
    def get_model_path(self):
        """Returns the path of the `.model` file, a scalar string tensor."""
        return self._model_path

    def _vocabulary(self):
        return self._pieces


def _read_lines(path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()
