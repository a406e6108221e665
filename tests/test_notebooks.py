"""The notebooks: built from their sources, committed executed, and they run top to bottom.

The committed notebooks are read for what they claim: they were executed in
the full setting, every run-dependent claim of their prose (a marker
`<!-- claim: NAME -->` in a markdown cell) is printed as holding by a code
cell right after it, the hand-written layers of notebook 03 equal the
library's, and notebooks/README.md quotes their execution times right.

The committed notebooks are only read. Execution happens on a copy in a
temporary directory, in the small setting `TRANSFORMER_NOTEBOOK_QUICK=1`
(a tiny corpus and a few training steps), with the runs written under the
temporary directory. Notebook 02 runs first and writes the toy run that
notebook 01 then loads, as a reader would run them; run alone, notebook 01
trains its own.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = ROOT / "notebooks"
# Each cell may take this long in the quick setting before the test fails.
CELL_TIMEOUT = 600
MAX_COMMITTED_BYTES = 3_000_000


def _load_builder():
    spec = importlib.util.spec_from_file_location(
        "build_notebooks", NOTEBOOKS_DIR / "build_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


builder = _load_builder()


def committed(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)


def figure_cells(notebook: nbformat.NotebookNode) -> list[int]:
    """Indices of the code cells that display at least one PNG figure."""
    return [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        and any("image/png" in output.get("data", {}) for output in cell.outputs)
    ]


@pytest.mark.parametrize("name", builder.NAMES)
def test_committed_notebook_matches_its_source(name):
    """The .ipynb is what `build_notebooks.py` makes of notebooks/src/<name>.py."""
    assert builder.sources(committed(name)) == builder.sources(builder.build(name)), (
        f"notebooks/{name}.ipynb is stale: run `python notebooks/build_notebooks.py --execute`"
    )


@pytest.mark.parametrize("name", builder.NAMES)
def test_committed_notebook_is_executed_with_figures(name):
    """Committed with outputs: every code cell ran, none failed, figures are there."""
    path = NOTEBOOKS_DIR / f"{name}.ipynb"
    notebook = committed(name)
    nbformat.validate(notebook)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    not_run = [i for i, cell in enumerate(code_cells) if cell.execution_count is None]
    assert not not_run, f"code cells {not_run} of {path.name} were not executed"
    errors = [
        output for cell in code_cells for output in cell.outputs if output.output_type == "error"
    ]
    assert not errors, f"{path.name} was committed with an error: {errors[0].get('ename')}"
    assert len(figure_cells(notebook)) >= 6, f"{path.name} shows too few figures"
    assert path.stat().st_size < MAX_COMMITTED_BYTES


def stream_text(cell: nbformat.NotebookNode) -> str:
    """What a code cell printed (its stdout and stderr)."""
    return "".join(output.text for output in cell.get("outputs", []) if output.output_type == "stream")


CLAIM_MARKER = re.compile(r"<!-- claim: ([\w-]+) -->")
CLAIM_LINE = re.compile(r"^claim ([\w-]+): (holds|DOES NOT HOLD)", re.MULTILINE)


@pytest.mark.parametrize("name", builder.NAMES)
def test_committed_notebook_was_executed_in_the_full_setting(name):
    notebook = committed(name)
    record = notebook.metadata.get("transformer_execution", {})
    assert record.get("setting") == "full", f"{name}.ipynb was not executed in the full setting: {record}"
    printed = "".join(stream_text(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert "setting: full" in printed and "setting: quick" not in printed


def claim_problems(cells) -> dict[str, list[str]]:
    """The prose claims of `cells` that no code cell right after them (one of
    the next two) prints as holding, and the printed claims the prose never makes."""
    made, problems = set(), {"unchecked": [], "contradicted": [], "not in the prose": []}
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for claim in CLAIM_MARKER.findall(cell.source):
            made.add(claim)
            following = [c for c in cells[index + 1:] if c.cell_type == "code"][:2]
            verdicts = dict(CLAIM_LINE.findall("".join(stream_text(c) for c in following)))
            if claim not in verdicts:
                problems["unchecked"].append(claim)
            elif verdicts[claim] != "holds":
                problems["contradicted"].append(claim)
    printed = {claim for cell in cells if cell.cell_type == "code"
               for claim, _ in CLAIM_LINE.findall(stream_text(cell))}
    problems["not in the prose"] = sorted(printed - made)
    return {kind: claims for kind, claims in problems.items() if claims}


@pytest.mark.parametrize("name", builder.NAMES)
def test_prose_claims_hold_in_the_committed_outputs(name):
    """Each claim of the prose is printed as holding by one of the two code cells after it."""
    assert not claim_problems(committed(name).cells), name


def test_claim_check_catches_a_contradicted_or_unchecked_claim():
    def cells(printed):
        code = nbformat.v4.new_code_cell("")
        code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
        return [nbformat.v4.new_markdown_cell("x <!-- claim: a -->"), code]

    assert claim_problems(cells("claim a: holds (x)\n")) == {}
    assert claim_problems(cells("claim a: DOES NOT HOLD (x)\n")) == {"contradicted": ["a"]}
    assert claim_problems(cells("claim b: holds (x)\n")) == {"unchecked": ["a"],
                                                              "not in the prose": ["b"]}


HAND_WRITTEN = re.compile(r"^(.+): max \|by hand - library\| = (\S+) ", re.MULTILINE)


def test_hand_written_layers_equal_the_library_s_on_the_trained_weights():
    """Notebook 03's stored outputs: multi-head attention, feed-forward, encoder and
    decoder layers (and the rest) written by hand equal the library's to 1e-5."""
    printed = "".join(stream_text(cell) for cell in committed("03_inside").cells
                      if cell.cell_type == "code")
    differences = {name: float(value) for name, value in HAND_WRITTEN.findall(printed)}
    for required in ("multi-head attention: output", "multi-head attention: weights", "feed-forward",
                     "residual + layer norm", "encoder layer", "decoder layer"):
        assert required in differences, f"notebook 03 prints no check of {required!r}"
    too_large = {name: value for name, value in differences.items() if not value < 1e-5}
    assert not too_large, too_large


