"""Everything that turns text into batches, offline by default.

- `corpus`: `Corpus` (train/valid/test sentence pairs) and `DataError`.
- `source`: `CorpusSource`, which corpus to read and how (files, columns,
  seed, held-out limits), the one argument of the loaders.
- `toy`: the generated toy Portuguese-English corpus, the offline default.
- `tsv`: your own `source<TAB>target` files.
- `streamed`: a TSV corpus of any size, read as a stream.
- `tfds_ted`: the tutorial's `ted_hrlr_translate/pt_to_en` through TFDS.
- `loading`: `load_corpus`, which picks one of the above, and
  `read_training_corpus`, a run's corpus (`training_corpus`: from its config).
- `tokenizers`: `build_tokenizers`, `save_tokenizers` and `load_tokenizers`,
  for either kind of subword tokenizer.
- `sentencepiece`: `SentencePieceTokenizer`, reversible (the default kind).
- `wordpiece`: `WordPieceTokenizer`, the tutorial's lower-casing one.
- `tokenizer_base`: what the two tokenizers share.
- `batching`: `((context, x), labels)` datasets for training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer._lazy import lazy_exports
from transformer.constants import DEFAULT_TOKENIZER, DEFAULT_VOCAB_SIZE, TOKENIZER_KINDS
from transformer.data.corpus import Corpus, DataError, Pair
from transformer.data.source import DATASETS, CorpusSource
from transformer.data.tfds_ted import TED_HRLR_PT_EN, load_ted_hrlr, load_tfds_translation
from transformer.data.tsv import (
    TsvStats,
    load_tsv_corpus,
    read_tsv,
    read_tsv_with_stats,
    split_pairs,
    write_tsv,
)

# Imported from their modules on first use, for two reasons. The tokenizers and
# batching import TensorFlow, and the package's own modules that do not (corpus,
# source, tsv, splits, streamed: the configuration reads them while train.py
# parses its options) must not start it. And `python -m transformer.data.toy`
# must find `toy` (and `loading`, which imports it) not yet imported, so that
# the module runs once. The `TYPE_CHECKING` block at the end names them for
# readers and static tools (tests/test_structure.py checks that the two agree).
_LAZY = {
    "generate_toy_corpus": "toy",
    "sample_toy_pairs": "toy",
    "count_toy_sentences": "toy",
    "toy_vocabulary": "toy",
    "load_corpus": "loading",
    "read_training_corpus": "loading",
    "training_corpus": "loading",
    "learn_wordpiece_vocab": "wordpiece",
    "WordPieceTokenizer": "wordpiece",
    "build_vocab": "wordpiece",
    "word_counts": "wordpiece",
    "TranslationTokenizers": "tokenizers",
    "build_tokenizers": "tokenizers",
    "save_tokenizers": "tokenizers",
    "load_tokenizers": "tokenizers",
    "tokenizer_kind": "tokenizers",
    "SentencePieceTokenizer": "sentencepiece",
    "learn_sentencepiece_model": "sentencepiece",
    "write_sentencepiece_files": "sentencepiece",
    "TokenizedPairs": "batching",
    "tokenize_pairs": "batching",
    "batches_from_tokens": "batching",
    "make_batches": "batching",
}

__all__ = [
    "DEFAULT_TOKENIZER", "DEFAULT_VOCAB_SIZE", "TOKENIZER_KINDS", "Corpus", "DataError", "Pair",
    "DATASETS", "CorpusSource", "TED_HRLR_PT_EN", "load_ted_hrlr", "load_tfds_translation",
    "TsvStats", "load_tsv_corpus", "read_tsv", "read_tsv_with_stats", "split_pairs", "write_tsv",
    *_LAZY,
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


if TYPE_CHECKING:  # the names of `_LAZY`, for readers and static tools
    from transformer.data.batching import (  # noqa: F401
        TokenizedPairs,
        batches_from_tokens,
        make_batches,
        tokenize_pairs,
    )
    from transformer.data.loading import (  # noqa: F401
        load_corpus,
        read_training_corpus,
        training_corpus,
    )
    from transformer.data.sentencepiece import (  # noqa: F401
        SentencePieceTokenizer,
        learn_sentencepiece_model,
        write_sentencepiece_files,
    )
    from transformer.data.tokenizers import (  # noqa: F401
        TranslationTokenizers,
        build_tokenizers,
        load_tokenizers,
        save_tokenizers,
        tokenizer_kind,
    )
    from transformer.data.toy import (  # noqa: F401
        count_toy_sentences,
        generate_toy_corpus,
        sample_toy_pairs,
        toy_vocabulary,
    )
    from transformer.data.wordpiece import (  # noqa: F401
        WordPieceTokenizer,
        build_vocab,
        learn_wordpiece_vocab,
        word_counts,
    )
