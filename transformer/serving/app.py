"""The server's ASGI application (Starlette): the endpoints, their checks, their answers.

    POST /translate     {"sentences": ["o gato preto"], "beam": 4, "n_best": 2}
      -> {"id": ..., "translations": [{"text": ..., "score": ..., "n_best": [...]}], ...}
    GET  /health        -> {"status": "ok", "run": NAME, "engine": ..., "waiting": 0}
    GET  /metrics       -> Prometheus' text format (`transformer.serving.metrics`)
    GET  /openapi.json  -> the OpenAPI schema of the above (`transformer.serving.schema`)

Every answer is JSON (but /metrics) and carries the request's id (its
`X-Request-ID` header, or a new one) in an `X-Request-ID` header and, for
JSON, an "id"; every request makes one log line (logger
`transformer.serving.access`). A client's mistake is a 4xx with a one-line
"error" and no traceback in the answer or the log; a failure of the server
is a 500 that says only to look in the log for its id.

Checks, in order: a browser's `Origin` that `allowed_origins` does not
list (403), a missing or wrong API key on anything but /health (401), a
body that is not `application/json` (415), too large (413) or too slow to
arrive (408), then `transformer.serving.limits` (400, 413), a full queue
(429), a stopping server (503) and the deadline (504). A client that
disconnects while it waits cancels its request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import json
import logging
import math
import re
import time
import uuid
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from transformer.serving.batcher import Batcher, Busy, Stopping
from transformer.serving.limits import (
    Limits,
    RequestError,
    check_work,
    output_length,
    parse_request,
    request_search,
)
from transformer.serving.metrics import CONTENT_TYPE, Metrics
from transformer.serving.schema import openapi_schema

__all__ = ["ServerSettings", "create_app"]

access_log = logging.getLogger("transformer.serving.access")
logger = logging.getLogger(__name__)

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_PATHS = ("/translate", "/health", "/metrics", "/openapi.json")
# The status of a request whose client left before its answer (nginx's convention).
CLIENT_CLOSED = 499
# Bytes of a body over `max_body` that are read and dropped before the 413, in
# bodies of `max_body` (see `_body`).
DRAIN_BODIES = 8


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """How the server treats its clients.

    Attributes:
        limits: what one request may ask (`transformer.serving.limits.Limits`).
        api_keys: keys a client must give (`Authorization: Bearer KEY` or
            `X-API-Key: KEY`) on every path but /health; none: no key needed.
        allowed_origins: the browser origins (`https://host:port`, or "*") that
            may call the server (CORS); none: every request with an `Origin`
            header is refused, so no web page can use it.
        body_seconds: seconds a request's body may take to arrive; then 408.
        max_batch: sentences of the waiting requests decoded in one call.
        max_wait: seconds a call waits for one more request (`Batcher`).
    """

    limits: Limits = Limits()
    api_keys: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    body_seconds: float = 10.0
    max_batch: int = 32
    max_wait: float = 0.005


class _ClientGone(Exception):
    """The client disconnected before its answer."""


class _Service:
    """What the endpoints share: the engine's batcher, the metrics, the settings."""

    def __init__(self, engine, run_dir, engine_name: str, settings: ServerSettings):
        self.run_dir = run_dir
        self.run_name = Path(run_dir).name if run_dir is not None else ""
        self.engine_name = engine_name
        self.settings = settings
        self.metrics = Metrics(lambda: self.batcher.waiting)
        limits = settings.limits
        self.batcher = Batcher(engine, settings.max_batch, settings.max_wait,
                               limits.max_waiting, limits.max_work, self.metrics.batch)
        self.schema = json.dumps(openapi_schema(limits)).encode()
        # The strategy of each set of options, made once (the default reads the run's config).
        self.search = functools.lru_cache(maxsize=256)(self._search)

    def _search(self, options: tuple):
        return request_search(dict(options), self.run_dir, self.engine_name)


def _json(status: int, payload: dict, request_id: str, headers=None) -> Response:
    """A JSON answer that RFC 8259 parsers accept (no NaN, no Infinity)."""
    body = json.dumps({"id": request_id, **payload}, ensure_ascii=False, allow_nan=False)
    return Response(body.encode("utf-8", errors="replace"), status,
                    {"X-Request-ID": request_id, **(headers or {})},
                    media_type="application/json")


