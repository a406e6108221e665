"""What the benchmarks share: pinning to cores, the machine record, reading
test pairs, scoring translations, and worker processes.

- `pinned(command, cores)`: the command under `taskset -c CORES`, so that a
  run has its own core(s) while another run uses the rest.
- `machine()`: the CPU model, family and model numbers, core count, the flags
  that pick the precision, the precision `train.py` picks here, and the load.
- `read_pairs(path)`: `source<TAB>target` pairs of a TSV, with a one-line
  error naming the file and line of a bad pair.
- Scoring, alike for this project's outputs and the peer's: `bleu_lc` and
  `bleu_all_ways` (sacrebleu 13a, lower-cased and cased, and `train.py`'s
  normalised form), `length_report`, and `copyable_share`, the share of
  copyable source tokens (names, versions, options, paths) that a translation
  keeps.
- `worker_json(command, env, what)`: runs a worker process and returns the
  JSON object it prints on its last line of output.

Not part of the library; every entry point of `bench/` imports it.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
# The development corpus (not in the repository), in the current directory.
DEFAULT_CORPUS = Path("ui-es-en")


class BenchError(Exception):
    """A problem a benchmark reports in one line and exits non-zero for."""


# --- Cores and the machine ----------------------------------------------------------------


def pinned(command: Sequence[str], cores: int | str | None) -> list[str]:
    """`command` pinned to `cores` with `taskset -c` (an int, or a list such as
    "0,1"); unchanged when `cores` is None.

    >>> pinned(["python", "train.py"], 1)
    ['taskset', '-c', '1', 'python', 'train.py']
    """
    return list(command) if cores is None else ["taskset", "-c", str(cores), *command]


def _cpuinfo() -> dict:
    numbers = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in numbers:
                    numbers[key] = value.strip()
                if len(numbers) == 3:
                    break
    except OSError:
        pass
    return numbers


def machine() -> dict:
    """CPU model, family and model numbers, core count, the flags that pick the
    precision, the precision `train.py` picks here, and the load averages (1, 5,
    15 min). The flags are read by `transformer.run.precision`, the one reader."""
    from transformer.run.precision import cpu_flags, default_precision

    numbers = _cpuinfo()
    flags = cpu_flags()
    return {
        "cpu_model": numbers.get("model name", platform.processor() or ""),
        "cpu_family": numbers.get("cpu family"),
        "cpu_model_number": numbers.get("model"),
        "cpu_count": os.cpu_count(),
        "amx_bf16": "amx_bf16" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "train_py_precision": default_precision(flags),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


# --- Test pairs and scoring ---------------------------------------------------------------


def read_pairs(path: Path | str, limit: int | None = None) -> list[tuple[str, str]]:
    """The `(source, target)` pairs of a TSV file (its first two columns), the
    first `limit` only when given.

    Raises:
        BenchError: a line without a tab, or the file cannot be read.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise BenchError(f"{path}: {error.strerror or error}") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise BenchError(f"{path}:{number}: expected source<TAB>target")
        pairs.append((fields[0], fields[1]))
    return pairs[:limit] if limit else pairs


