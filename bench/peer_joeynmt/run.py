"""The peer benchmark: JoeyNMT 2.3 trained for a wall-clock budget on one core,
decoded with beam 4 and scored as this project scores.

Steps, each logged:

1. Prepare the corpus (a `source<TAB>target` TSV directory, by default the
   development corpus, Spanish to English) in JoeyNMT's plain format
   (`train.es`, `train.en`, ...), with one SentencePiece vocabulary of 8000
   pieces for both languages learnt by this project's own code from the
   training pairs, as `train.py` learns it; a fixed random subset of the
   validation pairs for set-ups that validate on a few hundred.
2. Write the set-up's config (`configs.py`: `recipe`, `recipe_arch`, `cpu`)
   and train it with `launch.py` in the peer's virtual environment, pinned to
   one core (`taskset -c CORE`, one PyTorch thread), for `--minutes` of
   training batches; its validations run on top of them, unless
   `--budget-counts-validations` (see `launch.py`).
3. Decode the test split with beam 4 from JoeyNMT's best checkpoint (the best
   validation BLEU), or from the last weights when no validation finished in
   the budget (the JSON says which).
4. Score with sacrebleu: lower-cased 13a (this project's headline BLEU,
   `transformer.run.evaluation.evaluate`), cased 13a and train.py's normalised
   form, and the share of copyable tokens copied (both in `bench/common.py`).

The JSON (by default `bench/results/peer_joeynmt_<setup>_<minutes>min.json`
for the whole corpus; in the run directory for a slice) holds the commands,
the config, both parameter counts (JoeyNMT's own and this project's model at
the same architecture, counted with the package), target tokens per second,
validations, BLEU and the machine with its load before and after.

Needs `bash bench/peer_joeynmt/setup_venv.sh` first. Example:

    python bench/peer_joeynmt/run.py --setup cpu --minutes 10 --core 1
    python bench/peer_joeynmt/run.py --setup cpu --minutes 1 --train-pairs 2000 --test-pairs 100
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH), str(HERE)]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import configs  # noqa: E402
from common import BenchError, bleu_all_ways, copyable_share, machine, pinned  # noqa: E402

from transformer.model_config import PRESETS  # noqa: E402

logger = logging.getLogger("peer_joeynmt")

PEER_PYTHON = HERE / ".venv" / "bin" / "python"
# The development corpus (not in the repository), in the current directory.
DEFAULT_CORPUS = Path("ui-es-en")
LANGS = ("es", "en")
VOCAB_SIZE = 8000


def _write_lines(path: Path, lines) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _read_split(corpus: Path, name: str, limit: int | None):
    from transformer.data import read_tsv

    pairs = read_tsv(corpus / f"{name}.tsv")
    return pairs[:limit] if limit else pairs


def prepare_data(corpus: Path, out: Path, train_pairs=None, test_pairs=None,
                 valid_subset: int = 300, seed: int = 42) -> dict:
    """Writes the splits in JoeyNMT's plain format and the shared SentencePiece
    model; returns the paths `configs` takes, plus `pair_counts`."""
    from transformer.data.sentencepiece import (
        learn_sentencepiece_model,
        write_sentencepiece_files,
    )

    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": _read_split(corpus, "train", train_pairs),
              "valid": _read_split(corpus, "valid", None),
              "test": _read_split(corpus, "test", test_pairs)}
    chosen = sorted(random.Random(seed).sample(range(len(splits["valid"])),
                                               min(valid_subset, len(splits["valid"]))))
    splits[f"valid{valid_subset}"] = [splits["valid"][i] for i in chosen]
    for name, pairs in splits.items():
        for side, lang in enumerate(LANGS):
            _write_lines(out / f"{name}.{lang}", [pair[side] for pair in pairs])
    model_path = out / "shared.model"
    if not model_path.is_file():  # learning takes about 20 s on the whole corpus
        train = splits["train"]
        proto = learn_sentencepiece_model([s for s, _ in train] + [t for _, t in train],
                                          VOCAB_SIZE)
        write_sentencepiece_files(proto, out, "shared")
    pieces = [line.split("\t")[0] for line in
              (out / "shared.vocab").read_text(encoding="utf-8").splitlines()]
    _write_lines(out / "vocab.txt", pieces)
    return {
        "train": str(out / "train"), "dev": str(out / "valid"),
        "dev_subset": str(out / f"valid{valid_subset}"), "test": str(out / "test"),
        "model_file": str(model_path), "vocab_file": str(out / "vocab.txt"),
        "vocab_size": len(pieces),
        "pair_counts": {name: len(pairs) for name, pairs in splits.items()},
        "test_pairs": splits["test"],
    }


def project_model(corpus: Path, vocab_size: int, preset: str | None = None) -> tuple[dict, int]:
    """This project's real-text model (`train.py --data --valid --test`), at
    `preset`'s sizes when given (as the size rule sets them): its architecture
    and its parameters with `vocab_size` pieces, counted by building it with
    the package."""
    import tensorflow as tf

    from transformer.model import build_model
    from transformer.run.config import RunConfig
    from transformer.run.sizing import candidate_model

    config = RunConfig(data=str(corpus / "train.tsv"), valid=str(corpus / "valid.tsv"),
                       test=str(corpus / "test.tsv"))
    model_config = config.model if preset is None else candidate_model(preset, config.model)
    architecture = {name: getattr(model_config, name) for name in (
        "num_layers", "d_model", "num_heads", "dff", "normalize_first", "tie_embeddings")}
    model = build_model(model_config, vocab_size, vocab_size)
    tokens = tf.ones((1, 4), tf.int64)
    model((tokens, tokens), training=False)
    return architecture, int(model.count_params())


def build_config(setup: str, data: dict, model_dir: Path, architecture: dict, args) -> dict:
    """The set-up's JoeyNMT config on the prepared data."""
    paths = {key: data[key] for key in ("train", "dev", "test", "model_file", "vocab_file")}
    if setup == "recipe":
        return configs.recipe(paths, str(model_dir), args.seed)
    if setup == "recipe_arch":
        return configs.recipe_arch(paths, str(model_dir), architecture, args.seed)
    paths["dev"] = data["dev_subset"]
    return configs.cpu(paths, str(model_dir), architecture, warmup=args.warmup,
                       validation_freq=args.validation_freq, batch_tokens=args.batch_tokens,
                       seed=args.seed)


def _write_json(path: Path, config: dict) -> None:
    # launch.py writes it as YAML for JoeyNMT (the project's environment has no PyYAML).
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run_peer(arguments: list[str], core: int, log_path: Path) -> tuple[list[str], float]:
    """Runs `launch.py` with the peer's Python on one core; returns the command
    and its wall seconds. Raises BenchError with the log's last line on failure."""
    command = pinned([str(PEER_PYTHON), str(HERE / "launch.py"), *arguments], core)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                check=False, cwd=REPO)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        lines = [line for line in log_path.read_text(encoding="utf-8").splitlines() if line]
        raise BenchError(f"{log_path}: JoeyNMT exited with {result.returncode}: "
                         f"{lines[-1] if lines else 'no output'}")
    return command, seconds


_VALIDATION = re.compile(r"Steps: (\d+)\s.*?bleu: ([\d.]+)")


def validations(model_dir: Path) -> list[dict]:
    """JoeyNMT's validation reports (`validations.txt`): update and greedy BLEU."""
    path = model_dir / "validations.txt"
    if not path.is_file():
        return []
    found = (_VALIDATION.search(line) for line in path.read_text(encoding="utf-8").splitlines())
    return [{"step": int(m.group(1)), "valid_bleu": float(m.group(2))} for m in found if m]


def joeynmt_parameter_count(train_log: Path) -> int | None:
    match = re.search(r"Total params: (\d+)", train_log.read_text(encoding="utf-8"))
    return int(match.group(1)) if match else None


def train_and_decode(config: dict, run_dir: Path, args) -> dict:
    """Trains for the budget, then decodes the test split; returns the facts."""
    model_dir = Path(config["model_dir"])
    _write_json(run_dir / "train.json", config)
    budget = ["--budget-seconds", str(args.minutes * 60)]
    if args.budget_counts_validations:
        budget.append("--budget-counts-validations")
    command, train_seconds = run_peer(
        [*budget, "--stats-json", str(run_dir / "train_stats.json"),
         "train", str(run_dir / "train.json"), "--skip-test"],
        args.core, run_dir / "train.out")
    stats = json.loads((run_dir / "train_stats.json").read_text(encoding="utf-8"))
    best = model_dir / "best.ckpt"
    checkpoint = best if best.exists() else model_dir / "latest.ckpt"
    if not checkpoint.exists():
        raise BenchError(f"{model_dir}: JoeyNMT wrote no checkpoint (see {run_dir / 'train.out'})")
    _write_json(run_dir / "test.json", configs.for_test(config, str(checkpoint.resolve())))
    test_command, decode_seconds = run_peer(
        ["test", str(run_dir / "test.json"), "--output-path", str(run_dir / "hyps")],
        args.core, run_dir / "test.out")
    return {
        "commands": {"train": command, "test": test_command},
        "train_process_seconds": round(train_seconds, 1),
        "training": stats,
        "validations": validations(model_dir),
        "validated": best.exists(),
        "decoded_checkpoint": "best validation BLEU" if best.exists() else
                              "last weights (no validation finished in the budget)",
        "decode_process_seconds": round(decode_seconds, 1),
        "joeynmt_parameters": joeynmt_parameter_count(model_dir / "train.log"),
        "hypotheses": (run_dir / "hyps.test").read_text(encoding="utf-8").splitlines(),
    }


