"""The notebooks: built from their sources, committed executed, and they run top to bottom.

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
