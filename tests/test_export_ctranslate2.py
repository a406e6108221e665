"""Tests of transformer/decoding/ctranslate2_export.py and ctranslate2_translator.py: the model
run by CTranslate2.

The references are the model's own logits, one full forward pass per step
(`model((source, prefix))`), with the greedy and beam loops written here, so
that the tests follow the model and not the project's search code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the CTranslate2 export needs the ctranslate2 package "
    "(pip install 'ctranslate2>=4.5,<5')")
spm = pytest.importorskip("sentencepiece", reason="the export ships SentencePiece models")
from ctranslate2.specs import model_spec  # noqa: E402

from transformer.constants import (  # noqa: E402
    END_ID,
    LAYER_NORM_EPSILON,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
)
from transformer.data import read_tsv  # noqa: E402
from transformer.decoding.ctranslate2_export import (  # noqa: E402
    ctranslate2_spec,
    export_ctranslate2,
    export_run,
    source_tokens,
    training_target_pieces,
    vocabulary,
    write_vocabulary_map,
)
from transformer.decoding.ctranslate2_translator import (  # noqa: E402
    EXPORT_INFO_FILE,
    VOCABULARY_MAP_FILE,
    CTranslate2Translator,
    ctranslate2_module,
)
from transformer.decoding.pipeline import load_run  # noqa: E402
from transformer.decoding.strategies import Greedy  # noqa: E402
from transformer.model import Transformer  # noqa: E402

BEAM = 4


def _tokens(vocab, ids):
    return [vocab[i] for i in ids]


_IDS = tf.TensorSpec([None, None], tf.int64)
_LOG_PROBS = {}


def _log_probs(model, sources, targets):
    """`log_softmax(model((sources, targets)))`, traced once per model (the loops
    below call it once per step)."""
    if id(model) not in _LOG_PROBS:
        _LOG_PROBS[id(model)] = (model, tf.function(
            lambda s, t: tf.nn.log_softmax(model((s, t), training=False), axis=-1),
            input_signature=[_IDS, _IDS], autograph=False))
    return _LOG_PROBS[id(model)][1](tf.constant(sources, tf.int64),
                                    tf.constant(targets, tf.int64)).numpy()


def _step_log_probs(model, source_ids, prefixes):
    """`log P(next | source, prefix)` for each prefix (all of one length), `(n, vocab)`."""
    log_probs = _log_probs(model, [source_ids] * len(prefixes), prefixes)[:, -1]
    return log_probs.astype(np.float64)


def reference_greedy(model, source_ids, limit):
    """The most probable token at each step, up to `[END]` or `limit` tokens."""
    output = [START_ID]
    while len(output) <= limit:
        output.append(int(np.argmax(_step_log_probs(model, source_ids, [output])[0])))
        if output[-1] == END_ID:
            break
    return output[1:]


def reference_beam(model, source_ids, limit, k=BEAM):
    """Beam search ranked by `log P` (no length penalty): `k` live hypotheses, the
    `2k` best extensions, those ending in `[END]` among the first `k` finished,
    until the best finished one beats every live one. Returns `(tokens, log P)`."""
    alive, finished = [([START_ID], 0.0)], []
    for _ in range(limit):
        log_probs = _step_log_probs(model, source_ids, [seq for seq, _ in alive])
        candidates = sorted(
            ((score + log_probs[row, token], seq + [token])
             for row, (seq, score) in enumerate(alive) for token in range(log_probs.shape[1])),
            key=lambda c: -c[0])[: 2 * k]
        finished += [(seq, score) for score, seq in candidates[:k] if seq[-1] == END_ID]
        alive = [(seq, score) for score, seq in candidates if seq[-1] != END_ID][:k]
        if finished and max(s for _, s in finished) >= alive[0][1]:
            break
    else:
        finished += alive
    best, score = max(finished, key=lambda f: f[1])
    return best[1:], score


def _teacher_forced_log_probs(model, source_ids, output_ids):
    """The model's log-probability of each output token (one teacher-forced pass)."""
    log_probs = _log_probs(model, [source_ids], [[START_ID, *output_ids[:-1]]])[0]
    return log_probs[np.arange(len(output_ids)), output_ids]


