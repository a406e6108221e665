"""Exporting a trained `Transformer` to CTranslate2, a C++ inference engine.

`export_ctranslate2(model, tokenizers_or_run_dir, output_dir)` writes a
directory that `ctranslate2.Translator(output_dir)` loads, with the run's
tokenizer files beside the model; `transformer.decoding.ctranslate2_translator`
translates strings with it, without TensorFlow. The `ctranslate2` package is
imported only when a function here is called, and only the command lines
import this module (`transformer.cli.export`, when asked to convert), so the
rest of the project works without it. `export_run(run_dir)` exports a run
directory; `transformer-export RUN` and `translate.py --engine ctranslate2`
use it.

How the project's model maps onto CTranslate2's `TransformerSpec`:

- Layers: `TransformerSpec.from_config((encoder layers, decoder layers),
  num_heads, pre_norm=normalize_first)`. Post-norm (the paper's, the toy
  default) has no final norm; pre-norm (`normalize_first=True`, the real-text
  default) has the encoder's and the decoder's `final_layernorm` as the
  spec's `layer_norm`. CTranslate2's `layer_norm_epsilon` is set to this
  project's 1e-6 (`LAYER_NORM_EPSILON`; CTranslate2 would use 1e-5 without).
- Embeddings: `scale_embeddings` (multiply by sqrt(d_model), section 3.4)
  stays on. CTranslate2's own sinusoid concatenates sines and cosines; the
  project interleaves them (`positional_encoding`), so the table itself is
  the spec's `position_encodings.encodings`, `max_length` rows from position 0.
- Attention: `wq`, `wk`, `wv` are fused into one `(3 d, d)` linear for self-
  attention; for encoder-decoder attention `wq` stays alone and `wk`, `wv` are
  fused; `dense` is the output linear. Keras kernels `(in, out)` are
  transposed to CTranslate2's `(out, in)`. Every bias is kept.
- The feed-forward network is `linear_0` (ReLU, CTranslate2's default
  activation) and `linear_1`, with their biases.
- Output layer: a `Dense` becomes `decoder.projection` (weight and bias); a
  `TiedOutputProjection` becomes a projection with the embedding's table and
  no bias, and CTranslate2 stores the one table once (it aliases equal
  variables on save).
- Vocabularies: the tokenizers' tokens in id order, so CTranslate2's ids are
  the project's. The reserved tokens are CTranslate2's special tokens:
  `unk_token="[UNK]"`, `bos_token` and `decoder_start_token` `"[START]"`,
  `eos_token="[END]"`; `add_source_bos` and `add_source_eos` frame every
  source with `[START]` and `[END]` as the project's tokenizers do. `[PAD]`
  is never fed (CTranslate2 pads by lengths). One shared vocabulary is
  written once (`shared_vocabulary.json`).
- Vocabulary map: a shared vocabulary holds the pieces of both languages, and
  a translation needs only the target language's. Given the target pieces
  the model was trained on (`export_run` tokenizes the run's training pairs
  again as training did, its drawn segmentations included, after checking
  them against the run's data fingerprint), the export writes CTranslate2's
  vocabulary map of them (`vmap.txt`, one line with an empty source n-gram:
  candidates for every sentence), and `CTranslate2Translator` decodes with it
  (`use_vmap`): the output projection and its softmax run over those pieces
  only, so scores are renormalized over them.
- Tokenizers: CTranslate2 translates tokens (strings). The export copies the
  SentencePiece models (`source.model`/`target.model`, or `shared.model`)
  and their `.vocab` files, or the WordPiece vocabulary files, and writes
  `export.json` naming them. SentencePiece's `encode(..., out_type=str)`
  gives the pieces the project's tokenizer gives (without `[START]` and
  `[END]`, which CTranslate2 adds), except that a run of characters outside
  the vocabulary stays as it is where the project's shows `[UNK]`;
  CTranslate2 maps every token outside its vocabulary to `[UNK]`, so the ids
  are the same.
- Decoding: the project trims a source to the model's `max_length` tokens and
  caps an output at `min(max_length, input length + 50)` tokens, `[END]`
  included; `CTranslate2Translator` passes the same limits
  (`max_input_length`, `max_decoding_length`), and `min_decoding_length=0`:
  CTranslate2's default of 1 forbids `[END]` as the first token and
  renormalizes, so its scores would not be the model's `log P`. CTranslate2 ranks beam
  hypotheses by `log P / length ** length_penalty`, not by the GNMT penalty of
  `transformer.decoding.search.length_penalty`; with `length_penalty=0` (and
  `alpha=0` here) both rank by `log P`. One difference is left: a `[PAD]`
  among the output tokens so far is masked by the model's decoder and
  attended by CTranslate2's; trained models do not predict `[PAD]`, which is
  never a target.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

from transformer import rundir
from transformer.constants import (
    END_ID,
    LAYER_NORM_EPSILON,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
)
from transformer.data.loading import data_fingerprint, training_corpus
from transformer.data.tokenizers import load_tokenizers, tokenizer_kind
from transformer.decoding.ctranslate2_translator import (
    EXPORT_INFO_FILE,
    VOCABULARY_MAP_FILE,
    ctranslate2_module,
    write_run_export,
)
from transformer.decoding.pipeline import load_run
from transformer.model import TiedOutputProjection
from transformer.run.config import read_config
from transformer.run.fitting import drawn_pairs, training_tokens
from transformer.rundir import FINGERPRINT_KEY

logger = logging.getLogger(__name__)

__all__ = [
    "QUANTIZATIONS",
    "ctranslate2_spec",
    "export_ctranslate2",
    "export_run",
    "source_tokens",
    "training_target_pieces",
    "vocabulary",
    "write_vocabulary_map",
]

# CTranslate2's weight types (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`).
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")


def _numpy(variable) -> np.ndarray:
    """A float32 copy that CTranslate2 may quantize in place."""
    return np.array(tf.convert_to_tensor(variable), dtype=np.float32)


def _set_linear(spec, dense):
    """A Keras `Dense` (`kernel` `(in, out)`, `bias`) into a CTranslate2 `LinearSpec`."""
    spec.weight = np.ascontiguousarray(_numpy(dense.kernel).T)
    if dense.use_bias:
        spec.bias = _numpy(dense.bias)


def _set_fused(spec, denses):
    """Several `Dense` layers of one input into one linear: their outputs concatenated."""
    spec.weight = np.concatenate([_numpy(d.kernel).T for d in denses], axis=0)
    spec.bias = np.concatenate([_numpy(d.bias) for d in denses], axis=0)


def _set_layer_norm(spec, layer_norm):
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _set_self_attention(spec, block):
    """An `EncoderSelfAttention` or `MaskedDecoderSelfAttention` (fused q, k, v)."""
    mha = block.mha
    _set_fused(spec.linear[0], [mha.wq, mha.wk, mha.wv])
    _set_linear(spec.linear[1], mha.dense)
    _set_layer_norm(spec.layer_norm, block.layernorm)


def _set_cross_attention(spec, block):
    """An `EncoderDecoderAttention`: the queries alone, keys and values fused."""
    mha = block.mha
    _set_linear(spec.linear[0], mha.wq)
    _set_fused(spec.linear[1], [mha.wk, mha.wv])
    _set_linear(spec.linear[2], mha.dense)
    _set_layer_norm(spec.layer_norm, block.layernorm)


def _set_ffn(spec, layer):
    _set_linear(spec.linear_0, layer.ffn.dense1)
    _set_linear(spec.linear_1, layer.ffn.dense2)
    _set_layer_norm(spec.layer_norm, layer.ffn_layernorm)


def _set_inputs(spec, stack, embeddings_spec):
    """Embedding table, sqrt(d_model) scaling, the interleaved sinusoid and the final norm."""
    embeddings_spec.weight = _numpy(stack.pos_embedding.embedding.embeddings)
    spec.scale_embeddings = True
    # The layer's own table: `positional_encoding(max_length, d_model)`.
    spec.position_encodings.encodings = np.array(stack.pos_embedding.pos_encoding, np.float32)
    if stack.final_layernorm is not None:
        _set_layer_norm(spec.layer_norm, stack.final_layernorm)


def ctranslate2_spec(model, source_vocabulary, target_vocabulary):
    """A CTranslate2 `TransformerSpec` holding `model`'s weights and vocabularies.

    Args:
        model: a built `transformer.Transformer`.
        source_vocabulary, target_vocabulary: the tokens of each id, as the
            tokenizers have them (`vocabulary`); the reserved tokens first.

    Returns:
        A `ctranslate2.specs.TransformerSpec`, validated, ready for
        `optimize(quantization)` and `save(directory)`.

    Raises:
        ValueError: a vocabulary that does not fit the model, or does not
            start with `[PAD] [UNK] [START] [END]`.
    """
    specs = ctranslate2_module().specs
    for name, tokens, size in (("source", source_vocabulary, model.input_vocab_size),
                               ("target", target_vocabulary, model.target_vocab_size)):
        _check_vocabulary(name, tokens, size)
    if not model.built:
        raise ValueError("Received an unbuilt model; call it once (or load it) before exporting.")
    encoder, decoder = model.encoder, model.decoder
    spec = specs.TransformerSpec.from_config(
        (len(encoder.enc_layers), len(decoder.dec_layers)), model.config.num_heads,
        pre_norm=model.config.normalize_first, activation=specs.Activation.RELU,
    )
    _set_inputs(spec.encoder, encoder, spec.encoder.embeddings[0])
    for layer_spec, layer in zip(spec.encoder.layer, encoder.enc_layers, strict=True):
        _set_self_attention(layer_spec.self_attention, layer.self_attention)
        _set_ffn(layer_spec.ffn, layer)
    _set_inputs(spec.decoder, decoder, spec.decoder.embeddings)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.dec_layers, strict=True):
        _set_self_attention(layer_spec.self_attention, layer.causal_self_attention)
        _set_cross_attention(layer_spec.attention, layer.cross_attention)
        _set_ffn(layer_spec.ffn, layer)
    if isinstance(model.final_layer, TiedOutputProjection):
        # logits = x @ E^T: E, (vocab, d_model), is already CTranslate2's (out, in).
        spec.decoder.projection.weight = _numpy(model.final_layer._embedding.embeddings)
    else:
        _set_linear(spec.decoder.projection, model.final_layer)
    config = spec.config
    config.unk_token = RESERVED_TOKENS[UNK_ID]
    config.bos_token = RESERVED_TOKENS[START_ID]
    config.eos_token = RESERVED_TOKENS[END_ID]
    config.decoder_start_token = RESERVED_TOKENS[START_ID]
    config.add_source_bos = True
    config.add_source_eos = True
    config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(list(source_vocabulary))
    spec.register_target_vocabulary(list(target_vocabulary))
    spec.validate()
    return spec


def _check_vocabulary(name, tokens, size):
    tokens = list(tokens)
    if len(tokens) != size:
        raise ValueError(
            f"Received a {name} vocabulary of {len(tokens)} tokens for a model whose {name} "
            f"vocabulary has {size}: are these the run's tokenizers?"
        )
    if tuple(tokens[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
        raise ValueError(
            f"The {name} vocabulary must start with {list(RESERVED_TOKENS)}, found "
            f"{tokens[: len(RESERVED_TOKENS)]}."
        )
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"The {name} vocabulary holds a token twice; CTranslate2 needs each once.")


def vocabulary(tokenizer) -> list[str]:
    """The tokens of a tokenizer (built or reloaded), in id order."""
    size = int(tokenizer.get_vocab_size())
    ids = tf.range(size, dtype=tf.int64)[tf.newaxis]  # (1, vocab)
    return [token.decode("utf-8") for token in tokenizer.lookup(ids).numpy()[0]]


def source_tokens(tokenizer, sentences) -> list[list[str]]:
    """The project tokenizer's tokens of each sentence, without `[START]` and `[END]`
    (CTranslate2 adds them): what `ctranslate2.Translator.translate_batch` takes."""
    ids = tokenizer.tokenize(tf.constant(list(sentences), tf.string))  # (batch, (tokens))
    rows = tokenizer.lookup(ids).to_list()
    return [[token.decode("utf-8") for token in row[1:-1]] for row in rows]


# Target ids counted at a time for the vocabulary map.
_IDS_AT_ONCE = 1 << 24


def write_vocabulary_map(output_dir, pieces) -> Path | None:
    """Writes CTranslate2's vocabulary map (`vmap.txt`) making `pieces` the
    candidates of every sentence (CTranslate2 adds `[UNK]`, `[START]` and
    `[END]`); returns its path, or None (with a warning) for no pieces or a
    piece the map's format cannot hold (one with a space, tab or line break)."""
    pieces = list(pieces)
    bad = next((piece for piece in pieces if set(piece) & set(" \t\r\n")), None)
    if not pieces or bad is not None:
        logger.warning("Exported without a vocabulary map: %s.",
                       f"the target piece {bad!r} holds whitespace" if pieces
                       else "no target pieces were given")
        return None
    path = Path(output_dir) / VOCABULARY_MAP_FILE
    path.write_text("\t" + " ".join(pieces) + "\n", encoding="utf-8")
    return path


