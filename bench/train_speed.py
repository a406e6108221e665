"""Training-speed benchmark (issue #7): our Transformer against the same model on Keras's layers.

One process, one machine, ratios measured side by side: every timed round runs
one training step of each contender (and one large matmul, the machine's
ceiling) in a rotating order, so a teammate's test run slows all of them alike.
Figures are medians over the rounds, after warm-up.

Contenders:
    ours       `transformer.Transformer`.
    keras_mha  `bench/reference_keras_mha.py`: the same architecture and math on
               `keras.layers.MultiHeadAttention` (the reference of the bars).
    keras_hub  keras-hub's `TransformerEncoder`/`TransformerDecoder` with the same
               embedding and output layer, when keras-hub is installed. It also
               drops attention weights (Keras's `dropout`), so it does a little
               more work than the other two.

Each contender is trained the way `train.py` trains ours: `model.compile` with
the library's optimizer (Adam(CustomSchedule, 0.9, 0.98, 1e-9)) and
`masked_accuracy`, then `train_on_batch` (the step `fit` runs). The loss, at
train.py's default label smoothing (0.1), is the library's `MaskedLoss` for ours
and the tutorial's masked Keras cross-entropy for the Keras contenders
(`tutorial_masked_loss` in bench/reference_keras_mha.py); the "model-only"
configuration also trains the reference with `MaskedLoss`, so that only the
models differ.

Commands:
    python bench/train_speed.py --quick     # the guard: < 1 min, run before and after a change
    python bench/train_speed.py --quick --baseline HEAD   # this tree vs HEAD, in one run
    python bench/train_speed.py             # everything: presets x precisions, memory,
                                            # profile, scaling plots -> bench/results/

Outputs (full run): bench/results/train_speed.json, train_speed_table.md,
profile_*.txt, scaling_seq_len.png, scaling_batch.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from reference_keras_mha import (  # noqa: E402
    KerasMHATransformer,
    RefPositionalEmbedding,
    tutorial_masked_loss,
)

from transformer.constants import END_ID, PAD_ID, START_ID  # noqa: E402
from transformer.kernels.optimizers import make_optimizer  # noqa: E402
from transformer.model import Transformer  # noqa: E402
from transformer.model_config import PRESETS, TransformerConfig  # noqa: E402
from transformer.run import RunConfig  # noqa: E402
from transformer.run import default_precision as library_default_precision  # noqa: E402
from transformer.run.precision import cpu_flags  # noqa: E402
from transformer.training import MaskedLoss, masked_accuracy  # noqa: E402

RESULTS = ROOT / "bench" / "results"
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
CEILING_N = 2048  # the ceiling: one (N x N) @ (N x N) matmul, 2 N^3 FLOPs


# ---------------------------------------------------------------------------
# The training pieces: the library's, and the tutorial's loss for the reference
# ---------------------------------------------------------------------------


# The label smoothing train.py uses by default (0.1, section 5.4).
LABEL_SMOOTHING = RunConfig.__dataclass_fields__["label_smoothing"].default


# ---------------------------------------------------------------------------
# FLOPs of one training step, counted by hand
# ---------------------------------------------------------------------------


def step_flops(cfg: TransformerConfig, batch, src_len, tgt_len, target_vocab) -> dict[str, float]:
    """FLOPs of one training step: forward matmuls x 3 (forward + two backward products).

    A matmul (m x k) @ (k x n) costs 2 m k n FLOPs. Per layer, with B = batch,
    S = source length, T = target length, d = d_model, f = dff (the heads split
    d, so the attention products sum to the same count as one head of width d):

    encoder layer (S tokens):
        Q, K, V and output projections   4 * 2 B S d d
        Q K^T and weights @ V            2 * 2 B S S d
        feed-forward d -> f -> d         2 * 2 B S d f
    decoder layer (T tokens):
        self-attention projections       4 * 2 B T d d
        self Q K^T and weights @ V       2 * 2 B T T d   (full T x T; the mask adds -1e9,
                                                         nothing is skipped)
        cross Q and output projections   2 * 2 B T d d
        cross K and V projections        2 * 2 B S d d   (from the encoder output)
        cross Q K^T and weights @ V      2 * 2 B T S d
        feed-forward                     2 * 2 B T d f
    final projection to the vocabulary   2 B T d V

    Backward computes two products per forward product (gradient of the input
    and of the weight, or of both operands for Q K^T and weights @ V), hence x 3.
    Embedding lookups, softmax, layer norm, dropout, the loss and Adam are not
    counted (they are not matmuls).
    """
    B, S, T, d, f, V = batch, src_len, tgt_len, cfg.d_model, cfg.dff, target_vocab
    L = cfg.num_layers
    enc_proj = L * 4 * 2 * B * S * d * d
    enc_attn = L * 2 * 2 * B * S * S * d
    enc_ffn = L * 2 * 2 * B * S * d * f
    dec_proj = L * (4 * 2 * B * T * d * d + 2 * 2 * B * T * d * d + 2 * 2 * B * S * d * d)
    dec_attn = L * (2 * 2 * B * T * T * d + 2 * 2 * B * T * S * d)
    dec_ffn = L * 2 * 2 * B * T * d * f
    final = 2 * B * T * d * V
    forward = enc_proj + enc_attn + enc_ffn + dec_proj + dec_attn + dec_ffn + final
    return {
        "projections": 3 * (enc_proj + dec_proj),
        "attention_qk_av": 3 * (enc_attn + dec_attn),
        "feed_forward": 3 * (enc_ffn + dec_ffn),
        "final_projection": 3 * final,
        "forward": forward,
        "train_step": 3 * forward,
    }


# ---------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------


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
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "transformer"],
                             capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(f"git archive {revision} failed: {archive.stderr.decode().strip()}")
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
    try:
        optimizers = importlib.import_module("transformer_baseline.kernels.optimizers")
    except ModuleNotFoundError:  # a revision before transformer.kernels
        optimizers = training
    _BASELINE["make_optimizer"] = optimizers.make_optimizer
    _BASELINE["revision"] = revision


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
    from reference_keras_mha import copy_weights_from_ours

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


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def matmul_dtype(precision):
    """The dtype of a precision policy's matrix products."""
    return {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}.get(precision, tf.float32)


