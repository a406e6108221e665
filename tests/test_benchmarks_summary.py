"""Every figure of BENCHMARKS.md's summary and of README.md is in a results file
that cites it.

The summary is the table under "## Summary": figure, CPU, precision, code,
command, results. Its last column names the files of `bench/results/` that
back the row. Every number of the row's figure cell must be one of those
files' numbers at the precision written (98.20 matches 98.2 and 98.1953;
1,252 matches 1252; a percentage matches a share, 98.20% matching 0.982),
and a mean written as `M (mean of a, b, c)` must be the mean of its parts,
which are checked like any other number. The CPU cell's model number and
AMX, the precision cell's precisions and the code cell's commits must be
those the files record ("not recorded" when none of them records one).

README.md's figures are in the paragraphs that cite a results file: every
number of such a paragraph (outside code spans) is checked the same way
against the files it cites, and a decimal or a percentage of any other
paragraph is an error (version numbers and section numbers aside).
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
_COMMIT = re.compile(r"\b[0-9a-f]{7}\b")
PRECISIONS = ("mixed_bfloat16", "float32", "int8")
README = REPO / "README.md"
# Product versions and section numbers, which are not figures.
_NOT_FIGURES = re.compile(r"(?:Python|TensorFlow|Keras|JoeyNMT|CTranslate2|PyTorch)\s+\d+(?:\.\d+)*"
                          r"(?:(?:,|\s+to|\s+or|\s+and)\s+\d+(?:\.\d+)*)*|\d+\.\d+\.\d+")


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
    assert all(len(row) == 6 for row in ROWS), "each summary row: figure, CPU, precision, " \
        "code, command, results"


def _cited_paths(cell: str, where: str) -> list[Path]:
    cited = _CITED.findall(cell)
    assert cited, f"{where} cites no results file"
    paths = [REPO / name for name in cited]
    missing = [str(path.relative_to(REPO)) for path in paths if not path.is_file()]
    assert not missing, f"cited results files that do not exist: {missing}"
    return paths


def _unbacked(text: str, paths: list[Path]) -> list[str]:
    values = _file_numbers(paths)
    return [f"{value:g}{'%' if percent else ''}" for value, decimals, percent
            in numbers(_MEAN.sub(lambda m: m.group(2), text))
            if not _backed(value, decimals, percent, values)]


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_every_summary_figure_is_in_a_cited_results_file(row):
    figure, results = row[0], row[-1]
    paths = _cited_paths(results, f"the summary row {figure[:60]!r}")
    cited = [str(path.relative_to(REPO)) for path in paths]
    for mean, parts in _MEAN.findall(figure):
        values = [float(part) for part in parts.split(", ")]
        decimals = len(mean.split(".")[1]) if "." in mean else 0
        assert round(sum(values) / len(values), decimals) == float(mean), \
            f"{mean} is not the mean of {parts}"
    unbacked = _unbacked(figure, paths)
    assert not unbacked, f"figures of {figure[:60]!r} in none of {cited}: {unbacked}"


@pytest.mark.parametrize("row", ROWS, ids=[row[0][:40] for row in ROWS])
def test_every_summary_row_names_the_machine_precision_and_code_its_files_record(row):
    figure, cpu, precision, code, results = row[0], row[1], row[2], row[3], row[-1]
    paths = _cited_paths(results, f"the summary row {figure[:60]!r}")
    texts = [path.read_text(encoding="utf-8") for path in paths]
    model = re.search(r"model (\d+)", cpu)
    if model:
        recorded = {n for text in texts for n in re.findall(r'"cpu_model_number": "(\d+)"', text)}
        assert recorded == {model.group(1)}, f"{figure[:60]!r}: {cpu!r}, the files record {recorded}"
    amx = {a for text in texts for a in re.findall(r'"amx_bf16": (true|false)', text)}
    if "with AMX" in cpu:
        assert amx == {"true"}, f"{figure[:60]!r}: {cpu!r}, the files record amx_bf16 {amx}"
    if "no AMX" in cpu:
        assert amx == {"false"}, f"{figure[:60]!r}: {cpu!r}, the files record amx_bf16 {amx}"
    for name in PRECISIONS:
        if re.search(rf"\b{name}\b", precision):
            assert any(re.search(rf"\b{name}\b", text) for text in texts), \
                f"{figure[:60]!r}: {name} in none of the cited files"
    recorded = {c for text in texts for c in _COMMIT.findall(text) if not c.isdigit()}
    written = set(_COMMIT.findall(code))
    if code == "not recorded":
        assert not recorded, f"{figure[:60]!r}: the files record the code {recorded}"
    else:
        assert written and written <= recorded, \
            f"{figure[:60]!r}: code {code!r}, the files record {recorded or 'none'}"


def readme_paragraphs() -> list[str]:
    """README.md's paragraphs of prose (fenced blocks left out), lines joined."""
    text = re.sub(r"^```.*?^```", "", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text) if block.strip()]


def _prose(paragraph: str) -> str:
    """The paragraph without code spans, link targets, versions and section numbers."""
    text = re.sub(r"`[^`]*`", " ", paragraph)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return _NOT_FIGURES.sub(" ", text)


def test_every_readme_figure_is_in_the_results_file_its_paragraph_cites():
    citing = 0
    for paragraph in readme_paragraphs():
        prose = _prose(paragraph)
        if _CITED.search(paragraph):
            citing += 1
            paths = _cited_paths(paragraph, f"README's paragraph {paragraph[:60]!r}")
            unbacked = _unbacked(prose, paths)
            assert not unbacked, f"README: {paragraph[:80]!r}: not in the files it cites: {unbacked}"
        else:
            figures = [f"{v:g}{'%' if pc else ''}" for v, decimals, pc in numbers(prose)
                       if decimals or pc]
            assert not figures, f"README: {paragraph[:80]!r} has figures {figures} and cites " \
                "no results file"
    assert citing >= 2
