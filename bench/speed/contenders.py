"""The contenders of `bench/train_speed.py keras` and the batches they train on.

Each contender is built and compiled the way `train.py` builds and compiles
ours: `ours` (`transformer.Transformer`), `keras_mha` (the reference of the
bars, bench/reference_models.py), `keras_hub` (keras-hub's blocks, when
installed) and `baseline` (`transformer/` as of a git revision, loaded by
`load_baseline`). `WORKLOADS` gives the batch shapes of the two presets.

Not part of the library.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from common import REPO, BenchError
from reference_models import (
    KerasMHATransformer,
    RefPositionalEmbedding,
    tutorial_masked_loss,
)

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.model import Transformer
from transformer.model_config import TransformerConfig
from transformer.run.recipes import TOY_DEFAULTS
from transformer.training import MaskedLoss, make_optimizer, masked_accuracy

CONTENDERS = ("ours", "keras_mha", "keras_hub")
REFERENCE = "keras_mha"

# Vocabulary sizes and lengths of the benchmark batches.
# tutorial: the tutorial's subword tokenizers (ted_hrlr_translate/pt_to_en) have
#   7765 Portuguese and 7010 English tokens; batch 64 x 64 tokens.
# toy: the toy corpus has about 100 Portuguese and 70 English words
#   (transformer/data/toy.py) plus the 4 reserved tokens; sentences have at most
#   16 words, so a padded batch of 64 is about 20 tokens long.
WORKLOADS = {
    "tutorial": {"input_vocab": 7765, "target_vocab": 7010, "batch": 64, "seq_len": 64},
    "toy": {"input_vocab": 105, "target_vocab": 73, "batch": 64, "seq_len": 20},
}

# The paper's label smoothing (0.1, section 5.4), train.py's default on the toy
# corpus. (`RunConfig`'s own default is None: the dataset's recipe decides.)
LABEL_SMOOTHING = TOY_DEFAULTS["label_smoothing"]


class KerasHubTransformer(keras.Model):
    """The same model on keras-hub's `TransformerEncoder`/`TransformerDecoder` blocks."""

    def __init__(self, num_layers, d_model, num_heads, dff, input_vocab_size,
                 target_vocab_size, max_length, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        import keras_hub

        policy = self.dtype_policy
        common = dict(intermediate_dim=dff, num_heads=num_heads, dropout=dropout_rate,
                      activation="relu", layer_norm_epsilon=1e-6, normalize_first=False,
                      dtype=policy)
        self.enc_embedding = RefPositionalEmbedding(input_vocab_size, d_model, max_length,
                                                    dtype=policy)
        self.dec_embedding = RefPositionalEmbedding(target_vocab_size, d_model, max_length,
                                                    dtype=policy)
        self.enc_dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.dec_dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.enc_layers = [keras_hub.layers.TransformerEncoder(**common) for _ in range(num_layers)]
        self.dec_layers = [keras_hub.layers.TransformerDecoder(**common) for _ in range(num_layers)]
        self.final_layer = keras.layers.Dense(target_vocab_size, dtype=policy, name="final_layer")

    def call(self, inputs, training=None):
        context_tokens, x_tokens = inputs
        src_keep = tf.not_equal(context_tokens, PAD_ID)  # (batch, input_len), True = attend
        tgt_keep = tf.not_equal(x_tokens, PAD_ID)  # (batch, target_len)
        context = self.enc_dropout(self.enc_embedding(context_tokens), training=training)
        for layer in self.enc_layers:
            context = layer(context, padding_mask=src_keep, training=training)
        x = self.dec_dropout(self.dec_embedding(x_tokens), training=training)
        for layer in self.dec_layers:
            x = layer(x, context, decoder_padding_mask=tgt_keep, encoder_padding_mask=src_keep,
                      training=training)
        return tf.cast(self.final_layer(x), tf.float32)  # (batch, target_len, vocab)


_BASELINE = {}  # the baseline's Transformer class, once `load_baseline` ran


def load_baseline(revision: str):
    """Imports `transformer/` as of git `revision` as the package `transformer_baseline`.

    The files come from `git archive` into a temporary directory; their
    `transformer` imports and Keras registrations are renamed so that both
    versions live in one process and can be timed side by side (contender
    `baseline`), with the baseline's own model, loss and optimizer.
    """
    import atexit
    import re
    import shutil
    import tarfile
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="train_speed_baseline_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "transformer"],
                             capture_output=True, check=False)
    if archive.returncode:
        raise BenchError(f"git archive {revision} failed: {archive.stderr.decode().strip()}")
    tar_path = root / "baseline.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(root, filter="data")
    package = root / "transformer"
    for path in package.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\b(from|import) transformer\b", r"\1 transformer_baseline", text)
        text = text.replace('package="transformer"', 'package="transformer_baseline"')
        path.write_text(text)
    package.rename(root / "transformer_baseline")
    sys.path.insert(0, str(root))
    import importlib

    _BASELINE["Transformer"] = importlib.import_module("transformer_baseline.model").Transformer
    training = importlib.import_module("transformer_baseline.training")
    for name in ("MaskedLoss", "masked_accuracy"):
        _BASELINE[name] = getattr(training, name)
    make_optimizer_of = getattr(training, "make_optimizer", None)
    if make_optimizer_of is None:  # revisions that kept it beside the kernels
        make_optimizer_of = importlib.import_module(
            "transformer_baseline.kernels.optimizers").make_optimizer
    _BASELINE["make_optimizer"] = make_optimizer_of
    _BASELINE["revision"] = revision


