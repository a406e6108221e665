"""`transformer-serve RUN`: serve a trained run over HTTP (`transformer.serve`).

    transformer-serve runs/ui-es-en --port 8080
    curl -s localhost:8080/translate -d '{"sentences": ["Guardar el archivo"], "beam": 4}'
    python -m transformer.cli.serve runs/toy --engine ctranslate2

It prints `Serving RUN on http://HOST:PORT/` once it takes requests, and
stops on SIGTERM or Ctrl-C after answering the requests it took. Errors
before that (a missing run, a port in use) are one line, exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from transformer import rundir
from transformer.cli.common import (
    OneLineErrorParser,
    add_strategy_module_argument,
    import_strategy_modules,
    log_progress,
    positive_int,
    report_error,
)
from transformer.serve import App, Batcher, Limits, load_engine, make_server, serve

PROG = "transformer-serve"
ENGINES = ("tensorflow", "ctranslate2")


def build_parser() -> argparse.ArgumentParser:
    limits = Limits()
    parser = OneLineErrorParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run directory train.py wrote")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; "
                             "0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8080,
                        help="port to listen on; 0 for any free one (default: 8080)")
    parser.add_argument("--engine", choices=ENGINES, default="tensorflow",
                        help="tensorflow (the run's model) or ctranslate2 (its export, "
                             "converted once; pip install '.[ctranslate2]')")
    parser.add_argument("--quantization", default=None,
                        help="with --engine ctranslate2: the weights' type (default float32)")
    parser.add_argument("--max-batch", type=positive_int, default=32, metavar="N",
                        help="sentences of the requests waiting together decoded in one "
                             "call (default: 32)")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                        help="how long a request waits for others to share its call "
                             "(default: 5)")
    parser.add_argument("--max-sentences", type=positive_int, default=limits.max_sentences,
                        metavar="N", help="sentences in one request; more get a 413 "
                        f"(default: {limits.max_sentences})")
    parser.add_argument("--max-chars", type=positive_int, default=limits.max_chars,
                        metavar="N", help="characters of one sentence; more get a 413 "
                        f"(default: {limits.max_chars})")
    parser.add_argument("--max-waiting", type=positive_int, default=limits.max_waiting,
                        metavar="N", help="requests waiting for the decoder; more get a 429 "
                        f"(default: {limits.max_waiting})")
    add_strategy_module_argument(parser)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import_strategy_modules(parser, args.strategy_module)
    if args.quantization is not None and args.engine != "ctranslate2":
        print(f"{PROG}: error: --quantization is for --engine ctranslate2", file=sys.stderr)
        return 2
    log_progress(sys.stderr)

    try:
        run_dir = rundir.check_run_dir(args.run)
        engine = load_engine(run_dir, args.engine, args.quantization)
        limits = Limits(max_sentences=args.max_sentences, max_chars=args.max_chars,
                        max_waiting=args.max_waiting)
        batcher = Batcher(engine, args.max_batch, args.max_wait_ms / 1000, args.max_waiting)
        app = App(run_dir=str(run_dir), engine_name=args.engine, limits=limits, batcher=batcher)
        server = make_server(app, args.host, args.port)
    except (ValueError, OSError, ImportError) as err:
        return report_error(PROG, err)
    host, port = server.server_address[:2]
    print(f"Serving {run_dir} ({args.engine}) on http://{host}:{port}/", flush=True)
    serve(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
