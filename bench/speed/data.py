"""`bench/train_speed.py data`: vocabulary building and the input pipeline.

What it measures, in one process:

1. **Vocabulary building** (`build_tokenizers`, both languages): on the toy
   corpus (20,000 pairs) and on 50,000-pair synthetic corpora: "words" has a
   Zipf-distributed vocabulary of stems and endings like natural text (about
   45,000 distinct words a side, 19 words a sentence, TED-like), "letters" is
   a worst case of random letter strings with little shared structure. With
   `--reference`, the source side is also learnt with tensorflow_text's own
   `bert_vocab_from_dataset` (the tutorial's tool, the same vocabulary) for
   the ratio. With `--data FILE.tsv`, your corpus is timed too.
2. **Input pipeline**: tokenizing the toy training set once, then one epoch of
   `batches_from_tokens` (batches of 64), against one epoch of the tutorial's
   pipeline (tokenizing inside `tf.data` every epoch) and against training on
   the same batches (`train_on_batch` of the "toy" preset Transformer, the
   median step after warm-up). The pipeline must deliver a batch at least 10x
   faster than a training step consumes it.

Commands:
    python bench/train_speed.py data --quick          # toy only, ~1 min
    python bench/train_speed.py data                  # + 50,000-pair corpora, a few minutes
    python bench/train_speed.py data --reference      # + tensorflow_text's learner (slow)
    python bench/train_speed.py data --data por.tsv --source-column 1 --target-column 0
"""

from __future__ import annotations

import logging
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from transformer.constants import RESERVED_TOKENS  # noqa: E402
from transformer.data import (  # noqa: E402
    batches_from_tokens,
    build_tokenizers,
    generate_toy_corpus,
    read_tsv,
    tokenize_pairs,
)


def synthetic_pairs(n: int, kind: str, seed: int = 0) -> list[tuple[str, str]]:
    """`n` pairs of made-up text; both sides independent, the same statistics.

    Args:
        n: number of pairs.
        kind: "words" (stems x endings, Zipf, like natural text) or "letters"
            (random letter strings, a worst case for the learner).
        seed: the random seed.
    """
    rng = random.Random(seed)

    def lexicon(alphabet_consonants, vowels, endings, size):
        words = set()
        while len(words) < size:
            if kind == "words":
                stem = "".join(
                    rng.choice(alphabet_consonants) + rng.choice(vowels)
                    for _ in range(rng.randint(1, 4))
                )
                words.add(stem + rng.choice(endings))
            else:
                letters = alphabet_consonants + vowels
                words.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 12))))
        words = sorted(words)
        rng.shuffle(words)
        return words

    def side(consonants, vowels, endings, size, punctuation):
        words = lexicon(consonants, vowels, endings, size)
        weights = np.cumsum(1.0 / np.arange(1, len(words) + 1))
        weights /= weights[-1]
        sentences = []
        for _ in range(n):
            length = rng.randint(5, 34)
            picks = np.searchsorted(weights, [rng.random() for _ in range(length)])
            sentence = " ".join(words[i] for i in picks)
            sentences.append(sentence + " " + rng.choice(punctuation))
        return sentences

    pt = side(
        "bcdfgjlmnprstvxz",
        "aeiouãáéêíóõú",
        ["", "s", "a", "as", "ção", "ções", "mente", "ando", "ou", "am", "inho"],
        30000,
        ".?!",
    )
    en = side(
        "bcdfghjklmnprstvwy",
        "aeiouy",
        ["", "s", "ed", "ing", "ly", "tion", "er", "est", "'s"],
        25000,
        ".?!",
    )
    return list(zip(pt, en, strict=True))


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def bench_vocab(name, pairs, vocab_size, reference: bool, rows):
    n_words = [
        len({w for s in side for w in s.lower().split()}) for side in zip(*pairs, strict=True)
    ]
    tokenizers, seconds = timed(build_tokenizers, pairs, vocab_size, kind="wordpiece")
    sizes = (int(tokenizers.source.get_vocab_size()), int(tokenizers.target.get_vocab_size()))
    row = {
        "corpus": name,
        "pairs": len(pairs),
        "distinct words (src/tgt)": f"{n_words[0]:,}/{n_words[1]:,}",
        "vocab (src/tgt)": f"{sizes[0]}/{sizes[1]}",
        "build_tokenizers, both sides (s)": f"{seconds:.1f}",
    }
    if reference:
        from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

        dataset = tf.data.Dataset.from_tensor_slices([s for s, _ in pairs]).batch(1000).prefetch(2)
        vocab, ref_seconds = timed(
            bert_vocab_from_dataset.bert_vocab_from_dataset,
            dataset,
            vocab_size=vocab_size,
            reserved_tokens=list(RESERVED_TOKENS),
            bert_tokenizer_params={"lower_case": True},
        )
        ours_path = tokenizers.source.get_vocab_path().numpy().decode()
        same = Path(ours_path).read_text("utf-8").splitlines() == vocab
        row["tensorflow_text, source side only (s)"] = f"{ref_seconds:.1f}"
        row["same vocab"] = "yes" if same else "NO"
    rows.append(row)
    logging.info("%s", row)
    return tokenizers