def _strip_end(ids):
    return ids[:-1] if ids and ids[-1] == END_ID else ids


# --- Random models: every layout, exact numbers -------------------------------------------

def _random_model(normalize_first, tie, vocab_sizes, seed=0, decoder_layers=None):
    keras.utils.set_random_seed(seed)
    model = Transformer(2, 16, 2, 32, *vocab_sizes, max_length=24, dropout_rate=0.0,
                        tie_embeddings=tie, normalize_first=normalize_first,
                        num_decoder_layers=decoder_layers)
    model((tf.constant([[START_ID, 5, END_ID]]), tf.constant([[START_ID]])))
    # Sharper distributions than the initial ones, so that no two tokens tie.
    for variable in model.final_layer.weights or model.encoder.pos_embedding.weights:
        variable.assign(variable * 4.0)
    # A [PAD] in the prefix is masked by the model and attended by CTranslate2
    # (see the module docstring); a trained model never predicts it (it is
    # never a target), and these must not either. `_no_pad` checks it.
    if tie:
        table = model.encoder.pos_embedding.embedding.embeddings
        table.assign(tf.tensor_scatter_nd_update(table, [[PAD_ID]], tf.zeros([1, 16])))
    else:
        model.final_layer.bias.assign(tf.tensor_scatter_nd_update(
            model.final_layer.bias, [[PAD_ID]], [-1000.0]))
    return model


def _no_pad(ids):
    assert PAD_ID not in ids, ids
    return ids


def _vocab(size, prefix):
    return [*RESERVED_TOKENS, *(f"{prefix}{i}" for i in range(len(RESERVED_TOKENS), size))]


LAYOUTS = {
    "post-norm, shared, tied": (False, True, (30, 30)),
    "post-norm, separate": (False, False, (30, 26)),
    "pre-norm, shared, tied": (True, True, (30, 30)),
    "pre-norm, separate": (True, False, (27, 31)),
    "pre-norm, shared, untied": (True, False, (30, 30)),
    # A deeper encoder than decoder: 2 encoder layers, 1 decoder layer.
    "pre-norm, shared, tied, 1 decoder layer": (True, True, (30, 30), 1),
}
SOURCES = [[5, 6, 7], [9, 4, 11, 12, 8, 20], [25], [7, 7, 7, 7]]


@pytest.fixture(scope="module", params=list(LAYOUTS), ids=list(LAYOUTS))
def random_export(request, tmp_path_factory):
    normalize_first, tie, sizes, *decoder_layers = LAYOUTS[request.param]
    model = _random_model(normalize_first, tie, sizes, decoder_layers=next(iter(decoder_layers), None))
    source_vocab = _vocab(sizes[0], "s")
    target_vocab = source_vocab if sizes[0] == sizes[1] else _vocab(sizes[1], "t")
    spec = ctranslate2_spec(model, source_vocab, target_vocab)
    spec.optimize("float32")
    # The tied table is saved once: CTranslate2 aliases the projection to it.
    assert isinstance(spec.decoder.projection.weight, str) == tie
    directory = tmp_path_factory.mktemp("ct2")
    spec.save(str(directory))
    return model, ctranslate2.Translator(str(directory)), source_vocab, target_vocab, directory


def test_greedy_outputs_and_scores_equal_the_models(random_export):
    model, translator, source_vocab, target_vocab, _ = random_export
    limit = 12
    results = translator.translate_batch(
        [_tokens(source_vocab, s) for s in SOURCES], beam_size=1, max_decoding_length=limit,
        return_scores=True, length_penalty=0.0, min_decoding_length=0)
    equal = 0
    for source, result in zip(SOURCES, results, strict=True):
        encoder_ids = [START_ID, *source, END_ID]
        expected = _no_pad(reference_greedy(model, encoder_ids, limit))
        assert result.hypotheses[0] == _tokens(target_vocab, _strip_end(expected))
        equal += 1
        if expected[-1] == END_ID:  # a finished output's score is its log P
            log_p = _teacher_forced_log_probs(model, encoder_ids, expected).sum()
            assert result.scores[0] == pytest.approx(log_p, abs=1e-4)
    assert equal == len(SOURCES)


