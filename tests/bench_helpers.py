"""Loading bench/'s scripts in tests: they are scripts, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench_module(name: str, path: Path):
    """The module of the script at `path`, imported under `name` (and kept in
    `sys.modules`, so that the scripts' own imports of each other find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