def paired_speedup(reference_times, times) -> float:
    """Median over rounds of reference time / time: > 1 means faster than the reference."""
    return float(np.median(np.asarray(reference_times) / np.asarray(times)))


def matmul_ceiling_fn(precision):
    dtype = matmul_dtype(precision)
    a = tf.cast(tf.random.stateless_normal((CEILING_N, CEILING_N), seed=(1, 2)), dtype)
    b = tf.cast(tf.random.stateless_normal((CEILING_N, CEILING_N), seed=(3, 4)), dtype)
    @tf.function(autograph=False)
    def matmul(a, b):
        return tf.matmul(a, b)[:1, :1]  # a tiny result: the product itself is what is timed

    def run():
        matmul(a, b).numpy()

    return run, 2.0 * CEILING_N**3


def step_matmul_shapes(cfg: TransformerConfig, batch, src_len, tgt_len, target_vocab):
    """The forward matmuls of one step as `(batch_dims, m, k, n)`, the shapes `step_flops` counts.

    Projections and the feed-forward network are `(B*len, d) @ (d, out)`; the
    attention products are batched over `B * heads` with per-head depth `d / h`.
    """
    B, S, T, d, f, V = batch, src_len, tgt_len, cfg.d_model, cfg.dff, target_vocab
    h = cfg.num_heads
    dh = d // h
    layer_enc = [(1, B * S, d, d)] * 4 + [(B * h, S, dh, S), (B * h, S, S, dh),
                                           (1, B * S, d, f), (1, B * S, f, d)]
    layer_dec = ([(1, B * T, d, d)] * 4 + [(B * h, T, dh, T), (B * h, T, T, dh)]
                 + [(1, B * T, d, d)] * 2 + [(1, B * S, d, d)] * 2
                 + [(B * h, T, dh, S), (B * h, T, S, dh), (1, B * T, d, f), (1, B * T, f, d)])
    return layer_enc * cfg.num_layers + layer_dec * cfg.num_layers + [(1, B * T, d, V)]


def step_matmuls_fn(cfg, work, precision):
    """Only the matmuls of one training step, at their real shapes, as one graph.

    Every forward product `Y = A @ B` comes with the two of its gradient,
    `dY @ B^T` and `A^T @ dY` (as TensorFlow computes them, with transpose
    flags), so the FLOPs are exactly `step_flops(...)["train_step"]`. Timed in
    the same rounds, it is the best a step could do if everything else were
    free: the real upper bound of "of ceiling" at these matrix sizes.
    """
    dtype = matmul_dtype(precision)
    shapes = step_matmul_shapes(cfg, work["batch"], work["seq_len"], work["seq_len"],
                                work["target_vocab"])
    rng = np.random.default_rng(0)

    def rand(*shape):
        return tf.constant(rng.standard_normal(shape, dtype=np.float32), dtype)

    operands = []
    flops = 0.0
    for b, m, k, n in shapes:
        lead = (b,) if b > 1 else ()
        operands.append((rand(*lead, m, k), rand(*lead, k, n), rand(*lead, m, n)))
        flops += 3 * 2.0 * b * m * k * n

    @tf.function(autograph=False)
    def matmuls():
        outs = []
        for a, w, dy in operands:
            outs.append(tf.matmul(a, w)[..., :1, :1])  # forward
            outs.append(tf.matmul(dy, w, transpose_b=True)[..., :1, :1])  # d/dA
            outs.append(tf.matmul(a, dy, transpose_a=True)[..., :1, :1])  # d/dB
        return tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outs])

    def run():
        matmuls().numpy()

    return run, flops


