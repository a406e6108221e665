"""The package installs, outside the checkout, with working console scripts.

`pip install --no-deps --no-build-isolation --target` of a copy of the
project (so the build leaves nothing in the checkout), then the console
scripts run from another directory with only the installed copy on the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600

# What the build needs; the rest of the checkout stays out of the copy.
PROJECT_FILES = ("pyproject.toml", "README.md")

WHICH_TRANSFORMER = """
import runpy, sys
script = sys.argv[1]
sys.argv = [script, "--help"]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print("transformer from", sys.modules["transformer"].__file__, file=sys.stderr)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The installed copy: a `--target` directory with `bin/` and the packages."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    source.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "transformer", source / "transformer",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-input", "--disable-pip-version-check", "--target", str(target), str(source)],
        cwd=root, capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def _run(command, site, cwd):
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


@pytest.mark.slow
def test_installed_packages_include_the_subpackages(site):
    for package in ("transformer", "transformer/data", "transformer/run", "transformer/cli",
                    "transformer/kernels", "transformer/decoding"):
        assert (site / package / "__init__.py").is_file(), package


@pytest.mark.slow
@pytest.mark.parametrize("script, usage", [
    ("transformer-train", "usage: train.py"),
    ("transformer-translate", "usage: translate.py"),
    ("transformer-export", "usage: transformer-export"),
])
def test_console_script_help_from_another_directory(site, tmp_path, script, usage):
    path = site / "bin" / script
    assert path.is_file(), sorted(p.name for p in (site / "bin").iterdir())
    done = _run([str(path), "--help"], site, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(usage), done.stdout
    assert "Traceback" not in done.stderr

    # The same script, run in a subprocess that says which `transformer` it imported.
    which = _run([sys.executable, "-c", WHICH_TRANSFORMER, str(path)], site, cwd=tmp_path)
    assert which.returncode == 0, which.stderr
    imported = Path(which.stderr.strip().splitlines()[-1].removeprefix("transformer from "))
    assert imported.resolve() == (site / "transformer" / "__init__.py").resolve()
    assert REPO not in imported.resolve().parents