def training_target_pieces(run_dir, tokenizers) -> list[str] | None:
    """The target pieces a run was trained on, in id order, the reserved tokens
    left out: read from the ids of its `tokens/` files (trimmed, with the
    segmentations it drew, `rundir.SAMPLING_FILE`), or tokenized into them as
    training did when they are missing. None, with a warning, when its data
    cannot be read or are not the data the run was trained on (the data
    fingerprint of its `config.json`, which it must have)."""
    run_dir = Path(run_dir)
    try:
        config, record = read_config(run_dir)
        saved = record.get(FINGERPRINT_KEY)
        if saved is None:
            raise ValueError(f"its {rundir.CONFIG_FILE} has no data fingerprint to check them")
        tokens_dir = run_dir / rundir.TOKENS_DIR
        corpus = training_corpus(config, download=False, record_dir=tokens_dir)
        if saved != data_fingerprint(config, corpus):
            raise ValueError("they differ from the data the run was trained on "
                             f"({FINGERPRINT_KEY} in its {rundir.CONFIG_FILE})")
        tokens = training_tokens(tokens_dir, corpus.train, tokenizers,
                                 config.resolved_max_tokens, saved)
        plan = run_dir / rundir.SAMPLING_FILE
        if plan.is_file():
            tokens = drawn_pairs(config, corpus.train, tokenizers, tokens,
                                 rundir.read_json(plan), tokens_dir)
    except Exception as err:  # noqa: BLE001 - the map only speeds decoding up; say why not
        logger.warning("Exporting %s without a vocabulary map, which only makes decoding "
                       "faster: could not read the run's training pairs (%s). Export again "
                       "with `transformer-export RUN --force` once they can be read.",
                       run_dir, str(err).strip().splitlines()[0] if str(err).strip() else
                       type(err).__name__)
        return None
    used = np.zeros(int(tokenizers.target.get_vocab_size()), bool)
    ids = tokens.target.values
    for start in range(0, len(ids), _IDS_AT_ONCE):  # memory-mapped: a slice at a time
        used |= np.bincount(ids[start : start + _IDS_AT_ONCE], minlength=len(used)) > 0
    used[: len(RESERVED_TOKENS)] = False
    names = vocabulary(tokenizers.target)
    return [names[i] for i in np.flatnonzero(used)]


