"""A trained run over HTTP: `transformer-serve RUN` (`transformer.cli.serve`).

The standard library's threaded HTTP server takes the requests, and one
thread (`Batcher`) decodes them: requests that arrive together, within
`max_wait` seconds and up to `max_batch` sentences, are translated in one
call of the engine (TensorFlow's `Translator`, or the CTranslate2 export),
which is how a translator spends its time well. Requests whose output would
depend on the batch they are decoded in (sampling: `Strategy.TWO_PASSES`
false) are decoded on their own, so the same seed gives the same translation.

    POST /translate  {"sentences": ["o gato preto"], "beam": 4, "n_best": 2}
      -> {"translations": [{"text": ..., "score": ..., "n_best": [...]}], ...}
    GET /health      -> {"status": "ok", "run": ..., "engine": ..., "waiting": 0}

A request may set the decoding options of `translate.py` (`OPTIONS`; "search"
names a registered strategy, as `--search` does); none gives the search the
run was evaluated with. Bad requests get a 4xx answer
whose `error` says what is wrong: 400 for malformed JSON, a wrong type or
empty input, 413 for a request over a limit (`Limits`, each named), 429
when `max_waiting` requests already wait. SIGTERM (or Ctrl-C) stops taking
requests, finishes those taken and exits.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import http.server
import json
import logging
import numbers
import queue
import signal
import threading
import time
from collections.abc import Callable

# None of these imports TensorFlow: the TensorFlow engine does, when it is loaded.
from transformer.cli.export import ctranslate2_model
from transformer.cli.translate import search_strategy, tensorflow_translator
from transformer.constants import DEFAULT_MAX_OUTPUT_LENGTH
from transformer.ctranslate2_translator import CTranslate2Translator

logger = logging.getLogger(__name__)

# The decoding options of a request: translate.py's, by the same names.
OPTIONS = ("search", "beam", "alpha", "n_best", "temperature", "top_k", "top_p", "seed",
           "max_length")
_INTEGERS = {"beam": 1, "n_best": 1, "top_k": 1, "seed": 0, "max_length": 1}  # their minimum
_NUMBERS = ("alpha", "temperature", "top_p")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask, and how many may wait.

    Attributes:
        max_sentences: sentences in one request.
        max_chars: characters of one sentence.
        max_waiting: requests waiting for the decoder; more are answered 429.
        max_body: bytes of a request's body.
    """

    max_sentences: int = 64
    max_chars: int = 2000
    max_waiting: int = 256
    max_body: int = 1 << 20


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------
# Reading a request
# --------------------------------------------------------------------------


def parse_request(body: bytes, limits: Limits) -> tuple[list[str], dict]:
    """The sentences and decoding options of a request's JSON body.

    Raises:
        RequestError: 400 for malformed JSON, a wrong type, an unknown key or
            no sentence; 413 for more sentences or characters than `limits`.
    """
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(400, f"the body is not valid JSON: {err}") from None
    if not isinstance(request, dict):
        raise RequestError(400, "expected a JSON object such as {\"sentences\": [\"...\"]}")
    unknown = sorted(set(request) - {"sentences", "text", *OPTIONS})
    if unknown:
        raise RequestError(400, f"unknown keys {unknown}; expected \"sentences\" (or "
                                f"\"text\") and any of {list(OPTIONS)}")
    if ("sentences" in request) == ("text" in request):
        raise RequestError(400, "expected one of \"sentences\" (a list of strings) or "
                                "\"text\" (a string)")
    sentences = request.get("sentences", [request.get("text")])
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RequestError(400, "\"sentences\" must be a list of strings and \"text\" a string")
    if not sentences:
        raise RequestError(400, "\"sentences\" is empty: nothing to translate")
    if len(sentences) > limits.max_sentences:
        raise RequestError(413, f"{len(sentences)} sentences: at most {limits.max_sentences} "
                                "per request (the server's --max-sentences)")
    for index, sentence in enumerate(sentences):
        if len(sentence) > limits.max_chars:
            raise RequestError(413, f"sentence {index} has {len(sentence)} characters: at most "
                                    f"{limits.max_chars} (the server's --max-chars)")
    options = {name: request[name] for name in OPTIONS if request.get(name) is not None}
    for name, value in options.items():
        if name in _INTEGERS and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < _INTEGERS[name]):
            raise RequestError(400, f"\"{name}\" must be an integer of at least "
                                    f"{_INTEGERS[name]}; received {value!r}")
        if name in _NUMBERS and (isinstance(value, bool)
                                 or not isinstance(value, numbers.Real)):
            raise RequestError(400, f"\"{name}\" must be a number; received {value!r}")
        if name == "search" and not isinstance(value, str):
            raise RequestError(400, f"\"search\" must be a strategy's name; received {value!r}")
    return sentences, options