def train_step_fn(model, x, y):
    """One `fit`-style training step on a fixed batch; returns when the step is done."""

    def run():
        model.train_on_batch(x, y)  # returns numpy logs, so the step has finished

    return run


def round_robin(items, warmup, rounds):
    """Times `rounds` calls of every item, rotating the order each round, after `warmup` calls.

    Returns `(wall, cpu)`: per item, the wall-clock seconds and the CPU seconds
    of this process (all threads) of every timed call. On a machine shared with
    other work, wall time measures what we got; CPU time measures the work done.
    """
    for fn in items.values():
        for _ in range(warmup):
            fn()
    names = list(items)
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start, start_cpu = time.perf_counter(), time.process_time()
            items[name]()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return wall, cpu


def load_average() -> float:
    return os.getloadavg()[0]


def bench_config(preset, precision, contenders, args):
    cfg = PRESETS[preset]
    work = dict(WORKLOADS[preset])
    if args.batch:
        work["batch"] = args.batch
    if args.seq_len:
        work["seq_len"] = args.seq_len
    keras.utils.set_random_seed(0)
    (ctx, tin), tout = make_batch(work)
    items = {}
    for spec in contenders:  # "name" or "name@precision"
        name, _, own_precision = spec.partition("@")
        model = build_model(name, cfg, work, own_precision or precision)
        items[spec] = train_step_fn(model, (ctx, tin), tout)
    reference = next((spec for spec in contenders if spec.partition("@")[0] == REFERENCE), None)
    if reference is None:
        reference = next((spec for spec in contenders if spec.startswith(REFERENCE)), None)
    ceiling_run, ceiling_flops = matmul_ceiling_fn(precision)
    items["matmul_ceiling"] = ceiling_run
    matmuls_run, matmuls_flops = step_matmuls_fn(cfg, work, precision)
    items["step_matmuls"] = matmuls_run
    load_before = load_average()
    started = time.perf_counter()
    times, cpu = round_robin(items, args.warmup, args.rounds)
    elapsed = time.perf_counter() - started
    flops = step_flops(cfg, work["batch"], work["seq_len"], work["seq_len"], work["target_vocab"])
    tokens = work["batch"] * work["seq_len"]
    ceiling = ceiling_flops / float(np.median(times["matmul_ceiling"]))
    ceiling_best = ceiling_flops / float(np.min(times["matmul_ceiling"]))
    ceiling_cpu = ceiling_flops / float(np.median(cpu["matmul_ceiling"]))
    if abs(matmuls_flops - flops["train_step"]) > 1e-6 * flops["train_step"]:
        raise AssertionError(f"step_matmul_shapes counts {matmuls_flops:.6g} FLOPs, "
                             f"step_flops {flops['train_step']:.6g}")
    matmuls_med = float(np.median(times["step_matmuls"]))
    result = {
        "preset": preset, "precision": precision, "workload": work,
        "flops_per_step": flops, "target_tokens_per_step": tokens,
        "ceiling_gflops": ceiling / 1e9, "ceiling_best_gflops": ceiling_best / 1e9,
        "ceiling_gflop_per_cpu_s": ceiling_cpu / 1e9,
        "ceiling_step_times": [float(x) for x in times["matmul_ceiling"]],
        "step_matmuls": {
            "median_s": matmuls_med, "min_s": float(np.min(times["step_matmuls"])),
            "median_cpu_s": float(np.median(cpu["step_matmuls"])),
            "gflops": matmuls_flops / matmuls_med / 1e9,
            "ceiling_fraction": matmuls_flops / matmuls_med / ceiling,
            "times": [float(x) for x in times["step_matmuls"]],
        },
        "load_before": load_before,
        "load_after": load_average(), "seconds": elapsed, "reference": reference,
        "contenders": {},
    }
    for name in contenders:
        t, c = np.asarray(times[name]), np.asarray(cpu[name])
        med, med_cpu = float(np.median(t)), float(np.median(c))
        entry = {
            "step_times": [float(x) for x in t], "cpu_times": [float(x) for x in c],
            "median_step_s": med, "min_step_s": float(t.min()), "median_cpu_s": med_cpu,
            "tokens_per_s": tokens / med, "tokens_per_cpu_s": tokens / med_cpu,
            "gflops": flops["train_step"] / med / 1e9,
            "ceiling_fraction": flops["train_step"] / med / ceiling,
            "ceiling_fraction_best": flops["train_step"] / float(t.min()) / ceiling_best,
            "ceiling_fraction_cpu": flops["train_step"] / med_cpu / ceiling_cpu,
            "matmul_share": matmuls_med / med,
        }
        if reference is not None and name != reference:
            entry["speedup_vs_reference_paired_median"] = paired_speedup(times[reference], t)
            entry["speedup_vs_reference_cpu_paired_median"] = paired_speedup(cpu[reference], c)
        result["contenders"][name] = entry
    if "baseline" in times and "ours" in times:
        result["ours_vs_baseline"] = {
            "revision": _BASELINE.get("revision"),
            "wall_paired_median": paired_speedup(times["baseline"], times["ours"]),
            "cpu_paired_median": paired_speedup(cpu["baseline"], cpu["ours"]),
        }
    return result