def _shares_vocabulary(tokenizers) -> bool:
    return tokenizers.source is tokenizers.target or (
        tokenizer_kind(tokenizers.source) == "sentencepiece"
        and _model_path(tokenizers.source).name == "shared.model"
    )


def _resolve_tokenizers(tokenizers_or_run_dir):
    """Tokenizers, from the object itself, a run directory or a tokenizers directory."""
    if not isinstance(tokenizers_or_run_dir, (str, Path)):
        return tokenizers_or_run_dir
    path = Path(tokenizers_or_run_dir)
    if (path / rundir.TOKENIZERS_DIR).is_dir():
        path = path / rundir.TOKENIZERS_DIR
    return load_tokenizers(path)


def _copy_tokenizer_files(tokenizers, output_dir: Path) -> dict:
    """Copies the tokenizer files into the export; returns what `export.json` says of them."""
    shared = _shares_vocabulary(tokenizers)
    info = {"tokenizer": tokenizer_kind(tokenizers.source), "shared_vocabulary": shared}
    for side in ("source", "target"):
        tokenizer = getattr(tokenizers, side)
        if info["tokenizer"] == "sentencepiece":
            stem = "shared" if shared else side
            model_path = _model_path(tokenizer)
            shutil.copyfile(model_path, output_dir / f"{stem}.model")
            vocab = Path(tokenizer.get_vocab_path().numpy().decode("utf-8"))
            shutil.copyfile(vocab, output_dir / f"{stem}.vocab")
            info[f"{side}_model"] = f"{stem}.model"
        else:
            name = f"{side}_wordpiece_vocab.txt"
            (output_dir / name).write_text(
                "".join(token + "\n" for token in vocabulary(tokenizer)), encoding="utf-8")
            info[f"{side}_vocab"] = name
    return info


