"""`bench/decode_speed.py serve`: `transformer-serve` under load, against the engine called directly.

Starts `transformer-serve RUN --port 0` on 127.0.0.1 (pinned to `--server-cores`),
then for each number of concurrent clients (`--clients`, default 1, 8 and 32;
threads of this process, pinned to `--client-cores`) sends requests of one
test sentence each until `--requests` are answered or `--seconds` have passed,
and reports sentences a second and the p50 and p99 latency. The reference,
in its own process on the server's cores, before and after the loads: the
same engine called directly on the same sentences, one at a time and in
batches of `--max-batch`. The server's log (a line per request) is dropped.
`--server-repo DIR` starts the server of another checkout (such as an older
commit's, `git worktree add DIR COMMIT`), to compare two servers under the
same load and the same reference.

    python bench/decode_speed.py serve --run RUN --test ui-es-en/test.tsv --name ui
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from common import REPO, RESULTS, BenchError, machine, pinned, read_pairs, worker_json, write_json


def _post(url: str, sentence: str) -> float:
    """Seconds one request took; raises on any answer but 200."""
    body = json.dumps({"text": sentence}).encode()
    started = time.perf_counter()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        if response.status != 200:
            raise BenchError(f"the server answered {response.status}")
        response.read()
    return time.perf_counter() - started


def load(url: str, sentences: list[str], clients: int, requests: int, seconds: float) -> dict:
    """`clients` threads sending one sentence per request, until `requests` are
    answered or `seconds` pass; sentences a second and latency percentiles."""
    latencies: list[float] = []
    lock, errors = threading.Lock(), []
    deadline = time.perf_counter() + seconds
    counter = iter(range(requests))

    def client():
        while time.perf_counter() < deadline:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            try:
                took = _post(url, sentences[index % len(sentences)])
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(repr(err))
                return
            with lock:
                latencies.append(took)

    started, cpu = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu  # the clients' own, on their cores
    if errors:
        raise BenchError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    latencies.sort()
    return {"clients": clients, "requests": len(latencies), "seconds": round(wall, 2),
            "sentences per second": round(len(latencies) / wall, 2),
            "p50 ms": round(1000 * statistics.median(latencies), 1),
            "p99 ms": round(1000 * latencies[min(len(latencies) - 1,
                                                 int(0.99 * len(latencies)))], 1),
            "client cpu seconds": round(cpu, 2)}


def direct_worker(args) -> dict:
    """The engine called in this process: one sentence a call, then batches."""
    from transformer.decoding.engines import load_engine
    from transformer.decoding.search_options import SearchOptions, search_strategy

    sentences = [source for source, _ in read_pairs(args.test, args.requests)]
    engine = load_engine(args.run, args.engine)
    search = search_strategy(SearchOptions(), args.run)  # the server's default search
    engine(sentences[:4], search, None)  # traced before it is timed
    started = time.perf_counter()
    for sentence in sentences:
        engine([sentence], search, None)
    one = time.perf_counter() - started
    started = time.perf_counter()
    for at in range(0, len(sentences), args.max_batch):
        engine(sentences[at:at + args.max_batch], search, None)
    batched = time.perf_counter() - started
    return {"sentences": len(sentences),
            "one a call, sentences per second": round(len(sentences) / one, 2),
            f"batches of {args.max_batch}, sentences per second":
                round(len(sentences) / batched, 2)}


def _direct(args, run, test) -> dict:
    """The engine called directly, in its own process on the server's cores."""
    direct = worker_json(pinned([sys.executable, args.entry, "serve", "--run", str(run),
                                 "--test", str(test), "--requests", str(args.requests),
                                 "--engine", args.engine, "--max-batch", str(args.max_batch),
                                 "--worker"], args.server_cores), None, "the direct engine")
    print(json.dumps(direct), flush=True)
    return direct


def _loads(args, run, sentences) -> list[dict]:
    """The server under each number of clients."""
    command = pinned([sys.executable, "-m", "transformer.cli.serve", str(run), "--port",
                      "0", "--engine", args.engine, "--max-batch", str(args.max_batch)],
                     args.server_cores)
    server_repo = (args.server_repo or REPO).resolve()
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, cwd=server_repo,
                              env={**os.environ, "PYTHONPATH": str(server_repo)})
    try:
        line = server.stdout.readline()
        if not line.startswith("Serving "):
            raise BenchError("the server did not start")
        url = line.strip().rsplit(" ", 1)[-1] + "translate"
        _post(url, sentences[0])  # traced before it is timed
        loads = []
        for clients in args.clients:
            loads.append(load(url, sentences, clients, args.requests, args.seconds))
            print(json.dumps(loads[-1]), flush=True)
        return loads
    finally:
        server.terminate()
        server.wait(60)


def driver(args) -> int:
    """The engine directly, the server under load, the engine again: on a shared
    machine the two direct measurements show how much the speed moved meanwhile."""
    sentences = [source for source, _ in read_pairs(args.test, args.requests)]
    run, test = args.run.resolve(), args.test.resolve()  # the workers start in the repository
    before = machine()
    direct_before = _direct(args, run, test)
    loads = _loads(args, run, sentences)
    direct = _direct(args, run, test)
    name = f"serve_{args.engine}" + (f"_{args.name}" if args.name else "")
    write_json(RESULTS / f"{name}.json", {
        "machine_before": before, "machine_after": machine(), "engine": args.engine,
        "server_cores": args.server_cores, "client_cores": args.client_cores,
        "max_batch": args.max_batch, "server_repo": str(args.server_repo or "this checkout"),
        "loads": loads, "direct_before": direct_before, "direct": direct,
        "command": "python bench/decode_speed.py serve " + " ".join(sys.argv[2:])})
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", type=Path, required=True, help="a run directory (train.py)")
    parser.add_argument("--test", type=Path, required=True,
                        help="a TSV whose sources are the requests")
    parser.add_argument("--engine", choices=("tensorflow", "ctranslate2"), default="tensorflow")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=400,
                        help="requests per number of clients, at most")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="seconds per number of clients, at most")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--server-cores", default="0")
    parser.add_argument("--client-cores", default="1")
    parser.add_argument("--name", default="", help="suffix of the results file")
    parser.add_argument("--server-repo", type=Path, default=None, metavar="DIR",
                        help="start the server of this checkout (default: this one)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)


def run(args, parser=None) -> int:
    if args.worker:
        print(json.dumps(direct_worker(args)))
        return 0
    os.sched_setaffinity(0, {int(core) for core in str(args.client_cores).split(",")})
    return driver(args)