def tutorial_pipeline(pairs, tokenizers, batch_size, max_tokens):
    """The tutorial's make_batches: tokenizes inside tf.data on every epoch."""

    def prepare(pt, en):
        pt = tokenizers.source.tokenize(pt)[:, :max_tokens].to_tensor()
        en = tokenizers.target.tokenize(en)[:, : max_tokens + 1]
        return (pt, en[:, :-1].to_tensor()), en[:, 1:].to_tensor()

    sources = [s for s, _ in pairs]
    targets = [t for _, t in pairs]
    return (
        tf.data.Dataset.from_tensor_slices((sources, targets))
        .shuffle(len(pairs), seed=0)
        .batch(batch_size)
        .map(prepare, tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def bench_pipeline(corpus, tokenizers, batch_size, max_tokens, train_steps, rows):
    tokenized, tokenize_seconds = timed(tokenize_pairs, corpus.train, tokenizers, max_tokens)
    dataset = batches_from_tokens(tokenized, batch_size, shuffle=True, seed=0)
    epochs = []
    for _ in range(3):
        count, seconds = timed(lambda: sum(1 for _ in dataset))
        epochs.append(seconds)
    epoch_seconds = statistics.median(epochs)
    batch_ms = 1000 * epoch_seconds / count

    tutorial = tutorial_pipeline(corpus.train, tokenizers, batch_size, max_tokens)
    tutorial_epochs = [timed(lambda: sum(1 for _ in tutorial))[1] for _ in range(2)]
    tutorial_seconds = statistics.median(tutorial_epochs)

    from transformer.model import Transformer
    from transformer.model_config import PRESETS
    from transformer.training import make_optimizer, masked_accuracy, masked_loss

    keras.utils.set_random_seed(0)
    preset = PRESETS["toy"]
    model = Transformer(
        num_layers=preset.num_layers,
        d_model=preset.d_model,
        num_heads=preset.num_heads,
        dff=preset.dff,
        input_vocab_size=int(tokenizers.source.get_vocab_size()),
        target_vocab_size=int(tokenizers.target.get_vocab_size()),
        max_length=max(preset.max_length, max_tokens + 1),
        dropout_rate=preset.dropout_rate,
    )
    model.compile(
        optimizer=make_optimizer(preset.d_model), loss=masked_loss, metrics=[masked_accuracy]
    )
    batches = list(dataset.take(train_steps + 5))
    step_times = []
    for index, ((context, x), labels) in enumerate(batches):
        _, seconds = timed(model.train_on_batch, (context, x), labels)
        if index >= 5:  # warm-up: tracing and the first steps
            step_times.append(seconds)
    step_ms = 1000 * statistics.median(step_times)
    rows.append(
        {
            "pairs": len(corpus.train),
            "batch": batch_size,
            "tokenize once (s)": f"{tokenize_seconds:.2f}",
            "epoch, ours (s)": f"{epoch_seconds:.3f}",
            "epoch, tutorial pipeline (s)": f"{tutorial_seconds:.3f}",
            "ours vs tutorial": f"{tutorial_seconds / epoch_seconds:.1f}x faster",
            "ms per batch, ours": f"{batch_ms:.3f}",
            "ms per training step (toy preset)": f"{step_ms:.1f}",
            "pipeline vs training": f"{step_ms / batch_ms:.0f}x faster",
        }
    )


def markdown(rows) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(k, "")) for k in keys) + " |")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="toy corpus only")
    parser.add_argument(
        "--reference", action="store_true", help="also time tensorflow_text's learner"
    )
    parser.add_argument("--data", help="also time your own TSV corpus")
    parser.add_argument("--source-column", type=int, default=0)
    parser.add_argument("--target-column", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--train-steps", type=int, default=30, help="timed training steps")


def run(args, parser=None) -> int:
    """The `data` mode: the input pipeline timed, a Markdown table printed."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    print(
        f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    vocab_rows, pipeline_rows = [], []
    corpus = generate_toy_corpus()
    tokenizers = bench_vocab("toy", corpus.train, args.vocab_size, args.reference, vocab_rows)
    if not args.quick:
        for kind in ("words", "letters"):
            pairs = synthetic_pairs(50000, kind)
            bench_vocab(f"synthetic {kind}", pairs, args.vocab_size, args.reference, vocab_rows)
    if args.data:
        pairs = read_tsv(args.data, args.source_column, args.target_column, skip_bad_lines=True)
        bench_vocab(Path(args.data).name, pairs, args.vocab_size, args.reference, vocab_rows)
    print("\nVocabulary building\n")
    print(markdown(vocab_rows))

    bench_pipeline(
        corpus, tokenizers, args.batch_size, args.max_tokens, args.train_steps, pipeline_rows
    )
    print("\nInput pipeline (toy corpus)\n")
    print(markdown(pipeline_rows))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0