def request_search(options: dict, run_dir, engine="tensorflow"):
    """The search strategy of a request's options, as translate.py makes it of its
    own (`transformer.cli.translate.search_strategy`); 400 for options that do not go
    together or are out of range, or a strategy `engine` cannot run."""
    settings = {name: options.get(name) for name in OPTIONS}
    try:  # "search" names a registered strategy, as translate.py's --search does
        search = search_strategy(argparse.Namespace(**settings, setting=()), run_dir)
        if engine == "ctranslate2":
            search.ctranslate2_options()  # NotSupportedError, a ValueError
        return search
    except ValueError as err:
        message = str(err).replace("--n-best", "n_best").replace("--", "")
        raise RequestError(400, message) from None


# --------------------------------------------------------------------------
# Decoding the requests together
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    sentences: list[str]
    search: object
    max_length: int | None
    future: concurrent.futures.Future = dataclasses.field(
        default_factory=concurrent.futures.Future)

    def batches_with(self, other: _Job) -> bool:
        """Whether both may be decoded in one call: the same search and limit,
        and a search whose output does not depend on the batch."""
        return (self.search.TWO_PASSES and self.search == other.search
                and self.max_length == other.max_length)


class Busy(Exception):
    """Too many requests wait for the decoder."""


class Stopping(Exception):
    """The server is stopping and takes no more requests."""


class Batcher:
    """One thread that decodes the waiting requests, those that arrived together in one call.

    Args:
        engine: `engine(sentences, search, max_length)`, the results in order:
            one result per sentence (`.text`, `.score`), or a list of them
            for an n-best search.
        max_batch: sentences gathered into one call (a request with more is
            decoded alone).
        max_wait: seconds the first request of a call waits for others.
        max_waiting: requests that may wait; `submit` raises `Busy` beyond.
    """

    def __init__(self, engine: Callable, max_batch: int = 32, max_wait: float = 0.005,
                 max_waiting: int = 256):
        self.engine = engine
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._queue: queue.Queue = queue.Queue(maxsize=max_waiting)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="decoder", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, sentences, search, max_length=None) -> concurrent.futures.Future:
        """Queues a request; its future gets the engine's results (or its exception)."""
        if self._closed:
            raise Stopping("the server is stopping")
        job = _Job(list(sentences), search, max_length)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise Busy(f"{self._queue.maxsize} requests are waiting already") from None
        return job.future

    def close(self) -> None:
        """Decodes the requests already taken, then stops the thread."""
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            job = self._queue.get()
            if job is None:
                break
            jobs, count = [job], len(job.sentences)
            deadline = time.monotonic() + self.max_wait
            while count < self.max_batch and (timeout := deadline - time.monotonic()) > 0:
                try:
                    more = self._queue.get(timeout=timeout)
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                jobs.append(more)
                count += len(more.sentences)
            self._decode(jobs)

    def _decode(self, jobs: list[_Job]) -> None:
        """Decodes `jobs` in as few calls as go together; never raises."""
        while jobs:
            first = jobs[0]
            group = [job for job in jobs if job is first or first.batches_with(job)]
            jobs = [job for job in jobs if job not in group]
            sentences = [s for job in group for s in job.sentences]
            try:
                results = list(self.engine(sentences, first.search, first.max_length))
            except Exception as err:  # noqa: BLE001 - the clients are told, the thread lives on
                logger.exception("Decoding %d sentences failed.", len(sentences))
                for job in group:
                    job.future.set_exception(err)
                continue
            for job in group:
                job.future.set_result(results[:len(job.sentences)])
                results = results[len(job.sentences):]


