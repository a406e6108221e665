"""`transformer-serve RUN`: serve a trained run over HTTP (`transformer.serving`).

    transformer-serve runs/ui-es-en --port 8080 --api-key-file /etc/transformer/keys
    curl -s localhost:8080/translate -H 'Content-Type: application/json' \\
        -H 'Authorization: Bearer KEY' -d '{"sentences": ["Guardar el archivo"], "beam": 4}'
    python -m transformer.cli.serve runs/toy --engine ctranslate2

It prints `Serving RUN on http://HOST:PORT/` once it takes requests, logs
one line per request on standard error, and stops on SIGTERM or Ctrl-C after
answering the requests it took. Errors before that (a missing run, a port in
use, the extra `serve` not installed) are one line, exit status 1.
docs/serving.md describes the API, every limit and error, and how to run it
behind a reverse proxy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer import rundir
from transformer.cli.common import (
    OneLineErrorParser,
    add_strategy_module_argument,
    import_strategy_modules,
    log_progress,
    positive_float,
    positive_int,
    report_error,
)
from transformer.decoding.ctranslate2_translator import CLI_QUANTIZATIONS
from transformer.decoding.engines import ENGINES, load_engine
from transformer.serving.limits import Limits  # standard library only

try:  # the optional extra "serve": starlette, uvicorn, httptools, prometheus-client
    from transformer.serving import app as serving_app
    from transformer.serving import server as serving_server
except ImportError as missing:  # --help still works; main says what to install
    serving_app = serving_server = None
    _MISSING = missing

PROG = "transformer-serve"
ENDPOINTS = """endpoints:
  POST /translate     {"sentences": ["..."], "beam": 4, ...} -> {"translations": [...]}
  GET  /health        {"status": "ok", ...}; needs no API key
  GET  /metrics       Prometheus metrics
  GET  /openapi.json  the OpenAPI schema of the requests and answers, with the limits"""


def _limits_arguments(parser: argparse.ArgumentParser) -> None:
    """The per-request limits (`transformer.serving.limits.Limits`)."""
    limits = Limits()
    group = parser.add_argument_group("limits", "what one request may ask; a request over a "
                                      "limit gets a 4xx naming it")
    for name, metavar, kind, help_text in (
            ("max_sentences", "N", positive_int, "sentences in one request (413)"),
            ("max_chars", "N", positive_int, "characters of one sentence (413)"),
            ("max_body", "BYTES", positive_int, "bytes of a request's body (413)"),
            ("max_beam", "N", positive_int, "beam size, hypotheses kept per sentence (400)"),
            ("max_n_best", "N", positive_int, "translations per sentence (400)"),
            ("max_output_length", "N", positive_int,
             "output tokens per sentence, a request's max_length (400)"),
            ("max_work", "N", positive_int, "sentences x beam x output length of a request, and "
             "of one decoder call: the bound of the decoder's memory (413)"),
            ("max_waiting", "N", positive_int, "requests waiting for the decoder (429)"),
            ("timeout", "SECONDS", positive_float,
             "seconds a request may wait for its translation (504)")):
        default = getattr(limits, name)
        group.add_argument("--" + name.replace("_", "-"), type=kind, default=default,
                           metavar=metavar, help=f"{help_text} (default: {default})")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog=ENDPOINTS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the run directory train.py wrote")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; "
                             "0.0.0.0 for every interface, best behind a reverse proxy)")
    parser.add_argument("--port", type=int, default=8080,
                        help="port to listen on; 0 for any free one (default: 8080)")
    parser.add_argument("--engine", choices=ENGINES, default="tensorflow",
                        help="tensorflow (the run's model) or ctranslate2 (its export, "
                             "converted once; pip install '.[ctranslate2]')")
    parser.add_argument("--quantization", choices=CLI_QUANTIZATIONS, default=None,
                        help="with --engine ctranslate2: the weights' type (default float32)")
    parser.add_argument("--api-key", action="append", default=[], metavar="KEY",
                        help="a key clients must send (Authorization: Bearer KEY or "
                             "X-API-Key: KEY) on every path but /health; may be repeated")
    parser.add_argument("--api-key-file", type=Path, default=None, metavar="FILE",
                        help="read the keys from FILE, one a line (keeps them out of `ps`)")
    parser.add_argument("--allowed-origins", default="", metavar="ORIGINS",
                        help="comma-separated browser origins (https://host:port, or *) "
                             "that may call the server (CORS); by default a request with "
                             "an Origin header is refused (403)")
    _batching_arguments(parser)
    _limits_arguments(parser)
    add_strategy_module_argument(parser)
    return parser


def _batching_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("batching and connections")
    group.add_argument("--max-batch", type=positive_int, default=32, metavar="N",
                       help="sentences of the requests waiting together decoded in one "
                            "call (default: 32)")
    group.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                       help="how long a call waits for one more request to share it, "
                            "at most 8 times that in all (default: 5)")
    group.add_argument("--max-connections", type=positive_int, default=512, metavar="N",
                       help="connections served at once; more get a 503 (default: 512)")
    group.add_argument("--body-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                       help="seconds a request's headers (then the connection is closed) "
                            "and its body (then 408) may each take to arrive "
                            "(default: 10)")


def _api_keys(args) -> tuple[str, ...]:
    """The keys of --api-key and --api-key-file (blank lines and # comments skipped)."""
    keys = list(args.api_key)
    if args.api_key_file is not None:
        text = args.api_key_file.read_text(encoding="utf-8")
        keys += [line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")]
        if not keys:
            raise ValueError(f"--api-key-file {args.api_key_file}: no key in it")
    return tuple(keys)


def _settings(args):
    """The server's settings of the options."""
    names = [field for field in Limits.__dataclass_fields__]
    limits = Limits(**{name: getattr(args, name) for name in names})
    origins = tuple(o.strip() for o in args.allowed_origins.split(",") if o.strip())
    return serving_app.ServerSettings(
        limits=limits, api_keys=_api_keys(args), allowed_origins=origins,
        body_seconds=args.body_timeout, max_batch=args.max_batch,
        max_wait=args.max_wait_ms / 1000)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import_strategy_modules(parser, args.strategy_module)
    if args.quantization is not None and args.engine != "ctranslate2":
        parser.error("--quantization is for --engine ctranslate2")
    if serving_app is None:
        return report_error(PROG, ImportError(
            f"serving needs the optional extra: pip install '.[serve]' ({_MISSING})"))
    log_progress(sys.stderr)
    try:
        run_dir = rundir.check_run_dir(args.run)
        settings = _settings(args)
        engine = load_engine(run_dir, args.engine, args.quantization,
                             report=lambda line: print(line, file=sys.stderr))
        app = serving_app.create_app(engine, run_dir, args.engine, settings)
        sock = serving_server.listen(args.host, args.port)
    except (ValueError, OSError, ImportError) as err:
        return report_error(PROG, err)
    host, port = sock.getsockname()[:2]
    where = f"[{host}]" if ":" in host else host

    def ready():
        print(f"Serving {run_dir} ({args.engine}) on http://{where}:{port}/", flush=True)

    server = serving_server.make_server(app, args.max_connections,
                                        graceful_seconds=settings.limits.timeout + 5,
                                        header_seconds=args.body_timeout,
                                        on_ready=ready)
    serving_server.serve(server, sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