def test_score_batch_equals_the_models_log_probs(random_export):
    model, translator, source_vocab, target_vocab, _ = random_export
    rng = np.random.default_rng(0)
    targets = [list(rng.integers(4, len(target_vocab), size=n)) for n in (1, 5, 9, 3)]
    scored = translator.score_batch([_tokens(source_vocab, s) for s in SOURCES],
                                    [_tokens(target_vocab, t) for t in targets])
    for source, target, result in zip(SOURCES, targets, scored, strict=True):
        expected = _teacher_forced_log_probs(model, [START_ID, *source, END_ID],
                                             [*map(int, target), END_ID])
        np.testing.assert_allclose(result.log_probs, expected, atol=1e-4)


def test_beam_outputs_equal_the_reference_beam_search(random_export):
    model, translator, source_vocab, target_vocab, _ = random_export
    limit = 10
    results = translator.translate_batch(
        [_tokens(source_vocab, s) for s in SOURCES], beam_size=BEAM, max_decoding_length=limit,
        return_scores=True, length_penalty=0.0, num_hypotheses=BEAM,
        min_decoding_length=0)
    for source, result in zip(SOURCES, results, strict=True):
        encoder_ids = [START_ID, *source, END_ID]
        expected, log_p = reference_beam(model, encoder_ids, limit)
        _no_pad(expected)
        assert result.hypotheses[0] == _tokens(target_vocab, _strip_end(expected))
        if expected[-1] == END_ID:
            assert result.scores[0] == pytest.approx(log_p, abs=1e-4)
        # Every hypothesis is scored by its log P under the model.
        for hypothesis, score in zip(result.hypotheses, result.scores, strict=True):
            ids = [target_vocab.index(t) for t in hypothesis]
            if len(ids) < limit:
                log_p = _teacher_forced_log_probs(model, encoder_ids, [*ids, END_ID]).sum()
                assert score == pytest.approx(log_p, abs=1e-4)


def test_config_maps_the_reserved_tokens_and_the_epsilon(random_export):
    _, _, source_vocab, target_vocab, directory = random_export
    config = json.loads((directory / "config.json").read_text())
    assert config["layer_norm_epsilon"] == LAYER_NORM_EPSILON
    assert (config["unk_token"], config["bos_token"], config["eos_token"],
            config["decoder_start_token"]) == ("[UNK]", "[START]", "[END]", "[START]")
    assert config["add_source_bos"] and config["add_source_eos"]
    shared = source_vocab == target_vocab
    assert (directory / "shared_vocabulary.json").is_file() == shared
    assert (directory / "target_vocabulary.json").is_file() != shared


def test_positional_table_is_the_projects_not_ctranslate2s(random_export):
    model, translator, source_vocab, target_vocab, directory = random_export
    # Without the table CTranslate2 uses its own sinusoid, and the scores move.
    normalize_first, tie = model.config.normalize_first, model.config.tie_embeddings
    spec = ctranslate2_spec(model, source_vocab, target_vocab)
    spec.encoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.decoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.optimize("float32")
    other = directory.parent / f"{directory.name}-builtin"
    other.mkdir()
    spec.save(str(other))
    builtin = ctranslate2.Translator(str(other))
    source, target = _tokens(source_vocab, SOURCES[1]), _tokens(target_vocab, [5, 6, 7])
    ours = translator.score_batch([source], [target])[0].log_probs
    theirs = builtin.score_batch([source], [target])[0].log_probs
    assert not np.allclose(ours, theirs, atol=1e-3), (normalize_first, tie)


