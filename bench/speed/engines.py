"""`bench/decode_speed.py engines`: translate.py's TensorFlow path against CTranslate2.

One run directory and its test split, translated by each engine in its own
process, one after the other (never two at once):

- `tf`: `transformer.decoding.translator.Translator` on the model as saved, which is
  what `translate.py` runs (a run trained in `mixed_bfloat16` decodes in it);
- `tf-float32`: the same weights in a float32 model, when the run was saved
  in another precision;
- `ct2-float32`, `ct2-int8`: `transformer.decoding.ctranslate2_translator` on the
  run's CTranslate2 exports (`translate.py --engine ctranslate2
  [--quantization int8]`), converted before the timings.

Each engine on one core (`taskset -c 1`, one intra-op thread) and on two
(`taskset -c 0,1`, two threads), greedy decoding and beam 4 (alpha 0.6).
Measured: start-up (process start to the first translation of one sentence:
imports, loading, TensorFlow's tracing), sentences per second over the whole
split (after a warm-up call of eight sentences per search, which traces
TensorFlow's loop), BLEU (sacrebleu, 13a, lower-cased, as
bench/common.py), and the share of translations equal to the
float32 TensorFlow engine's (the reference: `tf-float32`, or `tf` for a
float32 run) with the same search, and how far the scores of the equal ones
are apart. Results: `bench/results/decode_engines_<name>.json` (`--name`) and a table on
standard output naming the CPU.

Commands (a run written by train.py, and its test split):
    python bench/decode_speed.py engines --run runs/ui --test ui-es-en/test.tsv --name ui
    python bench/decode_speed.py engines --run runs/toy --test toy_test.tsv --limit 200
    python bench/decode_speed.py engines --table bench/results/decode_engines_bible15_xeon207.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, RESULTS, BenchError, bleu_lc, machine, pinned, read_pairs, worker_json

from transformer import rundir
from transformer.decoding.strategies import Beam, Greedy

SEARCHES = {"greedy": Greedy(), "beam4": Beam(4, 0.6)}
CORES = {1: "1", 2: "0,1"}  # taskset CPU lists
WARM_UP = 8  # sentences translated once per search before the timed pass


def split_pairs(path, limit=None):
    """`(sources, references)` of a TSV file (the first two columns)."""
    pairs = read_pairs(path, limit)
    return [s for s, _ in pairs], [r for _, r in pairs]


# --- Worker: one engine in its own process ----------------------------------------------------

def float32_copy(model):
    """The same weights in a float32 `Transformer` (for a run saved in mixed precision)."""
    from transformer.model import Transformer

    config = {**model.get_config(), "dtype": "float32"}
    copy = Transformer.from_config(config)
    copy.build(((None, None), (None, None)))
    copy.set_weights(model.get_weights())
    return copy


def tensorflow_engine(run, variant, threads):
    """`(translate(sentences, search) -> (texts, scores), precision)` of a TensorFlow variant."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from transformer.decoding.pipeline import load_run
    from transformer.decoding.translator import Translator

    tokenizers, model = load_run(run)
    if variant == "tf-float32" and model.dtype_policy.name != "float32":
        model = float32_copy(model)
    translator = Translator(tokenizers, model)

    def translate(sentences, search):
        results = translator(sentences, search=search, return_attention=False)
        return [r.text for r in results], [r.score for r in results]

    return translate, model.dtype_policy.name


def ctranslate2_engine(run, variant, threads, patience=None, batch_size=None, use_vmap=None):
    """`(translate, precision)` of a CTranslate2 variant (`ct2-float32`, `ct2-int8`);
    `patience` replaces the beam's `BEAM_PATIENCE`, `batch_size` the engine's
    `CTRANSLATE2_BATCH_SIZE`, and `use_vmap=False` leaves the export's vocabulary
    map unused."""
    from transformer.decoding import strategies
    from transformer.decoding.ctranslate2_translator import CTranslate2Translator, run_export_dir

    if patience is not None:
        strategies.BEAM_PATIENCE = patience

    quantization = variant.split("-", 1)[1]
    translator = CTranslate2Translator(run_export_dir(run, quantization), use_vmap=use_vmap,
                                       intra_threads=threads, inter_threads=1)
    options = {} if batch_size is None else {"batch_size": batch_size}

    def translate(sentences, search):
        results = translator.translate(sentences, search=search, **options)
        return [r.text for r in results], [r.score for r in results]

    return translate, quantization


