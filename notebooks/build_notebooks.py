"""Builds the notebooks from their reviewable sources, and optionally executes them.

The `.ipynb` files are generated: edit `notebooks/src/<name>.py`, then rebuild.
A source is a Python file in the "percent" format that Jupytext, VS Code and
Spyder also read: a line `# %% [markdown]` starts a markdown cell whose lines
are comments (`# ` is stripped), a line `# %%` starts a code cell. Lines
before the first cell marker are a header for linters and are not copied.

Commands (from the repository root):

    python notebooks/build_notebooks.py              # rebuild both, without outputs
    python notebooks/build_notebooks.py --execute    # rebuild and execute (what is committed)
    python notebooks/build_notebooks.py --check      # the .ipynb sources match src/?

Executing uses nbclient with the `python3` kernel, in `notebooks/` as the
working directory, and writes the outputs (figures) into the notebooks. Set
`TRANSFORMER_NOTEBOOK_QUICK=1` for the small setting the test suite uses; the
committed notebooks are executed in the full setting.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from pathlib import Path

import nbformat

NOTEBOOKS_DIR = Path(__file__).resolve().parent
SOURCE_DIR = NOTEBOOKS_DIR / "src"
# In the order they are meant to be read (and executed: 02 trains the run 01 reuses).
NAMES = ("01_attention", "02_translate", "03_inside")
EXECUTION_ORDER = ("02_translate", "01_attention", "03_inside")
KERNEL_NAME = "python3"

_MARKDOWN = "# %% [markdown]"
_CODE = "# %%"
# TensorFlow's C++ start-up messages (absl logging, written to the kernel's stderr
# before Python can silence them); they are noise in a committed notebook.
_C_LOG_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IWE]\d{4} [\d:. ]+\s+\d+ \S+:\d+\] .*"
    r"|To enable the following instructions: .*)$"
)


def parse_source(text: str, path: str = "<source>") -> list[nbformat.NotebookNode]:
    """Splits a percent-format source into notebook cells.

    Args:
        text: the source text.
        path: its file name, for error messages.

    Returns:
        A list of `nbformat.v4` markdown and code cells.

    Raises:
        ValueError: when a markdown line is not a comment, naming file and line.
    """
    cells = []
    kind = None
    lines: list[str] = []
    start = 0

    def flush():
        if kind is None:
            return
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        source = "\n".join(lines)
        if kind == "markdown":
            cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cells.append(nbformat.v4.new_code_cell(source))

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.rstrip()
        if stripped == _MARKDOWN or stripped == _CODE or stripped.startswith(_CODE + " "):
            flush()
            kind = "markdown" if stripped == _MARKDOWN else "code"
            lines = []
            start = number
            continue
        if kind == "markdown":
            if stripped and not stripped.startswith("#"):
                raise ValueError(
                    f"{path}:{number}: a line of the markdown cell started at line {start} "
                    f"is not a comment: {stripped[:60]!r}"
                )
            lines.append(stripped[2:] if stripped.startswith("# ") else stripped[1:])
        elif kind == "code":
            lines.append(stripped)
    flush()
    if not cells:
        raise ValueError(f"{path}: no cells (expected lines `# %%` or `# %% [markdown]`)")
    return cells


def build(name: str) -> nbformat.NotebookNode:
    """The notebook `name` (e.g. "01_attention") built from `src/<name>.py`, no outputs."""
    path = SOURCE_DIR / f"{name}.py"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = parse_source(path.read_text(encoding="utf-8"), str(path))
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": KERNEL_NAME,
    }
    notebook.metadata["language_info"] = {"name": "python"}
    # Stable cell ids keep the diffs of a rebuilt notebook small.
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"{name.split('_')[0]}-{index:03d}"
    return notebook


def execute(
    notebook: nbformat.NotebookNode, cwd: Path, timeout: int = 1800
) -> nbformat.NotebookNode:
    """Executes `notebook` in place with nbclient, in working directory `cwd`.

    Raises `nbclient.exceptions.CellExecutionError` when a cell raises. The
    kernel inherits this process's environment (e.g. `TRANSFORMER_NOTEBOOK_QUICK`).
    """
    from nbclient import NotebookClient

    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=KERNEL_NAME,
        record_timing=False,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return notebook


def clean_outputs(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drops TensorFlow's C++ log lines and empty streams; merges consecutive streams.

    Only stream outputs (stdout/stderr text) change; results, figures and
    errors are kept as they are.
    """
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.outputs:
            if output.output_type == "stream":
                lines = output.text.splitlines(keepends=True)
                output.text = "".join(line for line in lines if not _C_LOG_LINE.match(line.rstrip()))
                if not output.text.strip():
                    continue
                previous = outputs[-1] if outputs else None
                if previous is not None and previous.output_type == "stream" and (
                    previous.name == output.name
                ):
                    previous.text += output.text
                    continue
            outputs.append(output)
        cell.outputs = outputs
    return notebook


def execution_record(seconds: float) -> dict:
    """What the notebook's metadata keeps of its execution: setting, time and machine.

    notebooks/README.md quotes these; tests/test_notebooks.py checks that it
    quotes them right and that the committed notebooks ran in the full setting.
    """
    quick = os.environ.get("TRANSFORMER_NOTEBOOK_QUICK") == "1"
    return {
        "setting": "quick" if quick else "full",
        "seconds": round(seconds),
        "cpu": _cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sources(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """The (cell type, source) pairs of a notebook, what `--check` compares."""
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"notebooks to build (default: {NAMES})")
    parser.add_argument("--execute", action="store_true", help="execute and keep the outputs")
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that the committed .ipynb files match their sources",
    )
    args = parser.parse_args(argv)
    names = args.names or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"unknown notebook(s) {unknown}; expected some of {list(NAMES)}")
    if args.check:
        stale = [
            name
            for name in names
            if not (NOTEBOOKS_DIR / f"{name}.ipynb").exists()
            or sources(nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4))
            != sources(build(name))
        ]
        for name in stale:
            print(f"notebooks/{name}.ipynb does not match notebooks/src/{name}.py; rebuild it.")
        return 1 if stale else 0
    if args.execute:
        names = [name for name in EXECUTION_ORDER if name in names]
        if os.environ.get("TRANSFORMER_NOTEBOOK_QUICK") == "1":
            print("warning: TRANSFORMER_NOTEBOOK_QUICK=1: executing in the quick setting; "
                  "commit notebooks executed in the full setting only.")
    for name in names:
        notebook = build(name)
        if args.execute:
            start = time.perf_counter()
            print(f"executing {name} ...", flush=True)
            execute(notebook, NOTEBOOKS_DIR)
            clean_outputs(notebook)
            seconds = time.perf_counter() - start
            notebook.metadata["transformer_execution"] = execution_record(seconds)
            print(f"  done in {seconds:.0f} s", flush=True)
        target = NOTEBOOKS_DIR / f"{name}.ipynb"
        nbformat.validate(notebook)
        nbformat.write(notebook, target)
        size = target.stat().st_size
        print(f"wrote {target.relative_to(NOTEBOOKS_DIR.parent)} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
