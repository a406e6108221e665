"""The `train.py` command line: its flags and their help, one-line errors, the printed result.

It trains a Transformer translator (Vaswani et al., 2017) by calling
`transformer.run.train`, the run as a library.

With no arguments it trains the `toy` model on the generated toy
Portuguese-to-English corpus (offline, a few minutes on a laptop CPU),
evaluates it on the toy test split and writes everything to runs/toy/.

    python train.py
    python train.py --data pairs.tsv --preset tutorial --epochs 20
    python train.py --output-dir runs/toy --resume      # after an interruption
    python translate.py --run runs/toy "o gato preto come o bolo"

This module only parses the options, once, into the `RunConfig` that the
Python API makes of the same choices (`config_of_choices`): an option not
given is left to the schema's defaults, as it is in Python. The work is
`transformer.run.train`. Importing it does not import TensorFlow: the options
are parsed first (so `--help` and a bad option answer at once), then
TensorFlow starts, with its native start-up messages hidden (see
`transformer.cli.common.hide_native_stderr`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

from transformer import run, rundir
from transformer.cli.common import (
    OneLineErrorParser,
    duration,
    hide_native_stderr,
    learning_rate,
    log_progress,
    non_negative_int,
    positive_int,
    rate,
    report_error,
)
from transformer.model_config import PRESETS, TransformerConfig
from transformer.run.adapt import parent_model
from transformer.run.allocator import use_fast_allocators
from transformer.run.config import RESUMABLE_FIELDS, RunConfig, resume_config
from transformer.run.recipes import (
    CORPUS_DEFAULTS,
    CORPUS_MODEL_DEFAULTS,
    MAX_EPOCHS,
    MIN_EPOCHS,
    PEAK_WARMUP_STEPS,
    TARGET_PAIRS_SEEN,
    TOY_DEFAULTS,
    dataset_defaults,
    default_model,
)
from transformer.run.sizing import body_parameters
from transformer.settings import SECTIONS, Option, option_flag, settings_option


def _start_tensorflow():
    """Imports TensorFlow for a run, once the options are known to be good.

    First the choices TensorFlow reads only at import: its C++ logs hidden
    and its CPU memory pool (`use_fast_allocators`, which also keeps
    malloc's freed memory); then the import,
    with its C++ start-up messages (oneDNN, CUDA probing) hidden too: they are
    written to the stderr file descriptor before TensorFlow reads any log-level
    setting, so the descriptor points at /dev/null meanwhile (see
    `transformer.cli.common.hide_native_stderr`); later native messages show.
    Python errors are raised after it is restored.
    """
    if "tensorflow" not in sys.modules:
        # hide the C++ logs of TensorFlow (its errors raise in Python)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        use_fast_allocators()
    restore = hide_native_stderr()
    try:
        import keras  # noqa: F401
        import tensorflow as tf
        import tensorflow_text  # noqa: F401

        tf.config.list_physical_devices()  # probes for GPUs; devices stay configurable
    finally:
        restore()


PROG = "train.py"

# Options that are not settings of the run.
_NOT_CONFIG = ("resume", "no_export")

# The argument type of each kind of setting (`transformer.settings.KINDS`).
_ARG_TYPES = {
    "text": None,
    "choice": None,
    "integer": int,
    "number": float,
    "positive_int": positive_int,
    "non_negative_int": non_negative_int,
    "rate": rate,
    "duration": duration,
    "learning_rate": learning_rate,
}


def _option_of(field: dataclasses.Field) -> Option:
    """The field's `Option`; a field declared without one still gets an option."""
    option = settings_option(field)
    if option is not None:
        return option
    inferred = {bool: "flag", int: "integer", float: "number"}.get(type(field.default), "text")
    return Option(help="", section="run", kind=inferred)


def _settings(schema=RunConfig):
    """(field, option, is a model field) for every setting of `schema` (`RunConfig`
    or a subclass) with a command-line option, in the schema's order: the model's
    fields in place of its `model` field."""
    for field in dataclasses.fields(schema):
        if field.name == "model":
            for model_field in dataclasses.fields(TransformerConfig):
                if option_flag(model_field):
                    yield model_field, _option_of(model_field), True
        elif option_flag(field):
            yield field, _option_of(field), False


def _show(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "none" if value is None else str(value)


def default_context() -> dict:
    """The names the `default_help` templates may use (help texts are plain strings)."""
    presets = "; ".join(f"{name} {p.num_layers}x{p.d_model}, {p.num_heads} heads, dff {p.dff}"
                        for name, p in sorted(PRESETS.items(),
                                              key=lambda item: body_parameters(item[1])))
    return dict(toy=TOY_DEFAULTS, corpus=CORPUS_DEFAULTS, toy_preset=PRESETS["toy"],
                tutorial_preset=PRESETS["tutorial"], presets=presets,
                target_pairs_seen=TARGET_PAIRS_SEEN, min_epochs=MIN_EPOCHS,
                max_epochs=MAX_EPOCHS, peak_warmup_steps=PEAK_WARMUP_STEPS)


def _default_text(field: dataclasses.Field, option: Option, is_model: bool, context) -> str:
    """The default as `--help` states it: the option's own words, the dataset
    recipes' values, the presets' values, or the field's default."""
    if callable(option.default_help):
        return option.default_help()
    if option.default_help is not None:
        return option.default_help.format(**context)
    name = field.name
    if is_model:
        by_preset = ", ".join(f"{_show(getattr(preset, name))} for {preset_name}"
                              for preset_name, preset in sorted(PRESETS.items()))
        if name in CORPUS_MODEL_DEFAULTS:
            return (f"{_show(CORPUS_MODEL_DEFAULTS[name])} on real corpora; the preset's on the "
                    f"toy corpus, {by_preset}")
        return f"the preset's, {by_preset}"
    if name in TOY_DEFAULTS or name in CORPUS_DEFAULTS:
        toy, corpus = TOY_DEFAULTS.get(name), CORPUS_DEFAULTS.get(name)
        if toy == corpus:
            return _show(toy)
        return f"{_show(toy)} for the toy corpus, {_show(corpus)} otherwise"
    if option.kind == "flag" and field.default is False:
        return "off"
    return _show(field.default)


def _add_setting(group, field, option: Option, is_model: bool, context) -> None:
    """Adds the option of one setting, its help generated from the schema; an
    option not given is absent from the parsed namespace (its default is the schema's)."""
    default_text = _default_text(field, option, is_model, context)
    help_text = f"{option.help} (default: {default_text})".lstrip()
    kwargs = dict(dest=field.name, help=help_text, default=argparse.SUPPRESS)
    if option.kind == "flag":
        kwargs["action"] = "store_true"
    elif option.kind == "switch":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs.update(type=_ARG_TYPES[option.kind], metavar=option.metavar)
        if option.choices is not None:
            kwargs.update(choices=option.choices, metavar=None)
    group.add_argument(option_flag(field), **kwargs)


def resumable_options() -> list[str]:
    """The options that may differ from the saved run on --resume (`RESUMABLE_FIELDS`)."""
    return sorted(option_flag(field) for field, _, _ in _settings()
                  if field.name in RESUMABLE_FIELDS - {"output_dir"})  # the run itself


def build_parser(schema=RunConfig) -> argparse.ArgumentParser:
    """The option parser, generated from the settings' schema (`RunConfig`'s fields
    and their `transformer.settings.Option`s). Only the options given appear in
    the namespace it parses: the defaults are the schema's (`config_of_choices`)."""
    parser = OneLineErrorParser(
        prog=PROG,
        description="Train a Transformer translator (Vaswani et al., 2017). With no "
        "arguments: the toy Portuguese-to-English corpus and the `toy` model, evaluated on "
        "the toy test split, written to runs/toy/.",
        epilog="Multi-worker: start the same command on every machine with "
        "--strategy multi-worker and a TF_CONFIG naming all workers and this one's index; "
        "worker 0 writes the run directory.",
        argument_default=argparse.SUPPRESS,
    )
    groups = {key: parser.add_argument_group(title) for key, title in SECTIONS.items()}
    context = default_context()
    for field, option, is_model in _settings(schema):
        _add_setting(groups[option.section], field, option, is_model, context)
    groups["run"].add_argument(
        "--resume", action="store_true",
        help="continue the run in --output-dir from its last checkpoint, with its saved "
        "settings; only " + ", ".join(resumable_options()) + " may change (any other "
        "option, --precision included, must match the saved run or is refused)")
    groups["run"].add_argument(
        "--no-export", action="store_true",
        help="do not export the translator to <output-dir>/export (default: export it)")
    return parser


def config_of_choices(choices: dict) -> RunConfig:
    """The `RunConfig` of the settings given, by name (`RunConfig`'s fields, and the
    model's as `--num-layers` gives them): the one the Python API makes of them.

    Example:

    >>> config_of_choices({"epochs": 2, "num_layers": 1}) == RunConfig(
    ...     epochs=2, model=default_model("toy", num_layers=1))
    True
    """
    values = dict(choices)
    model_keys = {f.name for f in dataclasses.fields(TransformerConfig)}
    overrides = {key: values.pop(key) for key in list(values) if key in model_keys}
    if overrides and values.get("init_from"):  # checked against the parent's model
        values["model"] = parent_model(values["init_from"], **overrides)
    elif overrides:
        dataset, data = values.get("dataset", "toy"), values.get("data")
        preset = values.get("preset") or dataset_defaults(dataset, data)["preset"]
        values["model"] = default_model(preset, dataset, data, **overrides)
    return RunConfig(**values)


def _config_from_args(args) -> RunConfig:
    """The `RunConfig` of the options; to resume, the saved one with the given changes."""
    choices = {k: v for k, v in vars(args).items() if k not in _NOT_CONFIG}
    config = config_of_choices(choices)
    if not getattr(args, "resume", False):
        return config
    return resume_config(config.run_dir, choices) or config  # None: nothing saved yet


def _check_corpus_files(config: RunConfig) -> None:
    """Raises a one-line `ValueError` for a corpus file that is not there: a
    mistyped path answers at once instead of after TensorFlow's start."""
    for flag, path in (("--data", config.data), ("--valid", config.valid),
                       ("--test", config.test)):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"{flag} {path}: no such file.")


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
    resume, export = getattr(args, "resume", False), not getattr(args, "no_export", False)

    log_progress(sys.stdout)
    logging.getLogger("absl").setLevel(logging.ERROR)  # TFDS' and TensorFlow's warnings
    # and tf.get_logger()'s, e.g. a refused checkpoint's unrestored values, after the error line
    logging.getLogger("tensorflow").setLevel(logging.ERROR)

    try:  # the options, a new run's files and directory, checked before TensorFlow starts
        config = _config_from_args(args)
        if not resume and config.strategy != "multi-worker":  # only the chief checks them
            _check_corpus_files(config)
            rundir.prepare_run_dir(config.run_dir, resume=False, chief=True)
    except (ValueError, OSError) as err:
        return report_error(PROG, err)
    _start_tensorflow()
    import tensorflow as tf

    try:
        result = run.train(config, resume=resume, export=export)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; continue with --resume.", file=sys.stderr)
        return 130
    except (ValueError, OSError, run.TrainingError, tf.errors.OpError) as err:
        return report_error(PROG, err)
    if result.is_chief:
        _print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
