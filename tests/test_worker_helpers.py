"""The local multi-worker launcher of the tests: distinct ports, and a relaunch
when a port was taken between picking it and a worker binding it."""

from __future__ import annotations

import json
import socket
import sys
import time

from worker_helpers import free_ports, run_workers

# A stand-in worker (no TensorFlow): records each launch; on the first launch
# worker 1 fails as TensorFlow does on a taken port, while worker 0 waits for
# it as a MultiWorkerMirroredStrategy worker would.
FAKE_WORKER = """
import json, os, pathlib, sys, time
config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
logs = pathlib.Path(sys.argv[1])
launch = len(list(logs.glob(f"{index}-*"))) + 1
(logs / f"{index}-{launch}").write_text(json.dumps(config))
if launch == 1 and index == 1:
    sys.exit("tensorflow.python.framework.errors_impl.UnknownError: " + sys.argv[2])
if launch == 1:
    time.sleep(120)
print("worker", index, "launch", launch)
"""


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_taken_port_relaunches_the_cluster_and_stops_the_waiting_worker(tmp_path):
    started = time.monotonic()
    command = [sys.executable, "-c", FAKE_WORKER, str(tmp_path), "Could not start gRPC server"]
    results = run_workers(command, count=2, timeout=100)
    assert time.monotonic() - started < 60  # worker 0 of launch 1 was killed, not awaited
    assert [code for code, _, _ in results] == [0, 0]
    assert [out.strip() for _, out, _ in results] == ["worker 0 launch 2", "worker 1 launch 2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-1", "0-2", "1-1", "1-2"]
    for launch in ("1", "2"):
        configs = [json.loads((tmp_path / f"{i}-{launch}").read_text()) for i in (0, 1)]
        assert configs[0]["cluster"] == configs[1]["cluster"]
        assert [c["task"] for c in configs] == [
            {"type": "worker", "index": 0},
            {"type": "worker", "index": 1},
        ]
        assert len(set(configs[0]["cluster"]["worker"])) == 2


def test_other_failures_are_returned_without_a_relaunch(tmp_path):
    command = [sys.executable, "-c", FAKE_WORKER, str(tmp_path), "Some other failure"]
    results = run_workers(command, count=2, timeout=100)
    codes = [code for code, _, _ in results]
    assert codes[1] == 1 and codes[0] != 0  # worker 0 was killed once worker 1 failed
    assert "Some other failure" in results[1][2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-1", "1-1"]


def test_every_launch_failing_on_ports_gives_up_after_the_attempts(tmp_path):
    command = [sys.executable, "-c", FAKE_WORKER, str(tmp_path), "Address already in use"]
    # Worker 1 fails on its first launch only; with one attempt that is the result.
    results = run_workers(command, count=2, timeout=100, attempts=1)
    assert results[1][0] == 1 and "Address already in use" in results[1][2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-1", "1-1"]
