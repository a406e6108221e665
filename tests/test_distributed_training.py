"""Distributed training computes what one device computes with the same global batch.

The runs are processes of `tests/replica_steps.py` (logical CPUs and
`TF_CONFIG` must be set before TensorFlow initialises): one process splits
the CPU into two logical devices and trains every configuration of `RUNS` on
one device, then mirrored on both; the workers are processes of their own.
Each run trains a tiny model, dropout
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
# Batches of three pairs of very different lengths (tests/replica_steps.py).
UNEVEN = ("--lengths", "unequal", "--batch", "3")


def replica_steps_command(strategy, *arguments):
    return [sys.executable, SCRIPT, strategy, *map(str, arguments)]


def start(strategy, *arguments):
    return subprocess.Popen(
        replica_steps_command(strategy, *arguments),
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


# Adam's steps in the run with the optimizer of `train` (the last test).
ADAM_STEPS = 6
# The configurations every strategy trains: the options of replica_steps.py.
RUNS = {
    "equal": (),
    "uneven": UNEVEN,
    "adam": ("--optimizer", "averaging-adam", "--steps", str(ADAM_STEPS)),
}


STRATEGIES = {"default": 1, "mirrored": 2}  # their replicas


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`{(strategy, run): OUT.npz}`: every run of `RUNS` on one device (the
    reference), then mirrored on two logical CPUs, in one process (one
    TensorFlow start)."""
    root = tmp_path_factory.mktemp("replica_steps")
    runs = []
    for name, run_options in RUNS.items():
        runs += ["--", str(root / f"{{strategy}}_{name}.npz"), *run_options]
    stdout = finish(start(*STRATEGIES, "--cpu-devices", "2", *runs))
    for replicas in STRATEGIES.values():
        assert stdout.count(f"replicas {replicas};") == len(RUNS)
    return {(strategy, name): root / f"{strategy}_{name}.npz"
            for strategy in STRATEGIES for name in RUNS}


@pytest.mark.slow
def test_mirrored_on_two_cpus_trains_as_one_device(trained):
    assert_same_training(trained["default", "equal"], trained["mirrored", "equal"])


def assert_same_weights(reference_path, distributed_path):
    # Only the weights: Keras weights each replica's reported loss by its
    # pairs, so the logged loss of an uneven step is not the mean over its
    # tokens (the gradient is).
    reference_losses, reference = load(reference_path)
    _, weights = load(distributed_path)
    assert len(reference_losses) == 3 and len(weights) == len(reference) > 10
    for index, (got, want) in enumerate(zip(weights, reference, strict=True)):
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"weight {index}")


@pytest.mark.slow
def test_two_workers_train_as_one_device_on_uneven_splits(trained, tmp_path):
    # Two workers hold batches of three pairs as two pairs and one, as they do
    # with token-budget batches of an odd number of pairs.
    out = tmp_path / "workers.npz"
    results = run_workers(replica_steps_command("multi-worker", out, *UNEVEN), count=2,
                          timeout=TIMEOUT)
    for code, stdout, stderr in results:
        assert code == 0, stderr[-3000:]
        assert "replicas 2;" in stdout
    assert_same_weights(trained["default", "uneven"], out)


@pytest.mark.slow
def test_mirrored_trains_as_one_device_when_replicas_hold_unequal_tokens_and_pairs(trained):
    # The loss divides by the global batch's real tokens (all-reduced), not by
    # each replica's own: a mean of per-replica means would fail here.
    assert_same_weights(trained["default", "uneven"], trained["mirrored", "uneven"])


# ------------------------------------------- the optimizer of a run, with its average

# Adam divides each update by sqrt(v) + 1e-9, so weights agree to float32
# rounding amplified by that division (observed: up to about 2e-6 after 6
# steps); the fused update used under a strategy moves them by 1e-3 or more.
ADAM_ATOL = 5e-5


def _step_weights(saved, step):
    return [saved[n] for n in sorted(saved.files) if n.startswith(f"s{step:02d}_")]


def _numpy_average(saved):
    """The moving average of the saved per-step weights, from the formula:
    step t uses m = min(0.9, (1 + t) / (10 + t)), step 0 copies the weights."""
    average = None
    for step in range(ADAM_STEPS):
        weights = [w.astype(np.float64) for w in _step_weights(saved, step)]
        m = 0.0 if step == 0 else min(0.9, (1 + step) / (10 + step))
        average = weights if average is None else [
            m * a + (1 - m) * w for a, w in zip(average, weights, strict=True)]
    return average


def _compared(saved):
    """Indices of the trainable weights whose updates should agree across
    strategies: not the attention's key biases, whose gradient is zero in
    exact arithmetic (adding `q . b` to every score of a query leaves its
    softmax unchanged), so Adam turns its rounding noise into full steps."""
    names = [str(n) for n in saved["names"]]
    assert sum(n.endswith("/wk/bias") for n in names) == 3  # one per attention
    return [i for i, n in enumerate(names) if not n.endswith("/wk/bias")]


@pytest.mark.slow
def test_mirrored_trains_and_averages_as_one_device_with_the_runs_optimizer(trained):
    """`make_optimizer`'s `AveragingAdam` with `CustomSchedule` and a moving
    average: Keras' element-wise updates under the strategy (the fused kernels
    would update each replica's copy with its own gradient) give the one-device
    run's fused updates, and both averages follow the formula."""
    one, two = np.load(trained["default", "adam"]), np.load(trained["mirrored", "adam"])
    for saved in (one, two):
        assert len(saved["losses"]) == ADAM_STEPS
        average = [saved[n] for n in sorted(saved.files) if n.startswith("a")]
        want = _numpy_average(saved)
        for index, (got, expected) in enumerate(zip(average, want, strict=True)):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6,
                                       err_msg=f"average {index} against the formula")
    compared = _compared(one)
    assert len(compared) > 10
    for prefix in ("a", f"s{ADAM_STEPS - 1:02d}_"):
        for index in compared:
            name = f"{prefix}{index:03d}"
            first = one[f"s00_{index:03d}"]
            assert np.max(np.abs(one[name] - first)) > 1e-3, f"{name} did not move"
            np.testing.assert_allclose(two[name], one[name], rtol=0, atol=ADAM_ATOL,
                                       err_msg=f"{name} ({one['names'][index]})")
