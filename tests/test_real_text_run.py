"""What the real-text defaults depend on, on a run trained with them (`real_text_run`).

The run (tests/conftest.py) has the real-text recipe's settings: token-budget
batches, a non-zero seed, beam-4 evaluation, a numeric peak rate, pre-norm
layers, one shared vocabulary with tied embeddings and a decoder shallower than
its encoder, and a `max_length` short enough for the tests to reach.
"""

from __future__ import annotations

import hashlib
import json
import logging

import pytest
from conftest import REAL_TEXT_MODEL, REAL_TEXT_SEED
from translate_helpers import copy_run

from transformer.cli import translate as translate_cli
from transformer.data import read_tsv
from transformer.data.streamed import file_sha256
from transformer.decoding.strategies import Beam, Greedy, Sample
from transformer.decoding.translator import Translator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The paper's peak rate for a 4,000-step warm-up, (d_model * 4000)^-0.5, written
# out here rather than read from the recipe it checks.
PEAK = (REAL_TEXT_MODEL["d_model"] * 4000) ** -0.5


@pytest.fixture(scope="module")
def run(real_text_run):
    return real_text_run


@pytest.fixture(scope="module")
def saved(run):
    return json.loads((run.run_dir / "config.json").read_text())


@pytest.fixture(scope="module")
def translator(run):
    return Translator.from_run(run.run_dir)


@pytest.fixture(scope="module")
def test_sources(run):
    return [source for source, _ in read_tsv(run.config.test)]


def test_the_run_has_the_real_text_recipe(run, saved):
    config = run.config
    assert config.batch_tokens > 0 and config.seed == REAL_TEXT_SEED
    assert config.shared_vocab and config.model.tie_embeddings
    assert config.model.normalize_first and config.model.dropout_rate == 0.0
    assert (config.model.num_layers, config.model.decoder_layers) == (2, 1)
    assert config.label_smoothing == 0.0 and config.ema_momentum == 0.999
    assert config.eval_beam_size == 4
    # config.json holds the same resolved values, the rate as a number.
    assert isinstance(saved["learning_rate"], float)
    assert saved["batch_tokens"] == config.batch_tokens and saved["seed"] == REAL_TEXT_SEED


def test_the_run_rises_to_the_papers_peak_for_4000_steps(run, saved):
    assert saved["learning_rate"] == pytest.approx(PEAK, rel=1e-6)
    # The warm-up is fitted into the run's 80 steps, rising linearly: the last
    # update (the 80th, step index 79) is made at 79/80 of the peak.
    assert run.final_step == 80
    assert run.history["learning_rate"][-1] == pytest.approx(PEAK * 79 / 80, rel=1e-4)
    assert run.history["learning_rate"][0] < PEAK / 1.5


def test_the_test_split_is_translated_with_the_runs_beam(run, translator, test_sources):
    evaluation = run.evaluation
    assert evaluation.beam_size == 4 and evaluation.num_sentences == len(test_sources)
    beam = [result.text for result in translator(test_sources, search=Beam(4),
                                                 return_attention=False)]
    assert evaluation.translations == beam
    # A translator of the run decodes as its evaluation did, without being told.
    assert [r.text for r in translator(test_sources[:6], return_attention=False)] == beam[:6]


def test_the_seed_orders_the_token_batches(run, translator):
    from transformer.data.batching import budget_batches_from_tokens, tokenize_pairs

    tokens = tokenize_pairs(read_tsv(run.config.data), translator.tokenizers,
                            run.config.model.max_length)

    def first_batches(seed):
        stream = budget_batches_from_tokens(tokens, run.config.batch_tokens, seed)
        return [labels.numpy().tolist() for _, labels in stream.take(4)]

    assert first_batches(REAL_TEXT_SEED) == first_batches(REAL_TEXT_SEED)
    assert first_batches(REAL_TEXT_SEED) != first_batches(0)


def test_the_fingerprint_reads_every_byte_of_a_file_larger_than_its_chunk(tmp_path):
    path = tmp_path / "big.tsv"
    lines = [f"frase {i}\tsentence {i}\n" for i in range(150_000)]  # about 3 MiB
    path.write_text("".join(lines), encoding="utf-8")
    assert path.stat().st_size > 2 * (1 << 20)
    before = file_sha256(path)
    assert before == hashlib.sha256(path.read_bytes()).hexdigest()
    lines[-2] = lines[-2].replace("sentence", "Sentence")  # in the last chunk
    path.write_text("".join(lines), encoding="utf-8")
    assert file_sha256(path) != before


