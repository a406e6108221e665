"""Everything that turns text into batches, offline by default.

- `corpus`: `Corpus` (train/valid/test sentence pairs) and `DataError`.
- `toy`: the generated toy Portuguese-English corpus, the offline default.
- `tsv`: your own `source<TAB>target` files.
- `tfds_ted`: the tutorial's `ted_hrlr_translate/pt_to_en` through TFDS.
- `source`: `CorpusSource`, which corpus to read and how (files, columns,
  seed, held-out limits), the one argument of the loaders.
- `loading`: `load_corpus`, which picks one of the above, and
  `read_training_corpus`, a run's corpus (`training_corpus`: from its config).
- `tokenizers`: `build_tokenizers`, `save_tokenizers` and `load_tokenizers`,
  for either kind of subword tokenizer.
- `sentencepiece`: `SentencePieceTokenizer`, reversible (the default kind).
- `wordpiece`: `WordPieceTokenizer`, the tutorial's lower-casing one.
- `tokenizer_base`: what the two tokenizers share.
- `batching`: `((context, x), labels)` datasets for training.

The names below are imported from their modules on first use: reading a TSV
file does not import tensorflow_text or tensorflow_datasets, and
`python -m transformer.data.toy` runs its module only once.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Corpus": "corpus",
    "DataError": "corpus",
    "Pair": "corpus",
    "generate_toy_corpus": "toy",
    "sample_toy_pairs": "toy",
    "count_toy_sentences": "toy",
    "toy_vocabulary": "toy",
    "read_tsv": "tsv",
    "read_tsv_with_stats": "tsv",
    "TsvStats": "tsv",
    "split_pairs": "tsv",
    "load_tsv_corpus": "tsv",
    "write_tsv": "tsv",
    "load_ted_hrlr": "tfds_ted",
    "load_tfds_translation": "tfds_ted",
    "TED_HRLR_PT_EN": "tfds_ted",
    "CorpusSource": "source",
    "load_corpus": "loading",
    "read_training_corpus": "loading",
    "training_corpus": "loading",
    "DATASETS": "source",
    "learn_wordpiece_vocab": "wordpiece",
    "WordPieceTokenizer": "wordpiece",
    "TranslationTokenizers": "tokenizers",
    "build_tokenizers": "tokenizers",
    "build_vocab": "wordpiece",
    "word_counts": "wordpiece",
    "save_tokenizers": "tokenizers",
    "load_tokenizers": "tokenizers",
    "DEFAULT_VOCAB_SIZE": "tokenizers",
    "TOKENIZER_KINDS": "tokenizers",
    "DEFAULT_TOKENIZER": "tokenizers",
    "tokenizer_kind": "tokenizers",
    "SentencePieceTokenizer": "sentencepiece",
    "learn_sentencepiece_model": "sentencepiece",
    "write_sentencepiece_files": "sentencepiece",
    "TokenizedPairs": "batching",
    "tokenize_pairs": "batching",
    "batches_from_tokens": "batching",
    "make_batches": "batching",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
