"""The TensorFlow tutorial's recipe on a TSV corpus: the reference BLEU and time to beat.

The tutorial ("Neural machine translation with a Transformer and Keras") trains
its Transformer this way, and this script does the same on any
`source<TAB>target` train/valid/test files:

- WordPiece vocabularies of up to 8,000 per language learnt from the training
  pairs (`transformer.data.build_tokenizers`, equal to tensorflow_text's
  `bert_vocab_from_dataset`, lower-cased, accents stripped);
- the model of `bench/reference_models.py` (our architecture on
  `keras.layers.MultiHeadAttention`) at the tutorial's sizes (4 layers,
  d_model 128, 8 heads, dff 512, dropout 0.1) with the tutorial's
  `key_dim=d_model` (per-head depth 128, `--key-dim heads` for the paper's
  d_model / num_heads = 16);
- `CustomSchedule(d_model, 4000)` and Adam(0.9, 0.98, 1e-9), batch 64, float32,
  no label smoothing, the tutorial's masked loss and masked accuracy, 4 epochs,
  one validation pass per epoch;
- greedy decoding of the test sources, at most 64 tokens (the tutorial's
  `Translator` default `max_length=64`);
- sacrebleu BLEU of the detokenized output against the raw references,
  lower-cased 13a and cased 13a (and `train.py`'s normalized BLEU, for
  comparison): see `bench/common.py`.

Remaining differences from the tutorial, kept to share the project's pipeline:
the batches come from `transformer.data.batching` (a full shuffle of the pairs
every epoch instead of a 20,000-pair buffer; no pair of these corpora is
longer than the tutorial's 128 tokens), and the attention sublayers follow our
model (dropout on the sublayer output, none on the attention weights; the
paper's interleaved sinusoids).

Example:

    python bench/tutorial_recipe.py --data train.tsv --valid valid.tsv --test test.tsv \\
        --json bench/results/real_text_recipe.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import bleu_all_ways, length_report, machine  # noqa: E402
from reference_models import (  # noqa: E402
    KerasMHATransformer,
    TutorialTransformer,
    tutorial_masked_loss,
)

from transformer.constants import END_ID, PAD_ID, START_ID  # noqa: E402
from transformer.data import CorpusSource, build_tokenizers, load_corpus  # noqa: E402
from transformer.data.batching import batches_from_tokens, tokenize_pairs  # noqa: E402
from transformer.run import evaluation as _scoring  # noqa: E402,F401 - loaded now, not after training
from transformer.training import make_optimizer, masked_accuracy  # noqa: E402

TUTORIAL_MAX_TOKENS = 128  # the tutorial's MAX_TOKENS
# The tutorial's model sizes.
NUM_LAYERS, D_MODEL, NUM_HEADS, DFF, DROPOUT = 4, 128, 8, 512, 0.1


def _greedy_loop(next_token, batch, max_length):
    """`[START]` then the arg-max tokens of `next_token(output_so_far)` for a batch,
    `[PAD]` after a sentence's `[END]`, at most `max_length` steps.

    Returns `(output, lengths)`: int64 numpy `(batch, 1 + steps)` with `[START]`,
    and each sentence's output tokens (`[END]` included).
    """
    output = np.full([batch, 1], START_ID, np.int64)
    finished = np.zeros([batch], bool)
    lengths = np.zeros([batch], np.int64)
    for _ in range(max_length):
        token = next_token(tf.constant(output)).numpy()  # (batch,)
        token = np.where(finished, PAD_ID, token)
        output = np.concatenate([output, token[:, None]], axis=1)
        lengths += ~finished
        finished |= token == END_ID
        if finished.all():
            break
    return output, lengths


def greedy_translate(model, tokenizers, sentences, max_length=64, batch_size=128):
    """Greedy decoding of `sentences` with the reference model, at most `max_length`
    output tokens ([END] included); the encoder runs once per batch.

    Returns `(texts, output_lengths, input_lengths)` in the order of `sentences`.
    """

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def encode(context_tokens):
        src_keep = tf.not_equal(context_tokens, PAD_ID)[:, tf.newaxis, :]  # (batch, 1, src)
        context = model.enc_embedding(context_tokens)
        for layer in model.enc_layers:
            context = layer(context, src_keep, training=False)  # (batch, src, d_model)
        return context

    @tf.function(input_signature=[
        tf.TensorSpec([None, None, None], tf.float32),
        tf.TensorSpec([None, None], tf.int64),
        tf.TensorSpec([None, None], tf.int64),
    ])
    def next_token(context, context_tokens, x_tokens):
        src_keep = tf.not_equal(context_tokens, PAD_ID)[:, tf.newaxis, :]
        tgt_keep = tf.not_equal(x_tokens, PAD_ID)[:, tf.newaxis, :]
        x = model.dec_embedding(x_tokens)
        for layer in model.dec_layers:
            x = layer(x, context, tgt_keep, src_keep, training=False)
        logits = model.final_layer(x[:, -1:, :])  # (batch, 1, vocab)
        return tf.argmax(logits[:, 0, :], axis=-1, output_type=tf.int64)  # (batch,)

    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i].split()))
    texts = [""] * len(sentences)
    out_lengths = [0] * len(sentences)
    in_lengths = [0] * len(sentences)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        context_tokens = tokenizers.source.tokenize(
            tf.constant([sentences[i] for i in indices])).to_tensor(default_value=PAD_ID)
        context = encode(context_tokens)
        output, lengths = _greedy_loop(
            lambda x, c=context, t=context_tokens: next_token(c, t, x), len(indices), max_length)
        decoded = tokenizers.target.detokenize(tf.constant(output)).numpy()
        src_len = np.count_nonzero(context_tokens.numpy() != PAD_ID, axis=1)
        for j, i in enumerate(indices):
            texts[i] = decoded[j].decode("utf-8")
            out_lengths[i] = int(lengths[j])
            in_lengths[i] = int(src_len[j])
    return texts, out_lengths, in_lengths


def greedy_translate_tutorial(model, tokenizers, sentences, max_length=64):
    """Greedy decoding with the tutorial's layout (`bench/reference_models.py`), as its
    `Translator` does it: the whole model runs again on the output so far at every
    step, at most `max_length` tokens ([END] included).

    The tutorial translates one sentence at a time, so its sources carry no
    padding. Here sentences of the same source length share a batch, which
    keeps that: a model whose padding mask Keras dropped would otherwise see
    padding that the tutorial's decoding never shows it.

    Returns `(texts, output_lengths, input_lengths)` in the order of `sentences`.
    """

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)] * 2)
    def next_token(context_tokens, x_tokens):
        logits = model((context_tokens, x_tokens), training=False)  # (batch, tgt, vocab)
        return tf.argmax(logits[:, -1, :], axis=-1, output_type=tf.int64)  # (batch,)

    tokens = [t.numpy() for t in tokenizers.source.tokenize(tf.constant(sentences))]
    by_length = {}
    for i, t in enumerate(tokens):
        by_length.setdefault(len(t), []).append(i)
    texts = [""] * len(sentences)
    out_lengths = [0] * len(sentences)
    in_lengths = [len(t) for t in tokens]
    for indices in by_length.values():
        context_tokens = tf.constant(np.stack([tokens[i] for i in indices]))
        output, lengths = _greedy_loop(
            lambda x, t=context_tokens: next_token(t, x), len(indices), max_length)
        decoded = tokenizers.target.detokenize(tf.constant(output)).numpy()
        for j, i in enumerate(indices):
            texts[i] = decoded[j].decode("utf-8")
            out_lengths[i] = int(lengths[j])
    return texts, out_lengths, in_lengths


class EpochTimer(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(round(time.perf_counter() - self._start, 1))


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--valid", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--key-dim", choices=("d_model", "heads"), default="d_model",
                        help="per-head depth: d_model (the tutorial's) or d_model/num_heads "
                             "(the paper's and ours)")
    parser.add_argument("--model", choices=("reference", "tutorial"), default="reference",
                        help="reference: our architecture on keras MultiHeadAttention with "
                             "explicit masks (bench/reference_models.py); tutorial: the "
                             "tutorial's own layout with Keras's implicit masks "
                             "(bench/reference_models.py; always key_dim=d_model)")
    parser.add_argument("--warmup-steps", type=int, default=4000)
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-decode", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--json", default=None, help="write the results here")
    return parser


def prepare_data(args):
    """The corpus, its WordPiece tokenizers (and the seconds they took) and the
    training and validation batches, as the tutorial prepares them."""
    corpus = load_corpus(CorpusSource(data=args.data, valid=args.valid, test=args.test,
                                       seed=args.seed))
    t0 = time.perf_counter()
    tokenizers = build_tokenizers(corpus.train, args.vocab_size, kind="wordpiece")
    tokenizer_seconds = time.perf_counter() - t0
    train_tokens = tokenize_pairs(corpus.train, tokenizers, TUTORIAL_MAX_TOKENS)
    valid_tokens = tokenize_pairs(corpus.valid, tokenizers, TUTORIAL_MAX_TOKENS)
    train_ds = batches_from_tokens(train_tokens, args.batch_size, shuffle=True, seed=args.seed)
    valid_ds = batches_from_tokens(valid_tokens, args.batch_size, shuffle=False)
    if args.steps_per_epoch:
        train_ds = train_ds.repeat()
    return corpus, tokenizers, tokenizer_seconds, train_ds, valid_ds


def build_model(args, parser, key_dim, src_vocab, tgt_vocab):
    """The model `--model` names, compiled the tutorial's way, and its decoding function."""
    if args.model == "tutorial":
        if args.key_dim != "d_model":
            parser.error("--model tutorial has the tutorial's key_dim=d_model only")
        model = TutorialTransformer(NUM_LAYERS, D_MODEL, NUM_HEADS, DFF, src_vocab, tgt_vocab,
                                    dropout_rate=DROPOUT)
        translate = greedy_translate_tutorial
    else:
        model = KerasMHATransformer(NUM_LAYERS, D_MODEL, NUM_HEADS, DFF, src_vocab, tgt_vocab,
                                    dropout_rate=DROPOUT, key_dim=key_dim)
        translate = greedy_translate
    model.compile(
        optimizer=make_optimizer(D_MODEL, args.warmup_steps),  # CustomSchedule + Adam
        loss=tutorial_masked_loss(args.label_smoothing),
        metrics=[masked_accuracy],
        jit_compile=False,
    )
    return model, translate


