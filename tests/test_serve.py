"""Tests of transformer.serving and transformer-serve: requests, limits, batching, HTTP edges.

One server of the tiny run (module fixture `served`, real decoding, small
limits) takes the requests that need a real engine; servers of a fake engine
(`_Gate`, which blocks each call until released) take those about deadlines,
disconnects and the queue. tests/test_serve_fuzz.py fuzzes the tiny run's server.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time

import pytest

pytest.importorskip("starlette", reason="the optional extra 'serve' is not installed")

from transformer.decoding.strategies import Beam, Greedy, Sample  # noqa: E402
from transformer.serving import Batcher, Busy, Limits  # noqa: E402
from transformer.serving.app import ServerSettings, create_app  # noqa: E402
from transformer.serving.server import listen, make_server  # noqa: E402

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# At exactly these the tiny server accepts; one past each it refuses.
LIMITS = Limits(max_sentences=4, max_chars=80, max_body=2048, max_beam=4, max_n_best=3,
                max_output_length=16, max_work=128, max_waiting=64, timeout=60)


@contextlib.contextmanager
def serving(engine, run_dir, settings, **server_options):
    """`engine` served by uvicorn in a thread on a free port; yields (host, port, app)."""
    app = create_app(engine, run_dir, "tensorflow", settings)
    sock = listen("127.0.0.1", 0)
    server = make_server(app, **server_options)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield ("127.0.0.1", sock.getsockname()[1], app)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def call(address, method, path, payload=None, raw=None, headers=None, timeout=60):
    """(status, headers, body) of one request on a new connection."""
    host, port = address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    body = raw if raw is not None else (None if payload is None else json.dumps(payload))
    sent = {"Content-Type": "application/json", **AUTH, **(headers or {})}
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def post(address, payload=None, raw=None, headers=None):
    """(status, JSON answer) of a POST /translate; the answer is parsed strictly."""
    status, _, body = call(address, "POST", "/translate", payload, raw, headers)
    return status, strict_json(body)


def strict_json(body: bytes):
    """RFC 8259 JSON, as a browser's JSON.parse reads it: no NaN or Infinity."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(body.decode("utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def served(run_dir, translator):
    """The tiny run served on a free port with `LIMITS` and the key `KEY`;
    `(host, port, app, calls)`, `calls` the engine's (sentences, search, max_length)."""
    calls = []

    def engine(sentences, search, max_length):
        calls.append((list(sentences), search, max_length))
        return translator(sentences, max_length=max_length, return_attention=False,
                          search=search)

    settings = ServerSettings(limits=LIMITS, api_keys=(KEY,), max_wait=0.05)
    with serving(engine, run_dir, settings) as (host, port, app):
        yield host, port, app, calls


def test_health_needs_no_key_and_shows_no_path(served, run_dir):
    status, _, body = call(served, "GET", "/health", headers={"Authorization": ""})
    health = strict_json(body)
    assert status == 200 and health["status"] == "ok" and health["engine"] == "tensorflow"
    assert health["run"] == run_dir.name and str(run_dir.parent) not in body.decode()


def test_translations_are_the_translators(served, translator, test_pairs):
    sources = [source for source, _ in test_pairs[:3]]
    status, answer = post(served, {"sentences": sources})
    assert status == 200
    expected = translator(sources, max_length=LIMITS.max_output_length, return_attention=False)
    assert [t["text"] for t in answer["translations"]] == [r.text for r in expected]
    for got, want in zip(answer["translations"], expected, strict=True):
        assert got["score"] == pytest.approx(float(want.score), rel=1e-4, abs=1e-4)
    status, one = post(served, {"text": sources[0]})
    assert status == 200 and one["translations"][0]["text"] == expected[0].text


def test_an_empty_sentence_scores_null_not_infinity(served):
    status, _, body = call(served, "POST", "/translate", {"sentences": ["", "o gato"]})
    assert status == 200 and b"Infinity" not in body and b"NaN" not in body
    empty = strict_json(body)["translations"][0]
    assert empty == {"text": "", "score": None}


def test_n_best_and_seeded_sampling(served, test_pairs):
    source = test_pairs[0][0]
    status, answer = post(served, {"text": source, "beam": 3, "n_best": 2})
    assert status == 200
    best = answer["translations"][0]
    assert len(best["n_best"]) == 2 and best["n_best"][0]["text"] == best["text"]
    assert best["n_best"][0]["score"] >= best["n_best"][1]["score"]
    request = {"sentences": [source, source], "temperature": 1.5, "seed": 11}
    first, second = post(served, request), post(served, request)
    assert first[0] == 200
    assert first[1]["translations"] == second[1]["translations"]