# ---------------------------------------------------------------------------
# Peak memory (one child process per contender: ru_maxrss is per process)
# ---------------------------------------------------------------------------


def _vm_hwm_mib():
    """This process's peak resident set (VmHWM of /proc/self/status), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def child_rss(contender, preset, precision, steps=3):
    cfg = PRESETS[preset]
    work = WORKLOADS[preset]
    (ctx, tin), tout = make_batch(work)
    model = build_model(contender, cfg, work, precision)
    for _ in range(steps):
        model.train_on_batch((ctx, tin), tout)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print("RSS_JSON " + json.dumps({"ru_maxrss_mib": peak_kib / 1024, "vm_hwm_mib": _vm_hwm_mib()}))


def measure_rss(contender, preset, precision):
    """Peak RSS of a fresh process that builds the model and trains 3 steps.

    `ru_maxrss` survives `exec`: a child forked from a big parent reports at
    least the parent's size. So the parent measures memory first, while it is
    small (TensorFlow imported, nothing built), and the child also reports
    VmHWM, the high-water mark of its own address space.
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-rss", contender, preset,
           precision]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RSS_JSON "):
            return json.loads(line[len("RSS_JSON "):])
    raise RuntimeError(f"memory child failed: {out.stderr[-2000:]}")


# ---------------------------------------------------------------------------
# Profile of one step (TF profiler, aggregated per op)
# ---------------------------------------------------------------------------


def _category(name, op):
    lname = name.lower()
    if re.search(r"/(query|key|value|attention_output)(_\d+)?/", lname):
        # Keras's EinsumDense projections run as (batch) matmuls.
        if "MatMul" in op or "Einsum" in op:
            return "matmul: projections and feed-forward"
    if op in ("_MklBatchMatMulV2", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "_MklEinsum"):
        return "matmul: attention Q K^T and weights @ V"
    if "MatMul" in op:
        return "matmul: final vocabulary projection" if "final_layer" in lname else \
            "matmul: projections and feed-forward"
    if name.rstrip(":") == "CpuExecutable":
        # An XLA-compiled function; in our step only the loss (training.py), forward and gradient.
        return "loss (log-softmax, gather, masking)"
    if "loss" in lname or op in ("LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits"):
        return "loss (log-softmax, gather, masking)"
    if "final_layer" in lname or op == "BiasAddGrad":
        return "bias add / bias gradients"
    if "adam" in lname or "optimizer" in lname or op.startswith("Assign") or \
            op.startswith("ResourceApply"):
        return "optimizer (Adam)"
    if "layernorm" in lname or "layer_norm" in lname:
        return "layer norm"
    if "dropout" in lname:
        return "dropout"
    if "embedding" in lname or op in ("UnsortedSegmentSum", "ResourceGather", "GatherV2"):
        return "embedding lookup / gradient"
    if "Softmax" in op or "softmax" in lname or "mha" in lname or "attention" in lname:
        return "attention softmax, mask, scale, heads"
    if "Transpose" in op or op == "Reshape":
        return "transpose / reshape"
    return "other"


