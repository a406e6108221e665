"""The strategies carry their behaviour (`transformer.strategies.Strategy`): what
each consumer needs of a strategy, it asks the object, never its type."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transformer import strategies
from transformer.strategies import BEAM_PATIENCE, Beam, Greedy, Sample, Strategy, check_strategy

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
_STRATEGY_NAMES = {"Strategy", "Greedy", "Beam", "Sample", "SEARCH_STRATEGIES"}


def type_questions(source: str) -> list[str]:
    """`line: code` of each `isinstance`/`issubclass` on a strategy class, and of
    each `is`/`==` comparison with one, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = set()
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "isinstance", "issubclass") and len(node.args) == 2:
            names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
                     for n in ast.walk(node.args[1])}
        elif isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops):
            names = {n.id for n in [node.left, *node.comparators] if isinstance(n, ast.Name)}
        if names & _STRATEGY_NAMES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_strategies_asks_a_strategy_its_type():
    asked = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "strategies.py":
            continue
        found = type_questions(path.read_text(encoding="utf-8"))
        if found:
            asked[str(path.relative_to(PACKAGE))] = found
    assert asked == {}, ("ask the strategy (transformer.strategies.Strategy), not its type: "
                         f"{asked}")


def test_type_questions_are_found():
    source = ("if isinstance(search, Beam): pass\n"
              "if kind is Greedy: pass\n"
              "if isinstance(s, (strategies.Sample, int)): pass\n"
              "if isinstance(s, str) or s is None: pass\n")
    assert [item.split(":")[0] for item in type_questions(source)] == ["1", "2", "3"]


@pytest.mark.parametrize("search, rows, results, alpha, two_passes", [
    (Greedy(), 1, 1, 0.0, True),
    (Beam(4, 0.6), 4, 1, 0.6, True),
    (Beam(5, 1.0, n_best=3), 5, 3, 1.0, True),
    (Sample(seed=1), 1, 1, 0.0, False),
])
def test_each_strategy_answers_the_protocol(search, rows, results, alpha, two_passes):
    assert isinstance(search, Strategy) and check_strategy(search) is search
    assert search.rows_per_sentence == rows
    assert search.results_per_sentence == results
    assert search.score_alpha == pytest.approx(alpha)
    assert type(search).penalty_alpha(search.settings()) == pytest.approx(alpha)
    assert search.TWO_PASSES is two_passes
    assert [name for name, _ in search.SETTINGS] == sorted(search.settings(), key=[
        name for name, _ in search.SETTINGS].index)


def test_the_ctranslate2_options_run_the_same_search():
    assert Greedy().ctranslate2_options() == {"beam_size": 1, "length_penalty": 0.0}
    assert Beam(1, 0.6).ctranslate2_options() == {"beam_size": 1, "length_penalty": 0.0}
    assert Beam(4, 0.6, n_best=2).ctranslate2_options() == {
        "beam_size": 4, "length_penalty": 0.6, "patience": BEAM_PATIENCE,
        "num_hypotheses": round(4 * BEAM_PATIENCE)}
    assert Sample(temperature=0.5, top_k=3, top_p=0.9, seed=7).ctranslate2_options() == {
        "beam_size": 1, "length_penalty": 0.0, "sampling_topk": 3, "sampling_topp": 0.9,
        "sampling_temperature": 0.5}
    assert Sample(seed=7).random_seed() == 7 and Greedy().random_seed() is None
    assert isinstance(Sample().random_seed(), int)  # drawn afresh


def test_every_strategy_type_is_a_strategy():
    assert all(issubclass(kind, Strategy) for kind in strategies.SEARCH_STRATEGIES)
    with pytest.raises(ValueError, match="expected Greedy"):
        check_strategy("beam")