@pytest.mark.parametrize("payload, raw, status, words", [
    (None, b"{not json", 400, "not valid JSON"),
    (None, b"", 400, "not valid JSON"),
    (None, b'{"text": "o gato \xff"}', 400, "not valid UTF-8"),
    ([1, 2], None, 400, "expected a JSON object"),
    ({"sentences": "one string"}, None, 400, "list of strings"),
    ({"sentences": []}, None, 400, "empty"),
    ({"sentences": ["a"], "beam": "4"}, None, 400, "\"beam\" must be an integer"),
    ({"sentences": ["a"], "beam": True}, None, 400, "\"beam\" must be an integer"),
    ({"sentences": ["a"], "beem": 4}, None, 400, "unknown keys ['beem']"),
    ({"sentences": ["a"], "text": "b"}, None, 400, "one of"),
    ({"sentences": ["a"], "beam": 1, "n_best": 2}, None, 400, "\"n_best\""),
    ({"sentences": ["a"], "beam": 2, "seed": 1}, None, 400, "sampling"),
    ({"sentences": ["a"], "search": "bean"}, None, 400, "unknown search strategy"),
    ({"text": "a", "beam": 2**40}, None, 400, "--max-beam"),
    ({"text": "a", "beam": 1000000}, None, 400, "--max-beam"),
    ({"text": "a", "seed": 2**70}, None, 400, "\"seed\" must be from 0 to"),
    ({"text": "a", "top_k": 2**31}, None, 400, "\"top_k\" must be from 1 to"),
    ({"text": "a", "temperature": 0}, None, 400, "\"temperature\" must be in"),
    ({"text": "a", "top_p": 0}, None, 400, "\"top_p\" must be in"),
    ({"text": "a", "alpha": -1}, None, 400, "\"alpha\" must be in"),
    (None, b'{"text": "a", "alpha": NaN}', 400, "NaN is not JSON"),
    (None, b'{"text": "a", "alpha": Infinity}', 400, "Infinity is not JSON"),
    (None, b'{"text": "a", "alpha": 1e400}', 400, "out of range"),
    (None, b'{"text": "a", "seed": 1' + b"0" * 400 + b"}", 400, "a number of 401 digits"),
    (None, b'{"text": "\\ud800"}', 400, "lone surrogate"),
    (None, b'{"text": "a", "text": "b"}', 400, "appears twice"),
    (None, b"[" * 1000 + b"]" * 1000, 400, "nests deeper"),
    (None, b'{"sentences": [["a"]]}', 400, "nests deeper"),
])
def test_bad_requests_get_a_4xx_that_says_why(served, payload, raw, status, words):
    got, answer = post(served, payload, raw)
    assert got == status and words in answer["error"], answer
    assert "\n" not in answer["error"] and "Traceback" not in answer["error"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "",
                                          "application/json; charset=latin-1"])
def test_a_body_that_is_not_json_is_415(served, content_type):
    status, answer = post(served, {"text": "o gato"}, headers={"Content-Type": content_type})
    assert status == 415 and "application/json" in answer["error"]


# (request at the limit, the same one past it, the option the refusal names)
_AT_AND_PAST = [
    ({"sentences": ["o gato"] * 4}, {"sentences": ["o gato"] * 5}, "--max-sentences"),
    ({"text": "o " * 40}, {"text": "o " * 40 + "o"}, "--max-chars"),
    ({"text": "o gato", "beam": 4}, {"text": "o gato", "beam": 5}, "--max-beam"),
    ({"text": "o gato", "beam": 4, "n_best": 3}, {"text": "o gato", "beam": 4, "n_best": 4},
     "--max-n-best"),
    ({"text": "o gato", "max_length": 16}, {"text": "o gato", "max_length": 17},
     "--max-output-length"),
    # 2 x 4 x 16 = 128 = max_work; 3 x 4 x 16 = 192
    ({"sentences": ["o gato"] * 2, "beam": 4}, {"sentences": ["o gato"] * 3, "beam": 4},
     "--max-work"),
]


@pytest.mark.parametrize("at, past, option", _AT_AND_PAST)
def test_a_limit_is_accepted_at_its_value_and_refused_past_it(served, at, past, option):
    status, answer = post(served, at)
    assert status == 200, answer
    status, answer = post(served, past)
    assert status in (400, 413) and option in answer["error"], answer