def baseline_revision():
    """The git revision `load_baseline` loaded, or None."""
    return _BASELINE.get("revision")


def keras_hub_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("keras_hub") is not None


def build_model(contender, cfg: TransformerConfig, work, precision):
    """A contender, compiled the way train.py compiles ours.

    `ours` trains with the library's `MaskedLoss`; `keras_mha` and `keras_hub`
    with the tutorial's masked Keras cross-entropy (`tutorial_masked_loss`),
    both at train.py's label smoothing. A `+our_loss` suffix gives a Keras
    contender our `MaskedLoss` instead, so that only the models differ.
    `baseline` uses the model, loss and optimizer of the baseline revision.
    """
    contender, _, variant = contender.partition("+")
    kwargs = dict(
        num_layers=cfg.num_layers, d_model=cfg.d_model, num_heads=cfg.num_heads, dff=cfg.dff,
        input_vocab_size=work["input_vocab"], target_vocab_size=work["target_vocab"],
        max_length=max(cfg.max_length, work["seq_len"] + 1), dropout_rate=cfg.dropout_rate,
        dtype=precision,
    )
    if contender == "baseline":
        model = _BASELINE["Transformer"](**kwargs)
        model.compile(optimizer=_BASELINE["make_optimizer"](cfg.d_model),
                      loss=_BASELINE["MaskedLoss"](LABEL_SMOOTHING),
                      metrics=[_BASELINE["masked_accuracy"]])
        return model
    cls = {"ours": Transformer, "keras_mha": KerasMHATransformer,
           "keras_hub": KerasHubTransformer}[contender]
    model = cls(**kwargs)
    if contender == "ours" or variant == "our_loss":
        loss = MaskedLoss(LABEL_SMOOTHING)
    else:
        loss = tutorial_masked_loss(LABEL_SMOOTHING)
    model.compile(optimizer=make_optimizer(cfg.d_model), loss=loss, metrics=[masked_accuracy])
    return model


def make_batch(work, seed=0):
    """A batch with realistic padding: lengths uniform in [len/2, len], ids >= 4.

    Returns `((context, target_in), target_out)` as int32 tensors, the target
    starting with [START] and ending with [END] as the data pipeline makes it.
    """
    rng = np.random.default_rng(seed)
    B, T = work["batch"], work["seq_len"]

    def tokens(vocab, length, framed):
        out = np.zeros((B, length), np.int32)
        for row in range(B):
            n = int(rng.integers(length // 2, length + 1))
            out[row, :n] = rng.integers(4, vocab, n)
            if framed:
                out[row, 0], out[row, n - 1] = START_ID, END_ID
        return out

    context = tokens(work["input_vocab"], T, framed=True)
    target = tokens(work["target_vocab"], T + 1, framed=True)
    return (tf.constant(context), tf.constant(target[:, :-1])), tf.constant(target[:, 1:])


def max_logit_difference(cfg, work):
    """Max |logits(ours) - logits(reference)| with our weights copied in (float32, no dropout)."""
    from reference_models import copy_weights_from_ours

    keras.utils.set_random_seed(0)
    small = dataclasses.replace(cfg)
    ours = build_model("ours", small, work, "float32")
    ref = build_model(REFERENCE, small, work, "float32")
    (ctx, tin), _ = make_batch(work)
    a = ours((ctx, tin), training=False)
    ref((ctx, tin), training=False)
    copy_weights_from_ours(ours, ref)
    b = ref((ctx, tin), training=False)
    return float(tf.reduce_max(tf.abs(a - b))), float(tf.reduce_max(tf.abs(a)))
