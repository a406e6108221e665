"""translate.py run as a user runs it: arguments or stdin, plots, scores, n-best lists,
sampling, errors. A few tests run it as a subprocess (clean start-up, standard
input, the exit status); the others call `main([...])` in this process."""

import io
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.cli.translate import main
from transformer.decoding.strategies import Beam, Greedy, Sample
from transformer.decoding.translator import Translator

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


@pytest.fixture()
def cli(run_dir, translator, monkeypatch, capsys):
    """`cli(*args, stdin=None)` runs `main` in this process and returns
    `(status, stdout lines, stderr lines)`; the tiny run loads once (its
    compiled pipelines are reused), any other run directory as usual."""
    load = Translator.from_run.__func__

    def from_run(cls, path, **kwargs):
        return translator if Path(path) == run_dir and not kwargs else load(cls, path, **kwargs)

    monkeypatch.setattr(Translator, "from_run", classmethod(from_run))

    def run(*args, stdin=None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            status = main([str(a) for a in args])
        except SystemExit as exit_:
            status = exit_.code
        out, err = capsys.readouterr()
        return status, out.splitlines(), err.splitlines()

    return run


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


@pytest.mark.slow  # TensorFlow in a subprocess
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


@pytest.mark.slow  # TensorFlow in a subprocess
def test_stdin_lines_beam_search_and_one_plot_per_sentence(run_dir, sentences, translator,
                                                            tmp_path):
    stdin = f"{sentences[0]}\n\n{sentences[1]}\n"
    done = _run(["--run", run_dir, "--beam", "3", "--alpha", "0.6", "--max-length", "20",
                 "--plot", "attention.png", "--layer", "1"], tmp_path, stdin=stdin)
    assert done.returncode == 0, done.stderr
    _assert_clean_stderr(done.stderr)
    expected = translator([sentences[0], "", sentences[1]], max_length=20,
                          search=Beam(3, alpha=0.6))
    assert done.stdout.splitlines() == [r.text for r in expected]
    for name in ("attention_1.png", "attention_3.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "attention_2.png").exists()  # the empty sentence has no plot
    assert "decoder_layer1_block2" in done.stderr


def test_one_sentence_plot_of_a_named_block(run_dir, sentences, translator, tmp_path, cli):
    out = tmp_path / "plots" / "self.png"
    status, stdout, stderr = cli("--run", run_dir, sentences[2], "--plot", out,
                                 "--layer", "decoder_layer1_block1")
    assert status == 0, stderr
    assert stdout == [translator(sentences[2]).text]
    assert out.read_bytes()[:8] == PNG_MAGIC


def _assert_one_line_error_in_process(result, *needles, status=1):
    code, stdout, stderr = result
    assert code == status and stdout == []
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith("translate.py: error:")
    for needle in needles:
        assert needle in stderr[0]


def test_missing_run_directory_is_a_one_line_error(tmp_path, cli):
    _assert_one_line_error_in_process(cli("--run", tmp_path / "nope", "o gato"),
                                      "nope", "does not exist")


def test_incomplete_run_directory_names_what_is_missing(run_dir, tmp_path, cli):
    (tmp_path / "config.json").write_text((run_dir / "config.json").read_text())
    _assert_one_line_error_in_process(cli("--run", tmp_path, "o gato"),
                                      "tokenizers", "model.keras")


def test_bad_layer_is_a_one_line_error(run_dir, cli):
    _assert_one_line_error_in_process(cli("--run", run_dir, "o gato", "--plot", "a.png",
                                          "--layer", "9"), "--layer 9")


@pytest.mark.parametrize("args,needle", [
    (["--beam", "0"], "--beam"),
    (["--alpha", "-1"], "--alpha"),
    (["--max-length", "x"], "--max-length"),
    (["--layer", "1"], "--plot"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-p", "0"], "--top-p"),
    (["--top-k", "0"], "--top-k"),
    (["--temperature", "0"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--seed", "-1"], "--seed"),
    (["--n-best", "0"], "--n-best"),
    (["--n-best", "3", "--beam", "2"], "--beam >= --n-best"),
    (["--top-k", "5", "--beam", "4"], "--beam 4 with sampling"),
    (["--seed", "1", "--n-best", "2"], "sampling"),
])
def test_bad_options_are_usage_errors(args, needle, cli):
    _assert_one_line_error_in_process(cli("--run", "runs/x", "o gato", *args), needle,
                                      status=2)


def test_usage_errors_and_help_do_not_import_tensorflow(tmp_path):
    code = ("import sys\n"
            "from transformer.cli.translate import main\n"
            "for argv in (['--help'], ['--run', 'x', 'o', '--top-p', '2']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as exit_:\n"
            "        print('status', exit_.code)\n"
            "print('tensorflow imported:', 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "not valid UTF-8" in done.stdout and "nothing is translated" in done.stdout
    assert "lp(Y) = ((5 + |Y|) / 6) ** alpha" in " ".join(done.stdout.split())
    assert done.stdout.splitlines()[-3:] == ["status 0", "status 2",
                                             "tensorflow imported: False"]
    assert "--top-p: expected a number in (0, 1]" in done.stderr


def test_stdin_lines_that_are_not_utf8_are_named_and_nothing_is_translated(run_dir, cli):
    # Stop before any work: translations are one line per input line, so skipping
    # a bad line would shift every later translation.
    status, stdout, stderr = cli(
        "--run", run_dir, stdin=b"o gato preto come o bolo\no gato \xff preto\no gato\n\xfe\n")
    assert status == 1 and stdout == []
    assert stderr == [
        "translate.py: error: <stdin>:2: not valid UTF-8 (byte 0xff at column 8)",
        "translate.py: error: <stdin>:4: not valid UTF-8 (byte 0xfe at column 1)",
    ]


@pytest.mark.slow  # TensorFlow in a subprocess
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


def test_a_byte_order_mark_on_stdin_is_not_translated(run_dir, sentences, translator, cli,
                                                      monkeypatch):
    given = []  # what the translator is asked (some tokenizers would drop the mark anyway)
    call = Translator.__call__

    def spy(self, sentence_or_list, *args, **kwargs):
        given.append(list(sentence_or_list))
        return call(self, sentence_or_list, *args, **kwargs)

    monkeypatch.setattr(Translator, "__call__", spy)
    stdin = ("\ufeff" + sentences[0] + "\n" + sentences[1] + "\n").encode("utf-8")
    status, stdout, _ = cli("--run", run_dir, "--show-tokens", stdin=stdin)
    assert given == [sentences[:2]]
    assert status == 0
    expected = translator(sentences[:2])
    assert stdout[0] == expected[0].text and stdout[3] == expected[1].text
    assert stdout[1] == "  source tokens: " + " ".join(expected[0].input_tokens)


def test_scores_follow_a_tab_and_are_the_searchs_own(run_dir, sentences, translator, cli):
    for extra, kwargs in (([], {}), (["--beam", "3"], {"search": Beam(3)})):
        status, stdout, _ = cli("--run", run_dir, *sentences, "--scores", *extra)
        assert status == 0
        expected = translator(sentences, **kwargs)
        assert stdout == [f"{r.text}\t{r.score:.4f}" for r in expected]
    greedy = translator(sentences[0])
    assert greedy.score == pytest.approx(greedy.log_prob)  # greedy: the plain log P


def test_n_best_lines_are_sorted_and_the_first_is_beam_fours_answer(run_dir, sentences,
                                                                     translator, cli):
    status, stdout, _ = cli("--run", run_dir, *sentences, "--n-best", "3")
    assert status == 0 and len(stdout) == 3 * len(sentences)
    beam = translator(sentences, search=Beam(4))
    for i, best in enumerate(beam):
        lines = [line.split("\t") for line in stdout[3 * i : 3 * i + 3]]
        assert all(len(parts) == 2 for parts in lines)
        scores = [float(score) for _, score in lines]
        assert scores == sorted(scores, reverse=True)
        assert lines[0][0] == best.text and scores[0] == pytest.approx(best.score, abs=1e-4)
        assert len({text for text, _ in lines}) >= 2  # different hypotheses


def test_a_strategy_named_by_search_prints_the_results_it_returns(run_dir, sentences,
                                                                  translator, cli):
    """`--search NAME` with the options of the same meaning and `--setting`: as
    many lines per sentence as the strategy returns, not as --n-best says."""
    status, stdout, _ = cli("--run", run_dir, *sentences, "--search", "beam", "--beam", "3",
                            "--setting", "n_best=2", "--setting", "alpha=0.0")
    assert status == 0 and len(stdout) == 2 * len(sentences)
    beam = translator(sentences, search=Beam(3, 0.0, n_best=2))
    assert [line.split("\t")[0] for line in stdout] == [h.text for best in beam for h in best]
    assert _strategy(run_dir, "--search", "sample", "--seed", "3", "--top-p", "0.5") == Sample(
        top_p=0.5, seed=3)
    assert _strategy(run_dir, "--search", "greedy") == Greedy()
    status, _, stderr = cli("--run", run_dir, "o gato", "--search", "bean")
    assert status == 2 and "unknown search strategy 'bean'" in stderr[-1]
    status, _, stderr = cli("--run", run_dir, "o gato", "--setting", "size=2")
    assert status == 2 and "add --search" in stderr[-1]


def test_sampling_is_reproducible_by_seed_and_top_k_one_is_greedy(run_dir, test_sources,
                                                                    translator, cli):
    def sample(*args):
        status, stdout, _ = cli("--run", run_dir, *test_sources, *args)
        assert status == 0 and len(stdout) == len(test_sources)
        return stdout

    assert sample("--top-k", "1") == [r.text for r in translator(test_sources)]
    first = sample("--temperature", "1.5", "--seed", "1")
    assert sample("--temperature", "1.5", "--seed", "1") == first
    assert sample("--temperature", "1.5", "--seed", "2") != first
    assert sample("--top-p", "0.9", "--seed", "3") == sample("--top-p", "0.9", "--seed", "3")


@pytest.fixture(scope="module")
def test_sources(tiny_run):
    from transformer.data import read_tsv

    return [source for source, _ in read_tsv(tiny_run.config.test)[:20]]


def test_without_search_options_the_run_decodes_as_it_was_evaluated(run_dir, sentences,
                                                                     translator, cli,
                                                                     monkeypatch):
    """No search option: the beam of the run's evaluation (`eval_beam_size` in
    its config.json; greedy when it has none), as train.py scored it."""
    import json

    from transformer import rundir

    saved = json.loads((run_dir / "config.json").read_text())
    status, greedy, _ = cli("--run", run_dir, *sentences)
    assert status == 0 and saved["eval_beam_size"] == 1
    assert greedy == [result.text for result in translator(sentences)]
    monkeypatch.setattr(rundir, "read_json", lambda path: {**saved, "eval_beam_size": 4})
    status, default, _ = cli("--run", run_dir, *sentences)
    assert status == 0
    assert default == [result.text for result in translator(sentences, search=Beam(4))]
    status, chosen, _ = cli("--run", run_dir, *sentences, "--beam", "1")
    assert chosen == greedy
    # What no option chooses, and what an option keeps.
    assert _strategy(run_dir) == Beam(4)
    assert _strategy(run_dir, "--alpha", "0.3") == Beam(4, alpha=0.3)
    assert _strategy(run_dir, "--seed", "1") == Sample(seed=1)
    assert _strategy(run_dir, "--n-best", "2") == Beam(4, n_best=2)
    assert _strategy(run_dir, "--n-best", "5") == Beam(5, n_best=5)
    assert _strategy(run_dir, "--beam", "1") == Greedy()
    monkeypatch.setattr(rundir, "read_json", lambda path: {})
    assert _strategy(run_dir) == Greedy()
    assert _strategy(run_dir, "--alpha", "0.3") == Beam(1, alpha=0.3)  # scored with lp


def _strategy(run_dir, *options):
    from transformer.cli import translate as translate_cli

    args = translate_cli.parse_args(["--run", str(run_dir), "o gato", *options])
    return translate_cli.search_strategy(args, args.run)


def test_from_run_decodes_as_translate_py_does(run_dir, test_sources, translator, tmp_path,
                                                capsys):
    """A run evaluated with a beam of 4: `Translator.from_run` and
    `translate.py --run` both search that beam, with the same translations."""
    import json

    from translate_helpers import copy_run

    copy = copy_run(run_dir, tmp_path / "run")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "eval_beam_size": 4}))
    loaded = Translator.from_run(copy)
    assert loaded.search == Beam(4)
    expected = [r.text for r in loaded(test_sources, return_attention=False)]
    assert expected != [r.text for r in translator(test_sources)]  # not greedy decoding
    assert main(["--run", str(copy), *test_sources]) == 0
    assert capsys.readouterr().out.splitlines() == expected