def profile_step(contender, preset, precision, out_dir: Path):
    import collections
    import glob
    import shutil
    import tempfile

    cfg = PRESETS[preset]
    work = WORKLOADS[preset]
    (ctx, tin), tout = make_batch(work)
    model = build_model(contender, cfg, work, precision)
    for _ in range(3):
        model.train_on_batch((ctx, tin), tout)
    logdir = tempfile.mkdtemp(prefix="train_speed_profile_")
    steps = 2
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch((ctx, tin), tout)
    wall = (time.perf_counter() - start) / steps
    tf.profiler.experimental.stop()
    try:
        # The profiler's trace format; no public reader exists in TensorFlow 2.21.
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:
        shutil.rmtree(logdir, ignore_errors=True)
        return {"wall_s": wall, "error": "xplane_pb2 not importable"}
    path = glob.glob(logdir + "/**/*.xplane.pb", recursive=True)[0]
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    by_cat, by_op = collections.Counter(), collections.Counter()
    for plane in space.planes:
        meta = plane.event_metadata
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                full = meta[event.metadata_id].name
                if ":" not in full:
                    continue
                name, op = full.rsplit(":", 1)
                if op in ("Run", "Process") or name.startswith("__inference") or \
                        name.rstrip(":") == "ExecutorState::ProcessAsync":  # wraps an XLA run
                    continue
                seconds = event.duration_ps / 1e12 / steps
                by_cat[_category(name, op)] += seconds
                by_op[op] += seconds
    shutil.rmtree(logdir, ignore_errors=True)
    total = sum(by_cat.values())
    lines = [f"# Profile of one training step: {contender}, {preset}, {precision}",
             f"wall time per step {wall:.3f} s; summed op time {total:.3f} s "
             f"(ops run on {tf.config.threading.get_inter_op_parallelism_threads() or 'default'} "
             "inter-op threads, so op time can exceed wall time); load "
             f"{load_average():.2f}", "", "## By category"]
    for cat, sec in by_cat.most_common():
        lines.append(f"{sec:8.3f} s  {100 * sec / total:5.1f}%  {cat}")
    lines += ["", "## Top op types"]
    for op, sec in by_op.most_common(20):
        lines.append(f"{sec:8.3f} s  {100 * sec / total:5.1f}%  {op}")
    text = "\n".join(lines) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"profile_{contender}_{preset}_{precision}.txt").write_text(text)
    print(text)
    return {"wall_s": wall, "op_seconds": dict(by_cat)}


# ---------------------------------------------------------------------------
# Scaling with sequence length and batch size
# ---------------------------------------------------------------------------


def scaling(args, precision, out_dir: Path):
    """Step time of ours and the reference against sequence length and batch size.

    One model per contender serves every shape (as in training, where every
    batch has its own length); each new shape gets one untimed warm-up step.
    """
    cfg = PRESETS["tutorial"]
    base = WORKLOADS["tutorial"]
    sweeps = {
        "seq_len": [(64, s) for s in (16, 32, 64, 128, 256)],
        "batch": [(b, 64) for b in (8, 16, 32, 64, 128)],
    }
    longest = max(seq for points in sweeps.values() for _, seq in points)
    contenders = ["ours", REFERENCE]
    keras.utils.set_random_seed(0)
    models = {name: build_model(name, cfg, dict(base, seq_len=longest), precision)
              for name in contenders}
    results = {}
    for sweep, points in sweeps.items():
        rows = []
        for batch, seq_len in points:
            work = dict(base, batch=batch, seq_len=seq_len)
            (ctx, tin), tout = make_batch(work)
            items = {name: train_step_fn(models[name], (ctx, tin), tout) for name in contenders}
            times, cpu = round_robin(items, warmup=1, rounds=args.scaling_rounds)
            flops = step_flops(cfg, batch, seq_len, seq_len, work["target_vocab"])
            row = {"batch": batch, "seq_len": seq_len, "flops": flops, "load": load_average()}
            for name in contenders:
                row[name] = float(np.median(times[name]))
                row[name + "_cpu"] = float(np.median(cpu[name]))
            rows.append(row)
            print(f"  scaling {sweep}: batch {batch} seq {seq_len}: "
                  + ", ".join(f"{n} {row[n] * 1e3:.0f} ms ({row[n + '_cpu']:.2f} CPU s)"
                              for n in contenders)
                  + f"  (Q K^T and weights @ V: "
                  f"{flops['attention_qk_av'] / flops['train_step']:.1%} of the FLOPs; load "
                  f"{row['load']:.1f})", flush=True)
        results[sweep] = rows
    plot_scaling(results, precision, out_dir)
    return results


