"""Every figure of BENCHMARKS.md's summary is in a results file that its row cites.

The summary is the table under "## Summary"; its last column names the
files of `bench/results/` that back the row. Every number of the row's
figure cell must be one of those files' numbers at the precision written
(98.20 matches 98.2 and 98.1953; 1,252 matches 1252; a percentage matches a
share, 98.20% matching 0.982), and a mean written as `M (mean of a, b, c)`
must be the mean of its parts, which are checked like any other number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "BENCHMARKS.md"

_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(%?)")
_MEAN = re.compile(r"([\d.]+) \(mean of ([\d., ]+?)\)")
_CITED = re.compile(r"`(bench/results/[^`]+)`")


def summary_rows() -> list[list[str]]:
    """The cells of each row of the summary table (header and rule left out)."""
    text = BENCHMARKS.read_text(encoding="utf-8")
    section = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def numbers(text: str) -> list[tuple[float, int, bool]]:
    """`(value, decimals, is_percent)` of every number written in `text`."""
    found = []
    for whole, fraction, percent in _NUMBER.findall(text):
        value = float(whole.replace(",", "") + ("." + fraction if fraction else ""))
        found.append((value, len(fraction), bool(percent)))
    return found


def _file_numbers(paths: list[Path]) -> set[float]:
    values = set()
    for path in paths:
        for token in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.read_text(encoding="utf-8")):
            values.add(float(token))
    return values


def _backed(value: float, decimals: int, percent: bool, values: set[float]) -> bool:
    candidates = values | ({v * 100 for v in values} if percent else set())
    return any(abs(round(v, decimals) - value) < 1e-9 for v in candidates)


ROWS = summary_rows()


def test_the_summary_has_rows_and_a_results_column():
    assert len(ROWS) >= 5
    assert all(len(row) == 5 for row in ROWS), "each summary row: figure, CPU, precision, " \
        "command, results"


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_every_summary_figure_is_in_a_cited_results_file(row):
    figure, results = row[0], row[-1]
    cited = _CITED.findall(results)
    assert cited, f"the summary row {figure[:60]!r} cites no results file"
    paths = [REPO / name for name in cited]
    missing = [str(path.relative_to(REPO)) for path in paths if not path.is_file()]
    assert not missing, f"cited results files that do not exist: {missing}"
    for mean, parts in _MEAN.findall(figure):
        values = [float(part) for part in parts.split(", ")]
        decimals = len(mean.split(".")[1]) if "." in mean else 0
        assert round(sum(values) / len(values), decimals) == float(mean), \
            f"{mean} is not the mean of {parts}"
    values = _file_numbers(paths)
    unbacked = [f"{value:g}{'%' if percent else ''}" for value, decimals, percent
                in numbers(_MEAN.sub(lambda m: m.group(2), figure))
                if not _backed(value, decimals, percent, values)]
    assert not unbacked, f"figures of {figure[:60]!r} in none of {cited}: {unbacked}"
