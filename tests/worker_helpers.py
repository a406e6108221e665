"""Launching the processes of a local multi-worker cluster for tests, port races included."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What a worker prints when its port was taken (TensorFlow's gRPC server
# reports "Could not start gRPC server"; the OS says "Address already in use").
BIND_FAILURE = re.compile(r"Could not start gRPC server|address already in use", re.IGNORECASE)


def free_ports(count):
    """`count` distinct TCP ports of 127.0.0.1 that were free a moment ago.

    The sockets are all held open until every port is picked (so the ports
    differ), then closed, since the workers must bind them. That leaves a race:
    another process may take a port between this call and a worker's bind. It
    cannot be closed from here (a worker cannot inherit a bound socket), so
    `run_workers` detects the resulting bind failure and relaunches the whole
    cluster on new ports.
    """
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _run_cluster(command, count, env, timeout):
    """One attempt: [(returncode, stdout, stderr)] of each worker. Once a worker
    fails, the others are killed at once (they would wait for it until timeout)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
    with tempfile.TemporaryDirectory(prefix="workers-") as logs:
        workers, files = [], []
        try:
            for index in range(count):
                tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
                out = open(os.path.join(logs, f"{index}.out"), "w+")
                err = open(os.path.join(logs, f"{index}.err"), "w+")
                files.append((out, err))
                workers.append(
                    subprocess.Popen(
                        command,
                        cwd=REPO,
                        stdout=out,
                        stderr=err,
                        text=True,
                        env={**os.environ, **(env or {}), "TF_CONFIG": json.dumps(tf_config)},
                    )
                )
            deadline = time.monotonic() + timeout
            while any(worker.poll() is None for worker in workers):
                if any(worker.poll() not in (None, 0) for worker in workers):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the workers of {command} ran over {timeout} s")
                time.sleep(0.5)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                worker.wait()
            results = []
            for worker, (out, err) in zip(workers, files, strict=True):
                out.seek(0)
                err.seek(0)
                results.append((worker.returncode, out.read(), err.read()))
                out.close()
                err.close()
    return results


def run_workers(command, count=2, env=None, timeout=300, attempts=3):
    """Runs `count` copies of `command` as the workers of one local cluster
    (`TF_CONFIG` set for each) and returns [(returncode, stdout, stderr)].

    A launch in which a worker could not bind its port (see `free_ports`) is
    retried on new ports, up to `attempts` launches in all.
    """
    for attempt in range(attempts):
        results = _run_cluster(command, count, env, timeout)
        bind_failed = any(code != 0 and BIND_FAILURE.search(err) for code, _, err in results)
        if not bind_failed or attempt == attempts - 1:
            return results
    raise AssertionError("unreachable")
