"""`translate.py --engine ctranslate2` and `transformer-export`: the tiny run converted once
inside (a copy of) its directory, translated by CTranslate2 as the TensorFlow engine
translates it, with the same strategies and scores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="the CTranslate2 engine needs the ctranslate2 package "
    "(pip install 'transformer-tutorial[ctranslate2]')")

from translate_helpers import copy_run  # noqa: E402

from transformer.cli import export as export_cli  # noqa: E402
from transformer.cli import translate as translate_cli  # noqa: E402
from transformer.decoding.ctranslate2_translator import (  # noqa: E402
    EXPORT_INFO_FILE,
    CTranslate2Translator,
    gnmt_length_penalty,
    run_export_dir,
    run_export_is_current,
)
from transformer.decoding.search import length_penalty  # noqa: E402
from transformer.decoding.strategies import Beam, Greedy, Sample  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_copy(run_dir, tmp_path_factory):
    """A copy of the tiny run, which the engine may convert into."""
    return copy_run(run_dir, tmp_path_factory.mktemp("engine") / "run")


@pytest.fixture(scope="module")
def sources(test_pairs):
    return [source for source, _ in test_pairs]


def _cli(main, args, capsys):
    try:
        status = main([str(a) for a in args])
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def _engine(run, sentences, capsys, *options):
    status, out, err = _cli(translate_cli.main, ["--run", run, "--engine", "ctranslate2",
                                                 *options, *sentences], capsys)
    assert status == 0, err
    return out, err


def _texts_and_scores(lines):
    pairs = [line.rsplit("\t", 1) for line in lines]
    return [text for text, _ in pairs], [float(score) for _, score in pairs]


def test_gnmt_penalty_is_the_searchs():
    for length in (1, 7, 30):
        for alpha in (0.0, 0.6, 1.0):
            assert gnmt_length_penalty(length, alpha) == pytest.approx(
                float(length_penalty(length, alpha)))


@pytest.mark.parametrize("options, search", [
    ((), Greedy()),  # the tiny run was evaluated greedily
    (("--beam", "4"), Beam(4, 0.6)),
], ids=["greedy", "beam4"])
def test_engine_translates_as_the_tensorflow_engine(run_copy, translator, sources, capsys,
                                                    options, search):
    lines, _ = _engine(run_copy, sources, capsys, *options, "--scores")
    texts, scores = _texts_and_scores(lines)
    expected = translator(sources, search=search, return_attention=False)
    assert texts == [t.text for t in expected]
    assert scores == pytest.approx([t.score for t in expected], abs=2e-3)


def test_conversion_is_made_once_and_again_for_a_newer_model(run_copy, sources, capsys):
    _engine(run_copy, sources[:2], capsys)  # converted by now
    export = run_export_dir(run_copy)
    assert run_export_is_current(run_copy)
    made = (export / "model.bin").stat().st_mtime_ns
    _, err = _engine(run_copy, sources[:2], capsys)
    assert (export / "model.bin").stat().st_mtime_ns == made and err == []
    model = run_copy / "model.keras"
    later = model.stat().st_mtime_ns + 10**9
    os.utime(model, ns=(later, later))
    assert not run_export_is_current(run_copy)
    lines, err = _engine(run_copy, sources[:2], capsys)
    assert len(lines) == 2 and any("converting" in line for line in err)
    assert run_export_is_current(run_copy)
    assert not [p for p in run_copy.iterdir() if ".tmp" in p.name]  # no leftovers


def test_int8_translates_and_mostly_agrees(run_copy, translator, sources, capsys):
    lines, _ = _engine(run_copy, sources, capsys, "--quantization", "int8")
    assert len(lines) == len(sources) and all(lines)
    int8, float32 = export_cli.ctranslate2_model(run_copy, "int8"), export_cli.ctranslate2_model(
        run_copy)
    assert json.loads((int8 / EXPORT_INFO_FILE).read_text())["quantization"] == "int8"
    assert (int8 / "model.bin").stat().st_size < (float32 / "model.bin").stat().st_size
    expected = [t.text for t in translator(sources, return_attention=False)]
    assert sum(a == b for a, b in zip(lines, expected, strict=True)) >= len(sources) // 2


def test_n_best_lists_and_scores_are_the_tensorflow_engines(run_copy, translator, sources,
                                                            capsys):
    lines, _ = _engine(run_copy, sources[:6], capsys, "--n-best", "3")
    assert len(lines) == 18
    texts, scores = _texts_and_scores(lines)
    expected = translator(sources[:6], search=Beam(4, 0.6, n_best=3), return_attention=False)
    for i, hypotheses in enumerate(expected):
        assert scores[3 * i: 3 * i + 3] == sorted(scores[3 * i: 3 * i + 3], reverse=True)
        assert texts[3 * i] == hypotheses[0].text
        assert scores[3 * i] == pytest.approx(hypotheses[0].score, abs=2e-3)


def test_sampling_is_reproducible_and_scored_by_log_p(run_copy, sources, capsys):
    args = ("--top-k", "5", "--temperature", "1.5", "--seed", "3", "--scores")
    first, _ = _engine(run_copy, sources[:8], capsys, *args)
    assert _engine(run_copy, sources[:8], capsys, *args)[0] == first
    top_1, _ = _engine(run_copy, sources[:8], capsys, "--top-k", "1", "--seed", "3")
    greedy, _ = _engine(run_copy, sources[:8], capsys)
    assert top_1 == greedy
    # The score is log P under the model itself, not under the reshaped distribution.
    translator = CTranslate2Translator(run_export_dir(run_copy))
    samples = translator.translate(sources[:8], search=Sample(1.5, top_k=5, seed=3))
    checked = 0
    for sample, sentence in zip(samples, sources[:8], strict=True):
        pieces = translator.tokenize([sentence])
        ended = sample.tokens[-1] == "[END]"
        if not ended and len(sample.tokens) > translator.max_input_length:
            # Stopped at the model's length: score_batch scores an [END] after
            # it, one position more than the model has.
            continue
        log_probs = translator.translator.score_batch(pieces, [sample.tokens[1:-1] if ended
                                                               else sample.tokens[1:]])[0]
        kept = log_probs.log_probs[: len(sample.tokens) - 1]
        assert sample.log_prob == pytest.approx(sum(kept), abs=1e-3)
        checked += 1
    assert checked >= 4


def test_show_tokens_and_empty_sentences(run_copy, translator, capsys):
    lines, _ = _engine(run_copy, ["o gato preto", ""], capsys, "--show-tokens")
    expected = translator(["o gato preto", ""], return_attention=False)
    assert lines[0] == expected[0].text and lines[3] == ""
    assert lines[1].split(": ", 1)[1] == " ".join(expected[0].input_tokens)
    assert lines[2].split(": ", 1)[1] == " ".join(expected[0].tokens)


@pytest.mark.parametrize("args, needle", [
    (["--plot", "a.png"], "--plot shows the attention weights of the TensorFlow engine"),
    (["--html", "a.html"], "--html shows the attention weights"),
])
def test_attention_options_need_the_tensorflow_engine(run_copy, capsys, args, needle):
    status, out, err = _cli(translate_cli.main, ["--run", run_copy, "--engine", "ctranslate2",
                                                 "o gato", *args], capsys)
    assert status == 2 and out == [] and len(err) == 1 and needle in err[0]


def test_quantization_needs_the_ctranslate2_engine(run_copy, capsys):
    status, _, err = _cli(translate_cli.main, ["--run", run_copy, "--quantization", "int8",
                                               "o gato"], capsys)
    assert status == 2 and "--quantization is for --engine ctranslate2" in err[0]


def test_without_ctranslate2_both_commands_say_how_to_install_it(run_copy, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    for main, args in ((translate_cli.main, ["--run", run_copy, "--engine", "ctranslate2",
                                             "o gato"]),
                       (export_cli.main, [run_copy, "--output", tmp_path / "x"])):
        status, out, err = _cli(main, args, capsys)
        assert status == 1 and out == [] and len(err) == 1, err
        assert "pip install 'transformer-tutorial[ctranslate2]'" in err[0]


def test_export_command_writes_a_directory_ctranslate2_loads(run_copy, tmp_path, sources,
                                                             capsys):
    output = tmp_path / "int8"
    status, out, err = _cli(export_cli.main, [run_copy, "--format", "ctranslate2",
                                              "--quantization", "int8", "--output", output],
                            capsys)
    assert status == 0 and out == [str(output)], err
    texts = CTranslate2Translator(output)(sources[:4])
    assert texts == CTranslate2Translator(run_export_dir(run_copy, "int8"))(sources[:4])
    # Not over an existing directory unless --force.
    status, _, err = _cli(export_cli.main, [run_copy, "--output", output], capsys)
    assert status == 1 and err == [f"transformer-export: error: --output {str(output)!r} "
                                   "already exists; add --force to replace it."]
    status, _, _ = _cli(export_cli.main, [run_copy, "--output", output, "--force"], capsys)
    assert status == 0
    assert json.loads((output / EXPORT_INFO_FILE).read_text())["quantization"] == "float32"


@pytest.mark.parametrize("args, status, needle", [
    (["--format", "onnx"], 2, "argument --format: invalid choice: 'onnx'"),
    (["--format", "savedmodel", "--quantization", "int8"], 2, "--quantization is for"),
    (["--quantization", "int4"], 2, "argument --quantization: invalid choice"),
])
def test_export_usage_errors_are_one_line(tmp_path, capsys, args, status, needle):
    code, out, err = _cli(export_cli.main, [tmp_path, *args], capsys)
    assert (code, out, len(err)) == (status, [], 1) and needle in err[0], err


def test_export_of_a_missing_run_is_a_one_line_error(tmp_path, capsys):
    status, _, err = _cli(export_cli.main, [tmp_path / "nope"], capsys)
    assert status == 1 and err == [f"transformer-export: error: Run directory "
                                   f"{str(tmp_path / 'nope')!r} does not exist."]


@pytest.mark.slow  # a SavedModel export (tens of seconds)
def test_export_command_keeps_the_savedmodel(run_copy, tmp_path, capsys):
    import tensorflow as tf

    output = tmp_path / "saved"
    status, out, err = _cli(export_cli.main, [run_copy, "--format", "savedmodel",
                                              "--output", output], capsys)
    assert status == 0 and out == [str(output)], err
    reloaded = tf.saved_model.load(str(output))
    assert reloaded(tf.constant(["o gato"])).numpy()[0]


FRESH_PROCESS = """
import sys
from transformer.cli.translate import main
status = main(sys.argv[1:])
print('tensorflow imported:', 'tensorflow' in sys.modules)
sys.exit(status)
"""


@pytest.mark.slow  # a fresh process
def test_a_converted_run_translates_without_starting_tensorflow(run_copy, sources, tmp_path,
                                                               capsys):
    _engine(run_copy, sources[:1], capsys)  # converted by now
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, "--run", str(run_copy), "--engine", "ctranslate2",
         *sources[:3]], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "tensorflow imported: False" and len(lines) == 4
    assert "Traceback" not in done.stderr


def test_export_help_does_not_import_tensorflow():
    code = ("import sys\n"
            "from transformer.cli.export import main\n"
            "try:\n"
            "    main(['--help'])\n"
            "except SystemExit as exit_:\n"
            "    print('status', exit_.code)\n"
            "print('tensorflow imported:', 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: transformer-export")
    assert done.stdout.splitlines()[-2:] == ["status 0", "tensorflow imported: False"]


def _docs_snippet():
    """The snippet of docs/ctranslate2.md, which README.md's CTranslate2 section points to."""
    text = (REPO / "docs" / "ctranslate2.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    return code


def test_the_documented_snippet_runs_with_ctranslate2_and_sentencepiece_only(
        run_copy, tmp_path):
    int8 = export_cli.ctranslate2_model(run_copy, "int8")
    code = _docs_snippet().replace("runs/toy", str(run_copy))
    code += "import sys; print('tensorflow imported:', 'tensorflow' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    text, imported = done.stdout.splitlines()
    assert imported == "tensorflow imported: False"
    sentence = "o gato preto come o bolo"
    assert text == CTranslate2Translator(int8).translate([sentence], search=Beam(4, 0.6))[0].text


def test_detokenize_keeps_the_spaces_the_projects_tokenizer_keeps(run_copy):
    import tensorflow as tf

    from transformer.data.tokenizers import load_tokenizers

    target = load_tokenizers(run_copy / "tokenizers").target
    translator = CTranslate2Translator(export_cli.ctranslate2_model(run_copy))
    vocabulary = [translator.target.id_to_piece(i)
                  for i in range(translator.target.get_piece_size())]
    words = [piece for piece in vocabulary if piece.startswith("\u2581") and len(piece) > 2][:3]
    assert "\u2581" in vocabulary and len(words) == 3
    for pieces in (["\u2581", *words], ["\u2581", "\u2581", *words], words, ["\u2581"]):
        ids = [translator.target.piece_to_id(p) for p in pieces]
        expected = target.detokenize(tf.constant([ids], tf.int64)).numpy()[0].decode("utf-8")
        assert translator.detokenize(pieces) == expected, pieces


def test_a_strategy_ctranslate2_cannot_run_is_refused_before_converting(run_copy, capsys,
                                                                         monkeypatch):
    class NoEngine(Greedy, name="test_no_ctranslate2"):
        def ctranslate2_options(self):
            return self.not_supported("CTranslate2")

    def converted(*args, **kwargs):
        raise AssertionError("converted a run for a search CTranslate2 cannot run")

    monkeypatch.setattr(translate_cli, "ctranslate2_model", converted)
    status, out, err = _cli(translate_cli.main, ["--run", run_copy, "--engine", "ctranslate2",
                                                 "--search", "test_no_ctranslate2", "o gato"],
                            capsys)
    assert status == 2 and out == []
    assert "NoEngine() cannot run on CTranslate2; translate with the TensorFlow engine." \
        in err[-1]
    # A server on CTranslate2 answers such a request 400, saying why.
    from transformer.serving.limits import RequestError, request_search

    with pytest.raises(RequestError) as refused:
        request_search({"search": "test_no_ctranslate2"}, run_copy, "ctranslate2")
    assert refused.value.status == 400 and "cannot run on CTranslate2" in str(refused.value)
    assert type(request_search({"search": "test_no_ctranslate2"}, run_copy)) is NoEngine