def plot_scaling(results, precision, out_dir: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    for sweep, key, label in (("seq_len", "seq_len", "sequence length (source = target)"),
                              ("batch", "batch", "batch size")):
        rows = results[sweep]
        xs = [r[key] for r in rows]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for name, style in (("ours", "o-"), (REFERENCE, "s--")):
            ax1.plot(xs, [r[name] * 1e3 for r in rows], style, label=f"{name} (wall clock)")
            ax2.plot(xs, [r[name + "_cpu"] / (r["batch"] * r["seq_len"]) * 1e6 for r in rows],
                     style, label=f"{name} (CPU time)")
        # FLOP model: time a step would take at ours' achieved rate at the middle point.
        mid = rows[len(rows) // 2]
        rate = mid["flops"]["train_step"] / mid["ours"]
        ax1.plot(xs, [r["flops"]["train_step"] / rate * 1e3 for r in rows], ":", color="gray",
                 label="FLOPs / (ours' rate at the middle point)")
        ax1.plot(xs, [r["flops"]["attention_qk_av"] / rate * 1e3 for r in rows], ":",
                 color="tab:red", label="of which Q K^T and weights @ V")
        rate_cpu = mid["flops"]["train_step"] / mid["ours_cpu"]
        ax2.plot(xs, [r["flops"]["train_step"] / rate_cpu / (r["batch"] * r["seq_len"]) * 1e6
                      for r in rows], ":", color="gray",
                 label="FLOPs per token / (ours' rate at the middle point)")
        for ax in (ax1, ax2):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.set_xlabel(label)
            ax.grid(True, alpha=0.3)
        ax1.set_yscale("log")
        ax1.set_ylabel("train-step time (ms)")
        ax2.set_ylabel("CPU microseconds per target token")
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=8)
        fixed = "batch 64" if sweep == "seq_len" else "64 tokens"
        fig.suptitle(f"tutorial preset, {precision}, {fixed}: train step vs {label}")
        fig.tight_layout()
        path = out_dir / f"scaling_{sweep}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {path}")


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def machine_info():
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = cpu_flags()
    return {
        "cpu": model, "cores": os.cpu_count(),
        "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
        "avx512_fp16": "avx512_fp16" in flags,
        "tensorflow": tf.__version__, "keras": keras.__version__,
        "python": platform.python_version(),
    }