def test_the_body_limit_at_its_value_and_past_it(served):
    body = json.dumps({"text": "o gato"}).encode()
    at = body[:-1] + b" " * (LIMITS.max_body - len(body)) + b"}"
    assert len(at) == LIMITS.max_body and post(served, raw=at)[0] == 200
    status, answer = post(served, raw=at + b" ")
    assert status == 413 and "--max-body" in answer["error"]


def test_the_key_is_needed_on_every_path_but_health(served):
    for method, path in (("POST", "/translate"), ("GET", "/metrics"),
                         ("GET", "/openapi.json")):
        for header in ({"Authorization": ""}, {"Authorization": "Bearer wrong"},
                       {"Authorization": "", "X-API-Key": KEY + "x"}):
            status, headers, body = call(served, method, path, {"text": "o"}, headers=header)
            assert status == 401 and "API key" in strict_json(body)["error"], (path, header)
    no_bearer = {"Authorization": "", "X-API-Key": KEY}
    assert call(served, "POST", "/translate", {"text": "o gato"}, headers=no_bearer)[0] == 200


def test_a_web_pages_origin_is_refused_without_allowed_origins(served):
    status, headers, body = call(served, "POST", "/translate", {"text": "o gato"},
                                 headers={"Origin": "http://evil.example"})
    assert status == 403 and "--allowed-origins" in strict_json(body)["error"]
    assert "access-control-allow-origin" not in {k.lower() for k in headers}
    status, _, _ = call(served, "OPTIONS", "/translate",
                        headers={"Origin": "http://evil.example",
                                 "Access-Control-Request-Method": "POST"})
    assert status >= 400


def test_the_request_id_is_echoed_and_logged_once(served, caplog):
    with caplog.at_level(logging.INFO, logger="transformer.serving.access"):
        status, headers, body = call(served, "POST", "/translate", {"text": "o gato"},
                                     headers={"X-Request-ID": "client-42"})
        bad = call(served, "POST", "/translate", {"text": "o", "beam": 99},
                   headers={"X-Request-ID": "client-43"})
    assert status == 200 and headers["x-request-id"] == "client-42"
    assert strict_json(body)["id"] == "client-42" and strict_json(bad[2])["id"] == "client-43"
    lines = [r.getMessage() for r in caplog.records if r.name == "transformer.serving.access"]
    assert len([line for line in lines if line.startswith("client-42 ")]) == 1
    assert [line for line in lines if line.startswith("client-43 ")][0].count(" 400 ") == 1
    assert not any(r.exc_info for r in caplog.records)


def test_metrics_count_requests_batches_and_the_queue(served):
    assert post(served, {"text": "o gato"})[0] == 200
    status, headers, body = call(served, "GET", "/metrics")
    text = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'transformer_serve_requests_total{path="/translate",status="200"}' in text
    for name in ("transformer_serve_waiting_requests ", "transformer_serve_batch_sentences_count",
                 "transformer_serve_decode_seconds_count", "transformer_serve_sentences_total"):
        assert name in text


def test_the_openapi_schema_states_the_limits(served):
    status, _, body = call(served, "GET", "/openapi.json")
    schema = strict_json(body)
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    assert status == 200 and schema["openapi"].startswith("3.")
    assert request["beam"]["maximum"] == LIMITS.max_beam
    assert request["max_length"]["maximum"] == LIMITS.max_output_length
    assert request["sentences"]["maxItems"] == LIMITS.max_sentences
    assert {"200", "400", "401", "413", "415", "429", "504"} <= set(
        schema["paths"]["/translate"]["post"]["responses"])


def test_wrong_paths_and_methods_are_json_4xx(served):
    assert call(served, "GET", "/nowhere")[0] == 404
    status, _, body = call(served, "DELETE", "/translate")
    assert status == 405 and "error" in strict_json(body)


def _concurrently(function, arguments):
    """`[function(argument) ...]`, each in its own thread, started together."""
    results = [None] * len(arguments)
    start = threading.Barrier(len(arguments))

    def run(index):
        start.wait()
        results[index] = function(arguments[index])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(arguments))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_concurrent_requests_share_calls_of_one_search_only(served, translator, test_pairs):
    *_, calls = served
    sources = [source for source, _ in test_pairs[:8]]
    searches = [{}, {"beam": 2}, {"beam": 2, "alpha": 0.9}, {"beam": 2, "n_best": 2}]
    requests = [{"text": s, **searches[i % 4]} for i, s in enumerate(sources)]
    before = len(calls)
    answers = _concurrently(lambda request: post(served, request), requests)
    assert all(status == 200 for status, _ in answers)
    made = calls[before:]
    assert sum(len(sentences) for sentences, _, _ in made) == len(sources)
    assert len(made) < len(sources)  # some requests were decoded together
    for sentences, _, _ in made:  # each call one search, the request's own
        expected = {json.dumps(searches[sources.index(s) % 4]) for s in sentences}
        assert len(expected) == 1
    for request, (_, answer) in zip(requests, answers, strict=True):
        alone = translator([request["text"]], max_length=LIMITS.max_output_length,
                           return_attention=False, search=_search_of(request))
        text = alone[0][0].text if isinstance(alone[0], list) else alone[0].text
        assert answer["translations"][0]["text"] == text