def _score(value):
    """A score as JSON: a finite number, or null (an empty output's -inf, a NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def translations(results) -> list[dict]:
    """The JSON of each sentence's results: the best text and score, and the
    n-best list when the search returns a list per sentence."""
    answer = []
    for result in results:
        hypotheses = result if isinstance(result, list) else [result]
        entry = {"text": hypotheses[0].text, "score": _score(hypotheses[0].score)}
        if isinstance(result, list):
            entry["n_best"] = [{"text": h.text, "score": _score(h.score)} for h in hypotheses]
        answer.append(entry)
    return answer


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    return given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _check_client(request: Request, settings: ServerSettings, needs_key: bool) -> None:
    """403 for a web page's origin that is not allowed, 401 without a valid key."""
    origin = request.headers.get("origin")
    if origin is not None and "*" not in settings.allowed_origins \
            and origin not in settings.allowed_origins:
        raise RequestError(403, "requests from web pages are refused unless the server's "
                                "--allowed-origins lists their origin")
    if not needs_key or not settings.api_keys:
        return
    given = request.headers.get("x-api-key")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if given is None and scheme.lower() == "bearer":
        given = token.strip()
    if given is None or not any(hmac.compare_digest(given.encode(), key.encode())
                                for key in settings.api_keys):
        raise RequestError(401, "a valid API key is needed: Authorization: Bearer KEY "
                                "(or X-API-Key: KEY)")


def _endpoint(handler, needs_key: bool = True):
    """`handler(service, request)` as an endpoint: the request's id, the client
    checks, one log line, the metrics, and every error as a JSON answer."""

    async def endpoint(request: Request) -> Response:
        service: _Service = request.app.state.service
        started, request_id = time.perf_counter(), _request_id(request)
        detail = ""
        try:
            _check_client(request, service.settings, needs_key)
            response = await handler(service, request, request_id)
        except RequestError as err:
            detail = str(err)
            headers = {"Connection": "close"} if err.status in (408, 413) else None
            if err.status == 401:
                headers = {"WWW-Authenticate": "Bearer"}
            response = _json(err.status, {"error": str(err)}, request_id, headers)
        except (_ClientGone, ClientDisconnect):
            response, detail = Response(status_code=CLIENT_CLOSED), "the client left"
        except Exception:  # noqa: BLE001 - the server's fault: logged, never shown
            logger.exception("Request %s failed.", request_id)
            response = _json(500, {"error": f"the server failed; its log says why under "
                                            f"request id {request_id}"}, request_id)
        _log(service, request, request_id, response.status_code, started, detail)
        return response

    return endpoint


def _log(service, request, request_id, status, started, detail=""):
    """The request's one log line and its metrics."""
    seconds = time.perf_counter() - started
    path = request.url.path if request.url.path in _PATHS else "other"
    service.metrics.answered(path, status, seconds)
    client = request.client.host if request.client else "-"
    access_log.info("%s %s %s %s %d %.1fms%s", request_id, client, request.method,
                    request.url.path[:100], status, 1000 * seconds,
                    f" {detail[:200]}" if detail else "")


async def _body(request: Request, settings: ServerSettings) -> bytes:
    """The request's body: 415 unless JSON, 413 over `max_body`, 408 when it takes
    longer than `body_seconds` to arrive."""
    media_type, _, parameters = request.headers.get("content-type", "").partition(";")
    charset = parameters.strip().lower().replace(" ", "")
    if media_type.strip().lower() != "application/json" or charset not in (
            "", "charset=utf-8", 'charset="utf-8"'):
        raise RequestError(415, "the body must be JSON: Content-Type: application/json")
    max_body = settings.limits.max_body
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    deadline = asyncio.get_running_loop().time() + settings.body_seconds
    async with contextlib.aclosing(request.stream()) as stream:
        if declared is None or declared <= max_body:
            try:
                body = await asyncio.wait_for(_read(stream, max_body), settings.body_seconds)
            except asyncio.TimeoutError:
                raise RequestError(408, f"the body took more than {settings.body_seconds:g} "
                                        "seconds to arrive") from None
            if body is not None:
                return body
        # Over the limit. A client still sending would meet a reset connection
        # instead of the 413 if the server closed with its body unread, so the
        # rest is read and dropped, at most DRAIN_BODIES bodies' bytes in what
        # is left of the body's time. Not when the client waits to be asked
        # (`Expect: 100-continue`: reading would ask it to send) or declares
        # more than would be read.
        asks = request.headers.get("expect", "").lower() == "100-continue"
        if not asks and (declared or 0) <= DRAIN_BODIES * max_body:
            left = deadline - asyncio.get_running_loop().time()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_drain(stream, DRAIN_BODIES * max_body), max(left, 0))
    size = f"{declared} bytes" if declared is not None else f"more than {max_body} bytes"
    raise RequestError(413, f"the body has {size}; the server's --max-body is {max_body}")


