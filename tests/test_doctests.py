"""The examples in the docstrings of `transformer` run, and print what they say.

Every module of the package whose source holds a `>>>` example is found here
by reading the files (a module added later is picked up with no change to this
test) and run with `doctest`, from a temporary directory, so that files an
example writes land there. Examples are meant to be small: tiny shapes, no
training. Code that needs a trained run or a corpus belongs in a ```python
block, which doctest does not run (as in `transformer.data.tokenizers`).
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()

# Examples known to fail, each with the reason; remove an entry with the fix.
KNOWN_FAILURES: dict[str, str] = {}


def test_the_examples_are_found():
    assert {"transformer.positional", "transformer.masking", "transformer.attention",
            "transformer.plot"} <= set(MODULES)
    stale = set(KNOWN_FAILURES) - set(MODULES)
    assert not stale, f"no '>>>' examples left in {stale}: remove them from KNOWN_FAILURES"


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[name], strict=True))
    if name in KNOWN_FAILURES else name
    for name in MODULES
])
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    tests = [test for test in finder.find(module, name) if test.examples]
    assert tests, f"{name} has '>>>' in its source but no example doctest finds"
    for test in tests:
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted and not failed, f"{failed} of {attempted} examples of {name} failed (above)"
