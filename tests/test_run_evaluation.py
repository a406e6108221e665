"""Tests of transformer.run.evaluation: the normalized form of translations."""

from __future__ import annotations


def test_normalize_text():
    from transformer.run.evaluation import normalize_text

    assert normalize_text("The boy's  Café.") == "the boy ' s cafe ."
    assert normalize_text("the boy ' s cafe .") == "the boy ' s cafe ."
    assert normalize_text("Não!", lower_case=False) == "Não !"