def format_config(res) -> list[str]:
    work = res["workload"]
    lines = [
        f"### {res['preset']} preset, {res['precision']}: batch {work['batch']} x "
        f"{work['seq_len']} tokens, vocab {work['input_vocab']}/{work['target_vocab']}",
        "",
        f"{res['flops_per_step']['train_step'] / 1e9:.2f} GFLOP per step (hand count). Matmul "
        f"ceiling ({CEILING_N}^3 matmul in the step's precision, timed in the same rounds): "
        f"median {res['ceiling_gflops']:.1f} GFLOP/s, best {res['ceiling_best_gflops']:.1f} "
        f"GFLOP/s, {res['ceiling_gflop_per_cpu_s']:.1f} GFLOP per CPU-second. Load "
        f"{res['load_before']:.2f} -> {res['load_after']:.2f}.",
        "",
    ]
    mm = res.get("step_matmuls")
    if mm:
        lines += [
            f"The step's matmuls alone (its {len(step_matmul_shapes(PRESETS[res['preset']], 1, 1, 1, 1))} "
            f"forward products and their gradients at the real shapes, one graph): median "
            f"{mm['median_s'] * 1e3:.0f} ms, {mm['gflops']:.1f} GFLOP/s = "
            f"{mm['ceiling_fraction']:.0%} of the ceiling. That is the most any step at these "
            "matrix sizes can reach; \"matmul share\" below is that time over the step's.",
            "",
        ]
    lines += [
        "| contender | median step (ms) | best (ms) | CPU s/step | target tokens/s | "
        "vs reference, wall (paired) | vs reference, CPU time | GFLOP/s | of ceiling: "
        "median | best | CPU | matmul share |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in res["contenders"].items():
        if name == res["reference"]:
            ratio = ratio_cpu = "1 (reference)"
        else:
            ratio = c.get("speedup_vs_reference_paired_median")
            ratio_cpu = c.get("speedup_vs_reference_cpu_paired_median")
            ratio = "-" if ratio is None else f"{ratio:.2f}x"
            ratio_cpu = "-" if ratio_cpu is None else f"{ratio_cpu:.2f}x"
        lines.append(
            f"| {name} | {c['median_step_s'] * 1e3:.0f} | {c['min_step_s'] * 1e3:.0f} | "
            f"{c['median_cpu_s']:.3f} | {c['tokens_per_s']:.0f} | {ratio} | {ratio_cpu} | "
            f"{c['gflops']:.1f} | {c['ceiling_fraction']:.0%} | "
            f"{c['ceiling_fraction_best']:.0%} | {c['ceiling_fraction_cpu']:.0%} | "
            + (f"{c['matmul_share']:.0%} |" if "matmul_share" in c else "- |")
        )
    if "ours_vs_baseline" in res:
        b = res["ours_vs_baseline"]
        lines += ["", f"ours (this tree) vs baseline ({b['revision']}): "
                      f"{b['wall_paired_median']:.3f}x wall, {b['cpu_paired_median']:.3f}x CPU "
                      "(paired medians; > 1 = this tree is faster)"]
    return lines


def bars(results, default_precision):
    """The issue's three bars, each a ratio measured in the same rounds.

    Returns `(text, wall_value, cpu_value, met[, best_value])`; `met` judges
    the wall-clock value, as the issue asks.
    """
    out = []
    by_key = {(r["preset"], r["precision"]): r for r in results}
    f32 = by_key.get(("tutorial", "float32"))
    if f32 and "ours" in f32["contenders"] and f32["reference"]:
        c = f32["contenders"]["ours"]
        out.append(("ours float32 >= reference float32 (tutorial)",
                    c["speedup_vs_reference_paired_median"],
                    c["speedup_vs_reference_cpu_paired_median"],
                    c["speedup_vs_reference_paired_median"] >= 1.0))
    split = by_key.get(("tutorial", "model-only"))
    if split and f"{REFERENCE}+our_loss" in split["contenders"]:
        ours, ref = split["contenders"]["ours"], split["contenders"][f"{REFERENCE}+our_loss"]
        wall = paired_speedup(ref["step_times"], ours["step_times"])
        cpu = paired_speedup(ref["cpu_times"], ours["cpu_times"])
        out.append(("model only: ours float32 >= the reference trained with our loss (tutorial)",
                    wall, cpu, wall >= 1.0))
    bar = by_key.get(("tutorial", "side-by-side"))
    if bar is None and default_precision == "float32" and f32 and "ours" in f32["contenders"] \
            and f32["reference"]:
        bar = {"contenders": {"ours@float32": f32["contenders"]["ours"]}}
    if bar and f"ours@{default_precision}" in bar["contenders"]:
        c = bar["contenders"][f"ours@{default_precision}"]
        out.append((f"ours at the default precision ({default_precision}) >= 1.3x the "
                    "reference in float32 (tutorial)",
                    c["speedup_vs_reference_paired_median"],
                    c["speedup_vs_reference_cpu_paired_median"],
                    c["speedup_vs_reference_paired_median"] >= 1.3))
    for prec in ("float32", "mixed_bfloat16"):
        r = by_key.get(("tutorial", prec))
        if r and "ours" in r["contenders"]:
            c = r["contenders"]["ours"]
            out.append((f"ours >= 60% of the {prec} matmul ceiling (tutorial; median step vs "
                        "median ceiling, best vs best)",
                        c["ceiling_fraction"], c["ceiling_fraction_cpu"],
                        c["ceiling_fraction"] >= 0.6, c["ceiling_fraction_best"]))
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Training-speed benchmark: ours vs the Keras-MHA reference (issue #7).")
    parser.add_argument("--quick", action="store_true",
                        help="guard mode (< 1 min): tutorial preset, float32, ours vs reference")
    parser.add_argument("--presets", nargs="+", default=None, choices=sorted(WORKLOADS))
    parser.add_argument("--precisions", nargs="+", default=None,
                        choices=["float32", "mixed_bfloat16", "mixed_float16"])
    parser.add_argument("--contenders", nargs="+", default=None, choices=CONTENDERS)
    parser.add_argument("--batch", type=int, default=None, help="override the batch size")
    parser.add_argument("--seq-len", type=int, default=None, help="override the length")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per contender")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds")
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also time transformer/ as of git revision REV (e.g. HEAD) as the "
                        "contender `baseline`: before/after a change in one run")
    parser.add_argument("--model-only", action="store_true",
                        help="with --quick: also time the reference trained with our loss "
                        "(always done in a full run)")
    parser.add_argument("--no-timing", action="store_true",
                        help="skip the timed configurations (e.g. to profile only)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS children")
    parser.add_argument("--no-profile", action="store_true", help="skip the profile")
    parser.add_argument("--no-scaling", action="store_true", help="skip the scaling plots")
    parser.add_argument("--scaling-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument("--child-rss", nargs=3, metavar=("CONTENDER", "PRESET", "PRECISION"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.child_rss:
        child_rss(*args.child_rss)
        return 0
    default_precision = str(library_default_precision())
    default_source = "transformer.run.default_precision()"
    if args.quick:
        presets = args.presets or ["tutorial"]
        precisions = args.precisions or ["float32"]
        contenders = args.contenders or ["ours", REFERENCE]
        args.warmup = 1 if args.warmup is None else args.warmup
        args.rounds = 4 if args.rounds is None else args.rounds
        args.no_memory = args.no_profile = args.no_scaling = True
    else:
        presets = args.presets or ["tutorial", "toy"]
        precisions = args.precisions or ["float32", "mixed_bfloat16"]
        contenders = args.contenders or [
            c for c in CONTENDERS if c != "keras_hub" or keras_hub_available()]
        args.warmup = 2 if args.warmup is None else args.warmup
        args.rounds = 9 if args.rounds is None else args.rounds
    if args.baseline:
        load_baseline(args.baseline)
        contenders = [*contenders, "baseline"]
    if "keras_hub" in contenders and not keras_hub_available():
        print("keras-hub is not installed: skipping it")
        contenders = [c for c in contenders if c != "keras_hub"]

    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, avx512_bf16={info['avx512_bf16']}, "
          f"amx_bf16={info['amx_bf16']}; TF {info['tensorflow']}, Keras {info['keras']}")
    print(f"losses: ours MaskedLoss, reference the tutorial's masked Keras cross-entropy "
          f"(label smoothing {LABEL_SMOOTHING}); default precision {default_precision} "
          f"({default_source}); load {load_average():.2f}")
    memory = {}
    if not args.no_memory:
        print(f"\n== peak resident memory (a fresh process per contender; this one is "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB) ==",
              flush=True)
        for preset in presets:
            for precision in precisions:
                for name in contenders:
                    if name == "baseline":
                        continue
                    rss = measure_rss(name, preset, precision)
                    memory[f"{name}/{preset}/{precision}"] = rss
                    print(f"  {name:10s} {preset:9s} {precision:15s} VmHWM "
                          f"{rss['vm_hwm_mib']:7.0f} MiB, ru_maxrss {rss['ru_maxrss_mib']:7.0f} MiB",
                          flush=True)

    if "ours" in contenders and REFERENCE in contenders and not (args.quick or args.no_timing):
        for preset in presets:
            diff, scale = max_logit_difference(PRESETS[preset], WORKLOADS[preset])
            print(f"equal math ({preset}): max |logits ours - reference| = {diff:.2e} "
                  f"(max |logit| {scale:.1f})")

    started = time.perf_counter()
    results = []
    for preset in presets if not args.no_timing else []:
        for precision in precisions:
            print(f"\n== {preset} / {precision}: warm-up {args.warmup}, {args.rounds} rounds ==",
                  flush=True)
            res = bench_config(preset, precision, contenders, args)
            results.append(res)
            print("\n".join(format_config(res)), flush=True)

    if not (args.quick or args.no_timing) and "ours" in contenders and REFERENCE in contenders \
            and "tutorial" in presets:
        side = ["ours@float32"] + [f"ours@{p}" for p in precisions if p != "float32"]
        side.append(f"{REFERENCE}@float32")
        print(f"\n== precisions side by side (tutorial): {', '.join(side)} ==", flush=True)
        res = bench_config("tutorial", "float32", side, args)
        res["precision"] = "side-by-side"
        results.append(res)
        print("\n".join(format_config(res)), flush=True)

    if (args.model_only or not args.quick) and not args.no_timing and "tutorial" in presets:
        # The reference once more, trained with our MaskedLoss: only the models differ.
        split = ["ours", REFERENCE, f"{REFERENCE}+our_loss"]
        print(f"\n== model only (tutorial, float32): {', '.join(split)} ==", flush=True)
        res = bench_config("tutorial", "float32", split, args)
        res["precision"] = "model-only"
        results.append(res)
        print("\n".join(format_config(res)), flush=True)

    profiles = {}
    if not args.no_profile:
        print("\n== profile of one step ==", flush=True)
        for name in ("ours", REFERENCE):
            for precision in precisions:
                profiles[f"{name}/{precision}"] = profile_step(name, "tutorial", precision,
                                                               args.out)

    scaling_results = {}
    if not args.no_scaling:
        print("\n== scaling (tutorial preset, float32) ==", flush=True)
        scaling_results = scaling(args, "float32", args.out)

    print("\n== bars ==")
    for text, value, value_cpu, ok, *best in bars(results, default_precision):
        if "ceiling" in text:
            shown = f"{value:.0%}, best {best[0]:.0%} (in CPU time {value_cpu:.0%})"
        else:
            shown = f"{value:.2f}x (in CPU time {value_cpu:.2f}x)"
        print(f"  [{'met' if ok else 'NOT met'}] {text}: {shown}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {load_average():.2f}")

    if not (args.quick or args.no_timing):
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {"machine": info, "default_precision": default_precision,
                   "default_precision_source": default_source,
                   "label_smoothing": LABEL_SMOOTHING, "configs": results,
                   "peak_rss_mib": memory, "profiles": profiles, "scaling": scaling_results,
                   "command": " ".join(sys.argv)}
        (args.out / "train_speed.json").write_text(json.dumps(payload, indent=1))
        table = []
        for res in results:
            table += format_config(res) + [""]
        (args.out / "train_speed_table.md").write_text("\n".join(table))
        print(f"wrote {args.out / 'train_speed.json'} and train_speed_table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
