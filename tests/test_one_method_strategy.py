"""A strategy written by a new user, as one class with one method, in the user's
own module, decodes through `Translator`, `translate.py` and the server.

The module (written here into a temporary folder on the path) holds two:

- `NoRepeats`: `Strategy` with `next_tokens` only, greedy decoding that never
  picks a token already in the output, run by the public loop
  `transformer.decoding.search.token_by_token`;
- `LengthNormalised`: `Greedy` with `score` only, greedy decoding scored by
  `log P` per output token: a strategy owns its score, and every consumer
  reports it.

Both decode the tiny run of tests/conftest.py. translate.py imports the
module with `--strategy-module` and chooses one with `--search NAME`; the
server takes the name in a request's "search", as `transformer-serve
--strategy-module` makes it known.
"""

from __future__ import annotations

import ast
import http.client
import importlib
import json
import sys

import numpy as np
import pytest
import tensorflow as tf

from transformer.constants import START_ID
from transformer.decoding.pipeline import sequence_log_probs
from transformer.decoding.strategies import NotSupportedError

MODULE = "users_one_method_strategies"
USERS_MODULE = '''"""A user's own search strategies, each one class with one method."""

import tensorflow as tf

from transformer import Greedy, Strategy


class NoRepeats(Strategy, name="users_no_repeats"):
    """Greedy decoding that never picks a token already in the output."""

    def next_tokens(self, log_probs, tokens, settings):
        vocab = tf.range(tf.shape(log_probs)[-1], dtype=tokens.dtype)
        seen = tf.reduce_any(tf.equal(tokens[:, :, tf.newaxis], vocab), axis=1)
        return tf.argmax(tf.where(seen, -1e9, log_probs), axis=-1)  # (rows,)


class LengthNormalised(Greedy, name="users_length_normalised"):
    """Greedy decoding, scored by log P per output token."""

    def score(self, log_prob, length, settings):
        return log_prob / length
'''
SENTENCES = 12


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """The user's module, imported from a folder of its own on `sys.path`."""
    folder = tmp_path_factory.mktemp("users_code")
    (folder / f"{MODULE}.py").write_text(USERS_MODULE, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(MODULE)
    finally:
        sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def sources(test_pairs):
    return [source for source, _ in test_pairs[:SENTENCES]]


def _never_repeats_and_is_greedy_otherwise(model, encoder_tokens, token_ids):
    """Whether each output token is the most probable one not yet in the output,
    by one full forward pass (not the cached loop)."""
    output = np.asarray(token_ids, np.int64)[np.newaxis]
    decoder_input = np.concatenate([[[START_ID]], output[:, :-1]], axis=1)
    logits = model((encoder_tokens, tf.constant(decoder_input)), training=False).numpy()[0]
    for step, row in enumerate(logits):
        row = row.copy()
        row[np.unique(decoder_input[0, : step + 1])] = -np.inf
        if int(np.argmax(row)) != int(output[0, step]):
            return False
    return True


def test_the_classes_have_one_method_each(users):
    classes = {node.name: [item.name for item in node.body if isinstance(item, ast.FunctionDef)]
               for node in ast.parse(USERS_MODULE).body if isinstance(node, ast.ClassDef)}
    assert classes == {"NoRepeats": ["next_tokens"], "LengthNormalised": ["score"]}
    assert users.NoRepeats.TWO_PASSES is False  # its own search: one pass, the safe default
    assert users.LengthNormalised.TWO_PASSES is True  # Greedy's search, Greedy's word


def test_it_decodes_through_the_translator(users, translator, sources):
    results = translator(sources, search=users.NoRepeats(), return_attention=False)
    greedy = translator(sources, return_attention=False)
    assert [r.text for r in results] != [r.text for r in greedy]  # the rule changes some
    for sentence, result in zip(sources, results, strict=True):
        encoder_tokens, _ = translator.encode([sentence])
        assert _never_repeats_and_is_greedy_otherwise(translator.transformer, encoder_tokens,
                                                      result.token_ids), sentence
        # Its score is the default, log P of its own tokens under the model.
        log_p, _ = sequence_log_probs(translator.transformer, encoder_tokens,
                                      result.token_ids[np.newaxis])
        assert result.score == result.log_prob == pytest.approx(log_p[0], abs=1e-4)
    assert translator.tracing_count(users.NoRepeats()) == 1


def test_a_length_normalised_greedy_reports_its_own_score(users, translator, sources):
    results = translator(sources, search=users.LengthNormalised(), return_attention=False)
    greedy = translator(sources, return_attention=False)
    assert [r.text for r in results] == [r.text for r in greedy]
    for result, plain in zip(results, greedy, strict=True):
        assert result.log_prob == pytest.approx(plain.log_prob, abs=1e-5)
        assert result.score == pytest.approx(result.log_prob / len(result.token_ids))
        assert result.score != pytest.approx(plain.score)  # the score is the strategy's


def test_translate_py_imports_the_users_module_and_decodes_by_name(
        users, translator, sources, monkeypatch, capsys):
    from transformer.cli import translate as translate_cli

    monkeypatch.setattr(translate_cli, "tensorflow_translator", lambda run_dir: translator)
    expected = translator(sources, search=users.NoRepeats(), return_attention=False)
    assert translate_cli.main(["--run", ".", "--strategy-module", MODULE,
                               "--search", "users_no_repeats", *sources]) == 0
    assert capsys.readouterr().out.splitlines() == [r.text for r in expected]

    expected = translator(sources, search=users.LengthNormalised(), return_attention=False)
    assert translate_cli.main(["--run", ".", "--strategy-module", MODULE, "--scores",
                               "--search", "users_length_normalised", *sources]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{r.text}\t{r.score:.4f}" for r in expected]


def test_translate_py_says_in_one_line_that_ctranslate2_cannot_run_it(users, capsys):
    from transformer.cli import translate as translate_cli

    with pytest.raises(SystemExit):
        translate_cli.parse_args(["--run", ".", "--strategy-module", MODULE, "--engine",
                                  "ctranslate2", "--search", "users_no_repeats", "o gato"])
    assert "NoRepeats() cannot run on CTranslate2; translate with the TensorFlow engine." \
        in capsys.readouterr().err
    with pytest.raises(NotSupportedError):
        users.NoRepeats().ctranslate2_options()


def _post(port, payload):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request("POST", "/translate", body=json.dumps(payload),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_server_decodes_it_by_the_name_in_a_request(users, translator, run_dir, sources):
    pytest.importorskip("starlette", reason="the optional extra 'serve' is not installed")
    from test_serve import serving  # the suite's server in a thread

    from transformer.cli import serve as serve_cli
    from transformer.cli.common import import_strategy_modules
    from transformer.serving.app import ServerSettings

    parser = serve_cli.build_parser()  # transformer-serve RUN --strategy-module MODULE
    args = parser.parse_args([str(run_dir), "--strategy-module", MODULE])
    import_strategy_modules(parser, args.strategy_module)

    def engine(sentences, search, max_length):  # the TensorFlow engine of the run
        max_length = min(max_length, translator.max_length)
        return translator(list(sentences), max_length=max_length, return_attention=False,
                          search=search)

    with serving(engine, run_dir, ServerSettings(max_wait=0.01)) as (_, port, _app):
        for name, search in (("users_no_repeats", users.NoRepeats()),
                             ("users_length_normalised", users.LengthNormalised())):
            status, answer = _post(port, {"sentences": sources, "search": name})
            assert status == 200, answer
            expected = translator(sources, search=search, return_attention=False)
            assert [t["text"] for t in answer["translations"]] == [r.text for r in expected]
            assert [t["score"] for t in answer["translations"]] == pytest.approx(
                [r.score for r in expected], abs=1e-4)