def answer(results) -> list[dict]:
    """The JSON of each sentence's results: the best text and score, and the
    n-best list when the search returns more than one."""
    translations = []
    for result in results:
        hypotheses = result if isinstance(result, list) else [result]
        entry = {"text": hypotheses[0].text, "score": float(hypotheses[0].score)}
        if isinstance(result, list):
            entry["n_best"] = [{"text": h.text, "score": float(h.score)} for h in hypotheses]
        translations.append(entry)
    return translations


# --------------------------------------------------------------------------
# The engines and the server
# --------------------------------------------------------------------------


def load_engine(run_dir, engine: str = "tensorflow", quantization: str | None = None):
    """`engine(sentences, search, max_length)` of a run: TensorFlow's `Translator`,
    or with "ctranslate2" the run's CTranslate2 export (converted once), which
    needs no TensorFlow to translate."""
    if engine == "ctranslate2":
        translator = CTranslate2Translator(ctranslate2_model(run_dir, quantization or "float32"))

        def decode(sentences, search, max_length):
            return translator.translate(sentences, search=search, max_length=(
                DEFAULT_MAX_OUTPUT_LENGTH if max_length is None else max_length))
        return decode
    translator = tensorflow_translator(run_dir)

    def decode(sentences, search, max_length):
        return translator(sentences, max_length=max_length, return_attention=False,
                          search=search)
    return decode


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client's requests share one connection
    server_version = "transformer-serve"
    timeout = 10  # seconds an idle connection is kept; a stopping server waits for them

    def log_message(self, format, *args):  # noqa: A002 - the base class' name
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 - the base class' name
        app = self.server.app
        if self.path.rstrip("/") != "/health":
            self._send(404, {"error": f"no such path {self.path!r}; GET /health or "
                                      "POST /translate"})
            return
        self._send(200, {"status": "ok", "run": app.run_name, "engine": app.engine_name,
                         "waiting": app.batcher.waiting})

    def do_POST(self):  # noqa: N802 - the base class' name
        app = self.server.app
        try:
            if self.path.rstrip("/") != "/translate":
                raise RequestError(404, f"no such path {self.path!r}; POST /translate")
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise RequestError(411, "a Content-Length header is needed")
            if int(length) > app.limits.max_body:
                self.close_connection = True  # the body is not read
                raise RequestError(413, f"the body has {length} bytes: at most "
                                        f"{app.limits.max_body}")
            sentences, options = parse_request(self.rfile.read(int(length)), app.limits)
            search = request_search(options, app.run_dir, app.engine_name)
            try:
                future = app.batcher.submit(sentences, search, options.get("max_length"))
            except Busy as err:
                raise RequestError(429, f"busy: {err} (the server's --max-waiting); retry "
                                        "later") from None
            except Stopping as err:
                raise RequestError(503, str(err)) from None
            results = future.result()
        except RequestError as err:
            self._send(err.status, {"error": str(err)})
            return
        except Exception as err:  # noqa: BLE001 - one request failed, the server lives on
            self._send(500, {"error": f"{type(err).__name__}: {err}"})
            return
        self._send(200, {"translations": answer(results), "search": repr(search)})


@dataclasses.dataclass
class App:
    """What the request handlers share: the run, the engine's name, the limits, the batcher."""

    run_dir: str
    engine_name: str
    limits: Limits
    batcher: Batcher

    @property
    def run_name(self) -> str:
        return str(self.run_dir)


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # connections the kernel holds before accepting (5 by default)
    daemon_threads = False  # closing waits for the answers being written
    block_on_close = True


def make_server(app: App, host: str = "127.0.0.1", port: int = 8080):
    """The HTTP server of `app` on `host:port` (0: any free port), not yet serving."""
    server = _Server((host, port), _Handler)
    server.app = app
    return server


def serve(server) -> None:
    """Serves until SIGTERM or Ctrl-C, then finishes the requests taken and closes."""
    def stop(signum, frame):
        logger.info("Stopping (signal %d): finishing the requests taken.", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        logger.info("Stopping (Ctrl-C): finishing the requests taken.")
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.app.batcher.close()
        server.server_close()