def worker(args):
    """Times one engine; prints one JSON object on the last line of standard output."""
    sources, _ = split_pairs(args.test, args.limit)
    if args.worker.startswith("tf"):
        translate, precision = tensorflow_engine(args.run, args.worker, args.threads)
    else:
        translate, precision = ctranslate2_engine(args.run, args.worker, args.threads,
                                                  args.patience, args.ct2_batch_size,
                                                  False if args.no_vmap else None)
    translate(sources[:1], Greedy())
    record = {"variant": args.worker, "threads": args.threads, "precision": precision,
              "startup_s": round(time.time() - args.spawned, 2), "searches": {}}
    for name in args.searches:
        search = SEARCHES[name]
        translate(sources[:WARM_UP], search)
        started = time.perf_counter()
        texts, scores = translate(sources, search)
        seconds = time.perf_counter() - started
        record["searches"][name] = {"seconds": round(seconds, 3), "texts": texts,
                                    "scores": [round(float(s), 5) for s in scores]}
        print(f"{args.worker} x{args.threads} {name}: {seconds:.1f} s", file=sys.stderr,
              flush=True)
    print(json.dumps(record))


# --- Driver -----------------------------------------------------------------------------------

def export_models(run):
    """The run's CTranslate2 exports, float32 and int8 (converted once, not timed)."""
    for quantization in ("float32", "int8"):
        done = subprocess.run([sys.executable, "-m", "transformer.cli.export", str(run),
                               "--quantization", quantization], cwd=REPO, capture_output=True,
                              text=True)
        if done.returncode:
            raise BenchError(done.stderr.strip())


