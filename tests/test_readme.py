"""Every command of README.md's ```bash blocks runs, so the docs cannot drift.

The commands run as a user would type them (through bash, in a scratch
directory that links `train.py`, `translate.py` and `transformer/`), with these
substitutions:

- `runs/toy` is the session's tiny trained run (tests/conftest.py `tiny_run`);
- every `python train.py` gets tiny settings (greedy evaluation among them)
  and its own `--output-dir` appended (later options win), and the data files the README names
  (`train.tsv`, `valid.tsv`, `test.tsv`) are small toy corpora;
- `transformer-train`, `transformer-translate` and `transformer-export` run their entry points
  (`transformer.cli.*:main`) with this checkout's Python, installed or not.

Skip rule: a command is skipped when it needs the network or another machine
(`--download`, `TF_CONFIG`), a path the reader does not have (the development corpus `ui-es-en/`),
is the install or test command itself (`python3 -m venv`, `pip install`,
`ruff`, `pytest`), installs system packages (`apt-get`), runs a benchmark of
`bench/` (minutes to hours; tests/test_bible_corpus.py, tests/test_budget_curve.py
and the other bench tests run them on small inputs), or starts a program that
runs until stopped (`tensorboard`, `jupyter`, the server, and the `curl`
requests to it: tests/test_serve.py serves a run). Everything else must exit 0; translate commands must print one
line per sentence, none of them empty.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

SKIP = re.compile(
    r"--download|TF_CONFIG|\bui-es-en/|-m venv\b|pip install|\bruff\b|\bpytest\b"
    r"|^tensorboard\b|\bjupyter\b|^transformer-serve\b|transformer\.cli\.serve\b|^curl\b|\bapt-get\b"
    r"|\bbench/"
)
# Tiny settings; greedy evaluation (a beam's trace costs more than the tiny run's
# training, and tests/test_real_text_run.py evaluates with the real-text beam).
TINY_TRAIN = ("--num-layers 1 --d-model 16 --num-heads 2 --dff 32 --epochs 1 "
              "--steps-per-epoch 2 --batch-size 8 --vocab-size 200 --examples 0 --no-export "
              "--eval-beam 1")
TINY_ADAPT = "--epochs 1 --steps-per-epoch 2 --batch-size 8 --examples 0 --no-export --eval-beam 1"
ENTRY_POINTS = {
    "transformer-train": "transformer.cli.train",
    "transformer-translate": "transformer.cli.translate",
    "transformer-export": "transformer.cli.export",
}


def readme_commands() -> list[str]:
    """The commands of the ```bash blocks, one per logical line (backslash
    continuations joined), comments and blank lines dropped."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.S | re.M)
    commands = []
    for block in blocks:
        for command in block.replace("\\\n", " ").splitlines():
            command = command.strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def _without_comment(command: str) -> str:
    return re.sub(r"\s+#\s.*$", "", command)


def _prepared(command: str, run_dir: Path, index: int) -> str:
    command = _without_comment(command).replace("runs/toy", str(run_dir))
    for script, module in ENTRY_POINTS.items():
        runner = f"{shlex.quote(sys.executable)} -c 'import sys; from {module} import main; " \
                 "sys.exit(main())'"
        command = re.sub(rf"(^|\| ){script}\b", rf"\g<1>{runner}", command)
    command = re.sub(r"(^|\| |&& )python ", rf"\g<1>{shlex.quote(sys.executable)} ", command)
    if "train.py" in command and "--help" not in command:
        # A run adapted from the tiny run keeps its model and vocabulary.
        tiny = TINY_ADAPT if "--init-from" in command else TINY_TRAIN
        command += f" {tiny} --output-dir runs/readme_{index}"
    return command


def _sentences_given(command: str) -> int | None:
    """How many sentences a translate command passes (arguments or printf lines)."""
    printf = re.match(r"printf '([^']*)'", command)
    if printf:
        return printf.group(1).count("\\n")
    words = shlex.split(command)
    script = next(i for i, w in enumerate(words) if w.endswith(("translate.py", "translate")))
    sentences, skip_next, n_best = [], False, 1
    for previous, word in zip(words[script:], words[script + 1:], strict=False):
        if skip_next:
            skip_next = False
            n_best = int(word) if previous == "--n-best" else n_best
        elif word.startswith("--"):
            skip_next = word in ("--run", "--beam", "--plot", "--layer", "--alpha",
                                 "--max-length", "--n-best", "--top-k", "--top-p",
                                 "--temperature", "--seed", "--html", "--engine",
                                 "--quantization")
        else:
            sentences.append(word)
    return len(sentences) * n_best  # --n-best N prints N lines per sentence


def test_readme_has_the_commands_this_test_relies_on():
    commands = readme_commands()
    assert any("translate.py --run runs/toy" in c for c in commands)
    assert any("tensorboard --logdir runs/toy/logs" in c for c in commands)
    assert any(c.startswith("python train.py --data") for c in commands)
    assert [c for c in commands if SKIP.search(c)]  # the skip rule is exercised


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A scratch directory that looks like the repository, with the README's data files."""
    from conftest import write_toy_tsv

    root = tmp_path_factory.mktemp("readme")
    for name in ("train.py", "translate.py", "transformer"):
        (root / name).symlink_to(REPO / name)
    (root / "docs").mkdir()
    write_toy_tsv(root, seed=1)  # train.tsv, valid.tsv, test.tsv
    return root


@pytest.mark.slow
@pytest.mark.parametrize("index, command", list(enumerate(readme_commands())))
def test_readme_command_runs(index, command, workspace, tiny_run):
    if SKIP.search(command):
        pytest.skip(f"skip rule (network, another machine, install/test, system packages, benchmark, server): {command}")
    prepared = _prepared(command, Path(tiny_run.run_dir), index)
    done = subprocess.run(["bash", "-c", prepared], cwd=workspace, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{command}\n{prepared}\n{done.stdout[-2000:]}\n" \
                                 f"{done.stderr[-2000:]}"
    if re.search(r"translate\.py|transformer-translate", command) and "--help" not in command:
        lines = [line for line in done.stdout.splitlines() if not line.startswith("  ")]
        assert len(lines) == _sentences_given(_without_comment(command)), done.stdout
        assert all(line.strip() for line in lines), done.stdout


def test_ci_runs_exactly_the_readmes_test_command():
    """.ci/run installs from the requirements files, then runs what README.md tells
    a reader to run after `pip install -r requirements-dev.txt &&`."""
    (install_and_test,) = [c for c in readme_commands() if "pip install -r requirements-dev.txt" in c]
    test_command = install_and_test.split("&&", 1)[1].strip()
    assert "pytest" in test_command and "--durations=" in test_command
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci_lines[-1].strip() == test_command


def test_the_options_that_may_change_on_resume_are_those_of_the_code():
    from transformer.cli.train import resumable_options

    text = " ".join(README.read_text().split())
    match = re.search(r"Only (.*?) may change on `--resume`", text)
    assert match, "README.md no longer says which options may change on --resume"
    listed = re.findall(r"`(--[a-z-]+)`", match.group(1))
    assert sorted(listed) == resumable_options()


def test_the_defaults_benchmarks_lists_are_the_recipes():
    """BENCHMARKS.md ("The real-text defaults", where README.md sends its readers)
    restates the real-text defaults; they are the code's."""
    from transformer.constants import DEFAULT_ALPHA
    from transformer.model_config import PRESETS
    from transformer.run.recipes import (
        CORPUS_DEFAULTS,
        CORPUS_MODEL_DEFAULTS,
        MAX_EPOCHS,
        MIN_EPOCHS,
        PEAK_WARMUP_STEPS,
        SAMPLING_MIN_PASSES,
        SHORT_RUN_SECONDS,
        SHORT_RUN_VOCAB_SIZE,
        TARGET_PAIRS_SEEN,
    )
    from transformer.run.sizing import AUTO_PRESET, REFERENCE_PRESET
    from transformer.training import COOLDOWN_SHARE

    assert "BENCHMARKS.md#the-real-text-defaults" in README.read_text(encoding="utf-8")
    benchmarks = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    text = " ".join(benchmarks.split("## The real-text defaults", 1)[1].split("\n## ", 1)[0].split())
    assert CORPUS_DEFAULTS["preset"] == AUTO_PRESET
    assert "the model the budget chooses" in text and "transformer/run/sizing.py" in text
    tutorial = PRESETS[REFERENCE_PRESET]
    assert (f"without one the `{REFERENCE_PRESET}` preset: {tutorial.num_layers} layers, "
            f"d_model {tutorial.d_model}, {tutorial.num_heads} heads, dff {tutorial.dff}") in text
    assert (f"(up to {CORPUS_DEFAULTS['vocab_size']:,} pieces; {SHORT_RUN_VOCAB_SIZE:,} with a "
            f"`--time-budget` of at most {SHORT_RUN_SECONDS // 60} minutes)") in text
    assert CORPUS_DEFAULTS["shared_vocab"] and CORPUS_MODEL_DEFAULTS["normalize_first"]
    assert CORPUS_MODEL_DEFAULTS["dropout_rate"] == 0 and "no dropout" in text
    assert CORPUS_DEFAULTS["label_smoothing"] == 0 and "no label smoothing" in text
    assert f"{CORPUS_DEFAULTS['batch_size']} pairs' worth of tokens" in text
    assert (f"an {CORPUS_DEFAULTS['warmup_steps']:,}-step warm-up to the peak of the paper's "
            f"{PEAK_WARMUP_STEPS:,}-step one") in text
    assert CORPUS_DEFAULTS["decay"] == "inverse_sqrt" and "then the paper's decay" in text
    assert COOLDOWN_SHARE == 0.2 and "keeps the peak until the last fifth of the run" in text
    assert f"about {TARGET_PAIRS_SEEN:,} pairs, {MIN_EPOCHS} to {MAX_EPOCHS}" in text
    assert f"beam {CORPUS_DEFAULTS['eval_beam_size']} and alpha {DEFAULT_ALPHA}" in text
    assert (f"on course for {SAMPLING_MIN_PASSES} passes or more" in text
            and f"alpha {CORPUS_DEFAULTS['subword_sampling']}: subword regularisation" in text)


def test_the_toy_vocabulary_size_the_readme_states_is_the_grammars():
    """README rounds the toy grammar's vocabulary ("about 100 Portuguese and 70 English
    words"); the rounding must stay within 5% of what `toy_vocabulary` returns."""
    from transformer.data import toy_vocabulary

    text = " ".join(README.read_text(encoding="utf-8").split())
    match = re.search(r"about (\d+) Portuguese and (\d+) English words", text)
    assert match, "README.md no longer states the toy grammar's vocabulary size"
    for stated, words in zip(map(int, match.groups()), toy_vocabulary(), strict=True):
        assert abs(len(words) - stated) <= 0.05 * stated, (stated, len(words))
