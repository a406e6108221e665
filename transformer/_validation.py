"""Argument checks shared by the layers and the run's configuration; errors read
like Keras's own. Plain Python: no TensorFlow at import."""

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


def check_label_smoothing(label_smoothing) -> float:
    """`label_smoothing` as a float, or a Keras-style `ValueError` unless it is in [0, 1)."""
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not (
        0 <= label_smoothing < 1
    ):
        raise ValueError(
            "Received an invalid value for argument `label_smoothing`, expected a float "
            f"in [0, 1). Received: label_smoothing={label_smoothing!r}"
        )
    return float(label_smoothing)


def check_learning_rate(learning_rate) -> float:
    """Checks a peak learning rate: a number in (0, 1]."""
    if (isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float))
            or not 0 < learning_rate <= 1):
        raise ValueError(
            f"Expected a learning rate in (0, 1]. Received: learning_rate={learning_rate!r}"
        )
    return float(learning_rate)
