"""Tests of transformer.data.corpus and of the package's lazy exports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import transformer.data as data
import transformer.run as run
from transformer.data import Corpus, DataError

ROOT = Path(__file__).resolve().parents[1]


def test_corpus_type_and_error_type():
    corpus = Corpus(train=[("a", "b")] * 3, valid=[], test=[("c", "d")], name="x")
    assert corpus.sizes() == {"train": 3, "valid": 0, "test": 1}
    assert repr(corpus) == "Corpus(train=3, valid=0, test=1, name='x')"
    assert corpus.skipped_lines == 0
    assert issubclass(DataError, ValueError)


def test_package_exports_everything_it_lists():
    for name in data.__all__:
        assert getattr(data, name) is not None
    assert "make_batches" in dir(data)
    with pytest.raises(AttributeError):
        data.no_such_name  # noqa: B018


def _python(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_package_faces_start_no_tensorflow():
    """`transformer.data` and `transformer.run` import their TensorFlow-free
    names plainly and the others on first use: `train.py` reads its options
    through them before TensorFlow starts."""
    done = _python("-c", "import sys, transformer.data, transformer.run; "
                   "print(sorted(m for m in ('tensorflow', 'tensorflow_text', 'keras') "
                   "if m in sys.modules))")
    assert done.stdout.split() == ["[]"], done.stderr
    assert "CorpusSource" in dir(data) and "train" in dir(run)


def test_the_toy_module_runs_once_as_a_script():
    """`python -m transformer.data.toy`: the package face does not import `toy`
    first (runpy would warn and run the module twice)."""
    done = _python("-W", "error::RuntimeWarning", "-m", "transformer.data.toy", "--sample", "1")
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr
