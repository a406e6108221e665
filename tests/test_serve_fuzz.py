"""A property-based fuzzer (hypothesis) against the tiny run's server: thousands of requests, no 5xx.

The requests are drawn from the request schema and around it: valid
requests (decoded for real by the tiny run), each option's values at, inside
and far outside its range, wrong types, unknown keys, deep or odd JSON, raw
bytes, and wrong content types and methods. Every answer must be below 500,
strict JSON (no NaN or Infinity) with an "error" for a 4xx, and the server
must still translate a normal request at the end.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("starlette", reason="the optional extra 'serve' is not installed")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from transformer.serving import Limits  # noqa: E402
from transformer.serving.app import ServerSettings, create_app  # noqa: E402
from transformer.serving.limits import OPTIONS  # noqa: E402
from transformer.serving.server import listen, make_server  # noqa: E402

EXAMPLES = 2500
LIMITS = Limits(max_sentences=3, max_chars=40, max_body=4096, max_beam=3, max_n_best=3,
                max_output_length=8, max_work=48, max_waiting=64, timeout=30)
ANSWERED: list[int] = []

_numbers = st.one_of(
    st.integers(-3, 20), st.integers(), st.integers(2**31 - 2, 2**31 + 1),
    st.integers(2**63 - 2, 2**63 + 1), st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-2, 2), st.sampled_from([0, 1, 1e-3, 1e3, 1e-300, 1e300, -0.0]))
_text = st.one_of(st.text(max_size=50), st.sampled_from(["", "o gato", "\ud800", "a\x00b"]),
                  st.text(alphabet="o gatpre", max_size=45))
_json = st.recursive(st.none() | st.booleans() | _numbers | _text,
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(_text, inner, max_size=4), max_leaves=12)
_value = st.one_of(_numbers, _text, st.booleans(), st.none(), _json)
_option = st.sampled_from([*OPTIONS, "setting", "sentences", "text", "x"])


@st.composite
def _request(draw):
    """A JSON object near the schema: sentences or text, some options, any values."""
    request = {}
    if draw(st.booleans()):
        request["sentences"] = draw(st.one_of(st.lists(_text, max_size=5), _value))
    else:
        request["text"] = draw(st.one_of(_text, _value))
    for name in draw(st.lists(_option, max_size=4, unique=True)):
        if name == "search":
            request[name] = draw(st.one_of(st.sampled_from(["greedy", "beam", "sample",
                                                            "nope"]), _value))
        else:
            request[name] = draw(st.one_of(_numbers, _value))
    return json.dumps(request, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


_body = st.one_of(
    _request(), _request(), _request(),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.sampled_from([b"", b"{", b"[" * 5000, b'{"text": "a", "text": "b"}', b"NaN",
                     b'{"text": "a", "beam": 1e999}', b'{"text": "a"}' + b" " * 5000]))
_content_type = st.one_of(st.just("application/json"), st.just("application/json"),
                          st.just("application/json; charset=utf-8"),
                          st.sampled_from(["text/plain", "", "application/json; charset=x",
                                           "multipart/form-data"]))
_target = st.one_of(st.just(("POST", "/translate")), st.just(("POST", "/translate")),
                    st.sampled_from([("GET", "/translate"), ("GET", "/health"),
                                     ("POST", "/health"), ("PUT", "/translate"),
                                     ("GET", "/metrics"), ("GET", "/x/../translate"),
                                     ("POST", "/translate/"), ("GET", "/openapi.json")]))


@pytest.fixture(scope="module")
def address(run_dir, translator):
    """The tiny run served on a free port in this process (real decoding, small limits)."""
    def engine(sentences, search, max_length):
        return translator(sentences, max_length=max_length, return_attention=False,
                          search=search)

    app = create_app(engine, run_dir, "tensorflow",
                     ServerSettings(limits=LIMITS, max_wait=0.0))
    sock = listen("127.0.0.1", 0)
    server = make_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield sock.getsockname()[:2]
    server.should_exit = True
    thread.join(30)


class _Client(threading.local):
    connection: http.client.HTTPConnection | None = None


_client = _Client()


def _send(address, method, path, body, content_type):
    """(status, body) on a kept-alive connection, opened again after the server closes it."""
    for attempt in (0, 1):
        if _client.connection is None:
            _client.connection = http.client.HTTPConnection(*address, timeout=60)
        try:
            _client.connection.request(method, path, body=body,
                                       headers={"Content-Type": content_type})
            response = _client.connection.getresponse()
            answer = response.read()
            if response.will_close:
                _client.connection.close()
                _client.connection = None
            return response.status, answer
        except (ConnectionError, http.client.HTTPException):
            _client.connection.close()
            _client.connection = None
            if attempt:
                raise
    raise AssertionError("unreachable")


def _strict(body: bytes):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(body.decode("utf-8"), parse_constant=refuse)


def test_thousands_of_generated_requests_get_no_5xx(address):
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(target=_target, body=_body, content_type=_content_type)
    def fuzz(target, body, content_type):
        method, path = target
        status, answer = _send(address, method, path, body if method != "GET" else None,
                               content_type)
        ANSWERED.append(status)
        assert status < 500, (method, path, body[:200], status, answer[:300])
        if path != "/metrics" or status != 200:
            parsed = _strict(answer)
            assert ("error" in parsed) == (status >= 400), parsed

    fuzz()
    assert len(ANSWERED) >= EXAMPLES
    assert ANSWERED.count(200) > EXAMPLES // 20  # valid requests were among them, decoded
    status, answer = _send(address, "POST", "/translate", b'{"text": "o gato"}',
                           "application/json")
    assert status == 200 and _strict(answer)["translations"][0]["text"]
