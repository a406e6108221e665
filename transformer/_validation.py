"""Argument checks shared by the layers; errors read like Keras's own."""

from __future__ import annotations

import numbers


def check_positive_int(name: str, value) -> None:
    """Raises a Keras-style ValueError unless `value` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a positive "
            f"integer. Received: {name}={value!r}"
        )


def check_rate(name: str, value) -> None:
    """Raises a Keras-style ValueError unless `value` is a float in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected a float in "
            f"[0, 1). Received: {name}={value!r}"
        )


def check_int_at_least(name: str, value, minimum: int) -> None:
    """Raises a Keras-style ValueError unless `value` is an integer `>= minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"Received an invalid value for argument `{name}`, expected an integer "
            f">= {minimum}. Received: {name}={value!r}"
        )


def check_heads_divide(d_model, num_heads) -> None:
    """Raises a Keras-style ValueError unless `num_heads` divides `d_model`
    (each head has depth `d_model // num_heads`, section 3.2.2)."""
    if d_model % num_heads != 0:
        raise ValueError(
            "Received an invalid value for argument `num_heads`, expected a divisor "
            f"of `d_model`. Received: d_model={d_model}, num_heads={num_heads}"
        )
