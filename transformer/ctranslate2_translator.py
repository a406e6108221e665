"""Translating with a model exported by `transformer.export_ctranslate2`, without TensorFlow.

`CTranslate2Translator(model_dir)` reads the export's `export.json`, tokenizes
with the shipped SentencePiece models (`sentencepiece`) and decodes with
`ctranslate2.Translator`, with the limits of the project's `Translator`. This
module imports neither TensorFlow nor the model code, so a machine that
serves translations needs only `ctranslate2` and `sentencepiece` besides it.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformer.constants import DEFAULT_EXTRA_LENGTH, DEFAULT_MAX_OUTPUT_LENGTH

__all__ = ["CTranslate2Translator", "EXPORT_INFO_FILE", "ctranslate2_module"]

# The file of an export that names the tokenizer files and the model's limits.
EXPORT_INFO_FILE = "export.json"
_INSTALL_HINT = "pip install 'ctranslate2>=4.5,<5'"


def ctranslate2_module():
    """The `ctranslate2` module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as err:
        raise ImportError(
            f"Running or exporting to CTranslate2 needs the ctranslate2 package: {_INSTALL_HINT}"
        ) from err
    return ctranslate2


class CTranslate2Translator:
    """Strings in, strings out, with an exported model: `ctranslate2` and
    `sentencepiece` only, no TensorFlow (see the module docstring).

    Sources are trimmed to the model's `max_length` tokens and each output
    gets at most `min(max_length, input length + extra_length)` tokens,
    `[END]` included, as the project's `Translator` does.

    Args:
        model_dir: a directory written by `export_ctranslate2` with
            SentencePiece tokenizers.
        device, compute_type, **kwargs: for `ctranslate2.Translator`
            (e.g. `compute_type="int8"`, `inter_threads`, `intra_threads`).

    Example:

    ```python
    translator = CTranslate2Translator("runs/x/ctranslate2")
    translator(["este é um problema que temos que resolver."], beam_size=4)
    ```
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", **kwargs):
        import sentencepiece as spm

        model_dir = Path(model_dir)
        info = json.loads((model_dir / EXPORT_INFO_FILE).read_text(encoding="utf-8"))
        if info["tokenizer"] != "sentencepiece":
            raise ValueError(
                f"{str(model_dir)!r} was exported with {info['tokenizer']} tokenizers; "
                "CTranslate2Translator needs SentencePiece (translate the tokens of "
                "source_tokens() with ctranslate2.Translator instead)."
            )
        self.source = spm.SentencePieceProcessor(model_file=str(model_dir / info["source_model"]))
        self.target = spm.SentencePieceProcessor(model_file=str(model_dir / info["target_model"]))
        self.max_input_length = int(info["max_input_length"])
        self.translator = ctranslate2_module().Translator(
            str(model_dir), device=device, compute_type=compute_type, **kwargs)

    def tokenize(self, sentences) -> list[list[str]]:
        """The source pieces of each sentence (no `[START]`/`[END]`), trimmed to fit."""
        rows = self.source.encode(list(sentences), out_type=str)
        return [row[: self.max_input_length - 2] for row in rows]

    def __call__(self, sentences, beam_size=1, length_penalty=0.0,
                 max_length=DEFAULT_MAX_OUTPUT_LENGTH, extra_length=DEFAULT_EXTRA_LENGTH,
                 **kwargs) -> list[str]:
        """Translates a list of sentences (beam search for `beam_size > 1`).

        `max_length` caps every output and `extra_length` (None for no such
        limit) each sentence's beyond its number of source tokens, `[END]`
        included, as in `transformer.decoding.output_limits`. More
        `ctranslate2.Translator.translate_batch` options may be passed.
        """
        tokens = self.tokenize(sentences)
        max_length = min(int(max_length), self.max_input_length)
        texts = [""] * len(tokens)
        # One call per output limit, so that each sentence gets its own.
        limits = [max_length if extra_length is None
                  else min(max_length, len(row) + int(extra_length)) for row in tokens]
        for limit in sorted(set(limits)):
            rows = [i for i, row_limit in enumerate(limits) if row_limit == limit]
            results = self.translator.translate_batch(
                [tokens[i] for i in rows], beam_size=beam_size, length_penalty=length_penalty,
                max_input_length=0, max_decoding_length=limit,  # trimmed by `tokenize`
                **{"min_decoding_length": 0, **kwargs},
            )
            for i, result in zip(rows, results, strict=True):
                texts[i] = self.target.decode(result.hypotheses[0]) if tokens[i] else ""
        return texts