def test_layer_norm_epsilon_is_the_projects(tmp_path):
    # Embeddings and positional encodings scaled down until the layer norms'
    # inputs vary about as much as epsilon: then epsilon shows in every score.
    model = _random_model(False, False, (30, 26))
    for stack in (model.encoder, model.decoder):
        stack.pos_embedding.pos_encoding = stack.pos_embedding.pos_encoding * 1e-3
        table = stack.pos_embedding.embedding.embeddings
        table.assign(table * 1e-3)
    source, target = [5, 6, 7, 8], [4, 9, 10]
    expected = _teacher_forced_log_probs(model, [START_ID, *source, END_ID], [*target, END_ID])
    scores = {}
    for epsilon in (LAYER_NORM_EPSILON, None):  # None: CTranslate2's default, 1e-5
        spec = ctranslate2_spec(model, _vocab(30, "s"), _vocab(26, "t"))
        assert spec.config.layer_norm_epsilon == LAYER_NORM_EPSILON
        spec.config.layer_norm_epsilon = epsilon
        spec.optimize("float32")
        (tmp_path / str(epsilon)).mkdir()
        spec.save(str(tmp_path / str(epsilon)))
        scores[epsilon] = ctranslate2.Translator(str(tmp_path / str(epsilon))).score_batch(
            [_tokens(_vocab(30, "s"), source)], [_tokens(_vocab(26, "t"), target)])[0].log_probs
    np.testing.assert_allclose(scores[LAYER_NORM_EPSILON], expected, atol=1e-4)
    assert np.abs(np.array(scores[None]) - expected).max() > 0.1


def test_bad_vocabularies_are_clear_errors():
    model = _random_model(False, False, (30, 26))
    with pytest.raises(ValueError, match="target vocabulary of 30 tokens"):
        ctranslate2_spec(model, _vocab(30, "s"), _vocab(30, "t"))
    with pytest.raises(ValueError, match=r"must start with \['\[PAD\]'"):
        ctranslate2_spec(model, ["<unk>", *_vocab(30, "s")[1:]], _vocab(26, "t"))


# --- The trained tiny run: tokenizers, files, and beam search on a real model ---------------

@pytest.fixture(scope="module")
def run_export(run_dir, tmp_path_factory):
    tokenizers, model = load_run(run_dir)
    directory = export_ctranslate2(model, run_dir, tmp_path_factory.mktemp("x") / "ct2")
    return tokenizers, model, directory


def test_export_ships_the_tokenizers_and_loads(run_export, test_pairs):
    tokenizers, _, directory = run_export
    info = json.loads((directory / EXPORT_INFO_FILE).read_text())
    assert info["tokenizer"] == "sentencepiece"
    sentences = [source for source, _ in test_pairs[:16]] + ["o gato xyzzyq"]
    # SentencePiece's own pieces are the project tokenizer's.
    # SentencePiece keeps unknown characters where the project's shows [UNK];
    # CTranslate2 maps them to [UNK] too.
    processor = spm.SentencePieceProcessor(model_file=str(directory / info["source_model"]))
    known = set(vocabulary(tokenizers.source))
    pieces = [[p if p in known else "[UNK]" for p in row]
              for row in processor.encode(sentences, out_type=str)]
    assert pieces == source_tokens(tokenizers.source, sentences)
    assert "[UNK]" in pieces[-1]
    for side in ("source", "target"):
        assert (directory / info[f"{side}_model"]).with_suffix(".vocab").is_file()
    assert json.loads((directory / "target_vocabulary.json").read_text()) == vocabulary(
        tokenizers.target)


@pytest.fixture(scope="module")
def pre_norm_export(tiny_run, tmp_path_factory):
    """The tiny run's recipe with two pre-norm layers and one shared vocabulary,
    tied embeddings: about 10 s of training."""
    from conftest import TINY_MODEL, TINY_TRAINING

    from transformer.model_config import TransformerConfig
    from transformer.run import RunConfig, train

    config = RunConfig(
        output_dir=str(tmp_path_factory.mktemp("pre_norm") / "run"),
        data=tiny_run.config.data, valid=tiny_run.config.valid, test=tiny_run.config.test,
        model=TransformerConfig(**{**TINY_MODEL, "num_layers": 2, "normalize_first": True,
                                   "tie_embeddings": True}),
        **{**TINY_TRAINING, "shared_vocab": True, "eval_beam_size": 1},
    )
    run_dir = train(config, verbose=0, export=False).run_dir  # only the CTranslate2 export
    tokenizers, model = load_run(run_dir)
    assert model.config.normalize_first and model.config.tie_embeddings
    directory = export_ctranslate2(model, run_dir, tmp_path_factory.mktemp("y") / "ct2")
    assert (directory / "shared_vocabulary.json").is_file()
    info = json.loads((directory / EXPORT_INFO_FILE).read_text())
    assert info["shared_vocabulary"] and info["source_model"] == info["target_model"]
    assert (directory / info["source_model"]).is_file()
    return tokenizers, model, directory


