"""Every file in `bench/results/` is cited by a report, and none records a path
of the machine it was measured on.

The reports are README.md, BENCHMARKS.md and the Markdown files under `docs/`
and `bench/`. A citation is a path into `bench/results/`, written from the
repository's top (`bench/results/<name>`) or from the citing file's folder
(`results/<name>` in `bench/TRAIN_SPEED.md`); its name may be a glob (`*`, `?`)
with brace lists (`budget_*_{no_ema,batch16}.json`). A results file that no
report cites is a superseded measurement: it goes (git history keeps it).

A results file keeps paths as `bench/common.py`'s `portable()` writes them,
relative to the repository (`runs/x`, `data/bible-es-en`): no home, root or
`/work/` folder of the machine, and nothing climbing out of the repository.
Images (`.png`) are not read.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

_CITED = re.compile(r"(?<![\w.-])((?:\.\./|[\w.-]+/)*results/)((?:[\w.*?-]|\{[^{}\s/]*\})+)")
_MACHINE_PATH = re.compile(r"/work/|/home/|/root/|\.\./")
NOT_READ = {".png"}


def reports() -> list[Path]:
    found = [REPO / "README.md", REPO / "BENCHMARKS.md"]
    for folder in ("docs", "bench"):
        found += sorted(path for path in (REPO / folder).rglob("*.md")
                        if ".venv" not in path.relative_to(REPO).parts)
    return [path for path in found if path.is_file()]


def expand(pattern: str) -> list[str]:
    """A glob's brace lists spelled out: `a_{b,c}*.json` is `a_b*.json` and `a_c*.json`."""
    found = re.search(r"\{([^{}]*)\}", pattern)
    if not found:
        return [pattern]
    head, tail = pattern[:found.start()], pattern[found.end():]
    return [word for part in found.group(1).split(",") for word in expand(head + part + tail)]


def citations(text: str, folder: Path) -> list[str]:
    """The glob patterns (braces expanded) of the names in `bench/results/` that
    `text`, a report in `folder`, cites."""
    patterns = []
    for prefix, name in _CITED.findall(text):
        folders = {(REPO / prefix).resolve(), (folder / prefix).resolve()}
        if RESULTS in folders:
            patterns += expand(name.rstrip("."))
    return patterns


def results_files() -> list[Path]:
    return sorted(path for path in RESULTS.iterdir() if path.is_file())


def test_citations_are_read_with_globs_and_brace_lists():
    assert expand("budget_*_5min_{no_ema,batch16}.json") == [
        "budget_*_5min_no_ema.json", "budget_*_5min_batch16.json"]
    assert expand("a_{b,c}_{d,e}*.json") == ["a_b_d*.json", "a_b_e*.json", "a_c_d*.json",
                                             "a_c_e*.json"]
    text = ("Results: `bench/results/x_{a,b}.json`, bench/results/step_kernels_*.json. "
            "![plot](results/scaling_batch.png) and runs/results/not_these.json")
    cited = ["x_a.json", "x_b.json", "step_kernels_*.json"]
    assert citations(text, REPO / "bench") == [*cited, "scaling_batch.png"]
    assert citations(text, REPO / "docs") == cited


def test_every_results_file_is_cited_by_a_report():
    patterns = [pattern for report in reports()
                for pattern in citations(report.read_text(encoding="utf-8"), report.parent)]
    files = results_files()
    assert len(files) > 10 and len(patterns) > 10
    uncited = [path.name for path in files
               if not any(fnmatch.fnmatchcase(path.name, pattern) for pattern in patterns)]
    assert not uncited, ("cited by no report (README.md, BENCHMARKS.md, docs/, bench/*.md):\n"
                         + "\n".join(uncited))


def test_no_results_file_records_a_path_of_the_machine():
    found = []
    for path in results_files():
        if path.suffix in NOT_READ:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.name}:{number}: {hit}" for hit in _MACHINE_PATH.findall(line)]
    assert not found, "\n".join(found[:50])
