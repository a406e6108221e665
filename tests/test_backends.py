"""The paper's layers run on the TensorFlow, JAX and PyTorch backends of Keras,
with the same configs, weights, outputs and attention weights.

Keras chooses its backend once, when it is imported, so each backend runs in
a process of its own: tests/backend_layers.py with KERAS_BACKEND in its
environment. TensorFlow, the reference, writes its layers' weights and
outputs; JAX and PyTorch (at once, one process each) load those weights,
check the outputs to 1e-5, write their own, and train a tiny Transformer with
`model.fit`; then the TensorFlow process loads theirs and checks theirs. A
backend whose package is not installed is skipped, saying how to install it
(`INSTALL`: requirements-dev.txt installs JAX on Python 3.11 and newer,
requirements-torch.txt PyTorch's CPU build). Marked `slow`: the fast suite
(`-m "not slow"`) leaves it out, CI and the full suite run it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "backend_layers.py"
OTHERS = ("jax", "torch")
INSTALL = {
    "jax": "pip install -r requirements-dev.txt installs it on Python 3.11 and newer",
    "torch": "pip install -r requirements-torch.txt installs PyTorch's CPU build",
}
TIMEOUT = 300
# Three processes, each importing Keras and TensorFlow: 50 to 70 s on two busy cores.
pytestmark = pytest.mark.slow


def _start(backend: str, log: Path, *args: str) -> subprocess.Popen:
    """tests/backend_layers.py under `backend`; its standard error goes to `log`
    (a pipe left unread could fill and stop it), its output is read here."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO),
           "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
    with log.open("w") as stderr:
        return subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env, cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                text=True)


def _finish(process: subprocess.Popen, log: Path, stdin: str = "") -> dict:
    """The process's JSON summary (its last line), or its error as the result."""
    try:
        out, _ = process.communicate(stdin, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    if process.returncode != 0 or not out.strip():
        return {"error": f"exit {process.returncode}\n{log.read_text()[-4000:]}"}
    return json.loads(out.strip().splitlines()[-1])


def _installed(backend: str) -> bool:
    return importlib.util.find_spec(backend) is not None


def _summary(runs: dict, backend: str) -> dict:
    """`backend`'s summary; skipped when its package is missing."""
    if not _installed(backend):
        pytest.skip(f"{backend} is not installed ({INSTALL[backend]})")
    assert backend in runs, f"not run: the reference failed\n{runs['tensorflow'].get('error')}"
    assert "error" not in runs[backend], runs[backend]["error"]
    return runs[backend]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The summaries of every process: `tensorflow` (the reference, which then
    checks what the others wrote) and each installed other backend."""
    root = tmp_path_factory.mktemp("backends")
    logs = {name: root / f"{name}.log" for name in ("tensorflow", *OTHERS)}
    reference = _start("tensorflow", logs["tensorflow"], "--write", str(root / "tensorflow"),
                       "--fit", "--check-stdin")
    # The reference's weights are on disk once it says so; it then trains
    # while the other backends start.
    written = reference.stdout.readline()
    others = [name for name in OTHERS if _installed(name)] if written else []
    started = {name: _start(name, logs[name], "--check", str(root / "tensorflow"),
                            "--write", str(root / name), "--fit") for name in others}
    results = {name: _finish(process, logs[name]) for name, process in started.items()}
    checks = "".join(f"{root / name}\n" for name in others if "error" not in results[name])
    results["tensorflow"] = _finish(reference, logs["tensorflow"], checks)
    return results


def test_tensorflow_writes_the_reference_and_fits(runs):
    summary = runs["tensorflow"]
    assert "error" not in summary, summary.get("error")
    assert summary["backend"] == "tensorflow"
    # 7 functions, 14 layer outputs, 9 of each Transformer (logits, 6 weights, 2 steps)
    assert summary["written"] == 39
    assert summary["refused"] == []  # nothing refuses under TensorFlow


@pytest.mark.parametrize("backend", OTHERS)
def test_layers_match_tensorflow_and_fit(runs, backend):
    summary = _summary(runs, backend)
    assert summary["backend"] == backend
    (largest,) = summary["checked"].values()
    assert largest <= 1e-5  # also asserted in the process, array by array
    losses = summary["fit_losses"]
    assert len(losses) == 5 and losses[-1] < losses[0]
    # The TensorFlow-only parts refuse with one line instead of failing deep inside.
    assert summary["refused"] == ["masked_loss", "CustomSchedule", "Translator",
                                  "seams.token_losses", "Translator.from_run", "train.py"]


@pytest.mark.parametrize("backend", OTHERS)
def test_weights_saved_under_another_backend_load_in_tensorflow(runs, backend):
    _summary(runs, backend)
    summary = runs["tensorflow"]
    assert "error" not in summary, summary.get("error")
    checked = {Path(path).name: largest for path, largest in summary["checked"].items()}
    assert checked[backend] <= 1e-5
