"""Train a Transformer translator (Vaswani et al., 2017) from the command line.

With no arguments it trains the `toy` model on the generated toy
Portuguese-to-English corpus (offline, a few minutes on a laptop CPU),
evaluates it on the toy test split and writes everything to runs/toy/.

    python train.py
    python train.py --data pairs.tsv --preset tutorial --epochs 20
    python train.py --output-dir runs/toy --resume      # after an interruption
    python translate.py --run runs/toy "o gato preto come o bolo"

This module only parses the options; the work is `transformer.run.train`.
Importing it does not import TensorFlow: the options are parsed first (so
`--help` and a bad option answer at once), then TensorFlow starts, with its
native start-up messages hidden (see `transformer.cli.common.hide_native_stderr`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from transformer import rundir
from transformer.cli.common import (
    OneLineErrorParser,
    duration,
    hide_native_stderr,
    learning_rate,
    non_negative_int,
    positive_int,
    rate,
    report_error,
    use_tensorflow_memory_pool,
)
from transformer.constants import SENTENCEPIECE_MODEL_TYPES, STRATEGIES, TOKENIZER_KINDS
from transformer.data.loading import DATASETS
from transformer.model_config import PRESETS
from transformer.run.config import RESUMABLE_FIELDS, RunConfig
from transformer.run.precision import (
    PRECISIONS,
    default_precision,
    explain_default_precision,
)
from transformer.run.recipes import (
    CORPUS_DEFAULTS,
    CORPUS_DROPOUT_RATE,
    MAX_EPOCHS,
    MIN_EPOCHS,
    TARGET_PAIRS_SEEN,
    TOY_DEFAULTS,
    dataset_defaults,
    default_model,
)


def _start_tensorflow():
    """Imports TensorFlow for a run, once the options are known to be good.

    First the choices TensorFlow reads only at import: its C++ logs hidden
    and its CPU memory pool (`use_tensorflow_memory_pool`); then the import,
    with its C++ start-up messages (oneDNN, CUDA probing) hidden too: they are
    written to the stderr file descriptor before TensorFlow reads any log-level
    setting, so the descriptor points at /dev/null meanwhile (see
    `transformer.cli.common.hide_native_stderr`); later native messages show.
    Python errors are raised after it is restored.
    """
    if "tensorflow" not in sys.modules:
        # hide the C++ logs of TensorFlow (its errors raise in Python)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        use_tensorflow_memory_pool()
    restore = hide_native_stderr()
    try:
        import keras  # noqa: F401
        import tensorflow as tf
        import tensorflow_text  # noqa: F401

        tf.config.list_physical_devices()  # probes for GPUs; devices stay configurable
    finally:
        restore()


PROG = "train.py"


# Option name -> RunConfig field, where they differ.
_FIELD = {"dropout": "dropout_rate", "examples": "num_examples", "eval_beam": "eval_beam_size"}
# Options that are not settings of the run.
_NOT_CONFIG = ("resume", "no_export")


def resumable_options() -> list[str]:
    """The options that may differ from the saved run on --resume (`RESUMABLE_FIELDS`)."""
    option_of = {field: option for option, field in _FIELD.items()}
    fields = RESUMABLE_FIELDS - {"output_dir", "eval_batch_size"}  # the run itself; no option
    return sorted("--" + option_of.get(field, field).replace("_", "-") for field in fields)


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """The option parser; with `suppress_defaults`, only given options appear."""
    d = RunConfig()  # the defaults, in one place
    toy, tutorial = PRESETS["toy"], PRESETS["tutorial"]

    def default(value):
        return argparse.SUPPRESS if suppress_defaults else value

    parser = OneLineErrorParser(
        prog=PROG,
        description="Train a Transformer translator (Vaswani et al., 2017). With no "
        "arguments: the toy Portuguese-to-English corpus and the `toy` model, evaluated on "
        "the toy test split, written to runs/toy/.",
        epilog="Multi-worker: start the same command on every machine with "
        "--strategy multi-worker and a TF_CONFIG naming all workers and this one's index; "
        "worker 0 writes the run directory.",
        argument_default=argparse.SUPPRESS if suppress_defaults else None,
    )

    group = parser.add_argument_group("data")
    group.add_argument("--dataset", choices=DATASETS, default=default(d.dataset),
                       help=f"corpus when no --data is given (default: {d.dataset}, generated "
                       "offline; ted_hrlr_translate/pt_to_en is the tutorial's, via TFDS)")
    group.add_argument("--data", metavar="FILE.tsv", default=default(None),
                       help="train on tab-separated sentence pairs (default: none)")
    group.add_argument("--valid", metavar="FILE.tsv", default=default(None),
                       help="validation pairs (default: split off --data)")
    group.add_argument("--test", metavar="FILE.tsv", default=default(None),
                       help="test pairs (default: split off --data)")
    group.add_argument("--source-column", type=non_negative_int, metavar="N",
                       default=default(d.source_column),
                       help=f"TSV column of the source sentence, from 0 (default: {d.source_column})")
    group.add_argument("--target-column", type=non_negative_int, metavar="N",
                       default=default(d.target_column),
                       help=f"TSV column of the target sentence (default: {d.target_column})")
    group.add_argument("--skip-bad-lines", action="store_true", default=default(False),
                       help="skip malformed TSV lines instead of stopping (default: stop)")
    group.add_argument("--download", action="store_true", default=default(False),
                       help="let TFDS download --dataset ted_hrlr_translate/pt_to_en if it is "
                       "not on disk (default: never download)")
    group.add_argument("--tfds-data-dir", metavar="DIR", default=default(None),
                       help="TFDS data directory (default: TFDS' own, ~/tensorflow_datasets)")
    group.add_argument("--max-tokens", type=positive_int, metavar="N", default=default(None),
                       help="longest sentence in tokens; longer ones are trimmed, keeping [END] "
                       f"(default: the model's max_length, {toy.max_length} for toy, "
                       f"{tutorial.max_length} for tutorial)")
    group.add_argument("--vocab-size", type=positive_int, metavar="N",
                       default=default(d.vocab_size),
                       help="largest subword vocabulary: the one both languages share with "
                       "--shared-vocab (the default on real corpora), else each language's "
                       f"(default: {d.vocab_size})")
    group.add_argument("--tokenizer", choices=TOKENIZER_KINDS, default=default(None),
                       help="subword tokenizer: sentencepiece keeps case, accents and "
                       "punctuation, so translations read as written text; wordpiece is the "
                       "tutorial's BertTokenizer, which lower-cases, strips accents and "
                       "splits punctuation off (the boy ' s book) (default: "
                       f"{CORPUS_DEFAULTS['tokenizer']})")
    group.add_argument("--subword-model", choices=SENTENCEPIECE_MODEL_TYPES,
                       default=default(None),
                       help="what sentencepiece learns: bpe makes every toy word one piece, "
                       "unigram is SentencePiece's own default (default: "
                       f"{TOY_DEFAULTS['subword_model']} for the toy corpus, "
                       f"{CORPUS_DEFAULTS['subword_model']} otherwise)")
    group.add_argument("--shared-vocab", action=argparse.BooleanOptionalAction,
                       default=default(None),
                       help="one SentencePiece vocabulary for both languages, with the two "
                       "embeddings and the pre-softmax weights tied (section 3.4); on real "
                       "text it learnt much faster than two vocabularies, see BENCHMARKS.md "
                       "(default: yes with sentencepiece on real corpora; no for the toy "
                       "corpus and for wordpiece)")

    group = parser.add_argument_group("model (--num-layers etc. override the preset)")
    group.add_argument("--preset", choices=sorted(PRESETS), default=default(None),
                       help=f"model size (default: {TOY_DEFAULTS['preset']} for the toy corpus, "
                       f"{CORPUS_DEFAULTS['preset']} otherwise; toy: "
                       + ", ".join(f"{k}={v}" for k, v in toy.to_dict().items())
                       + "; tutorial: "
                       + ", ".join(f"{k}={v}" for k, v in tutorial.to_dict().items()) + ")")
    for option, field in (("--num-layers", "num_layers"), ("--d-model", "d_model"),
                          ("--num-heads", "num_heads"), ("--dff", "dff")):
        group.add_argument(option, type=positive_int, metavar="N", default=default(None),
                           help=f"(default: the preset's, {getattr(toy, field)} for toy, "
                           f"{getattr(tutorial, field)} for tutorial)")
    group.add_argument("--dropout", type=rate, metavar="RATE", default=default(None),
                       help=f"dropout rate (default: {CORPUS_DROPOUT_RATE} on real corpora, "
                       "where short runs underfit and learnt much more without it, see "
                       "BENCHMARKS.md; the preset's on the toy corpus, "
                       f"{toy.dropout_rate} for toy, {tutorial.dropout_rate} for tutorial)")
    group.add_argument("--normalize-first", action=argparse.BooleanOptionalAction,
                       default=default(None),
                       help="pre-norm layers, x + sublayer(LayerNorm(x)), instead of the "
                       "paper's post-norm LayerNorm(x + sublayer(x)); short runs on real "
                       "text learnt much faster with it, see BENCHMARKS.md (default: yes on real "
                       "corpora; no, the paper's, for the toy corpus)")

    group = parser.add_argument_group("training")
    group.add_argument("--batch-size", type=positive_int, metavar="N",
                       default=default(None),
                       help="sentence pairs per step, over all devices; with token budgets "
                       "(--batch-tokens) it sizes the budget (default: "
                       f"{TOY_DEFAULTS['batch_size']} for the toy corpus, "
                       f"{CORPUS_DEFAULTS['batch_size']} otherwise: on real text twice the "
                       "updates of the tutorial's 64 learnt more in the same time, see "
                       "BENCHMARKS.md)")
    group.add_argument("--epochs", type=positive_int, metavar="N", default=default(None),
                       help="epochs to train; may grow on --resume (default: "
                       f"{TOY_DEFAULTS['epochs']} for the toy corpus; otherwise sized from the "
                       f"corpus: enough to see about {TARGET_PAIRS_SEEN:,} pairs, "
                       f"{MIN_EPOCHS} to {MAX_EPOCHS} epochs)")
    group.add_argument("--time-budget", type=duration, metavar="DURATION",
                       default=default(d.time_budget),
                       help="stop training after this much time (600, 600s, 10m, 1h30m; "
                       "validation included, the final evaluation not), counted over "
                       "--resume, or after --epochs, whichever comes first; without "
                       f"--epochs the cap is {MAX_EPOCHS} epochs. With --fit-warmup the "
                       "warm-up ends when the budget does, if that comes first "
                       "(default: none)")
    group.add_argument("--steps-per-epoch", type=positive_int, metavar="N",
                       default=default(d.steps_per_epoch),
                       help="updates per epoch (default: "
                       + (str(d.steps_per_epoch) if d.steps_per_epoch else
                          "one pass over the training pairs") + ")")
    group.add_argument("--batch-tokens", type=non_negative_int, metavar="N",
                       default=default(None),
                       help="batch pairs of about equal length, at most N padded tokens per "
                       "batch and side (section 5.1), so that almost no padding is computed; "
                       "0 for batches of --batch-size pairs (default: 0 for the toy corpus; "
                       "otherwise --batch-size times the mean padded pair length, with one device)")
    group.add_argument("--warmup-steps", type=positive_int, metavar="N",
                       default=default(None),
                       help="learning-rate warm-up of the paper's schedule (default: "
                       f"{TOY_DEFAULTS['warmup_steps']} for the toy corpus, "
                       f"{CORPUS_DEFAULTS['warmup_steps']} otherwise, as in the paper; "
                       "see --fit-warmup for runs shorter than that)")
    group.add_argument("--learning-rate", type=learning_rate, metavar="PEAK",
                       default=default(d.learning_rate),
                       help="the schedule's peak, reached after the warm-up and then "
                       "decaying as the inverse square root of the step; 'paper' for the "
                       "paper's (d_model * warmup)^-0.5, which grows as the warm-up "
                       f"shrinks (default: {d.learning_rate})")
    group.add_argument("--fit-warmup", action=argparse.BooleanOptionalAction,
                       default=default(None),
                       help="a run shorter than --warmup-steps (by --epochs, or by "
                       "--time-budget) warms up over its whole length to the same peak, so "
                       "that it ends at the peak; on real text that learnt faster than "
                       "stopping partway up, and than a shorter warm-up followed by the "
                       "decay (BENCHMARKS.md); --no-fit-warmup keeps the paper's warm-up, "
                       "which such a run never finishes (default: yes)")
    group.add_argument("--label-smoothing", type=rate, metavar="EPS",
                       default=default(None),
                       help="label smoothing, 0 for none (default: "
                       f"{TOY_DEFAULTS['label_smoothing']} for the toy corpus, as in the paper; "
                       f"{CORPUS_DEFAULTS['label_smoothing']} otherwise: in runs of a few "
                       "thousand steps on real text it lowered BLEU, see BENCHMARKS.md)")
    group.add_argument("--seed", type=non_negative_int, metavar="N", default=default(d.seed),
                       help="fixes corpus, tokenizers, initial weights and data order "
                       f"(default: {d.seed})")
    group.add_argument("--checkpoint-every", type=positive_int, metavar="N",
                       default=default(d.checkpoint_every),
                       help="save the training state every N steps, and after every epoch "
                       f"(default: {d.checkpoint_every})")
    group.add_argument("--average-checkpoints", type=positive_int, metavar="N",
                       default=default(d.average_checkpoints),
                       help="the trained model is the mean of the weights of the last N "
                       "checkpoints (section 6.1 of the paper; in short runs that were "
                       "still improving it lowered BLEU, see BENCHMARKS.md); 1 keeps "
                       f"the final weights (default: {d.average_checkpoints})")

    group = parser.add_argument_group("run")
    group.add_argument("--output-dir", metavar="DIR", default=default(None),
                       help="run directory (default: runs/<name>: runs/toy, runs/ted_hrlr_pt_to_en, "
                       "or runs/<stem of --data>); must be empty unless --resume")
    group.add_argument("--resume", action="store_true", default=default(False),
                       help="continue the run in --output-dir from its last checkpoint, with "
                       "its saved settings; only " + ", ".join(resumable_options())
                       + " may change (any other option, --precision included, must match "
                       "the saved run or is refused)")
    group.add_argument("--no-export", action="store_true", default=default(False),
                       help="do not export the translator to <output-dir>/export (default: "
                       "export it)")
    group.add_argument("--eval-beam", type=positive_int, metavar="N",
                       default=default(None),
                       help="beam size of the final evaluation's translations; 1 is greedy, "
                       f"more is the paper's beam search with alpha 0.6 (default: "
                       f"{TOY_DEFAULTS['eval_beam_size']} for the toy corpus, "
                       f"{CORPUS_DEFAULTS['eval_beam_size']} otherwise)")
    group.add_argument("--examples", type=non_negative_int, metavar="N",
                       default=default(d.num_examples),
                       help=f"example translations to print (default: {d.num_examples})")

    group = parser.add_argument_group("performance")
    group.add_argument("--precision", choices=PRECISIONS, default=default(default_precision()),
                       help=f"dtype policy (default: {explain_default_precision()}; the "
                       "default is mixed_bfloat16 on CPUs with AMX bfloat16, float32 elsewhere)")
    group.add_argument("--jit-compile", action="store_true", default=default(False),
                       help="compile the train step with XLA; it recompiles for every new "
                       "batch shape, which is slow with variable sentence lengths (default: off)")

    group = parser.add_argument_group("scale")
    group.add_argument("--strategy", choices=STRATEGIES, default=default(d.strategy),
                       help="default: one device; mirrored: all GPUs (or --cpu-devices) of "
                       "this machine; multi-worker: several machines, from TF_CONFIG "
                       f"(default: {d.strategy})")
    group.add_argument("--cpu-devices", type=positive_int, metavar="N", default=default(None),
                       help="split the CPU into N logical devices, to try --strategy mirrored "
                       "without GPUs (default: 1)")
    return parser


def _config_from_args(args, explicit):
    """The `RunConfig` of the options; to resume, the saved one with the given changes."""
    values = {_FIELD.get(k, k): v for k, v in vars(args).items() if k not in _NOT_CONFIG}
    if values["preset"] is None:
        values["preset"] = dataset_defaults(values["dataset"], values["data"])["preset"]
    model_keys = ("num_layers", "d_model", "num_heads", "dff", "dropout_rate", "normalize_first")
    model = default_model(values["preset"], values["dataset"], values["data"],
                          **{key: values.pop(key) for key in model_keys})
    config = RunConfig(model=model, **values)
    if not args.resume:
        return config
    if not (config.run_dir / rundir.CONFIG_FILE).is_file():
        return config  # nothing saved yet: train() starts the run
    changes = {_FIELD.get(k, k): v for k, v in vars(explicit).items() if k not in _NOT_CONFIG}
    return RunConfig.load(config.run_dir).for_resume(**changes)


def _print_result(result):
    evaluation = result.evaluation
    if evaluation is not None:
        print(
            f"Test split ({evaluation.num_sentences} pairs): masked token accuracy "
            f"{100 * evaluation.masked_accuracy:.2f}%, exact match "
            f"{100 * evaluation.exact_match:.2f}%, BLEU {evaluation.bleu:.2f} "
            f"(lower-cased {evaluation.bleu_lowercase:.2f})"
        )
        print(f"BLEU signatures: {evaluation.bleu_signature}; "
              f"{evaluation.bleu_lowercase_signature}")
    if result.examples:
        print("Examples:")
        for source, reference, translation in result.examples:
            mark = "" if translation.strip() else " (empty)"
            print(f"  source:      {source}")
            print(f"  reference:   {reference}")
            print(f"  translation: {translation}{mark}")
    print(f"Run directory: {result.run_dir}")
    print(f'Translate with: python translate.py --run {result.run_dir} "<sentence>"')


def main(argv=None) -> int:
    """Runs `train.py` with `argv` (default: the command line's); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    explicit = build_parser(suppress_defaults=True).parse_args(argv)

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    package_logger = logging.getLogger("transformer")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    package_logger.propagate = False
    logging.getLogger("absl").setLevel(logging.ERROR)  # TFDS' and TensorFlow's warnings
    # and tf.get_logger()'s, e.g. a refused checkpoint's unrestored values, after the error line
    logging.getLogger("tensorflow").setLevel(logging.ERROR)

    _start_tensorflow()
    import tensorflow as tf

    from transformer.run.trainer import TrainingError, train

    try:
        config = _config_from_args(args, explicit)
        result = train(config, resume=args.resume, export=not args.no_export)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; continue with --resume.", file=sys.stderr)
        return 130
    except (ValueError, OSError, TrainingError, tf.errors.OpError) as err:
        return report_error(PROG, err)
    if result.is_chief:
        _print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