def _search_of(request):
    if "beam" not in request:
        return Greedy()
    return Beam(size=request["beam"], alpha=request.get("alpha", 0.6),
                n_best=request.get("n_best", 1))


def test_a_seed_gives_the_same_text_under_load(served, test_pairs):
    *_, calls = served
    sources = [source for source, _ in test_pairs[:4]]
    sampled = {"sentences": sources[:2], "temperature": 2.0, "seed": 5}
    status, alone = post(served, sampled)
    assert status == 200
    before = len(calls)
    requests = [sampled, *({"text": s} for s in sources), sampled]
    answers = _concurrently(lambda request: post(served, request), requests)
    assert answers[0] == (200, {**answers[0][1], "translations": alone["translations"]})
    assert answers[-1][1]["translations"] == alone["translations"]
    for sentences, search, _ in calls[before:]:
        if isinstance(search, Sample):
            assert sentences == sources[:2]  # decoded alone, never with another request


class _Gate:
    """An engine that records its calls and blocks each until released."""

    def __init__(self, fail_first=False):
        self.calls, self.entered = [], threading.Event()
        self.release = threading.Event()
        self.fail_first = fail_first

    def __call__(self, sentences, search, max_length):
        self.calls.append(list(sentences))
        self.entered.set()
        assert self.release.wait(30)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("engine broke at /secret/path")
        return [type("R", (), {"text": s.upper(), "score": 0.0})() for s in sentences]


def test_only_identical_searches_share_a_call_and_sampling_is_alone():
    gate = _Gate()
    batcher = Batcher(gate, max_batch=32, max_wait=0.05, max_waiting=8)
    first = batcher.submit(["a"], Greedy())
    assert gate.entered.wait(10)  # the decoder is busy with the first
    futures = [batcher.submit(["b"], Beam(4, 0.6)), batcher.submit(["c"], Beam(4, 0.7)),
               batcher.submit(["d"], Beam(4, 0.6, n_best=2)), batcher.submit(["e"], Beam(4, 0.6)),
               batcher.submit(["f"], Sample(seed=1)), batcher.submit(["g"], Sample(seed=1)),
               batcher.submit(["h"], Beam(4, 0.6), max_length=9)]
    gate.release.set()
    assert [r.text for r in first.result(10)] == ["A"]
    assert [f.result(10)[0].text for f in futures] == ["B", "C", "D", "E", "F", "G", "H"]
    batcher.close()
    assert sorted(gate.calls) == [["a"], ["b", "e"], ["c"], ["d"], ["f"], ["g"], ["h"]]


def test_a_full_queue_is_busy_and_a_call_holds_at_most_max_work():
    gate = _Gate()
    batcher = Batcher(gate, max_batch=32, max_wait=0.05, max_waiting=4, max_work=20)
    first = batcher.submit(["a"], Greedy(), work=10)
    assert gate.entered.wait(10)
    waiting = [batcher.submit([s], Greedy(), work=10) for s in "bcde"]
    with pytest.raises(Busy):
        batcher.submit(["f"], Greedy(), work=10)
    gate.release.set()
    assert first.result(10) and all(w.result(10) for w in waiting)
    batcher.close()
    assert gate.calls == [["a"], ["b", "c"], ["d", "e"]]  # 20 work per call at most


def test_a_cancelled_request_is_not_decoded_and_an_engine_error_fails_its_own_only():
    gate = _Gate(fail_first=True)
    batcher = Batcher(gate, max_wait=0.0)
    failing = batcher.submit(["a"], Greedy())
    assert gate.entered.wait(10)
    cancelled = batcher.submit(["b"], Greedy())
    assert cancelled.cancel()
    gate.release.set()
    with pytest.raises(RuntimeError, match="engine broke"):
        failing.result(10)
    assert batcher.submit(["c"], Greedy()).result(10)[0].text == "C"
    batcher.close()
    assert gate.calls == [["a"], ["c"]]