def score(hypotheses: list[str], pairs) -> dict:
    if len(hypotheses) != len(pairs):
        raise BenchError(f"JoeyNMT wrote {len(hypotheses)} test translations for "
                         f"{len(pairs)} test pairs.")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    return {"bleu": bleu_all_ways(hypotheses, references),
            "copyable_tokens": copyable_share(sources, references, hypotheses)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", choices=configs.SETUPS, required=True)
    parser.add_argument("--minutes", type=float, required=True, help="training wall clock")
    parser.add_argument("--core", type=int, default=1, help="the one CPU core (taskset -c)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="directory with train.tsv, valid.tsv, test.tsv (source<TAB>target; "
                        "default: ui-es-en, the development corpus)")
    parser.add_argument("--train-pairs", type=int, default=None, help="first N pairs only")
    parser.add_argument("--test-pairs", type=int, default=None, help="first N pairs only")
    parser.add_argument("--valid-subset", type=int, default=300,
                        help="validation pairs of the cpu set-up (a fixed random subset)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="cpu set-up: warm-up updates (default: 20 per budget minute)")
    parser.add_argument("--validation-freq", type=int, default=None,
                        help="cpu set-up: updates between validations (default: 10 per "
                             "budget minute, at least 2)")
    parser.add_argument("--batch-tokens", type=int, default=768,
                        help="cpu set-up: JoeyNMT token batch size (padded)")
    parser.add_argument("--budget-counts-validations", action="store_true",
                        help="JoeyNMT's validations count towards --minutes (default: its "
                             "training batches only, validations on top, as train.py's "
                             "--time-budget counts its training only)")
    parser.add_argument("--preset", default=None, choices=PRESETS,
                        help="recipe_arch and cpu set-ups: the architecture of this project's "
                             "preset PRESET (the size rule's choice for the corpus and "
                             "budget: `size_rule.preset` of a run's config.json) instead of "
                             "the real-text default's")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--work-dir", type=Path, default=REPO / "runs" / "peer_joeynmt")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error(f"--minutes must be positive, received {args.minutes}")
    # About 1 update a second on one loaded core (2 unloaded): the warm-up is
    # a third of the run or less, and about six validations or more.
    if args.warmup is None:
        args.warmup = max(1, round(20 * args.minutes))
    if args.validation_freq is None:
        args.validation_freq = max(2, round(10 * args.minutes))
    if args.preset is not None and args.setup == "recipe":
        parser.error("--preset sets the architecture of the recipe_arch and cpu set-ups; the "
                     "recipe set-up keeps JoeyNMT's own")
    if not PEER_PYTHON.is_file():
        parser.error(f"{PEER_PYTHON} not found: run `bash bench/peer_joeynmt/setup_venv.sh`")
    for name in ("train", "valid", "test"):
        if not (args.corpus / f"{name}.tsv").is_file():
            parser.error(f"{args.corpus / (name + '.tsv')} not found (--corpus)")
    return args


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse_args(argv)
    sliced = bool(args.train_pairs or args.test_pairs)
    preset = f"_{args.preset}" if args.preset else ""
    tag = f"{args.setup}{preset}_{args.minutes:g}min" + ("_slice" if sliced else "")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    run_dir = args.work_dir / f"{tag}_{stamp}"
    data_dir = args.work_dir / f"data_train{args.train_pairs or 'all'}_test{args.test_pairs or 'all'}"
    machine_before = machine()
    try:
        data = prepare_data(args.corpus, data_dir, args.train_pairs, args.test_pairs,
                            args.valid_subset, args.seed)
        architecture, project_parameters = project_model(args.corpus, data["vocab_size"], args.preset)
        run_dir.mkdir(parents=True)
        config = build_config(args.setup, data, run_dir / "model", architecture, args)
        logger.info("Training %s for %g min on core %d in %s", args.setup, args.minutes,
                    args.core, run_dir)
        facts = train_and_decode(config, run_dir, args)
        result = score(facts.pop("hypotheses"), data["test_pairs"])
    except BenchError as error:
        print(f"peer_joeynmt: {error}", file=sys.stderr)
        return 1
    result.update(facts)
    result.update({
        "setup": args.setup, "minutes": args.minutes, "core": args.core,
        "corpus": str(args.corpus), "pair_counts": data["pair_counts"],
        "vocab_size": data["vocab_size"], "project_architecture": architecture,
        "parameters_formula": configs.parameter_count(config, data["vocab_size"]),
        "project_parameters": project_parameters,
        "config": config, "run_dir": str(run_dir), "started_utc": stamp,
        "machine_before": machine_before, "machine_after": machine(),
        "note": "training_wall_seconds includes validations; the budget counts what "
                "training.budget_counts says; target_tokens_per_second counts training "
                "batches only (validations excluded)",
    })
    out = args.json or (run_dir / "result.json" if sliced else
                        BENCH / "results" / f"peer_joeynmt_{tag}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if out.parent != run_dir:
        shutil.copy2(out, run_dir / "result.json")
    logger.info("BLEU %.2f (lower-cased 13a), %s target tokens/s, %d validations -> %s",
                result["bleu"]["bleu_lc_13a"], result["training"]["target_tokens_per_second"],
                result["training"]["validations"], out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
