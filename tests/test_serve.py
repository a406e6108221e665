"""Tests of transformer.serve and transformer-serve: requests, batching, limits, shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from transformer.serve import App, Batcher, Busy, Limits, make_server

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(run_dir, translator):
    """The tiny run served in this process on a free port, TensorFlow engine."""
    calls = []

    def engine(sentences, search, max_length):
        calls.append(len(sentences))
        return translator(sentences, max_length=max_length, return_attention=False,
                          search=search)

    app = App(run_dir=str(run_dir), engine_name="tensorflow",
              limits=Limits(max_sentences=4, max_chars=80, max_waiting=64),
              batcher=Batcher(engine, max_batch=32, max_wait=0.05))
    httpd = make_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", calls
    httpd.shutdown()
    app.batcher.close()
    httpd.server_close()


def post(url, payload, raw=None):
    """(status, JSON answer) of a POST to `url`."""
    data = raw if raw is not None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_health(server):
    base, _ = server
    with urllib.request.urlopen(base + "/health", timeout=10) as response:
        health = json.loads(response.read())
    assert health["status"] == "ok" and health["engine"] == "tensorflow"


def test_translations_are_the_translators(server, translator, test_pairs):
    base, _ = server
    sources = [source for source, _ in test_pairs[:3]]
    status, answer = post(base + "/translate", {"sentences": sources})
    assert status == 200
    expected = translator(sources, return_attention=False)
    assert [t["text"] for t in answer["translations"]] == [r.text for r in expected]
    for got, want in zip(answer["translations"], expected, strict=True):
        assert got["score"] == pytest.approx(float(want.score), rel=1e-4, abs=1e-4)
    status, one = post(base + "/translate", {"text": sources[0]})
    assert status == 200 and one["translations"][0]["text"] == expected[0].text


def test_n_best_and_seeded_sampling(server, test_pairs):
    base, _ = server
    source = test_pairs[0][0]
    status, answer = post(base + "/translate", {"text": source, "beam": 3, "n_best": 2})
    assert status == 200
    best = answer["translations"][0]
    assert len(best["n_best"]) == 2 and best["n_best"][0]["text"] == best["text"]
    assert best["n_best"][0]["score"] >= best["n_best"][1]["score"]
    request = {"sentences": [source, source], "temperature": 1.5, "seed": 11}
    first, second = post(base + "/translate", request), post(base + "/translate", request)
    assert first[0] == 200 and first == second


@pytest.mark.parametrize("payload, raw, status, words", [
    (None, b"{not json", 400, "not valid JSON"),
    ([1, 2], None, 400, "expected a JSON object"),
    ({"sentences": "one string"}, None, 400, "list of strings"),
    ({"sentences": []}, None, 400, "empty"),
    ({"sentences": ["a"], "beam": "4"}, None, 400, "\"beam\" must be an integer"),
    ({"sentences": ["a"], "beem": 4}, None, 400, "unknown keys ['beem']"),
    ({"sentences": ["a"], "text": "b"}, None, 400, "one of"),
    ({"sentences": ["a"], "beam": 1, "n_best": 2}, None, 400, "n_best"),
    ({"sentences": ["a"], "beam": 2, "seed": 1}, None, 400, "sampling"),
    ({"sentences": ["a"] * 5}, None, 413, "at most 4 per request"),
    ({"sentences": ["a", "x" * 81]}, None, 413, "sentence 1 has 81 characters"),
])
def test_bad_requests_get_a_4xx_that_says_why(server, payload, raw, status, words):
    base, _ = server
    got, answer = post(base + "/translate", payload, raw)
    assert got == status and words in answer["error"]


def test_a_wrong_path_is_404(server):
    base, _ = server
    assert post(base + "/nowhere", {"text": "a"})[0] == 404


def test_concurrent_requests_share_calls_and_get_their_own_answers(server, translator,
                                                                   test_pairs):
    base, calls = server
    sources = [source for source, _ in test_pairs[:8]]
    expected = [r.text for r in translator(sources, return_attention=False)]
    before = len(calls)
    answers = [None] * len(sources)

    def client(i):
        answers[i] = post(base + "/translate", {"text": sources[i]})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a[1]["translations"][0]["text"] for a in answers] == expected
    assert len(calls) - before < len(sources)  # some requests were decoded together


class _Gate:
    """An engine that records its calls and blocks each until released."""

    def __init__(self, fail_first=False):
        self.calls, self.entered = [], threading.Event()
        self.release = threading.Event()
        self.fail_first = fail_first

    def __call__(self, sentences, search, max_length):
        self.calls.append(list(sentences))
        self.entered.set()
        assert self.release.wait(10)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("engine broke")
        return [type("R", (), {"text": s.upper(), "score": 0.0})() for s in sentences]


def test_waiting_requests_are_decoded_in_one_call_and_a_full_queue_is_busy():
    from transformer.strategies import Greedy, Sample

    gate = _Gate()
    batcher = Batcher(gate, max_batch=32, max_wait=0.01, max_waiting=3)
    first = batcher.submit(["a"], Greedy())
    assert gate.entered.wait(10)  # the decoder is busy with the first
    waiting = [batcher.submit([s], Greedy()) for s in ("b", "c")]
    seeded = batcher.submit(["d"], Sample(seed=1))
    with pytest.raises(Busy):
        batcher.submit(["e"], Greedy())
    gate.release.set()
    assert [r.text for r in first.result(10)] == ["A"]
    assert [w.result(10)[0].text for w in waiting] == ["B", "C"]
    assert seeded.result(10)[0].text == "D"
    batcher.close()
    assert gate.calls == [["a"], ["b", "c"], ["d"]]  # sampling is decoded alone


def test_an_engine_error_fails_its_requests_only():
    from transformer.strategies import Greedy

    gate = _Gate(fail_first=True)
    gate.release.set()
    batcher = Batcher(gate, max_wait=0.0)
    with pytest.raises(RuntimeError, match="engine broke"):
        batcher.submit(["a"], Greedy()).result(10)
    assert batcher.submit(["b"], Greedy()).result(10)[0].text == "B"
    batcher.close()


def test_the_command_serves_and_stops_cleanly_on_sigterm(run_dir, tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "transformer.cli.serve", str(run_dir), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("Serving "), process.stderr.read()
        url = line.strip().rsplit(" ", 1)[-1].rstrip("/")
        status, answer = post(url + "/translate", {"text": "o gato"})
        assert status == 200 and isinstance(answer["translations"][0]["text"], str)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert process.wait(30) == 0
        assert time.monotonic() - started < 30
    finally:
        process.kill()
        process.wait()


def test_the_command_says_in_one_line_what_is_wrong(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "transformer.cli.serve", str(tmp_path / "absent")],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"transformer-serve: error: Run directory {str(tmp_path / 'absent')!r} does not exist."]