@pytest.fixture()
def gated():
    """A server of a `_Gate` engine (no run: greedy by default), short deadlines;
    `(address, gate, app)`."""
    gate = _Gate()
    settings = ServerSettings(limits=Limits(timeout=1.0, max_waiting=4), body_seconds=0.5,
                              max_wait=0.0)
    with serving(gate, None, settings, header_seconds=0.5, max_connections=8) as served:
        yield served, gate, served[2]
        gate.release.set()


def _waiting(app, count, seconds=10):
    deadline = time.monotonic() + seconds
    while app.state.service.batcher.waiting != count and time.monotonic() < deadline:
        time.sleep(0.01)
    return app.state.service.batcher.waiting == count


def test_a_request_past_its_deadline_is_504_and_never_decoded(gated):
    address, gate, app = gated
    busy = threading.Thread(target=post, args=(address, {"text": "first"}))
    busy.start()
    assert gate.entered.wait(10)
    started = time.monotonic()
    status, answer = post(address, {"text": "late"})
    assert status == 504 and "--timeout" in answer["error"]
    assert time.monotonic() - started < 5
    gate.release.set()
    busy.join(10)
    assert post(address, {"text": "next"})[0] == 200
    assert ["LATE"] not in gate.calls and ["late"] not in gate.calls


def test_a_client_that_leaves_cancels_its_request(gated, caplog):
    address, gate, app = gated
    busy = threading.Thread(target=post, args=(address, {"text": "first"}))
    busy.start()
    assert gate.entered.wait(10)
    body = json.dumps({"text": "gone"}).encode()
    with caplog.at_level(logging.INFO, logger="transformer.serving.access"):
        with socket.create_connection(address[:2]) as leaving:
            leaving.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            assert _waiting(app, 1)
        assert _waiting(app, 0)  # cancelled once the connection closed
        gate.release.set()
        busy.join(10)
        assert post(address, {"text": "next"})[0] == 200
    assert ["gone"] not in gate.calls
    assert any(" 499 " in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("length", [100, 3 << 20], ids=["within", "over_max_body"])
def test_a_client_that_leaves_while_sending_its_body_is_a_499_not_a_server_failure(
        gated, caplog, length):
    address = gated[0]
    with caplog.at_level(logging.INFO, logger="transformer.serving"):
        with socket.create_connection(address[:2]) as leaving:
            leaving.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            b"application/json\r\nContent-Length: %d\r\n\r\n{\"te" % length)
            time.sleep(0.1)
        deadline = time.monotonic() + 10
        while not any(" 499 " in r.getMessage() for r in caplog.records) and \
                time.monotonic() < deadline:
            time.sleep(0.02)
    assert any(" 499 " in r.getMessage() for r in caplog.records)
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


def _raw(address, data: bytes, seconds: float = 5.0) -> bytes:
    """What the server sends back to `data` on a raw connection until it closes it."""
    with socket.create_connection(address[:2], timeout=seconds) as connection:
        connection.sendall(data)
        answer = b""
        with contextlib.suppress(socket.timeout):
            while chunk := connection.recv(65536):
                answer += chunk
    return answer


def test_a_client_that_waits_to_be_asked_for_a_body_over_the_limit_is_refused_at_once(gated):
    # `Expect: 100-continue` (curl's way with large bodies): reading the body
    # would answer "100 Continue" and make the client send it all.
    answer = _raw(gated[0], b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            b"application/json\r\nContent-Length: %d\r\nExpect: 100-continue"
                            b"\r\n\r\n" % (3 << 20))
    assert answer.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in answer
    assert b"3145728 bytes; the server's --max-body is" in answer


def test_a_slow_body_is_408_and_slow_headers_are_cut(gated):
    address, _, _ = gated
    started = time.monotonic()
    answer = _raw(address, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           b"application/json\r\nContent-Length: 40\r\n\r\n{\"text\"")
    assert answer.startswith(b"HTTP/1.1 408 ") and b"Traceback" not in answer
    assert _raw(address, b"POST /translate HTTP/1.1\r\nHost: x\r\n") == b""
    assert _raw(address, b"GET /health\r\n") == b""  # HTTP/0.9 gets no bare body
    assert time.monotonic() - started < 4


def test_chunked_with_a_length_is_refused_and_too_many_connections_503(gated):
    address, _, _ = gated
    body = b'{"text": "a"}'
    smuggled = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                % (len(body), body))
    assert _raw(address, smuggled).startswith(b"HTTP/1.1 400 ")
    idle = [socket.create_connection(address[:2]) for _ in range(8)]
    try:
        time.sleep(0.1)
        assert _raw(address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.1 503 ")
    finally:
        for connection in idle:
            connection.close()
