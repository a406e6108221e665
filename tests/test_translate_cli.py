"""translate.py run as a user runs it: a subprocess, arguments or stdin, plots, errors."""

import subprocess
import sys
from pathlib import Path

import pytest

from transformer.translate import Translator

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "translate.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    """The session's tiny trained run (tests/conftest.py)."""
    return Path(tiny_run.run_dir)


@pytest.fixture(scope="module")
def sentences(tiny_run):
    from transformer.data import read_tsv

    return [source for source, _ in read_tsv(tiny_run.config.test)[:3]]


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.from_run(run_dir)


def _run(args, cwd, stdin=None):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], input=stdin, capture_output=True,
        text=True, timeout=300, cwd=cwd,
    )


def _assert_clean_stderr(stderr):
    assert "Traceback" not in stderr
    # TensorFlow's native start-up notices are hidden without --verbose.
    assert "I0000" not in stderr and "oneDNN" not in stderr


def _assert_one_line_error(done, *needles):
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("translate.py: error:")
    for needle in needles:
        assert needle in lines[0]


def test_arguments_are_translated_as_a_batch_with_tokens(run_dir, sentences, translator,
                                                         tmp_path):
    long_sentence = " ".join(["o gato preto come o bolo"] * 12)
    done = _run(["--run", run_dir, *sentences, long_sentence, "--show-tokens"], tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_clean_stderr(done.stderr)
    assert "trimmed" in done.stderr  # the over-long sentence
    expected = translator(sentences + [long_sentence])
    lines = done.stdout.splitlines()
    assert len(lines) == 3 * len(expected)
    for i, result in enumerate(expected):
        assert lines[3 * i] == result.text
        assert lines[3 * i + 1] == "  source tokens: " + " ".join(result.input_tokens)
        assert lines[3 * i + 2] == "  output tokens: " + " ".join(result.tokens)


def test_stdin_lines_beam_search_and_one_plot_per_sentence(run_dir, sentences, translator,
                                                            tmp_path):
    stdin = f"{sentences[0]}\n\n{sentences[1]}\n"
    done = _run(["--run", run_dir, "--beam", "3", "--alpha", "0.6", "--max-length", "20",
                 "--plot", "attention.png", "--layer", "1"], tmp_path, stdin=stdin)
    assert done.returncode == 0, done.stderr
    _assert_clean_stderr(done.stderr)
    expected = translator([sentences[0], "", sentences[1]], max_length=20, beam_size=3,
                          alpha=0.6)
    assert done.stdout.splitlines() == [r.text for r in expected]
    for name in ("attention_1.png", "attention_3.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "attention_2.png").exists()  # the empty sentence has no plot
    assert "decoder_layer1_block2" in done.stderr


def test_one_sentence_plot_of_a_named_block(run_dir, sentences, translator, tmp_path):
    out = tmp_path / "plots" / "self.png"
    done = _run(["--run", run_dir, sentences[2], "--plot", out,
                 "--layer", "decoder_layer1_block1"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == translator(sentences[2]).text
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_missing_run_directory_is_a_one_line_error(tmp_path):
    done = _run(["--run", tmp_path / "nope", "o gato"], tmp_path)
    _assert_one_line_error(done, "nope", "does not exist")


def test_incomplete_run_directory_names_what_is_missing(run_dir, tmp_path):
    (tmp_path / "config.json").write_text((run_dir / "config.json").read_text())
    done = _run(["--run", tmp_path, "o gato"], tmp_path)
    _assert_one_line_error(done, "tokenizers", "model.keras")


def test_bad_layer_is_a_one_line_error(run_dir, tmp_path):
    done = _run(["--run", run_dir, "o gato", "--plot", "a.png", "--layer", "9"], tmp_path)
    _assert_one_line_error(done, "--layer 9")


@pytest.mark.parametrize("args,needle", [
    (["--beam", "0"], "--beam"),
    (["--alpha", "-1"], "--alpha"),
    (["--max-length", "x"], "--max-length"),
    (["--layer", "1"], "--plot"),
])
def test_bad_options_are_usage_errors(args, needle, tmp_path):
    done = _run(["--run", "runs/x", "o gato", *args], tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("translate.py: error:")
    assert needle in done.stderr


def test_stdin_lines_that_are_not_utf8_are_named_and_nothing_is_translated(run_dir, tmp_path):
    # Stop before any work: translations are one line per input line, so skipping
    # a bad line would shift every later translation.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--run", str(run_dir)],
        input=b"o gato preto come o bolo\no gato \xff preto\no gato\n\xfe\n",
        capture_output=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr
    assert stderr.splitlines() == [
        "translate.py: error: <stdin>:2: not valid UTF-8 (byte 0xff at column 8)",
        "translate.py: error: <stdin>:4: not valid UTF-8 (byte 0xfe at column 1)",
    ]


def test_help_says_what_happens_to_bad_bytes(tmp_path):
    done = _run(["--help"], tmp_path)
    assert done.returncode == 0
    assert "not valid UTF-8" in done.stdout and "nothing is translated" in done.stdout


def test_html_writes_one_self_contained_explorer_per_sentence(run_dir, sentences, translator,
                                                                tmp_path):
    done = _run(["--run", run_dir, sentences[0], sentences[1], "--html", "out/explorer.html"],
                tmp_path)
    assert done.returncode == 0, done.stderr
    _assert_clean_stderr(done.stderr)
    for i, sentence in enumerate(sentences[:2], start=1):
        page = (tmp_path / "out" / f"explorer_{i}.html").read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>") and "<script" in page
        assert sentence in page and translator(sentence).text in page and str(run_dir) in page
        assert "src=" not in page and "href=" not in page
    assert "attention explorer" in done.stderr
    done = _run(["--run", run_dir, "o gato", "--html", "explorer.png"], tmp_path)
    _assert_one_line_error(done, "--html explorer.png", ".html")
