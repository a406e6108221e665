"""Everything after training: searching, translating, exporting a trained `Transformer`.

The package's top level holds the paper's layers; this folder holds what
uses them once they are trained, one job per module:

- `strategies`: `Strategy`, the contract of a search (one method, on the
  public loop of `search`), and the built-in `Greedy`, `Beam`, `Sample`
  (standard library only, so that the command lines check their options
  before TensorFlow starts);
- `search`: the search loops in TensorFlow over a next-token callback:
  `token_by_token` (the public loop a one-method strategy runs on), greedy
  search, sampling, beam search (section 6.1);
- `pipeline`: the model's step as that callback, the tutorial's naive loop,
  and the translation pipeline (text to text, in TensorFlow ops) written once;
- `translator`: `Translator`, the Python API (text in, `Translation`s out);
- `saved_model`: that pipeline exported as a SavedModel;
- `ctranslate2_export`, `ctranslate2_translator`: the model as a CTranslate2
  model directory, and translating with it without TensorFlow;
- `search_options`: translate.py's and a served request's options -> one
  strategy (standard library only);
- `engines`: a run's engine (TensorFlow or CTranslate2), loaded for the
  command lines and the server (`transformer.serving`).

Nothing is imported here: `import transformer.decoding.strategies` does not
start TensorFlow. The public names (`Translator`, `Strategy`, `Greedy`,
`Beam`, `Sample`, ...) are also `transformer`'s own.
"""
