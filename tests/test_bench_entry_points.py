"""bench/'s entry points with modes (train_speed.py, decode_speed.py): choosing a
mode, importing only its module, and the step variants' environments. Nothing
is timed here."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
sys.path[:0] = [str(BENCH)]

import common  # noqa: E402


def _fake_mode(monkeypatch, run):
    module = types.ModuleType("fake_mode")
    module.__doc__ = "A fake mode.\n\nMore."
    module.add_arguments = lambda parser: parser.add_argument("--n", type=int, default=1)
    module.run = run
    monkeypatch.setitem(sys.modules, "fake_mode", module)
    return {"fake": ("fake_mode", "a fake mode")}


def test_a_mode_gets_its_options_and_the_entry_points_path(monkeypatch):
    seen = {}
    modes = _fake_mode(monkeypatch, lambda args, parser: seen.update(vars(args)) or 0)
    assert common.run_mode(["fake", "--n", "3"], "Doc.", modes, str(BENCH / "x.py")) == 0
    assert seen == {"n": 3, "entry": str(BENCH / "x.py")}


def test_a_bench_error_of_a_mode_is_one_line_and_exit_1(monkeypatch, capsys):
    def run(args, parser):
        raise common.BenchError("runs/x: no metrics.json")

    modes = _fake_mode(monkeypatch, run)
    assert common.run_mode(["fake"], "Doc.", modes, "/b/x.py") == 1
    assert capsys.readouterr().err == "x fake: runs/x: no metrics.json\n"


def test_no_mode_or_an_unknown_one_lists_the_modes(monkeypatch, capsys):
    modes = _fake_mode(monkeypatch, lambda args, parser: 0)
    assert common.run_mode([], "Doc.", modes, "x.py") == 2
    assert common.run_mode(["bogus"], "Doc.", modes, "x.py") == 2
    assert "fake         a fake mode" in capsys.readouterr().err
    assert common.run_mode(["--help"], "Doc.", modes, "x.py") == 0
    assert "MODE --help" in capsys.readouterr().out


@pytest.mark.parametrize("script, modes", [
    ("train_speed.py", ["step", "keras", "tokenizers", "data"]),
    ("decode_speed.py", ["engines", "cached", "serve"]),
])
def test_the_entry_points_list_their_modes(script, modes):
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == modes


def test_the_ctranslate2_worker_starts_without_tensorflow():
    """`decode_speed.py engines` times CTranslate2's start-up: its module must not
    import TensorFlow (the TensorFlow engine imports it in its own worker)."""
    code = ("import sys; sys.path[:0] = sys.argv[1:]; import speed.engines; "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow imported'")
    done = subprocess.run([sys.executable, "-c", code, str(REPO), str(BENCH)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_step_variants_choose_the_allocator_and_onednn_by_environment(monkeypatch):
    from speed import step

    pool = "TF_CPU_ALLOCATOR_USE_BFC"
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.setenv(pool, "true")  # as in a shell that exported it: malloc still gets malloc
    assert step.environment("default")[pool] == "true"
    assert pool not in step.environment("malloc") and pool not in step.environment("arena1")
    assert step.environment("onednn")["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert "TF_ENABLE_ONEDNN_OPTS" not in step.environment("default")