async def _read(stream, max_body: int) -> bytes | None:
    """The body's chunks, joined; None as soon as they pass `max_body` bytes."""
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > max_body:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(stream, max_bytes: int) -> None:
    """Reads and drops the body's chunks until it ends or `max_bytes` pass."""
    size = 0
    async for chunk in stream:
        size += len(chunk)
        if size > max_bytes:
            return


async def _disconnected(request: Request) -> None:
    """Returns once the client has disconnected (the body is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _result(request: Request, future, seconds: float):
    """The decoder's results of `future`; cancels it when the client leaves (then
    `_ClientGone`) or `seconds` pass (then a RequestError 504)."""
    waiting = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({waiting, gone}, timeout=max(0.0, seconds),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if waiting in done:
        return waiting.result()
    future.cancel()  # the decoder's job, unless it is being decoded: now, from here
    waiting.cancel()
    if gone in done:
        raise _ClientGone
    raise RequestError(504, "the translation took longer than the server's --timeout")


async def _translate(service: _Service, request: Request, request_id: str) -> Response:
    started = time.monotonic()
    limits = service.settings.limits
    parsed = parse_request(await _body(request, service.settings), limits)
    options = {k: v for k, v in parsed.options.items() if k != "max_length"}
    search = service.search(tuple(sorted(options.items())))
    length = output_length(parsed.options.get("max_length"), limits)
    work = check_work(len(parsed.sentences), search, length, limits)
    try:
        future = service.batcher.submit(parsed.sentences, search, length, work)
    except Busy as err:
        raise RequestError(429, f"busy: {err} (the server's --max-waiting); retry later") \
            from None
    except Stopping as err:
        raise RequestError(503, str(err)) from None
    results = await _result(request, future, limits.timeout - (time.monotonic() - started))
    return _json(200, {"translations": translations(results), "search": repr(search)},
                 request_id)


async def _health(service: _Service, request: Request, request_id: str) -> Response:
    return _json(200, {"status": "ok", "run": service.run_name, "engine": service.engine_name,
                       "waiting": service.batcher.waiting}, request_id)


async def _metrics(service: _Service, request: Request, request_id: str) -> Response:
    return Response(service.metrics.text(), 200, {"X-Request-ID": request_id},
                    media_type=CONTENT_TYPE)


async def _openapi(service: _Service, request: Request, request_id: str) -> Response:
    return Response(service.schema, 200, {"X-Request-ID": request_id},
                    media_type="application/json")


async def _http_error(request: Request, err: HTTPException) -> Response:
    """A path or method the server does not have (404, 405), as JSON and one log line."""
    service: _Service = request.app.state.service
    request_id = _request_id(request)
    message = (f"no such path; the server has POST /translate, GET {', GET '.join(_PATHS[1:])}"
               if err.status_code == 404 else f"{request.method} is not allowed here")
    response = _json(err.status_code, {"error": message}, request_id, err.headers)
    _log(service, request, request_id, err.status_code, time.perf_counter(), message)
    return response


def create_app(engine, run_dir, engine_name: str = "tensorflow",
               settings: ServerSettings = ServerSettings()) -> Starlette:  # noqa: B008
    """The ASGI application that serves `engine`, and starts its decoder thread.

    Args:
        engine: `engine(sentences, search, max_length)`
            (`transformer.decoding.engines.load_engine`).
        run_dir: the run directory (its evaluation search is the default, greedy
            for None; only its name is shown to clients).
        engine_name: "tensorflow" or "ctranslate2" (strategies CTranslate2 cannot
            run are refused).
        settings: the limits, keys, origins and batching.

    Returns:
        A Starlette application; its shutdown (the ASGI lifespan's, or
        `app.state.service.batcher.close()`) decodes the requests taken and stops the
        decoder thread.
    """
    service = _Service(engine, run_dir, engine_name, settings)
    routes = [Route("/translate", _endpoint(_translate), methods=["POST"]),
              Route("/health", _endpoint(_health, needs_key=False), methods=["GET"]),
              Route("/metrics", _endpoint(_metrics), methods=["GET"]),
              Route("/openapi.json", _endpoint(_openapi), methods=["GET"])]
    middleware = []
    if settings.allowed_origins:
        middleware.append(Middleware(
            CORSMiddleware, allow_origins=list(settings.allowed_origins),
            allow_methods=["GET", "POST"], expose_headers=["X-Request-ID"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key", "X-Request-ID"]))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.get_running_loop().run_in_executor(None, service.batcher.close)

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error})
    app.router.redirect_slashes = False  # "/translate/" is a 404, not a redirect without JSON
    app.state.service = service
    return app
