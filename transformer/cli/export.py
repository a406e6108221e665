"""The `transformer-export` command line: a trained run as a model to deploy.

    transformer-export runs/x --format ctranslate2 --quantization int8
    transformer-export runs/x --format ctranslate2 --output /srv/models/es-en
    transformer-export runs/x --format savedmodel --output exported/

`--format ctranslate2` (the default) writes a CTranslate2 model directory
with its SentencePiece files (`transformer.decoding.ctranslate2_export`), by default
the run's own `RUN/ctranslate2-<quantization>/`, which `translate.py --engine
ctranslate2` reuses; it needs the optional `ctranslate2` package.
`--format savedmodel` writes the TensorFlow SavedModel of the translation
pipeline (`transformer.decoding.saved_model.export_translator`), by default to
`RUN/export/`, which train.py writes at the end of a run. The directory
written is printed on standard output. Errors are one line on standard
error, with exit status 1 (2 for a usage error); TensorFlow is imported only
once the options and the run directory are checked.

`ctranslate2_model(run_dir, quantization)` is the conversion
`translate.py --engine ctranslate2` makes once and reuses
(`transformer.decoding.engines.ctranslate2_model`, which says so on standard error here).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

from transformer import rundir
from transformer.cli.common import OneLineErrorParser, hide_native_stderr, report_error
from transformer.decoding import engines  # no TensorFlow at import
from transformer.decoding.ctranslate2_translator import (  # no TensorFlow, no ctranslate2 at import
    CLI_QUANTIZATIONS,
    ctranslate2_module,
)

PROG = "transformer-export"
FORMATS = ("ctranslate2", "savedmodel")

__all__ = ["FORMATS", "ctranslate2_model", "main", "parse_args"]


def parse_args(argv=None):
    parser = OneLineErrorParser(
        prog=PROG,
        description="Export a trained run directory (see train.py) as a model to deploy.",
    )
    parser.add_argument("run", metavar="RUN", help="the run directory written by train.py")
    parser.add_argument("--format", choices=FORMATS, default="ctranslate2",
                        help="ctranslate2: a CTranslate2 model directory with its SentencePiece "
                             "files (needs the ctranslate2 package); savedmodel: the TensorFlow "
                             "SavedModel of the translation pipeline (default: ctranslate2)")
    parser.add_argument("--quantization", choices=CLI_QUANTIZATIONS, default=None,
                        help="ctranslate2 only: the weights' type (default float32; int8 is "
                             "smaller and faster on CPUs)")
    parser.add_argument("--output", metavar="DIR", default=None,
                        help="the directory to write (default: RUN/ctranslate2-QUANTIZATION, "
                             "which translate.py --engine ctranslate2 uses, or RUN/export for "
                             "savedmodel); it must not exist unless --force")
    parser.add_argument("--force", action="store_true", help="replace an existing --output")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's own start-up messages on standard error")
    args = parser.parse_args(argv)
    if args.format == "savedmodel" and args.quantization is not None:
        parser.error("--quantization is for --format ctranslate2 (a SavedModel is float32)")
    return args


def ctranslate2_model(run_dir, quantization="float32", force=False) -> Path:
    """`transformer.decoding.engines.ctranslate2_model`, saying on standard error when it converts.

    Raises:
        ImportError: without the ctranslate2 package, saying how to install it.
        transformer.rundir.RunDirError: a missing or incomplete run directory.
    """
    return engines.ctranslate2_model(run_dir, quantization, force=force, report=_note)


def _note(line):
    """A progress line (a conversion) on standard error."""
    print(line, file=sys.stderr)


def run(args) -> Path:
    """Exports as the options say; returns the directory written (or reused)."""
    run_dir = rundir.check_run_dir(args.run)
    quantization = args.quantization or "float32"
    if args.format == "ctranslate2":
        if args.output is None:  # the run's own export, which translate.py reuses
            return ctranslate2_model(run_dir, quantization, force=args.force)
        ctranslate2_module()
    output = Path(args.output) if args.output else run_dir / rundir.EXPORT_DIR
    if args.output and output.exists() and not args.force:
        raise ValueError(f"--output {str(output)!r} already exists; add --force to replace it.")
    _, savedmodel, exporting = engines.tensorflow_modules()
    if args.format == "ctranslate2":
        return exporting.export_run(run_dir, output, quantization=quantization, force=True)
    if output.exists():  # --force, or the run's own export/ written again
        shutil.rmtree(output)
    return savedmodel.export_translator(run_dir, output)


def main(argv=None) -> int:
    """Runs `transformer-export` with `argv` (default: the command line's); returns the
    exit status."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not args.verbose and "tensorflow" not in sys.modules:
        hide_native_stderr()  # for the whole run: TensorFlow is imported lazily
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        output = run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - one line for people, no traceback
        return report_error(PROG, err)
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
