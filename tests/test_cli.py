"""Tests of transformer/cli/common.py, what train.py and translate.py share: argument types,
one-line errors.

No TensorFlow: transformer.cli.common uses the standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.cli.common import (
    OneLineErrorParser,
    duration,
    learning_rate,
    non_negative_float,
    non_negative_int,
    positive_int,
    rate,
    report_error,
)

REPO = Path(__file__).resolve().parents[1]

NOT_NUMBERS = ["", "x", "1x", "--1"]


@pytest.mark.parametrize("text,expected", [("1", 1), ("7", 7), (" 12 ", 12), ("+3", 3)])
def test_positive_int_accepts_integers_from_one(text, expected):
    assert positive_int(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "-0", "1.5", "1e3", "inf", "nan", *NOT_NUMBERS])
def test_positive_int_rejects_the_rest_naming_the_value(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        positive_int(text)
    assert str(caught.value) == f"expected a positive integer, got {text!r}"


@pytest.mark.parametrize("text,expected", [("0", 0), ("-0", 0), ("5", 5)])
def test_non_negative_int_accepts_zero(text, expected):
    assert non_negative_int(text) == expected


@pytest.mark.parametrize("text", ["-1", "-7", "0.5", "inf", "nan", *NOT_NUMBERS])
def test_non_negative_int_rejects_negatives_and_non_integers(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        non_negative_int(text)
    assert str(caught.value) == f"expected a non-negative integer, got {text!r}"


@pytest.mark.parametrize("text,expected", [("0", 0.0), ("0.1", 0.1), ("0.999", 0.999),
                                           ("1e-3", 0.001)])
def test_rate_accepts_zero_up_to_one_excluded(text, expected):
    assert rate(text) == expected


@pytest.mark.parametrize("text", ["1", "1.0", "1.5", "-0.1", "-1", "inf", "-inf", "nan",
                                  *NOT_NUMBERS])
def test_rate_rejects_one_negatives_inf_and_nan(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        rate(text)
    assert str(caught.value) == f"expected a number in [0, 1), got {text!r}"


@pytest.mark.parametrize("text,expected", [("1e-3", 0.001), ("1", 1.0), ("paper", "paper")])
def test_learning_rate_accepts_up_to_one_and_paper(text, expected):
    assert learning_rate(text) == expected


@pytest.mark.parametrize("text", ["0", "-1e-3", "1.5", "inf", "nan", "Paper", *NOT_NUMBERS])
def test_learning_rate_rejects_zero_above_one_and_words(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        learning_rate(text)
    assert str(caught.value) == f"expected a number in (0, 1] or 'paper', got {text!r}"


@pytest.mark.parametrize("text,expected", [("600", 600.0), ("600s", 600.0), ("10m", 600.0),
                                           ("1h30m", 5400.0), ("1.5h", 5400.0),
                                           ("2m30s", 150.0), (" 10M ", 600.0)])
def test_duration_accepts_hours_minutes_and_seconds(text, expected):
    assert duration(text) == expected


@pytest.mark.parametrize("text", ["", "m", "ten minutes", "10m1h", "-5m", "1e3", "5d"])
def test_duration_rejects_what_is_not_a_duration(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a duration such as"):
        duration(text)


@pytest.mark.parametrize("text", ["0", "0m", "0h0m0s"])
def test_duration_rejects_zero(text):
    with pytest.raises(argparse.ArgumentTypeError, match="above zero"):
        duration(text)


@pytest.mark.parametrize("text,expected", [("0", 0.0), ("0.6", 0.6), ("2", 2.0),
                                           ("1e10", 1e10)])
def test_non_negative_float_accepts_finite_numbers_from_zero(text, expected):
    assert non_negative_float(text) == expected


@pytest.mark.parametrize("text", ["-1", "-0.5", "inf", "-inf", "nan", "1e400"])
def test_non_negative_float_rejects_negative_and_non_finite_numbers(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        non_negative_float(text)
    assert str(caught.value) == f"expected a finite number >= 0, got {text!r}"


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_non_negative_float_rejects_non_numbers(text):
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        non_negative_float(text)
    assert str(caught.value) == f"expected a number >= 0, got {text!r}"


def _parser():
    parser = OneLineErrorParser(prog="demo.py")
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--rate", type=rate, default=0.0)
    return parser


def test_parser_parses_valid_values():
    args = _parser().parse_args(["--epochs", "3", "--rate", "0.25"])
    assert (args.epochs, args.rate) == (3, 0.25)


@pytest.mark.parametrize("argv,message", [
    (["--epochs", "0"], "argument --epochs: expected a positive integer, got '0'"),
    (["--rate", "nan"], "argument --rate: expected a number in [0, 1), got 'nan'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_parser_errors_are_one_line_with_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        _parser().parse_args(argv)
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"demo.py: error: {message} (see demo.py --help)\n"


@pytest.mark.parametrize("err,line", [
    (ValueError("bad.tsv:2: expected 2 columns\n  sem tradução"),
     "x.py: error: bad.tsv:2: expected 2 columns\n"),
    (OSError(), "x.py: error: OSError\n"),
    (RuntimeError("  \n"), "x.py: error: RuntimeError\n"),
])
def test_report_error_prints_the_first_line_and_returns_1(err, line, capsys):
    assert report_error("x.py", err) == 1
    assert capsys.readouterr().err == line


HIDE_THEN_RESTORE = r"""
import os, sys
from transformer.cli.common import hide_native_stderr

restore = hide_native_stderr()
os.write(2, b"native while hidden\n")
print("python while hidden", file=sys.stderr)
restore()
restore()  # a second call does nothing
os.write(2, b"native after restore\n")
print("python after restore", file=sys.stderr)
"""


def test_hide_native_stderr_keeps_python_output_and_restores():
    done = subprocess.run([sys.executable, "-c", HIDE_THEN_RESTORE], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "python while hidden", "native after restore", "python after restore"
    ]


def test_importing_cli_does_not_import_tensorflow():
    code = "import sys, transformer.cli.common; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr
