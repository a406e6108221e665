"""The shared argument checks of `transformer._validation` (plain Python)."""

from __future__ import annotations

import math

import pytest

from transformer._validation import (
    check_int_at_least,
    check_learning_rate,
    check_max_tokens,
    check_non_negative_int,
    check_positive_int,
    check_rate,
)
from transformer.data.corpus import DataError


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "3", None])
def test_positive_int_rejects(value):
    with pytest.raises(ValueError) as caught:
        check_positive_int("batch_size", value)
    assert str(caught.value) == (
        "Received an invalid value for argument `batch_size`, expected a positive "
        f"integer. Received: batch_size={value!r}"
    )


@pytest.mark.parametrize("value", [-1, 0.5, False, None])
def test_non_negative_int_rejects_with_the_given_error_and_note(value):
    with pytest.raises(DataError) as caught:
        check_non_negative_int("source_column", value, error=DataError,
                               note=" (columns count from 0)")
    assert str(caught.value) == (
        "Received an invalid value for argument `source_column`, expected a non-negative "
        f"integer (columns count from 0). Received: source_column={value!r}"
    )


@pytest.mark.parametrize("value", [-0.1, 1, 1.0, math.nan, True, "0.1"])
def test_rate_rejects(value):
    with pytest.raises(DataError, match=r"expected a float in \[0, 1\)"):
        check_rate("test_fraction", value, error=DataError)


def test_the_default_error_is_a_plain_value_error():
    with pytest.raises(ValueError) as caught:
        check_rate("dropout_rate", 1.5)
    assert type(caught.value) is ValueError


def test_valid_values_pass():
    check_positive_int("n", 1)
    check_non_negative_int("n", 0)
    assert check_rate("eps", 0) == 0.0 and isinstance(check_rate("eps", 0), float)
    assert check_rate("eps", 0.999) == 0.999
    check_int_at_least("beam_size", 1, 1)
    check_max_tokens(2)
    assert check_learning_rate(1) == 1.0


@pytest.mark.parametrize("value", [1, 0, 2.0, True])
def test_max_tokens_needs_room_for_start_and_end(value):
    with pytest.raises(ValueError) as caught:
        check_max_tokens(value, error=DataError)
    assert isinstance(caught.value, DataError)
    assert str(caught.value) == (
        "Received an invalid value for argument `max_tokens`, expected an integer "
        f"of at least 2 (room for [START] and [END]). Received: max_tokens={value!r}"
    )


@pytest.mark.parametrize("value", [0, 0.0, 1.5, math.nan, False])
def test_learning_rate_rejects(value):
    with pytest.raises(ValueError, match=r"Expected a learning rate in \(0, 1\]"):
        check_learning_rate(value)


def test_int_at_least_rejects():
    with pytest.raises(ValueError, match=r"expected an integer >= 1\. Received: beam_size=0"):
        check_int_at_least("beam_size", 0, 1)
