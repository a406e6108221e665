"""What the command-line scripts (train.py, translate.py, transformer-serve, ...) share.

Argument types that reject bad values with a message naming the value, an
`argparse.ArgumentParser` whose errors are one line, the one-line report of an
error, the progress log's lines (`log_progress`), and the hiding of TensorFlow's native start-up messages. Standard
library only: importing it does not import TensorFlow.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Callable

from transformer.constants import PAPER_LEARNING_RATE

__all__ = [
    "OneLineErrorParser",
    "duration",
    "hide_native_stderr",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "probability",
    "rate",
    "report_error",
]


def _int_or_none(text):
    try:
        return int(text)
    except ValueError:  # also too many digits
        return None


def _float_or_none(text):
    try:
        return float(text)
    except ValueError:
        return None


def positive_int(text: str) -> int:
    """Argument type: an integer >= 1.

    Args:
        text: the command-line value.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: `text` is not an integer, or is below 1.

    Example:
        >>> positive_int("4")
        4
    """
    value = _int_or_none(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """Argument type: an integer >= 0.

    Args:
        text: the command-line value.

    Returns:
        The integer.

    Raises:
        argparse.ArgumentTypeError: `text` is not an integer, or is negative.

    Example:
        >>> non_negative_int("0")
        0
    """
    value = _int_or_none(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def rate(text: str) -> float:
    """Argument type: a rate in [0, 1), such as dropout or label smoothing.

    Args:
        text: the command-line value.

    Returns:
        The number.

    Raises:
        argparse.ArgumentTypeError: `text` is not a number in [0, 1) (nan is not).

    Example:
        >>> rate("0.1")
        0.1
    """
    value = _float_or_none(text)
    if value is None or not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def learning_rate(text: str) -> float | str:
    """Argument type: a learning rate in (0, 1], or `paper` (returned as is).

    Example:
        >>> learning_rate("1e-3"), learning_rate("paper")
        (0.001, 'paper')
    """
    if text == PAPER_LEARNING_RATE:
        return text
    value = _float_or_none(text)
    if value is None or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a number in (0, 1] or {PAPER_LEARNING_RATE!r}, got {text!r}")
    return value


_DURATION_UNITS = {"h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?)h)?(?:(\d+(?:\.\d*)?)m)?(?:(\d+(?:\.\d*)?)s?)?")


def duration(text: str) -> float:
    """Argument type: a positive duration in seconds, written `90`, `90s`, `10m`, `1h30m`.

    Args:
        text: the command-line value: hours `h`, minutes `m` and seconds `s`
            (the unit of a bare number), in that order.

    Returns:
        The duration in seconds.

    Raises:
        argparse.ArgumentTypeError: `text` is not such a duration, or is zero.

    Example:
        >>> duration("10m"), duration("1h30m"), duration("90")
        (600.0, 5400.0, 90.0)
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 600, 600s, 10m or 1h30m, got {text!r}")
    seconds = sum(float(value) * unit for value, unit in
                  zip(match.groups(), _DURATION_UNITS.values(), strict=True) if value)
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"expected a duration above zero, got {text!r}")
    return seconds


def non_negative_float(text: str) -> float:
    """Argument type: a finite number >= 0, such as beam search's length penalty.

    Args:
        text: the command-line value.

    Returns:
        The number.

    Raises:
        argparse.ArgumentTypeError: `text` is not a number, or is negative, inf or nan.

    Example:
        >>> non_negative_float("0.6")
        0.6
    """
    value = _float_or_none(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """Argument type: a finite number > 0, such as a sampling temperature.

    Example:
        >>> positive_float("0.7")
        0.7
    """
    value = _float_or_none(text)
    if value is None or not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def probability(text: str) -> float:
    """Argument type: a number in (0, 1], such as top-p's probability mass.

    Example:
        >>> probability("0.9")
        0.9
    """
    value = _float_or_none(text)
    if value is None or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


class OneLineErrorParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose usage errors are one line.

    Instead of the usage and the error, it prints
    `PROG: error: MESSAGE (see PROG --help)` to standard error and exits with
    status 2, as argparse does.

    Example:
        >>> parser = OneLineErrorParser(prog="train.py")
        >>> _ = parser.add_argument("--epochs", type=positive_int)
        >>> parser.parse_args(["--epochs", "0"])  # doctest: +SKIP
        train.py: error: argument --epochs: expected a positive integer, got '0' (see train.py --help)
    """

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def log_progress(stream) -> None:
    """Writes the package's INFO log lines (a run's progress) to `stream`, bare."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    package_logger = logging.getLogger("transformer")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    package_logger.propagate = False


def report_error(prog: str, err: BaseException) -> int:
    """Prints `err` as one line, `PROG: error: MESSAGE`, to standard error.

    Args:
        prog: the script's name, such as "train.py".
        err: the exception; only the first line of its message is shown, or its
            type name when the message is empty.

    Returns:
        1, the exit status for the script to return.

    Example:
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as stderr:
        ...     status = report_error("translate.py", ValueError("no such run\\ndetails"))
        >>> status, stderr.getvalue()
        (1, 'translate.py: error: no such run\\n')
    """
    lines = str(err).strip().splitlines()
    message = lines[0] if lines else type(err).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1


def _keep_as_is() -> None:
    """The `restore` of `hide_native_stderr` when nothing was changed."""


def hide_native_stderr() -> Callable[[], None]:
    """Sends what native code writes to file descriptor 2 to /dev/null.

    TensorFlow's C++ code prints start-up notices (oneDNN, CUDA probing)
    straight to the file descriptor, before it reads `TF_CPP_MIN_LOG_LEVEL`.
    `sys.stderr` is re-opened on a copy of the original descriptor, so the
    program's own warnings and errors still show.

    Returns:
        `restore()`, which points descriptor 2 and `sys.stderr` back; a script
        that hides the notices for its whole life need not call it. Without a
        usable descriptor 2 (embedded Python, say) nothing is changed and
        `restore` does nothing.

    Example:
        >>> restore = hide_native_stderr()
        >>> try:
        ...     import tensorflow as tf  # doctest: +SKIP
        ... finally:
        ...     restore()
    """
    previous = sys.stderr
    try:
        previous.flush()
        original = os.dup(2)
    except (AttributeError, OSError, ValueError):  # no sys.stderr, or no descriptor 2
        return _keep_as_is
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        os.close(original)
        return _keep_as_is
    os.dup2(devnull, 2)
    os.close(devnull)
    stream = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    sys.stderr = stream

    def restore() -> None:
        if stream.closed:
            return
        stream.flush()
        os.dup2(stream.fileno(), 2)
        if sys.stderr is stream:
            sys.stderr = previous
        stream.close()

    return restore


def add_strategy_module_argument(parser: argparse.ArgumentParser) -> None:
    """`--strategy-module MODULE`: the modules whose search strategies `--search
    NAME` (or a served request's "search") may name, imported by
    `import_strategy_modules`."""
    parser.add_argument("--strategy-module", action="append", default=[], metavar="MODULE",
                        help="import MODULE (on PYTHONPATH) first, so that the search "
                             "strategies it defines can be chosen by name; may be repeated")


def import_strategy_modules(parser: argparse.ArgumentParser, modules) -> None:
    """Imports `modules` (`--strategy-module`): a strategy class registers its
    name when its module is imported. A module that fails to import is a
    usage error naming it."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - any failure of the user's module
            parser.error(f"--strategy-module {module}: {type(err).__name__}: {err}")