def test_readme_quotes_the_execution_times():
    """notebooks/README.md gives each notebook's full-setting time as its metadata records it."""
    readme = (NOTEBOOKS_DIR / "README.md").read_text(encoding="utf-8")
    for name in builder.NAMES:
        record = committed(name).metadata["transformer_execution"]
        row = re.search(rf"^\| `{name}\.ipynb` \| (\d+) s \|", readme, re.MULTILINE)
        assert row, f"notebooks/README.md has no execution time row for {name}"
        assert int(row.group(1)) == record["seconds"], (name, row.group(1), record)
        assert record["cpu"] in readme


def test_parse_source_reports_a_bad_markdown_line():
    with pytest.raises(ValueError, match=r"nb\.py:3: .*not a comment"):
        builder.parse_source("# %% [markdown]\n# Title\nnot a comment\n", "nb.py")


@pytest.fixture(scope="module")
def quick_workspace(tmp_path_factory):
    """A temporary directory with the quick setting in the environment of the kernels."""
    workspace = tmp_path_factory.mktemp("notebooks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSFORMER_NOTEBOOK_QUICK", "1")
        patch.setenv("TRANSFORMER_NOTEBOOK_RUNS", str(workspace / "runs"))
        patch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        )
        patch.setenv("MPLBACKEND", "Agg")
        yield workspace


# 02 first: it writes the run that 01 loads. Slow: each starts a kernel that
# imports TensorFlow and trains (docs/design.md, "Tests").
@pytest.mark.slow
@pytest.mark.parametrize("name", builder.EXECUTION_ORDER)
def test_notebook_runs_top_to_bottom(name, quick_workspace):
    """Executes a copy of the committed notebook; a cell that raises fails the test."""
    copy = quick_workspace / f"{name}.ipynb"
    shutil.copy(NOTEBOOKS_DIR / f"{name}.ipynb", copy)
    notebook = nbformat.read(copy, as_version=4)
    expected_figures = figure_cells(notebook)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name=builder.KERNEL_NAME,
        record_timing=False,
        resources={"metadata": {"path": str(quick_workspace)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{name}.ipynb raised in the quick setting:\n{error}")
    finally:
        nbformat.write(notebook, copy)  # kept in the temporary directory for debugging
    elapsed = time.perf_counter() - start
    sys.stderr.write(f"{name}.ipynb executed in {elapsed:.0f} s (quick setting)\n")
    # Every cell that shows a figure in the committed notebook shows one again.
    missing = sorted(set(expected_figures) - set(figure_cells(notebook)))
    assert not missing, f"cells {missing} of {name}.ipynb displayed no figure when re-run"