def _pieces(translator, sentence):
    """The source tokens of `sentence`, untrimmed, [START] and [END] included."""
    return int(translator.tokenizers.source.tokenize([sentence]).row_lengths()[0])


def _long_sentence(words, tokens, translator):
    """The shortest sentence of toy words that makes at least `tokens` source tokens."""
    sentence = []
    while _pieces(translator, " ".join(sentence)) < tokens:
        sentence.append(words[len(sentence) % len(words)])
    return " ".join(sentence)


@pytest.fixture(scope="module")
def long_sentences(translator, test_sources):
    """A sentence of `max_length` tokens or one more, and one well past it."""
    words = " ".join(test_sources).split()
    limit = REAL_TEXT_MODEL["max_length"]
    near, past = (_long_sentence(words, limit, translator),
                  _long_sentence(words, limit + 8, translator))
    assert limit <= _pieces(translator, near) <= limit + 3 < limit + 8 <= _pieces(translator, past)
    return [near, past]


@pytest.fixture(scope="module")
def engine_run(run, tmp_path_factory):
    """A copy of the run for the CTranslate2 engine to convert into."""
    pytest.importorskip("ctranslate2")
    return copy_run(run.run_dir, tmp_path_factory.mktemp("real_text_engine") / "run")


def _engine(run_dir, sentences, capsys, *options):
    status = translate_cli.main(["--run", str(run_dir), "--engine", "ctranslate2", *options,
                                 *sentences])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out.splitlines(), err


@pytest.mark.parametrize("search, options", [(Greedy(), ("--beam", "1")), (Beam(4), ())],
                         ids=["greedy", "the run's beam"])
def test_both_engines_trim_inputs_at_and_past_the_maximum_length_alike(
        engine_run, translator, long_sentences, capsys, caplog, search, options):
    limit = REAL_TEXT_MODEL["max_length"]
    with caplog.at_level(logging.WARNING):
        expected = translator(long_sentences, search=search, return_attention=False)
    # Trimmed to the model's max_length tokens ([START] and [END] included), and said so.
    assert [len(result.input_tokens) for result in expected] == [limit, limit]
    assert "max_length" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        lines, _ = _engine(engine_run, long_sentences, capsys, *options)
    assert lines == [result.text for result in expected]
    assert "max_length" in caplog.text


def test_the_engine_samples_with_top_p_reproducibly(engine_run, translator, test_sources,
                                                   long_sentences, capsys):
    sentences = test_sources[:6] + long_sentences
    args = ("--top-p", "0.9", "--temperature", "1.2", "--seed", "3")
    first, _ = _engine(engine_run, sentences, capsys, *args)
    assert len(first) == len(sentences)
    assert _engine(engine_run, sentences, capsys, *args)[0] == first
    # A nucleus this small keeps only the most likely token: greedy decoding.
    narrow, _ = _engine(engine_run, sentences, capsys, "--top-p", "1e-6", "--seed", "3")
    assert narrow == _engine(engine_run, sentences, capsys, "--beam", "1")[0]
    sampled = translator(sentences, search=Sample(1.2, top_p=0.9, seed=3),
                         return_attention=False)
    assert all(result.tokens for result in sampled)


def test_plots_of_a_decoder_shallower_than_its_encoder(run, translator, test_sources,
                                                       tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Translator, "from_run", classmethod(lambda cls, path: translator))
    sentence = test_sources[0]
    default = tmp_path / "default.png"
    assert translate_cli.main(["--run", str(run.run_dir), sentence, "--plot",
                               str(default)]) == 0
    out, err = capsys.readouterr()
    assert default.read_bytes()[:8] == PNG_MAGIC
    assert "decoder_layer1_block2" in err  # the decoder's last layer, not the encoder's
    encoder = tmp_path / "encoder.png"
    assert translate_cli.main(["--run", str(run.run_dir), sentence, "--plot", str(encoder),
                               "--layer", "encoder_layer2"]) == 0
    assert encoder.read_bytes()[:8] == PNG_MAGIC
    capsys.readouterr()
    assert translate_cli.main(["--run", str(run.run_dir), sentence, "--plot",
                               str(tmp_path / "x.png"), "--layer", "2"]) != 0
    assert "decoder layers 1 to 1" in capsys.readouterr().err
