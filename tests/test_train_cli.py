"""train.py as a user runs it: a subprocess on tiny settings.

Covers the run directory, refusal of a non-empty one, SIGKILL mid-epoch and
--resume, one-line errors, and the mirrored and multi-worker strategies.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from worker_helpers import run_workers

REPO = Path(__file__).resolve().parents[1]
TRAIN = str(REPO / "train.py")
TIMEOUT = 300

TINY = [
    "--preset", "toy", "--num-layers", "1", "--d-model", "16", "--num-heads", "2",
    "--dff", "32", "--dropout", "0", "--batch-size", "16", "--steps-per-epoch", "5",
    "--warmup-steps", "10", "--precision", "float32", "--examples", "2", "--eval-beam", "1",
]


@pytest.fixture(scope="module")
def data_args(tmp_path_factory):
    from conftest import write_toy_tsv

    train, valid, test = write_toy_tsv(tmp_path_factory.mktemp("cli_tsv"), n_train=200)
    return ["--data", str(train), "--valid", str(valid), "--test", str(test)]


def run_train(*args, env=None, code=None):
    """Runs train.py (or `code`, which runs it after a patch) and returns the result."""
    command = [sys.executable, "-c", code, *args] if code else [sys.executable, TRAIN, *args]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        command, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=TIMEOUT
    )


def weights_digest(stdout):
    found = re.findall(r"Weights after step (\d+): sha256 ([0-9a-f]{64})", stdout)
    assert found, stdout
    step, digest = found[-1]
    return int(step), digest


def assert_one_line_error(result, returncode, *fragments):
    assert result.returncode == returncode, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("train.py: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# The uninterrupted run of the SIGKILL test, and the run whose directory is checked.
# Dropout on: a resumed run must draw the uninterrupted run's dropout masks too.
REFERENCE = [*TINY, "--epochs", "3", "--checkpoint-every", "3", "--dropout", "0.1"]


@pytest.fixture(scope="module")
def reference_run(data_args, tmp_path_factory):
    """`(output directory, result)` of one tiny run, exported, shared by two tests."""
    out = tmp_path_factory.mktemp("reference") / "run"
    result = run_train(*REFERENCE, *data_args, "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.mark.slow  # TensorFlow in a subprocess
def test_tiny_run_writes_its_directory_and_is_not_overwritten(data_args, reference_run):
    out, result = reference_run
    assert "Traceback" not in result.stderr
    stdout = result.stdout
    for text in ("Epoch 1/3 - step 5", "Epoch 3/3 - step 15", "learning_rate",
                 "exact match", "BLEU signatures: nrefs:1|", "Examples:", "Run directory"):
        assert text in stdout, stdout
    assert len(stdout.splitlines()) < 60  # nothing scrolls

    for name in ("config.json", "tokenizers/saved_model.pb", "model.keras",
                 "checkpoints/checkpoint", "metrics.csv", "metrics.json",
                 "export/saved_model.pb"):
        assert (out / name).exists(), name
    assert list((out / "logs" / "train").glob("events.out.tfevents.*"))
    assert list((out / "logs" / "validation").glob("events.out.tfevents.*"))
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["d_model"] == 16 and config["steps_per_epoch"] == 5
    assert config["precision"] == "float32" and config["target_vocab_size"] > 4
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["0", "1", "2"]
    assert {"loss", "masked_accuracy", "val_loss", "learning_rate"} <= set(rows[0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_step"] == 15
    assert set(metrics["test"]) >= {"masked_accuracy", "exact_match", "bleu", "bleu_signature"}

    # The same command again is refused, and nothing is touched.
    before = sorted(p.name for p in out.iterdir())
    refused = run_train(*REFERENCE, *data_args, "--output-dir", str(out))
    assert_one_line_error(refused, 1, "is not empty", "--resume")
    assert sorted(p.name for p in out.iterdir()) == before

    # Resuming may not change the model, but may train longer.
    changed = run_train("--output-dir", str(out), "--resume", "--d-model", "32", "--no-export")
    assert_one_line_error(changed, 1, "Cannot change `d_model`")
    longer = run_train("--output-dir", str(out), "--resume", "--epochs", "4", "--no-export")
    assert longer.returncode == 0, longer.stderr
    assert "Resuming" in longer.stdout and "at step 15 (epoch 4, batch 0)" in longer.stdout
    assert "Epoch 4/4 - step 20" in longer.stdout
    assert json.loads((out / "config.json").read_text())["epochs"] == 4


KILL_AT_STEP = """
import os, runpy, signal, sys
from transformer.run import callbacks