def bleu_lc(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU, sacrebleu 13a, lower-cased: the headline figure of BENCHMARKS.md."""
    import sacrebleu

    metric = sacrebleu.BLEU(lowercase=True, tokenize="13a")
    return round(float(metric.corpus_score(list(hypotheses), [list(references)]).score), 2)


def bleu_all_ways(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """BLEU of raw detokenized hypotheses against raw references, with signatures:
    sacrebleu 13a lower-cased and cased, and `train.py`'s form (both sides through
    `transformer.run.evaluation.normalize_text`) with its exact match."""
    import sacrebleu

    from transformer.run.evaluation import normalize_text

    hypotheses, references = list(hypotheses), list(references)
    out = {}
    for name, lowercase in (("bleu_lc_13a", True), ("bleu_cased_13a", False)):
        metric = sacrebleu.BLEU(lowercase=lowercase, tokenize="13a")
        score = metric.corpus_score(hypotheses, [references])
        out[name] = round(float(score.score), 2)
        out[name + "_signature"] = str(metric.get_signature())
        if lowercase:
            out["hyp_ref_length_ratio_lc_13a"] = round(score.sys_len / max(1, score.ref_len), 3)
    metric = sacrebleu.BLEU()
    hyps = [normalize_text(h) for h in hypotheses]
    refs = [normalize_text(r) for r in references]
    out["bleu_train_py"] = round(float(metric.corpus_score(hyps, [refs]).score), 2)
    out["bleu_train_py_signature"] = str(metric.get_signature()) + " (normalize_text both sides)"
    out["exact_match_train_py"] = round(
        sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(refs), 4)
    return out


def length_report(output_lengths, input_lengths, cap) -> dict:
    """Output-length statistics. `output_lengths` count generated tokens, [END] included
    when produced; an output "hit the cap" when it has `cap` tokens and no [END]."""
    import numpy as np

    out_len = np.asarray(output_lengths)
    in_len = np.asarray(input_lengths)
    return {
        "cap": int(cap),
        "outputs": int(out_len.size),
        "hit_cap": int(np.count_nonzero(out_len >= cap)),
        "hit_cap_share": round(float(np.mean(out_len >= cap)), 4),
        "mean_output_tokens": round(float(out_len.mean()), 2),
        "median_output_tokens": float(np.median(out_len)),
        "mean_input_tokens": round(float(in_len.mean()), 2),
        "max_input_tokens": int(in_len.max()),
    }


# --- Copyable tokens ----------------------------------------------------------------------
# A source token is copyable when it has a digit, a capital letter after its first
# character ("GNOME", "iPhone"), a slash, or a leading dash ("-v", "--help"), and
# the reference holds it unchanged. Tokens are split on white space and stripped
# of the punctuation around them, so that "(v2.0)," counts as "v2.0".

_AROUND = "\"'`“”‘’«»()[]{}<>,.;:!?¡¿…"  # stripped from both ends; a leading dash stays


def core(token: str) -> str:
    """The token without the punctuation around it.

    >>> core('"(v2.0),'), core("--help."), core("/usr/bin/")
    ('v2.0', '--help', '/usr/bin/')
    """
    return token.strip(_AROUND)


def kinds(token: str) -> list[str]:
    """Why a (stripped) token should be copied: any of `digit`, `inner_capital`,
    `slash`, `leading_dash`; empty when none applies.

    >>> kinds("GNOME"), kinds("Abrir"), kinds("--no-color"), kinds("x86_64/")
    (['inner_capital'], [], ['leading_dash'], ['digit', 'slash'])
    """
    found = []
    if any(ch.isdigit() for ch in token):
        found.append("digit")
    if any(ch.isupper() for ch in token[1:]):
        found.append("inner_capital")
    if "/" in token:
        found.append("slash")
    if token.startswith("-") and token.lstrip("-"):
        found.append("leading_dash")
    return found


def _cores(text: str) -> collections.Counter:
    return collections.Counter(c for c in (core(t) for t in text.split()) if c)


def copyable_share(sources: Sequence[str], references: Sequence[str],
                   outputs: Sequence[str]) -> dict:
    """Counts copyable source tokens and how many of them the outputs copied.

    Each occurrence counts once; an output copies a token as many times as it
    holds it. Returns `candidates` (source tokens of one of the kinds),
    `copyable` (of those, held by the reference), `copied` (of those, held by
    the output too), `copied_share` (`copied / copyable`, None without copyable
    tokens) and `by_kind` (the same three counts per kind).

    >>> copyable_share(["Abrir /etc/fstab con -v"], ["Open /etc/fstab with -v"],
    ...                ["Open /etc/fstab with -V"])["copied_share"]
    0.5

    Raises:
        ValueError: if the three sequences differ in length.
    """
    if not len(sources) == len(references) == len(outputs):
        raise ValueError(
            f"copyable_share needs as many references and outputs as sources; received "
            f"{len(sources)} sources, {len(references)} references, {len(outputs)} outputs.")
    totals = collections.Counter()
    by_kind = collections.defaultdict(collections.Counter)
    for source, reference, output in zip(sources, references, outputs, strict=True):
        in_reference, in_output = _cores(reference), _cores(output)
        for token, count in _cores(source).items():
            token_kinds = kinds(token)
            if not token_kinds:
                continue
            copyable = min(count, in_reference[token])
            copied = min(copyable, in_output[token])
            for counter in (totals, *(by_kind[k] for k in token_kinds)):
                counter["candidates"] += count
                counter["copyable"] += copyable
                counter["copied"] += copied
    names = ("candidates", "copyable", "copied")
    result = {name: totals[name] for name in names}
    result["copied_share"] = (
        round(totals["copied"] / totals["copyable"], 4) if totals["copyable"] else None)
    result["by_kind"] = {kind: {name: counts[name] for name in names}
                         for kind, counts in sorted(by_kind.items())}
    return result


# --- Worker processes ---------------------------------------------------------------------


def worker_json(command: Sequence[str], env: dict | None, what: str) -> dict:
    """Runs `command` and returns the JSON object on the last line of its output.

    Raises:
        BenchError: the worker failed (the end of its error output is printed first).
    """
    done = subprocess.run(list(command), capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        raise BenchError(f"{what} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def portable(text: str) -> str:
    """`text` without this machine's paths: the repository's folder and the
    Python executable, so that a results file reads the same on any machine.

    >>> portable(f"{sys.executable} {REPO}/train.py --seed 0")
    'python train.py --seed 0'
    """
    return text.replace(sys.executable, "python").replace(f"{REPO}/", "")


def write_json(path: Path, record) -> None:
    """`record` as indented UTF-8 JSON at `path` (its folder made), its strings
    `portable`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = portable(json.dumps(record, indent=2, ensure_ascii=False))
    path.write_text(text + "\n", encoding="utf-8")


# --- Entry points with modes ----------------------------------------------------------------


def run_mode(argv, doc: str, modes: dict[str, tuple[str, str]], entry: str) -> int:
    """Runs one mode of an entry point: `argv[0]` names it, `modes` maps each name
    to `(module, one-line summary)`. Only that mode's module is imported (a
    worker that must not load TensorFlow does not); the module gives
    `add_arguments(parser)` and `run(args, parser) -> exit code`, and
    `args.entry` is the entry point's path, for workers to call it again.
    """
    import argparse
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    summary = "\n".join(f"  {name:12s} {text}" for name, (_, text) in modes.items())
    if not argv or argv[0] not in modes:
        first = doc.split("\n\n")[0]
        print(f"{first}\n\nusage: {Path(entry).name} MODE [options]; "
              f"MODE --help for its options. Modes:\n{summary}",
              file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    module = importlib.import_module(modes[argv[0]][0])
    parser = argparse.ArgumentParser(prog=f"{Path(entry).name} {argv[0]}",
                                     description=(module.__doc__ or "").split("\n\n")[0])
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    args.entry = str(Path(entry).resolve())
    try:
        return module.run(args, parser)
    except BenchError as error:
        print(f"{Path(entry).stem} {argv[0]}: {error}", file=sys.stderr)
        return 1