@pytest.mark.parametrize("export", [
    "run_export", pytest.param("pre_norm_export", marks=pytest.mark.slow)])
def test_trained_model_greedy_and_beam_equal_the_reference(export, request, test_pairs):
    tokenizers, model, directory = request.getfixturevalue(export)
    translator = ctranslate2.Translator(str(directory))
    # The reference searches are plain Python loops: a third of the test pairs,
    # and for the pre-norm layout (a difference in it shows in every sentence) 8.
    sentences = [source for source, _ in test_pairs[:24 if export == "run_export" else 8]]
    tokens = source_tokens(tokenizers.source, sentences)
    source_ids = [list(r) for r in tokenizers.source.tokenize(tf.constant(sentences)).to_list()]
    target_vocab = vocabulary(tokenizers.target)
    limit = 30
    greedy = translator.translate_batch(tokens, beam_size=1, max_decoding_length=limit,
                                        min_decoding_length=0)
    beam = translator.translate_batch(tokens, beam_size=BEAM, max_decoding_length=limit,
                                      length_penalty=0.0, return_scores=True,
                                      min_decoding_length=0)
    greedy_equal = beam_equal = 0
    for ids, g, b in zip(source_ids, greedy, beam, strict=True):
        greedy_equal += g.hypotheses[0] == _tokens(
            target_vocab, _strip_end(reference_greedy(model, ids, limit)))
        expected, log_p = reference_beam(model, ids, limit)
        beam_equal += b.hypotheses[0] == _tokens(target_vocab, _strip_end(expected))
        assert b.scores[0] == pytest.approx(log_p, abs=1e-3)
    assert (greedy_equal, beam_equal) == (len(sentences), len(sentences))


@pytest.mark.parametrize("extra_length", [50, 1])
def test_ctranslate2_translator_gives_the_projects_texts(run_export, test_pairs, extra_length):
    tokenizers, model, directory = run_export
    sentences = [source for source, _ in test_pairs[:8]] + [""]
    texts = CTranslate2Translator(directory)(sentences, extra_length=extra_length)
    source_ids = [list(r) for r in tokenizers.source.tokenize(tf.constant(sentences)).to_list()]
    cut = 0
    for ids, sentence, text in zip(source_ids, sentences, texts, strict=True):
        # Each output's limit: its source tokens (between [START] and [END]) + extra_length.
        limit = len(ids) - 2 + extra_length
        output = reference_greedy(model, ids, limit) if sentence else []
        cut += len(output) == limit and output[-1] != END_ID
        expected = tokenizers.target.detokenize(tf.constant([output or [END_ID]], tf.int64))
        assert text == expected.numpy()[0].decode("utf-8")
    assert (cut > 0) == (extra_length == 1)


def test_int8_export_loads_and_mostly_agrees(run_export, run_dir, test_pairs, tmp_path):
    tokenizers, model, directory = run_export
    int8 = export_ctranslate2(model, tokenizers, tmp_path / "int8", quantization="int8")
    assert (int8 / "model.bin").stat().st_size < (directory / "model.bin").stat().st_size
    sentences = [source for source, _ in test_pairs]
    exact = CTranslate2Translator(directory)(sentences)
    quantized = CTranslate2Translator(int8, compute_type="int8")(sentences)
    agree = sum(a == b for a, b in zip(exact, quantized, strict=True))
    assert agree >= len(sentences) // 2


def test_bad_arguments_are_clear_errors(run_export, tmp_path):
    tokenizers, model, directory = run_export
    with pytest.raises(ValueError, match="quantization='int4'"):
        export_ctranslate2(model, tokenizers, tmp_path / "a", quantization="int4")
    with pytest.raises(ValueError, match="already exists; pass force=True"):
        export_ctranslate2(model, tokenizers, directory)


