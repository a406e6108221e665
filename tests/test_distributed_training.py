"""Distributed training computes what one device computes with the same global batch.

Each run is a fresh process of `tests/replica_steps.py` (logical CPUs and
`TF_CONFIG` must be set before TensorFlow initialises): a tiny model, dropout
0, seed 0, SGD (whose updates, unlike Adam's, scale with the gradient, so a
loss not divided by the replica count shows in the weights) and three fixed
global batches of four pairs. Sums over replicas run in another order than on
one device, so the weights agree to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from worker_helpers import REPO, run_workers

SCRIPT = str(REPO / "tests" / "replica_steps.py")
TIMEOUT = 300
# Three SGD steps of learning rate 1 on float32: observed differences are
# about 2e-7; a loss counted twice moves weights by 1e-2 or more.
ATOL = 1e-5


def replica_steps_command(strategy, out, *options):
    return [sys.executable, SCRIPT, strategy, str(out), *options]


def start(strategy, out, *options):
    return subprocess.Popen(
        replica_steps_command(strategy, out, *options),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process):
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr[-3000:]
    return stdout


def load(path):
    saved = np.load(path)
    weights = [saved[name] for name in sorted(saved.files) if name.startswith("w")]
    return saved["losses"], weights


def assert_same_training(reference_path, distributed_path):
    reference_losses, reference = load(reference_path)
    losses, weights = load(distributed_path)
    assert len(reference_losses) == 3
    np.testing.assert_allclose(
        losses, reference_losses, rtol=1e-5, atol=0, err_msg="per-step training loss"
    )
    assert len(weights) == len(reference) > 10
    moved = max(float(np.max(np.abs(w))) for w in weights)
    assert moved > 0
    for index, (got, want) in enumerate(zip(weights, reference, strict=True)):
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"weight {index}")


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The reference: the same global batches on one device, equal tokens per half."""
    out = tmp_path_factory.mktemp("one_device") / "weights.npz"
    stdout = finish(start("default", out))
    assert "replicas 1;" in stdout
    return out


@pytest.mark.slow
def test_mirrored_on_two_cpus_trains_as_one_device(one_device, tmp_path):
    out = tmp_path / "mirrored.npz"
    stdout = finish(start("mirrored", out, "--cpu-devices", "2"))
    assert "replicas 2;" in stdout
    assert_same_training(one_device, out)


@pytest.mark.slow
def test_two_workers_train_as_one_device(one_device, tmp_path):
    out = tmp_path / "workers.npz"
    results = run_workers(replica_steps_command("multi-worker", out), count=2, timeout=TIMEOUT)
    for code, stdout, stderr in results:
        assert code == 0, stderr[-3000:]
        assert "replicas 2;" in stdout
    assert_same_training(one_device, out)


@pytest.mark.slow
def test_mirrored_trains_as_one_device_when_replicas_hold_unequal_tokens(tmp_path):
    # The loss divides by the global batch's real tokens (all-reduced), not by
    # each replica's own: a mean of per-replica means would fail here.
    reference = start("default", tmp_path / "one.npz", "--lengths", "unequal")
    mirrored = start("mirrored", tmp_path / "two.npz", "--cpu-devices", "2", "--lengths", "unequal")
    finish(reference)
    finish(mirrored)
    assert_same_training(tmp_path / "one.npz", tmp_path / "two.npz")