def run_worker(args, variant, threads):
    command = pinned([sys.executable, args.entry, "engines",
                      "--run", str(args.run), "--test", str(args.test), "--worker", variant,
                      "--threads", str(threads), "--spawned", repr(time.time()),
                      "--searches", *args.searches], CORES[threads])
    if args.limit:
        command += ["--limit", str(args.limit)]
    if args.patience is not None:
        command += ["--patience", str(args.patience)]
    if args.ct2_batch_size is not None:
        command += ["--ct2-batch-size", str(args.ct2_batch_size)]
    if args.no_vmap:
        command += ["--no-vmap"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    return worker_json(command, env, f"{variant} on {threads} core(s)")


def compare(results, references, reference_variant):
    """Table rows: per variant, cores and search, speed, BLEU, agreement and score gaps."""
    rows = []
    for record in results:
        for name, out in record["searches"].items():
            ref = next(r for r in results if r["variant"] == reference_variant
                       and r["threads"] == record["threads"])["searches"][name]
            equal = [i for i, (a, b) in enumerate(zip(out["texts"], ref["texts"], strict=True))
                     if a == b]
            gaps = [abs(out["scores"][i] - ref["scores"][i]) for i in equal
                    if abs(ref["scores"][i]) != float("inf")]
            as_translate_py = next((r["searches"][name] for r in results if r["variant"] == "tf"
                                    and r["threads"] == record["threads"]), ref)
            same = sum(a == b for a, b in zip(out["texts"], as_translate_py["texts"],
                                              strict=True))
            rows.append({
                "variant": record["variant"], "precision": record["precision"],
                "cores": record["threads"], "search": name,
                "sentences_per_s": round(len(out["texts"]) / out["seconds"], 2),
                "seconds": out["seconds"], "startup_s": record["startup_s"],
                "bleu_lc_13a": bleu_lc(out["texts"], references),
                "agreement": round(len(equal) / len(out["texts"]), 4),
                "agreeing": len(equal),
                "agreement_with_tf": round(same / len(out["texts"]), 4),
                "score_gap_max": round(max(gaps), 5) if gaps else None,
                "score_gap_median": round(statistics.median(gaps), 6) if gaps else None,
            })
    return rows


SAME = "as on 1 core"  # texts and scores stored once when the thread counts agree


def _one_core_twin(outputs, record):
    return next((o for o in outputs if o["variant"] == record["variant"] and o["threads"] == 1
                 and o is not record), None)


def compact(outputs):
    """The outputs without the texts and scores a run on 1 core already holds."""
    for record in outputs:
        twin = _one_core_twin(outputs, record)
        for name, out in record["searches"].items():
            if twin and name in twin["searches"] and all(
                    out[key] == twin["searches"][name][key] for key in ("texts", "scores")):
                out["texts"] = out["scores"] = SAME
    return outputs


def expand(outputs):
    """`compact` undone."""
    for record in outputs:
        for name, out in record["searches"].items():
            if out["texts"] == SAME:
                twin = _one_core_twin(outputs, record)["searches"][name]
                out["texts"], out["scores"] = twin["texts"], twin["scores"]
    return outputs


def print_table(record):
    rows = record["rows"]
    print(f"\n{record['run']} on {record['sentences']} test sentences; "
          f"{record['machine']['cpu_model']} ({record['machine']['cpu_count']} cores); "
          f"agreement: translations equal to {record['reference']}'s")
    print("| engine | precision | cores | search | sentences/s | start-up s | BLEU | agreement "
          "| with tf | score gap (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['variant']} | {row['precision']} | {row['cores']} | {row['search']} | "
              f"{row['sentences_per_s']:.1f} | {row['startup_s']:.1f} | {row['bleu_lc_13a']:.2f} "
              f"| {100 * row['agreement']:.1f}% ({row['agreeing']}) "
              f"| {100 * row['agreement_with_tf']:.1f}% | {row['score_gap_max']} |")


def driver(args):
    sources, references = split_pairs(args.test, args.limit)
    saved = rundir.read_json(Path(args.run) / rundir.CONFIG_FILE).get("precision", "float32")
    variants = ["tf", *(["tf-float32"] if saved != "float32" else []), "ct2-float32",
                "ct2-int8"]
    variants = [v for v in variants if not args.variants or v in args.variants]
    # The float32 TensorFlow engine is the reference, else the first one run.
    reference = next((v for v in ("tf-float32", "tf") if v in variants), variants[0])
    export_models(args.run)
    results = []
    for threads in args.cores:
        for variant in variants:
            print(f"{variant} on {threads} core(s) ...", file=sys.stderr, flush=True)
            results.append(run_worker(args, variant, threads))
    record = {"run": str(args.run), "test": str(args.test), "sentences": len(sources),
              "saved_precision": saved, "reference": reference, "machine": machine(),
              "patience": args.patience, "ct2_batch_size": args.ct2_batch_size,
              "no_vmap": args.no_vmap,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join(sys.argv), "rows": compare(results, references, reference),
              "outputs": compact(results)}
    name = f"decode_engines_{args.name}.json" if args.name else "decode_engines.json"
    path = RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
    print_table(record)
    print(f"\nwritten: {path.relative_to(REPO)}")


def table(path):
    """Prints the table of a results file again (its rows recomputed from its outputs)."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    _, references = split_pairs(record["test"], record["sentences"])
    record["rows"] = compare(expand(record["outputs"]), references, record["reference"])
    print_table(record)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", type=Path, help="a run directory (train.py)")
    parser.add_argument("--test", type=Path, help="the test split, a TSV file")
    parser.add_argument("--table", type=Path, default=None,
                        help="print the table of this results file again, and nothing else")
    parser.add_argument("--name", default="", help="suffix of the results file")
    parser.add_argument("--limit", type=int, default=None, help="the first N test pairs only")
    parser.add_argument("--cores", type=int, nargs="+", choices=sorted(CORES), default=[1, 2])
    parser.add_argument("--searches", nargs="+", choices=list(SEARCHES), default=list(SEARCHES))
    parser.add_argument("--variants", nargs="+", default=None,
                        help="only these of tf, tf-float32, ct2-float32, ct2-int8")
    parser.add_argument("--patience", type=float, default=None,
                        help="CTranslate2's beam patience (default: the engine's BEAM_PATIENCE)")
    parser.add_argument("--ct2-batch-size", type=int, default=None,
                        help="sentences CTranslate2 decodes together (default: the engine's "
                             "CTRANSLATE2_BATCH_SIZE)")
    parser.add_argument("--no-vmap", action="store_true",
                        help="CTranslate2 without the export's vocabulary map")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--spawned", type=float, default=None, help=argparse.SUPPRESS)


def run(args, parser) -> int:
    """The `engines` mode: a table again (`--table`), a worker, or the whole comparison."""
    if args.table:
        table(args.table)
    elif not (args.run and args.test):
        parser.error("--run and --test are required")
    elif args.worker:
        worker(args)
    else:
        driver(args)
    return 0