def test_wordpiece_tokenizers_are_exported_as_vocabulary_files(test_pairs, tmp_path):
    from transformer.data.tokenizers import build_tokenizers

    tokenizers = build_tokenizers(test_pairs, vocab_size=200, vocab_dir=tmp_path / "vocab",
                                  kind="wordpiece")
    sizes = [int(t.get_vocab_size()) for t in (tokenizers.source, tokenizers.target)]
    model = _random_model(False, False, sizes)
    directory = export_ctranslate2(model, tokenizers, tmp_path / "ct2")
    info = json.loads((directory / EXPORT_INFO_FILE).read_text())
    assert info["tokenizer"] == "wordpiece" and not info["shared_vocabulary"]
    lines = (directory / info["target_vocab"]).read_text(encoding="utf-8").splitlines()
    assert lines == vocabulary(tokenizers.target)
    # The project's tokens go through CTranslate2 as they are.
    sentences = [source for source, _ in test_pairs if len(source.split()) < 8][:2]
    assert len(sentences) == 2
    translator = ctranslate2.Translator(str(directory))
    results = translator.translate_batch(source_tokens(tokenizers.source, sentences),
                                         max_decoding_length=5, min_decoding_length=0)
    for sentence, result in zip(sentences, results, strict=True):
        ids = tokenizers.source.tokenize(tf.constant([sentence])).to_list()[0]
        expected = _strip_end(reference_greedy(model, ids, 5))
        assert result.hypotheses[0] == [lines[i] for i in expected]
    with pytest.raises(ValueError, match="wordpiece tokenizers; CTranslate2Translator needs"):
        CTranslate2Translator(directory)


# --- The vocabulary map of a shared vocabulary --------------------------------------------

@pytest.fixture(scope="module")
def mapped_export(real_text_run, tmp_path_factory):
    """`(tokenizers, directory)` of the real-text run's export."""
    tokenizers, _ = load_run(real_text_run.run_dir)
    directory = export_run(real_text_run.run_dir, tmp_path_factory.mktemp("vmap") / "ct2")
    return tokenizers, directory


def test_a_shared_vocabulary_is_mapped_to_the_training_targets_pieces(mapped_export,
                                                                      real_text_run):
    tokenizers, directory = mapped_export
    config = real_text_run.config
    assert not (Path(real_text_run.run_dir) / "sampling.json").exists()  # the best split only
    line, = (directory / VOCABULARY_MAP_FILE).read_text(encoding="utf-8").splitlines()
    key, candidates = line.split("\t")
    assert key == ""  # candidates of every sentence
    pieces = candidates.split(" ")
    # SentencePiece's own pieces of the training targets, trimmed as training trims them.
    processor = spm.SentencePieceProcessor(
        model_file=str(directory / json.loads((directory / EXPORT_INFO_FILE).read_text())[
            "target_model"]))
    keep = config.resolved_max_tokens - 2
    seen = {piece for _, target in read_tsv(config.data)
            for piece in processor.encode(target, out_type=str)[:keep]}
    everything = vocabulary(tokenizers.target)
    assert pieces == [piece for piece in everything if piece in seen]
    # Pieces of the targets only: the source language's own pieces are left out.
    assert len(pieces) + len(RESERVED_TOKENS) < len(everything)
    info = json.loads((directory / EXPORT_INFO_FILE).read_text())
    assert info["vocabulary_map_pieces"] == len(pieces)


def test_the_map_keeps_every_greedy_translation_that_uses_its_pieces(mapped_export, test_pairs):
    _, directory = mapped_export
    mapped = CTranslate2Translator(directory)
    unmapped = CTranslate2Translator(directory, use_vmap=False)
    assert mapped.use_vmap and not unmapped.use_vmap
    pieces = set((directory / VOCABULARY_MAP_FILE).read_text(encoding="utf-8").split())
    sentences = [source for source, _ in test_pairs]
    kept = 0
    for a, b in zip(mapped.translate(sentences, Greedy()), unmapped.translate(sentences, Greedy()),
                    strict=True):
        assert set(a.tokens[1:-1]) <= pieces
        if set(b.tokens[1:-1]) <= pieces:
            # Each step's best piece is a candidate, so it stays the best; the
            # softmax over fewer pieces gives the same output a higher log P.
            kept += 1
            assert a.tokens == b.tokens
            assert a.log_prob >= b.log_prob - 1e-4
    assert kept > 0


