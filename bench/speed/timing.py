"""How `bench/train_speed.py keras` times a training step and tells where its time goes.

The step's FLOPs counted by hand (`step_flops`), the machine's matmul ceiling
(`matmul_ceiling_fn`), the step's matmuls alone at their real shapes
(`step_matmuls_fn`), the rotating rounds that time contenders side by side
(`round_robin`, `paired_speedup`) and a profile of one step aggregated per op
category (`profile_step`).

Not part of the library.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from speed.contenders import WORKLOADS, build_model, make_batch
from transformer.model_config import PRESETS, TransformerConfig

CEILING_N = 2048  # the ceiling: one (N x N) @ (N x N) matmul, 2 N^3 FLOPs


# ---------------------------------------------------------------------------
# FLOPs of one training step, counted by hand
# ---------------------------------------------------------------------------


def step_flops(cfg: TransformerConfig, batch, src_len, tgt_len, target_vocab) -> dict[str, float]:
    """FLOPs of one training step: forward matmuls x 3 (forward + two backward products).

    A matmul (m x k) @ (k x n) costs 2 m k n FLOPs. Per layer, with B = batch,
    S = source length, T = target length, d = d_model, f = dff (the heads split
    d, so the attention products sum to the same count as one head of width d):

    encoder layer (S tokens; `num_layers` of them):
        Q, K, V and output projections   4 * 2 B S d d
        Q K^T and weights @ V            2 * 2 B S S d
        feed-forward d -> f -> d         2 * 2 B S d f
    decoder layer (T tokens; `decoder_layers` of them):
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
    L, D = cfg.num_layers, cfg.decoder_layers
    enc_proj = L * 4 * 2 * B * S * d * d
    enc_attn = L * 2 * 2 * B * S * S * d
    enc_ffn = L * 2 * 2 * B * S * d * f
    dec_proj = D * (4 * 2 * B * T * d * d + 2 * 2 * B * T * d * d + 2 * 2 * B * S * d * d)
    dec_attn = D * (2 * 2 * B * T * T * d + 2 * 2 * B * T * S * d)
    dec_ffn = D * 2 * 2 * B * T * d * f
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
    if op == "ArgMax":
        return "accuracy metric (arg-max)"
    if "loss" in lname or "cross_entropy" in lname or \
            op in ("LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits"):
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


def profile_ops(run_steps, steps):
    """Op time per step of `run_steps()` (which runs `steps` steps) under the TF
    profiler: `(wall seconds per step, {category: seconds}, {op type: seconds})`,
    or None where the profiler's trace format cannot be read."""
    import collections
    import glob
    import shutil
    import tempfile

    logdir = tempfile.mkdtemp(prefix="train_speed_profile_")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    run_steps()
    wall = (time.perf_counter() - start) / steps
    tf.profiler.experimental.stop()
    try:
        # The profiler's trace format; no public reader exists in TensorFlow 2.21.
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:
        shutil.rmtree(logdir, ignore_errors=True)
        return None
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
    return wall, by_cat, by_op


def profile_lines(title, wall, by_cat, by_op) -> list[str]:
    """A profile as text: op time per category and the top op types."""
    total = sum(by_cat.values())
    lines = [f"# {title}",
             f"wall time per step {wall:.3f} s; summed op time {total:.3f} s "
             f"(ops run on {tf.config.threading.get_inter_op_parallelism_threads() or 'default'} "
             "inter-op threads, so op time can exceed wall time); load "
             f"{load_average():.2f}", "", "## By category"]
    for cat, sec in by_cat.most_common():
        lines.append(f"{sec:8.3f} s  {100 * sec / total:5.1f}%  {cat}")
    lines += ["", "## Top op types"]
    for op, sec in by_op.most_common(20):
        lines.append(f"{sec:8.3f} s  {100 * sec / total:5.1f}%  {op}")
    return lines


def profile_step(contender, preset, precision, out_dir: Path):
    cfg = PRESETS[preset]
    work = WORKLOADS[preset]
    (ctx, tin), tout = make_batch(work)
    model = build_model(contender, cfg, work, precision)
    for _ in range(3):
        model.train_on_batch((ctx, tin), tout)
    steps = 2

    def run_steps():
        for _ in range(steps):
            model.train_on_batch((ctx, tin), tout)

    profile = profile_ops(run_steps, steps)
    if profile is None:
        return {"error": "xplane_pb2 not importable"}
    wall, by_cat, by_op = profile
    text = "\n".join(profile_lines(f"Profile of one training step: {contender}, {preset}, "
                                   f"{precision}", wall, by_cat, by_op)) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"profile_{contender}_{preset}_{precision}.txt").write_text(text)
    print(text)
    return {"wall_s": wall, "op_seconds": dict(by_cat)}