step_to_kill = int(os.environ["KILL_AT_STEP"])
original = callbacks.CheckpointSaver.on_train_batch_end

def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if callbacks.optimizer_step(self.model.optimizer) == step_to_kill:
        os.kill(os.getpid(), signal.SIGKILL)

callbacks.CheckpointSaver.on_train_batch_end = on_train_batch_end
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_continues_exactly(data_args, reference_run, tmp_path):
    """Killed at step 8 and resumed, the run ends with the reference run's weights
    (the same options; exporting or not changes no weight)."""
    reference = reference_run[1]
    assert weights_digest(reference.stdout)[0] == 15
    args = [*REFERENCE, *data_args, "--no-export"]

    out = tmp_path / "run"
    killed = run_train(*args, "--output-dir", str(out), code=KILL_AT_STEP,
                       env={"KILL_AT_STEP": "8"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    state = (out / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-6"' in state
    # What a kill in the middle of saving step 9 would leave: data without index.
    (out / "checkpoints" / "ckpt-9.data-00000-of-00001").write_bytes(b"\0" * 100)

    resumed = run_train("--output-dir", str(out), "--resume", "--no-export")
    assert resumed.returncode == 0, resumed.stderr
    assert "at step 6 (epoch 2, batch 1)" in resumed.stdout
    assert "Epoch 2/3 - step 10" in resumed.stdout and "Epoch 3/3 - step 15" in resumed.stdout
    # Weights, optimizer state, schedule step and data order were all restored:
    # the resumed run ends with exactly the uninterrupted run's weights.
    assert weights_digest(resumed.stdout) == weights_digest(reference.stdout)
    with open(out / "metrics.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1", "2"]


@pytest.mark.slow  # TensorFlow in a subprocess
def test_flag_and_data_errors_are_one_line(tmp_path):
    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("o gato\tthe cat\nsem tradução\n", encoding="utf-8")
    out = ["--output-dir", str(tmp_path / "out")]

    result = run_train("--batch-size", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "argument --batch-size: expected a positive integer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    assert_one_line_error(run_train("--data", str(bad_tsv), *out), 1, "bad.tsv:2")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_mirrored_strategy_on_two_logical_cpus(data_args, tmp_path):
    out = tmp_path / "run"
    result = run_train(*TINY, *data_args, "--epochs", "1", "--strategy", "mirrored",
                       "--cpu-devices", "2", "--no-export", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    assert "Mirrored training on 2 devices" in result.stdout
    assert "Epoch 1/1 - step 5" in result.stdout
    assert (out / "model.keras").is_file()


# Worker 1's clock runs ten times as fast as worker 0's: counting its own
# time, it would reach the budget steps before the chief.
SKEWED_CLOCK = """
import json, os, runpy, sys, time, types
from transformer.run import callbacks

if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    fast = types.ModuleType("fast_time")
    fast.__dict__.update(vars(time))
    fast.perf_counter = lambda: 10 * time.perf_counter()
    callbacks.time = fast
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.slow
def test_multi_worker_two_processes_stop_at_one_budget_with_the_same_weights(data_args, tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-c", SKEWED_CLOCK, *TINY, *data_args, "--epochs", "400",
            "--time-budget", "6s", "--no-export", "--strategy", "multi-worker",
            "--output-dir", str(out)]
    # run_workers picks free ports and relaunches on new ones if another
    # process took a port before a worker bound it (see worker_helpers.free_ports).
    outputs = []
    for code, stdout, stderr in run_workers(args, count=2, timeout=TIMEOUT):
        assert code == 0, stderr
        outputs.append(stdout)
    chief, other = outputs
    assert "2 workers, 2 replicas in sync; this is worker 0" in chief
    assert "this is worker 1" in other
    # The chief scans, learns the vocabulary and tokenizes; the other links its files.
    assert "Tokenized 200 training pairs" in chief and "Built " in chief
    assert "Linked the chief's tokens" in other
    assert "Tokenized" not in other and "Built " not in other
    # Both count the chief's seconds: they stop after the same step, the
    # budget's, long before the epochs' 2,000 steps, with the same weights.
    stops = [re.findall(r"Time budget of 6 s reached at step (\d+)", log) for log in outputs]
    assert stops[0] == stops[1] and len(stops[0]) == 1, stops
    assert weights_digest(chief) == weights_digest(other)
    assert 0 < weights_digest(chief)[0] < 2000
    # Only the chief wrote the run directory; the other worker's copies are gone.
    assert (out / "model.keras").is_file() and (out / "metrics.json").is_file()
    assert "Run directory" in chief and "Run directory" not in other
    temp = re.search(r"writes its copies to (\S+) ", other).group(1)
    assert not Path(temp).exists()


def test_resume_help_names_exactly_the_options_that_may_change():
    from transformer.cli.train import build_parser, resumable_options
    from transformer.run.config import RESUMABLE_FIELDS

    parser = build_parser()
    options = {option for action in parser._actions for option in action.option_strings}
    assert set(resumable_options()) <= options
    assert "precision" not in RESUMABLE_FIELDS  # a changed --precision is refused
    (resume,) = [a for a in parser._actions if "--resume" in a.option_strings]
    assert "only " + ", ".join(resumable_options()) + " may change" in resume.help
    assert "--precision included" in resume.help


def _help_of(parser, flag):
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return action.help


def test_the_options_and_their_help_come_from_the_schema():
    import dataclasses

    from transformer.cli.train import build_parser
    from transformer.model_config import TransformerConfig
    from transformer.run.config import RunConfig
    from transformer.run.recipes import CORPUS_DEFAULTS, TOY_DEFAULTS
    from transformer.settings import option_flag, setting

    parser = build_parser()
    flags = {option for action in parser._actions for option in action.option_strings}
    for cls in (RunConfig, TransformerConfig):
        for field in dataclasses.fields(cls):
            flag = option_flag(field)
            if flag:  # a setting with an option: its meaning is its help
                assert flag in flags
                assert _help_of(parser, flag).startswith(cls.describe(field.name)
                                                         if cls is RunConfig else
                                                         field.metadata["setting"].help)
    # The defaults in the help are the recipes' and the fields' own values.
    assert (f"(default: {TOY_DEFAULTS['batch_size']} for the toy corpus, "
            f"{CORPUS_DEFAULTS['batch_size']} otherwise)") in _help_of(parser, "--batch-size")
    assert (f"(default: {TOY_DEFAULTS['vocab_size']} for the toy corpus, "
            f"{CORPUS_DEFAULTS['vocab_size']} otherwise, or 4000 with a --time-budget of at "
            "most 10 minutes)") in _help_of(parser, "--vocab-size")
    assert "2 for toy, 4 for tutorial" in _help_of(parser, "--num-layers")

    # A setting added to the schema is an option, its help and default generated.
    @dataclasses.dataclass(frozen=True)
    class Extended(RunConfig):
        min_delta: int = setting(3, "the least improvement that counts",
                                section="schedule", kind="positive_int", metavar="N")
        undocumented: float = 0.5

    extended = build_parser(schema=Extended)
    assert (_help_of(extended, "--min-delta")
            == "the least improvement that counts (default: 3)")
    assert extended.parse_args(["--min-delta", "7"]).min_delta == 7
    assert extended.parse_args(["--undocumented", "0.7"]).undocumented == 0.7
    assert "--min-delta N" in extended.format_help()
    assert "--undocumented" in extended.format_help()
    assert "--min-delta" not in parser.format_help()


def test_dropout_defaults_to_zero_on_real_corpora_and_keeps_a_given_rate(tmp_path):
    from transformer.cli.train import _config_from_args, build_parser

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("uno\tone\n", encoding="utf-8")

    def config(*argv):
        return _config_from_args(build_parser().parse_args(["--data", str(pairs), *argv]))

    assert config().model.dropout_rate == 0.0
    assert config("--dropout", "0.1").model.dropout_rate == 0.1
    assert config("--preset", "toy").model.dropout_rate == 0.0
    toy = _config_from_args(build_parser().parse_args([]))
    assert toy.model.dropout_rate == 0.1


def _without_memory_pool_setting():
    return {key: value for key, value in os.environ.items() if key != "TF_CPU_ALLOCATOR_USE_BFC"}


BEFORE_TENSORFLOW = """
import os, runpy, sys
sys.argv = ["train.py", *sys.argv[1:]]
try:
    runpy.run_path("train.py", run_name="__main__")
except SystemExit as done:
    print("exit", done.code)
print("tensorflow" in sys.modules, os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""


@pytest.mark.parametrize("argv,code", [(["--help"], 0), (["--epochs", "0"], 2),
                                       (["--no-such-option"], 2)])
def test_help_and_usage_errors_answer_before_tensorflow_starts(argv, code):
    """In well under a second: TensorFlow is not imported, nothing is set for it."""
    env = _without_memory_pool_setting()
    done = subprocess.run([sys.executable, "-c", BEFORE_TENSORFLOW, *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.stdout.splitlines()[-2:] == [f"exit {code}", "False None"], done.stderr
    if code:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


START_TENSORFLOW = """
import os, sys
import transformer.cli.train as cli
print("tensorflow" in sys.modules, os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
cli._start_tensorflow()
print("tensorflow" in sys.modules, os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""


@pytest.mark.parametrize("given,used", [(None, "true"), ("false", "false")])
def test_the_memory_pool_is_chosen_when_tensorflow_starts_not_on_import(given, used):
    """Importing the module changes no environment variable (a test process that
    imports it must not pass the setting on to later subprocesses); a run sets
    TF_CPU_ALLOCATOR_USE_BFC just before TensorFlow's import reads it, unless
    the environment already says otherwise."""
    env = _without_memory_pool_setting()
    if given is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = given
    done = subprocess.run([sys.executable, "-c", START_TENSORFLOW], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", str(given), "True", used]


def test_starting_tensorflow_in_a_process_that_has_it_changes_no_environment(monkeypatch):
    import tensorflow  # noqa: F401 - already imported by the test session

    from transformer.cli import train as cli

    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    cli._start_tensorflow()
    assert "TF_CPU_ALLOCATOR_USE_BFC" not in os.environ


MAIN_THEN_SAY_IF_TENSORFLOW = (
    "import sys; from transformer.cli.train import main; status = main(sys.argv[1:]); "
    "print('tensorflow imported:', 'tensorflow' in sys.modules); sys.exit(status)")


def test_a_non_empty_output_dir_is_refused_before_tensorflow_starts(tmp_path):
    """The refusal a newcomer meets first (train.py run twice) comes at once,
    one line, without starting TensorFlow; the directory is left as it was."""
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    refused = run_train("--output-dir", str(tmp_path), code=MAIN_THEN_SAY_IF_TENSORFLOW)
    assert_one_line_error(refused, 1, "is not empty", "--resume")
    assert "tensorflow imported: False" in refused.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("flag", ["--data", "--valid", "--test"])
def test_a_missing_corpus_file_is_named_before_tensorflow_starts(tmp_path, flag):
    missing, present = tmp_path / "missing.tsv", tmp_path / "train.tsv"
    present.write_text("o gato\tthe cat\n", encoding="utf-8")
    given = {"--data": present, flag: missing}
    args = [str(part) for item in given.items() for part in item]
    refused = run_train(*args, "--output-dir", str(tmp_path / "out"),
                        code=MAIN_THEN_SAY_IF_TENSORFLOW)
    assert_one_line_error(refused, 1, f"{flag} {missing}: no such file")
    assert "tensorflow imported: False" in refused.stdout
    assert not (tmp_path / "out").exists()