def test_without_the_runs_training_pairs_there_is_no_map(real_text_run, tmp_path, caplog):
    tokenizers, _ = load_run(real_text_run.run_dir)
    record = json.loads((Path(real_text_run.run_dir) / "config.json").read_text())
    fingerprint = record["data_fingerprint"]
    copy = tmp_path / "train.tsv"
    copy.write_bytes(Path(record["data"]).read_bytes())
    # The same pairs in another file, the fingerprint made for it: the map is made.
    same = {**record, "data": str(copy), "data_fingerprint": {
        **fingerprint, "data": {**fingerprint["data"], "path": str(copy)}}}
    cases = {
        "same": same,
        "changed": same,  # the copy's content changes below
        "missing": {**record, "data": str(tmp_path / "gone.tsv")},
        "unfingerprinted": {k: v for k, v in record.items() if k != "data_fingerprint"},
    }
    for name, config in cases.items():
        if name == "changed":
            copy.write_text("um\tone\n" + copy.read_text(encoding="utf-8"), encoding="utf-8")
        run = tmp_path / name
        run.mkdir()
        (run / "config.json").write_text(json.dumps(config))
        caplog.clear()
        pieces = training_target_pieces(run, tokenizers)
        if name == "same":
            best = training_target_pieces(real_text_run.run_dir, tokenizers)
            assert pieces == best and "without a vocabulary map" not in caplog.text
            # A run that drew segmentations was trained on their pieces too.
            (run / "sampling.json").write_text(json.dumps({"samples": True, "from_pass": 1}))
            drawn = training_target_pieces(run, tokenizers)
            assert set(best) < set(drawn)
        else:
            assert pieces is None, name
            assert "without a vocabulary map" in caplog.text and "--force" in caplog.text
        if name == "changed":
            assert "differ from the data the run was trained on" in caplog.text
        if name == "unfingerprinted":
            assert "no data fingerprint" in caplog.text


def test_a_piece_with_whitespace_or_no_pieces_write_no_map(tmp_path, caplog):
    assert write_vocabulary_map(tmp_path, ["\u2581a", "b c"]) is None
    assert "'b c' holds whitespace" in caplog.text
    assert write_vocabulary_map(tmp_path, []) is None
    assert not (tmp_path / VOCABULARY_MAP_FILE).exists()
    assert write_vocabulary_map(tmp_path, ["\u2581a", "b"]).read_text(encoding="utf-8") == \
        "\t\u2581a b\n"


def test_use_vmap_without_a_map_is_a_clear_error(run_export):
    _, _, directory = run_export
    assert not (directory / VOCABULARY_MAP_FILE).exists()
    assert not CTranslate2Translator(directory).use_vmap
    with pytest.raises(ValueError, match="has no vocabulary map"):
        CTranslate2Translator(directory, use_vmap=True)


FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    from transformer.decoding.ctranslate2_translator import CTranslate2Translator
    texts = CTranslate2Translator(sys.argv[1])(json.loads(sys.argv[2]), beam_size=4)
    print(json.dumps({"texts": texts, "tensorflow": "tensorflow" in sys.modules}))
""")


def test_translator_runs_without_tensorflow(run_export, test_pairs, tmp_path):
    _, _, directory = run_export
    sentences = [source for source, _ in test_pairs[:4]]
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(directory), json.dumps(sentences)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not result["tensorflow"]
    assert result["texts"] == CTranslate2Translator(directory)(sentences, beam_size=4)


def test_without_ctranslate2_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r"pip install 'transformer-tutorial\[ctranslate2\]' "
                                          r"\(or 'ctranslate2>=4.5,<5'\)"):
        ctranslate2_module()
    with pytest.raises(ImportError, match="needs the ctranslate2 package"):
        ctranslate2_spec(_random_model(False, False, (30, 26)), _vocab(30, "s"), _vocab(26, "t"))
