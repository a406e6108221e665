"""The command lines: `train.py`, `translate.py` and `transformer-export`.

- `common`: argument types, the one-line-error parser, the error report and
  the hiding of TensorFlow's native start-up messages.
- `train`: train a translator and write a run directory.
- `translate`: translate with a trained run, plot its attention.
- `export`: a trained run as a CTranslate2 model directory or a SavedModel.

Each script module has `main(argv=None) -> int`. Importing this package
imports neither TensorFlow nor the rest of `transformer`.
"""