def _model_path(tokenizer) -> Path:
    return Path(tokenizer.get_model_path().numpy().decode("utf-8"))


def export_ctranslate2(model, tokenizers_or_run_dir, output_dir, quantization="float32",
                       force=False, target_pieces=None) -> Path:
    """Writes `model` and its tokenizers as a CTranslate2 model directory.

    Args:
        model: a built `transformer.Transformer` (e.g. a run's `model.keras`).
        tokenizers_or_run_dir: the run's tokenizers (an object with `.source`
            and `.target`, built or reloaded), or a run directory, or its
            `tokenizers/` directory.
        output_dir: the directory to write; it must not exist unless `force`.
        quantization: the weights' type, `"float32"` (default) or `"int8"`
            (or another of `QUANTIZATIONS`).
        force: replace an existing `output_dir`.
        target_pieces: the target pieces the model was trained on
            (`training_target_pieces`), or None; when they are fewer than the
            target vocabulary's, the export gets a vocabulary map of them (see
            the module docstring).

    Returns:
        `output_dir` as a Path. It holds CTranslate2's `model.bin`,
        `config.json` and vocabularies (`shared_vocabulary.json`, or
        `source_vocabulary.json` and `target_vocabulary.json`), the tokenizer
        files, `export.json` (see the module docstring) and, with a vocabulary
        map, `vmap.txt`.

    Raises:
        ImportError: without the `ctranslate2` package.
        ValueError: a bad `quantization`, an unbuilt model, tokenizers that
            do not fit it, or an existing `output_dir` without `force`.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"Received quantization={quantization!r}, expected one of {', '.join(QUANTIZATIONS)}."
        )
    output_dir = Path(output_dir)
    if output_dir.exists() and not force:
        raise ValueError(f"{str(output_dir)!r} already exists; pass force=True to replace it.")
    tokenizers = _resolve_tokenizers(tokenizers_or_run_dir)
    spec = ctranslate2_spec(model, vocabulary(tokenizers.source), vocabulary(tokenizers.target))
    spec.optimize(quantization=quantization)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True)
    spec.save(str(output_dir))
    info = _copy_tokenizer_files(tokenizers, output_dir)
    info.update(max_input_length=int(model.config.max_length), quantization=quantization)
    if (target_pieces is not None
            and len(target_pieces) + len(RESERVED_TOKENS) < model.target_vocab_size
            and write_vocabulary_map(output_dir, target_pieces)):
        info["vocabulary_map_pieces"] = len(target_pieces)
    rundir.write_json_atomic(output_dir / EXPORT_INFO_FILE, info)
    return output_dir


def export_run(run_dir, output_dir=None, quantization="float32", force=False) -> Path:
    """Exports a run directory written by train.py (its `model.keras` and tokenizers,
    and, for a shared vocabulary, the vocabulary map of its training targets).

    Args:
        run_dir: the run directory.
        output_dir: where to write; by default the run's own export,
            `transformer.decoding.ctranslate2_translator.run_export_dir(run_dir,
            quantization)`, which is replaced atomically (`write_run_export`)
            and which `translate.py --engine ctranslate2` reuses while the
            model file is unchanged.
        quantization, force: as `export_ctranslate2` (`force` applies to an
            `output_dir` given).

    Returns:
        The directory written, as a Path.

    Raises:
        transformer.rundir.RunDirError: a missing or incomplete run directory.
    """
    tokenizers, model = load_run(run_dir)
    # Only a shared vocabulary holds pieces that no target uses.
    pieces = training_target_pieces(run_dir, tokenizers) if _shares_vocabulary(tokenizers) \
        else None
    if output_dir is None:
        return write_run_export(run_dir, quantization, lambda directory: export_ctranslate2(
            model, tokenizers, directory, quantization=quantization, target_pieces=pieces))
    return export_ctranslate2(model, tokenizers, output_dir, quantization=quantization,
                              force=force, target_pieces=pieces)
