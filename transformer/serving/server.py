"""Running the application on uvicorn: the socket, the HTTP parser, the connection cap, the stop.

uvicorn parses HTTP (httptools' llhttp when it is installed, which refuses
a request with both `Transfer-Encoding` and `Content-Length`, and requests
that are not HTTP/1.x), caps the connections (`max_connections`: more get a
503), closes idle keep-alive connections, and on SIGTERM or Ctrl-C stops
taking connections, waits for the requests taken (at most
`graceful_seconds`) and then runs the application's shutdown, which decodes
what the decoder took and stops its thread.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["make_server", "serve"]

logger = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn's server, which calls `on_ready()` once it takes requests."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None):
        super().__init__(config)
        self.on_ready = on_ready

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready()


class _HeaderDeadline(HttpToolsProtocol):
    """uvicorn's httptools protocol, which also closes a connection whose request
    line and headers take longer than `header_seconds` to arrive (a slow client
    holding a connection, the "slowloris" attack, or an HTTP/0.9 request, which
    has no headers), counted from the connection's start or its last answer."""

    header_seconds = 10.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline = self.loop.call_later(self.header_seconds, self._headers_late)

    def on_headers_complete(self) -> None:
        self._deadline.cancel()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._deadline.cancel()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.header_seconds, self._headers_late)

    def connection_lost(self, exc) -> None:
        self._deadline.cancel()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        answering = self.cycle is not None and not self.cycle.response_complete
        if not answering and not self.transport.is_closing():
            self.transport.close()


def make_server(app, max_connections: int = 512, keep_alive_seconds: float = 5.0,
                graceful_seconds: float = 60.0, header_seconds: float = 10.0,
                on_ready: Callable[[], None] | None = None) -> uvicorn.Server:
    """A uvicorn server of `app`, not yet serving (`serve` runs it).

    Args:
        app: the ASGI application (`transformer.serving.app.create_app`).
        max_connections: connections and requests served at once; more get a 503.
        keep_alive_seconds: how long an idle keep-alive connection is kept.
        graceful_seconds: how long a stopping server waits for the requests taken.
        header_seconds: how long a request's line and headers may take to arrive;
            then the connection is closed.
        on_ready: called once the server takes requests.
    """
    protocol = type("HeaderDeadline", (_HeaderDeadline,), {"header_seconds": header_seconds})
    config = uvicorn.Config(
        app, http=protocol, loop="auto", lifespan="on", limit_concurrency=max_connections,
        timeout_keep_alive=keep_alive_seconds, timeout_graceful_shutdown=graceful_seconds,
        access_log=False,  # the application logs one line per request itself
        log_config=None, server_header=False, date_header=True, backlog=128)
    return _Server(config, on_ready)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


def serve(server: uvicorn.Server, sock: socket.socket) -> None:
    """Serves on `sock` until SIGTERM or Ctrl-C, then finishes the requests taken.

    In the main thread uvicorn handles the signals and, once stopped, raises
    the one it caught again; SIGTERM's handler is then a no-op of ours, so the
    process ends normally (exit status 0) rather than by the signal.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stopped)
    server.run(sockets=[sock])


def _stopped(signum, frame) -> None:
    logger.info("Stopped (signal %d).", signum)
