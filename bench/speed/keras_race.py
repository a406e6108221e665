"""`bench/train_speed.py keras`: our Transformer against the same model on Keras's layers.

One process, one machine, ratios measured side by side: every timed round runs
one training step of each contender (and one large matmul, the machine's
ceiling) in a rotating order, so a teammate's test run slows all of them alike.
Figures are medians over the rounds, after warm-up.

Contenders:
    ours       `transformer.Transformer`.
    keras_mha  `bench/reference_models.py`: the same architecture and math on
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
(`tutorial_masked_loss` in bench/reference_models.py); the "model-only"
configuration also trains the reference with `MaskedLoss`, so that only the
models differ.

Commands:
    python bench/train_speed.py keras --quick   # the guard: < 1 min, before and after a change
    python bench/train_speed.py keras --quick --baseline HEAD   # this tree vs HEAD, in one run
    python bench/train_speed.py keras           # everything: presets x precisions, memory,
                                                # profile, scaling plots -> bench/results/

Outputs (full run): bench/results/train_speed.json (its tables are printed),
profile_*.txt, scaling_seq_len.png, scaling_batch.png.

The contenders and their batches are in bench/speed/contenders.py; the
FLOP count, the matmul ceiling, the timing rounds and the profile in
bench/speed/timing.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import RESULTS, machine  # noqa: E402

from speed.contenders import (  # noqa: E402
    CONTENDERS,
    LABEL_SMOOTHING,
    REFERENCE,
    WORKLOADS,
    baseline_revision,
    build_model,
    keras_hub_available,
    load_baseline,
    make_batch,
    max_logit_difference,
)
from speed.timing import (  # noqa: E402
    CEILING_N,
    load_average,
    matmul_ceiling_fn,
    paired_speedup,
    profile_step,
    round_robin,
    step_flops,
    step_matmul_shapes,
    step_matmuls_fn,
    train_step_fn,
)
from transformer.model_config import PRESETS  # noqa: E402
from transformer.run import default_precision as library_default_precision  # noqa: E402

# ---------------------------------------------------------------------------
# One configuration: every contender in the same rounds
# ---------------------------------------------------------------------------


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
            "revision": baseline_revision(),
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


def measure_rss(entry, contender, preset, precision):
    """Peak RSS of a fresh process that builds the model and trains 3 steps.

    `ru_maxrss` survives `exec`: a child forked from a big parent reports at
    least the parent's size. So the parent measures memory first, while it is
    small (TensorFlow imported, nothing built), and the child also reports
    VmHWM, the high-water mark of its own address space.
    """
    cmd = [sys.executable, entry, "keras", "--child-rss", contender, preset, precision]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RSS_JSON "):
            return json.loads(line[len("RSS_JSON "):])
    raise RuntimeError(f"memory child failed: {out.stderr[-2000:]}")


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
    """`common.machine()` with the versions of TensorFlow, Keras and Python."""
    return {**machine(), "tensorflow": tf.__version__, "keras": keras.__version__,
            "python": platform.python_version()}


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def choose_runs(args):
    """The presets, precisions and contenders to run, filling in the defaults of
    `--quick` (and its warm-up and rounds) or of a full run in `args`."""
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
    return presets, precisions, contenders


def peak_memory(entry, presets, precisions, contenders):
    """Peak RSS per contender, preset and precision, each in a fresh process."""
    memory = {}
    print(f"\n== peak resident memory (a fresh process per contender; this one is "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB) ==",
          flush=True)
    for preset in presets:
        for precision in precisions:
            for name in contenders:
                if name == "baseline":
                    continue
                rss = measure_rss(entry, name, preset, precision)
                memory[f"{name}/{preset}/{precision}"] = rss
                print(f"  {name:10s} {preset:9s} {precision:15s} VmHWM "
                      f"{rss['vm_hwm_mib']:7.0f} MiB, ru_maxrss {rss['ru_maxrss_mib']:7.0f} MiB",
                      flush=True)
    return memory


def timed_configs(args, presets, precisions, contenders):
    """Every timed configuration: presets x precisions, then (in a full run) the
    precisions side by side, then (with --model-only or in a full run) the
    reference trained with our loss."""
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
    return results


def print_bars(results, default_precision):
    print("\n== bars ==")
    for text, value, value_cpu, ok, *best in bars(results, default_precision):
        if "ceiling" in text:
            shown = f"{value:.0%}, best {best[0]:.0%} (in CPU time {value_cpu:.0%})"
        else:
            shown = f"{value:.2f}x (in CPU time {value_cpu:.2f}x)"
        print(f"  [{'met' if ok else 'NOT met'}] {text}: {shown}")


def write_results(out: Path, payload):
    """train_speed.json (everything; its tables are printed as they are measured) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_speed.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {out / 'train_speed.json'}")


def run(args, parser=None):
    """The `keras` mode: a memory child, or the timed configurations and what
    the options add (memory, profile, scaling), then the bars."""
    if args.child_rss:
        child_rss(*args.child_rss)
        return 0
    default_precision = str(library_default_precision())
    default_source = "transformer.run.default_precision()"
    presets, precisions, contenders = choose_runs(args)

    info = machine_info()
    print(f"machine: {info['cpu_model']}, {info['cpu_count']} cores, "
          f"avx512_bf16={info['avx512_bf16']}, "
          f"amx_bf16={info['amx_bf16']}; TF {info['tensorflow']}, Keras {info['keras']}")
    print(f"losses: ours MaskedLoss, reference the tutorial's masked Keras cross-entropy "
          f"(label smoothing {LABEL_SMOOTHING}); default precision {default_precision} "
          f"({default_source}); load {load_average():.2f}")
    memory = {} if args.no_memory else peak_memory(args.entry, presets, precisions, contenders)

    if "ours" in contenders and REFERENCE in contenders and not (args.quick or args.no_timing):
        for preset in presets:
            diff, scale = max_logit_difference(PRESETS[preset], WORKLOADS[preset])
            print(f"equal math ({preset}): max |logits ours - reference| = {diff:.2e} "
                  f"(max |logit| {scale:.1f})")

    started = time.perf_counter()
    results = timed_configs(args, presets, precisions, contenders)

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

    print_bars(results, default_precision)
    print(f"\ntotal {time.perf_counter() - started:.0f} s, load {load_average():.2f}")

    if not (args.quick or args.no_timing):
        payload = {"machine": info, "default_precision": default_precision,
                   "default_precision_source": default_source,
                   "label_smoothing": LABEL_SMOOTHING, "configs": results,
                   "peak_rss_mib": memory, "profiles": profiles, "scaling": scaling_results,
                   "command": " ".join(sys.argv)}
        write_results(args.out, payload)
    return 0

