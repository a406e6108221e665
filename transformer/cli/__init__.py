"""The command line: `train.py` and `translate.py` (or `transformer-train`, `transformer-translate`).

- `common`: argument types, the one-line-error parser, the error report and
  the hiding of TensorFlow's native start-up messages.
- `train`: train a translator and write a run directory.
- `translate`: translate with a trained run, plot its attention.

Each script module has `main(argv=None) -> int`. Importing this package
imports neither TensorFlow nor the rest of `transformer`.
"""