def train(model, args, train_ds, valid_ds):
    """`model.fit` with one validation pass per epoch; its times, steps and history."""
    timer = EpochTimer()
    t0, cpu0 = time.perf_counter(), time.process_time()
    history = model.fit(train_ds, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        validation_data=valid_ds, callbacks=[timer], verbose=2)
    train_seconds = time.perf_counter() - t0
    train_cpu_seconds = time.process_time() - cpu0
    return {
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(train_cpu_seconds, 1),
        "epoch_seconds": timer.seconds,
        "steps": int(model.optimizer.iterations.numpy()),
        "history": {k: [round(float(v), 4) for v in vals] for k, vals in history.history.items()},
    }


def settings(args, key_dim, src_vocab, tgt_vocab, params):
    """The settings of the run, as its JSON records them."""
    return {
        "model": ("bench/reference_models.TutorialTransformer" if args.model == "tutorial"
                  else "bench/reference_models.KerasMHATransformer"),
        "num_layers": NUM_LAYERS, "d_model": D_MODEL, "num_heads": NUM_HEADS,
        "dff": DFF, "dropout_rate": DROPOUT, "key_dim": key_dim,
        "warmup_steps": args.warmup_steps, "label_smoothing": args.label_smoothing,
        "batch_size": args.batch_size, "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch, "vocab_size_limit": args.vocab_size,
        "source_vocab": src_vocab, "target_vocab": tgt_vocab, "parameters": params,
        "max_decode": args.max_decode, "seed": args.seed,
    }


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)

    key_dim = D_MODEL if args.key_dim == "d_model" else D_MODEL // NUM_HEADS
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(args.seed)
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    machine_start = machine()

    corpus, tokenizers, tokenizer_seconds, train_ds, valid_ds = prepare_data(args)
    src_vocab = int(tokenizers.source.get_vocab_size())
    tgt_vocab = int(tokenizers.target.get_vocab_size())

    keras.utils.set_random_seed(args.seed)
    model, translate = build_model(args, parser, key_dim, src_vocab, tgt_vocab)
    (context, x), _ = next(iter(train_ds))
    model((context, x))
    params = model.count_params()
    print(f"reference model key_dim={key_dim}: {params:,} parameters; vocab {src_vocab}/"
          f"{tgt_vocab}; {len(corpus.train)} training pairs", flush=True)

    training = train(model, args, train_ds, valid_ds)
    machine_after_train = machine()

    t0 = time.perf_counter()
    sources = [s for s, _ in corpus.test]
    references = [r for _, r in corpus.test]
    texts, out_lengths, in_lengths = translate(
        model, tokenizers, sources, max_length=args.max_decode)
    decode_seconds = time.perf_counter() - t0
    if args.json:  # the translations and weights first: nothing of a long run is lost
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).with_suffix(".translations.txt").write_text(
            "".join(t + "\n" for t in texts), encoding="utf-8")
        model.save_weights(Path(args.json).with_suffix(".weights.h5"))
    result = {
        "what": "the TensorFlow tutorial's recipe (bench/tutorial_recipe.py)",
        "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "date": started_at,
        "machine_start": machine_start,
        "machine_after_train": machine_after_train,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "precision": "float32",
        "settings": settings(args, key_dim, src_vocab, tgt_vocab, params),
        "tokenizer_seconds": round(tokenizer_seconds, 1),
        **training,
        "decode_seconds": round(decode_seconds, 1),
        "test": bleu_all_ways(texts, references),
        "lengths": length_report(out_lengths, in_lengths, args.max_decode),
        "examples": [
            {"source": s, "reference": r, "translation": t}
            for s, r, t in zip(sources[: args.examples], references[: args.examples],
                               texts[: args.examples], strict=True)
        ],
    }
    # Cut at input length + 50 (paper, section 6.1): the same as decoding with that cap.
    cut = [min(o, i + 50) for o, i in zip(out_lengths, in_lengths, strict=True)]
    result["lengths"]["outputs_longer_than_input_plus_50"] = int(
        sum(o > c for o, c in zip(out_lengths, cut, strict=True)))
    print(json.dumps(result, indent=1, ensure_ascii=False), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
