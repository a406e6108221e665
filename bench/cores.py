"""Every core at work: `train.py`'s target tokens a second on one core and on more.

Runs the same training (one corpus, given splits, the defaults, a time
budget) in each set-up, one after the other, and reads the tokens a second
from `train.py`'s own once-a-minute progress lines (the median after the
first minute, which holds the warm-up):

- `one-core`: one process pinned to core 0;
- `one-process`: one process on cores 0..N-1 (TensorFlow's intra-op threads);
- `mirrored`: one process on cores 0..N-1, `--strategy mirrored
  --cpu-devices N` (a replica per logical CPU device);
- `workers`: N processes, `--strategy multi-worker` on 127.0.0.1, worker i
  pinned to core i; the chief's log is read.

Each set-up's ratio is against `one-core` of the same invocation.

Example (ui-es-en, two cores, 4 minutes each):

    python bench/cores.py --data ui-es-en --cores 2 --budget 4m \\
        --json bench/results/cores_ui-es-en_xeon207amx.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # `transformer`, for machine()

from common import REPO, BenchError, machine, pinned, write_json  # noqa: E402
from scale import run_train  # noqa: E402

SETUPS = ("one-core", "one-process", "mirrored", "workers")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _run_workers(options: list[str], cores: int, logs: Path) -> dict:
    """`cores` multi-worker processes, worker i on core i; the chief's record.
    The other workers' output goes to `logs`/worker_i.log; if the chief fails,
    they are stopped."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(cores)]}

    def tf_config(index):
        return {"TF_CONFIG": json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": index}})}

    logs.mkdir(parents=True, exist_ok=True)
    others = []
    for index in range(1, cores):
        with open(logs / f"worker_{index}.log", "w") as log:
            others.append(subprocess.Popen(
                pinned([sys.executable, str(REPO / "train.py"), *options], index),
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **tf_config(index)}))
    try:
        chief = run_train(options, 0, env=tf_config(0))
    except BaseException:
        for process in others:
            process.kill()
        raise
    for index, process in enumerate(others, start=1):
        if process.wait(timeout=600):
            raise BenchError(f"worker {index} failed: see {logs / f'worker_{index}.log'}")
    return chief


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="a folder with train.tsv, valid.tsv and test.tsv")
    parser.add_argument("--cores", type=int, default=2, help="cores of the multi-core set-ups")
    parser.add_argument("--budget", default="4m", help="--time-budget of each run")
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "cores")
    parser.add_argument("--train-args", default="", help="more train.py options")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    all_cores = ",".join(str(core) for core in range(args.cores))
    results = {}
    try:
        for setup in args.setups:
            run = args.work / setup
            shutil.rmtree(run, ignore_errors=True)
            options = ["--data", str(args.data / "train.tsv"), "--valid",
                       str(args.data / "valid.tsv"), "--test", str(args.data / "test.tsv"),
                       "--time-budget", args.budget, "--eval-beam", "1", "--no-export",
                       "--output-dir", str(run), *args.train_args.split()]
            if setup == "one-core":
                record = run_train(options, 0)
            elif setup == "one-process":
                record = run_train(options, all_cores)
            elif setup == "mirrored":
                record = run_train([*options, "--strategy", "mirrored", "--cpu-devices",
                                    str(args.cores)], all_cores)
            else:
                record = _run_workers([*options, "--strategy", "multi-worker"], args.cores,
                                      args.work / "logs")
            record["batch_tokens"] = json.loads((run / "config.json").read_text())["batch_tokens"]
            results[setup] = record
            print(setup, json.dumps({k: record[k] for k in (
                "steps_per_second", "target_tokens_per_second", "first_step_seconds")}),
                flush=True)
    except BenchError as error:
        print(f"cores.py: {error}", file=sys.stderr)
        return 1
    base = (results.get("one-core") or {}).get("target_tokens_per_second")
    for record in results.values():
        rate = record.get("target_tokens_per_second")
        record["ratio_to_one_core"] = round(rate / base, 3) if base and rate else None
    if args.json:
        write_json(args.json, {"machine": machine(), "data": str(args.data),
                               "budget": args.budget, "cores": args.cores, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
