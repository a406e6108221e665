"""Argument checks shared by the layers, the data pipeline and the run's
configuration; errors read like Keras's own. Plain Python: no TensorFlow at import.

Every check raises `error` (a `ValueError` by default); data code passes its
`transformer.data.corpus.DataError`, a subclass of `ValueError`.
"""

from __future__ import annotations

import numbers


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _invalid(name: str, expected: str, value, error: type[Exception]) -> Exception:
    return error(
        f"Received an invalid value for argument `{name}`, expected {expected}. "
        f"Received: {name}={value!r}"
    )


def check_positive_int(name: str, value, *, error: type[Exception] = ValueError) -> None:
    """Raises `error` unless `value` is a positive integer."""
    if not _is_int(value) or value <= 0:
        raise _invalid(name, "a positive integer", value, error)


def check_non_negative_int(name: str, value, *, error: type[Exception] = ValueError,
                           note: str = "") -> None:
    """Raises `error` unless `value` is an integer >= 0; `note` follows the
    expectation in the message, e.g. `" (columns count from 0)"`."""
    if not _is_int(value) or value < 0:
        raise _invalid(name, f"a non-negative integer{note}", value, error)


def check_rate(name: str, value, *, error: type[Exception] = ValueError) -> float:
    """`value` as a float, or raises `error` unless it is a number in [0, 1)
    (a dropout rate, label smoothing's `eps`, a share of the corpus)."""
    if not _is_real(value) or not 0 <= value < 1:
        raise _invalid(name, "a float in [0, 1)", value, error)
    return float(value)


def check_choice(name: str, value, choices, *, error: type[Exception] = ValueError) -> None:
    """Raises `error` unless `value` is one of `choices`."""
    if value not in choices:
        raise _invalid(name, f"one of {list(choices)}", value, error)


def check_int_at_least(name: str, value, minimum: int, *,
                       error: type[Exception] = ValueError) -> None:
    """Raises `error` unless `value` is an integer `>= minimum`."""
    if not _is_int(value) or value < minimum:
        raise _invalid(name, f"an integer >= {minimum}", value, error)


def check_max_tokens(max_tokens, *, error: type[Exception] = ValueError) -> None:
    """Raises `error` unless `max_tokens` leaves room for `[START]` and `[END]`."""
    if not _is_int(max_tokens) or max_tokens < 2:
        raise _invalid("max_tokens", "an integer of at least 2 (room for [START] and [END])",
                       max_tokens, error)


def check_heads_divide(d_model, num_heads) -> None:
    """Raises a Keras-style ValueError unless `num_heads` divides `d_model`
    (each head has depth `d_model // num_heads`, section 3.2.2)."""
    if d_model % num_heads != 0:
        raise ValueError(
            "Received an invalid value for argument `num_heads`, expected a divisor "
            f"of `d_model`. Received: d_model={d_model}, num_heads={num_heads}"
        )


def check_learning_rate(learning_rate) -> float:
    """Checks a peak learning rate: a number in (0, 1]."""
    if not _is_real(learning_rate) or not 0 < learning_rate <= 1:
        raise ValueError(
            f"Expected a learning rate in (0, 1]. Received: learning_rate={learning_rate!r}"
        )
    return float(learning_rate)
