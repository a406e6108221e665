"""`transformer-serve` as a process: hostile requests, its memory, SIGTERM under load, errors.

One server process of the tiny run (module fixture `server`) with its default
limits and an API key from a file; the process's peak memory (VmHWM) is read
from /proc after the hostile requests.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the optional extra 'serve' is not installed")

REPO = Path(__file__).resolve().parent.parent
KEY = "file-key"
GIB = 1 << 30


def _start(run_dir, tmp_path, *options):
    keys = tmp_path / "keys"
    keys.write_text(f"# the test's key\n{KEY}\n", encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "transformer.cli.serve", str(run_dir), "--port", "0",
         "--api-key-file", str(keys), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = process.stdout.readline()
    if not line.startswith("Serving "):
        process.kill()
        pytest.fail(f"the server did not start: {line!r} {process.stderr.read()[-2000:]}")
    host, port = line.strip().rsplit("//", 1)[-1].rstrip("/").rsplit(":", 1)
    return process, (host, int(port))


def request(address, payload=None, raw=None, content_type="application/json", timeout=60):
    """(status, body, seconds) of a POST /translate with the key."""
    connection = http.client.HTTPConnection(*address, timeout=timeout)
    started = time.monotonic()
    try:
        connection.request("POST", "/translate",
                           body=raw if raw is not None else json.dumps(payload),
                           headers={"Content-Type": content_type, "X-API-Key": KEY})
        response = connection.getresponse()
        return response.status, response.read(), time.monotonic() - started
    finally:
        connection.close()


def _peak_memory(pid: int) -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    process, address = _start(run_dir, tmp_path_factory.mktemp("serve"))
    yield process, address
    if process.poll() is None:
        process.kill()
    process.wait(30)


_HOSTILE = [
    ({"sentences": ["o gato preto"], "beam": 1000000}, None, "application/json"),
    ({"sentences": ["o gato preto"] * 64, "beam": 16}, None, "application/json"),
    ({"sentences": ["o gato preto"], "beam": 2**40}, None, "application/json"),
    ({"text": "o gato", "seed": 2**70}, None, "application/json"),
    ({"text": "o gato", "max_length": 10**9}, None, "application/json"),
    ({"text": "o gato", "n_best": 10**6}, None, "application/json"),
    ({"text": "o gato", "top_k": 2**63}, None, "application/json"),
    ({"text": "o gato", "temperature": 1e-300}, None, "application/json"),
    ({"sentences": ["o " * 1000] * 64, "beam": 16, "max_length": 256}, None,
     "application/json"),
    ({"sentences": ["o"] * 100000}, None, "application/json"),
    (None, b'{"text": "\\ud800"}', "application/json"),
    (None, b"[" * 100000 + b"]" * 100000, "application/json"),
    (None, b'{"text": "o gato"}', "text/plain"),
    (None, b"x" * (2 << 20), "application/json"),
    (None, b'{"text": "a", "alpha": -Infinity}', "application/json"),
]


def test_hostile_requests_get_a_4xx_within_seconds_and_memory_stays_bounded(server):
    process, address = server
    for payload, raw, content_type in _HOSTILE:
        status, body, seconds = request(address, payload, raw, content_type)
        assert 400 <= status < 500 and seconds < 5, (payload, raw and raw[:40], status)
        answer = body.decode()
        assert "Traceback" not in answer and "/" not in json.loads(answer)["error"].replace(
            "application/json", ""), answer
    # The most work one request may ask: 64 sentences x beam 4 x 128 tokens (--max-work).
    status, body, _ = request(address, {"sentences": ["o gato preto come o bolo " * 60] * 64,
                                        "beam": 4})
    assert status == 200 and len(json.loads(body)["translations"]) == 64
    assert request(address, {"text": "o gato"})[0] == 200
    assert _peak_memory(process.pid) < 3 * GIB


def test_a_client_still_sending_a_body_over_the_limit_reads_the_413(server):
    """The server answers 413 before the body has arrived; closing then with the
    body unread would reset the connection under a client that is still
    sending (as `requests` and http.client do), which would see an error
    instead of the answer. Declared and chunked bodies of 1.5-8 MiB."""
    _, address = server
    sizes = [(3 << 19) + i * (340 << 10) for i in range(20)]
    for size in sizes:
        status, body, _ = request(address, raw=b"x" * size)
        assert status == 413 and "max-body" in json.loads(body)["error"], (size, status)
    connection = http.client.HTTPConnection(*address, timeout=60)
    try:
        connection.request("POST", "/translate", body=(b"x" * (1 << 16) for _ in range(64)),
                           headers={"Content-Type": "application/json", "X-API-Key": KEY},
                           encode_chunked=True)
        assert connection.getresponse().status == 413
    finally:
        connection.close()


def test_sigterm_under_load_answers_every_request_taken_and_exits_0(server):
    process, address = server
    answers = []

    def client(i):
        answers.append(request(address, {"sentences": [f"o gato {i}"] * 8, "beam": 4})[0])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)  # the requests are taken
    process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(60)
    assert answers == [200] * 20
    assert process.wait(60) == 0
    log = process.stderr.read()
    assert "Traceback" not in log and log.count(" POST /translate 200 ") >= 20


def test_the_command_says_in_one_line_what_is_wrong(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "transformer.cli.serve", str(tmp_path / "absent")],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"transformer-serve: error: Run directory {str(tmp_path / 'absent')!r} does not exist."]
