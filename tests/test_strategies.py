"""The strategies carry their behaviour (`transformer.decoding.strategies.Strategy`): what
each consumer needs of a strategy, it asks the object, never its type."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transformer.decoding import strategies
from transformer.decoding.strategies import (
    BEAM_PATIENCE,
    Beam,
    Greedy,
    NotSupportedError,
    Sample,
    SavedModelFunction,
    Strategy,
    as_strategy,
    check_strategy,
    registered,
    strategy_class,
)

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
_STRATEGY_NAMES = {"Strategy", "Greedy", "Beam", "Sample"}


def type_questions(source: str) -> list[str]:
    """`line: code` of each `isinstance`/`issubclass` on a strategy class, of each
    `is`/`==` comparison with one, of each dict keyed by one and of each look-up
    by a type (`table[type(search)]`) in `source`: type switches."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = set()
        if isinstance(node, ast.Dict):
            names = {key.id for key in node.keys if isinstance(key, ast.Name)}
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Call) and getattr(
                node.slice.func, "id", None) == "type":
            names = {"Strategy"}
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
    assert asked == {}, ("ask the strategy (transformer.decoding.strategies.Strategy), not its "
                         f"type: {asked}")


def test_type_questions_are_found():
    source = ("if isinstance(search, Beam): pass\n"
              "if kind is Greedy: pass\n"
              "if isinstance(s, (strategies.Sample, int)): pass\n"
              "if isinstance(s, str) or s is None: pass\n"
              "searches = {Greedy: 1, 'beam': 2}\n"
              "run = searches[type(search)]\n"
              "options = {'beam': 1}[name]\n")
    assert sorted(item.split(":")[0] for item in type_questions(source)) == [
        "1", "2", "3", "5", "6"]


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
    # Its own score: log P, divided by the GNMT penalty for a beam.
    assert search.score(-6.0, 7.0, search.settings()) == pytest.approx(
        -6.0 / ((5 + 7) / 6) ** alpha)
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


def test_the_built_in_strategies_are_registered_by_name():
    assert {"greedy": Greedy, "beam": Beam, "sample": Sample}.items() <= registered().items()
    assert strategy_class("beam") is Beam
    with pytest.raises(ValueError, match=r"unknown search strategy 'bean', expected one of"):
        strategy_class("bean")
    with pytest.raises(ValueError, match="expected Greedy"):
        check_strategy("beam")
    assert as_strategy(Beam) == Beam() and as_strategy(Sample(seed=2)) == Sample(seed=2)
    with pytest.raises(ValueError, match="`kind`, expected a subclass of Strategy"):
        as_strategy(str)


def test_a_strategy_without_a_search_cannot_be_made_and_one_method_is_enough():
    class Forgetful(Strategy):  # neither next_tokens nor search
        def score(self, log_prob, length, settings):
            return log_prob

    with pytest.raises(TypeError, match="abstract method 'next_tokens'"):
        Forgetful()
    with pytest.raises(TypeError, match="abstract method"):
        Strategy()

    class OneMethod(Strategy):  # the smallest strategy
        def next_tokens(self, log_probs, tokens, settings):
            raise AssertionError("never searched")

    search = OneMethod()
    assert (search.results_per_sentence, search.rows_per_sentence) == (1, 1)
    assert search.score(-2.0, 3.0, {}) == -2.0 and search.settings() == {}
    assert repr(search) == "OneMethod()" and search.SAVED_MODEL is None
    # Engines are declared by the strategies that run on them, not required.
    with pytest.raises(NotSupportedError, match=r"^OneMethod\(\) cannot run on CTranslate2"):
        search.ctranslate2_options()


def test_two_passes_is_off_unless_the_class_that_searches_declares_it():
    """A sampler whose draws depend on the batch row is safe by default: a class
    with its own search decodes in one pass unless it says otherwise."""

    class Drawing(Greedy):  # a search of its own: neither Greedy's word nor its engine
        def next_tokens(self, log_probs, tokens, settings):
            raise AssertionError("never searched")

    assert Strategy.TWO_PASSES is False and Drawing.TWO_PASSES is False
    assert Drawing.search is Strategy.search  # its one method is its search
    with pytest.raises(NotSupportedError):
        Drawing().ctranslate2_options()

    class Declared(Strategy):
        TWO_PASSES = True

        def next_tokens(self, log_probs, tokens, settings):
            raise AssertionError("never searched")

    class Rescored(Greedy):  # Greedy's search, its own score: Greedy's word holds
        def score(self, log_prob, length, settings):
            return log_prob / length

    assert Declared.TWO_PASSES is True and Rescored.TWO_PASSES is True
    assert Rescored().ctranslate2_options() == Greedy().ctranslate2_options()
    assert Rescored().score(-6.0, 3.0, {}) == -2.0


def test_a_subclass_is_registered_only_by_its_own_name():
    class Mine(Greedy):
        pass

    assert Mine.NAME is None and "greedy" in registered() and registered()["greedy"] is Greedy
    assert Mine.SAVED_MODEL is None and Greedy.SAVED_MODEL is not None  # "greedy" is taken
    assert Mine().pipeline_key() != Greedy().pipeline_key()
    taken = r"'greedy' for .*Other: the name of transformer\.decoding\.strategies\.Greedy already"
    with pytest.raises(ValueError, match=taken):
        class Other(Greedy, name="greedy"):
            pass
    assert registered()["greedy"] is Greedy


def test_static_fields_key_the_compiled_pipeline_and_settings_do_not():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Grouped(Beam):
        groups: int = 2  # not among SETTINGS: a static field, a pipeline of its own

    assert Beam(4, 0.6).pipeline_key() == Beam(6, 0.0, 2).pipeline_key()
    assert Grouped(groups=2).pipeline_key() != Grouped(groups=3).pipeline_key()
    assert Grouped(size=5, groups=2).pipeline_key() == Grouped(size=4, groups=2).pipeline_key()


def test_a_plain_class_is_keyed_by_its_attributes_and_a_list_is_refused():
    class Penalized(Greedy):  # not a dataclass: its attributes are its fields
        def __init__(self, penalty, words=()):
            self.penalty, self.words = penalty, words

    assert Penalized(1.5).pipeline_key() != Penalized(3.0).pipeline_key()
    assert Penalized(1.5).pipeline_key() == Penalized(1.5).pipeline_key()
    with pytest.raises(ValueError, match="must be hashable"):
        Penalized(1.5, words=["a"]).pipeline_key()


def test_an_engine_that_cannot_run_a_strategy_says_so_in_one_line():
    class Unsupported(Greedy):
        def ctranslate2_options(self):
            return self.not_supported("CTranslate2")

    with pytest.raises(NotSupportedError, match=r"Unsupported\(\) cannot run on CTranslate2; "
                                                r"translate with the TensorFlow engine\.$"):
        Unsupported().ctranslate2_options()
    assert issubclass(NotSupportedError, ValueError)  # the command lines' one-line errors


def test_the_built_in_strategies_declare_their_savedmodel_functions():
    assert Greedy.SAVED_MODEL == SavedModelFunction("greedy")
    assert Beam.SAVED_MODEL.inputs == (("beam_size", "size"), ("alpha", "alpha"))
    assert [setting for _, setting in Sample.SAVED_MODEL.inputs] == [
        name for name, _ in Sample.SETTINGS]
    assert Strategy.SAVED_MODEL is None and strategies.Strategy.NAME is None


def test_strategy_module_lets_the_command_lines_name_a_users_strategy(
        tmp_path, monkeypatch, capsys):
    from transformer.cli import serve as serve_cli
    from transformer.cli import translate as translate_cli

    module = "users_strategies"  # a module of the user's, made here
    (tmp_path / f"{module}.py").write_text(
        "import dataclasses\n"
        "from transformer.decoding.strategies import Greedy\n\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Thrifty(Greedy, name='users_thrifty'):\n"
        "    patience: int = 2\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit):  # not imported: an unknown name
        translate_cli.parse_args(["--run", ".", "--search", "users_thrifty", "o gato"])
    capsys.readouterr()
    args = translate_cli.parse_args(["--run", ".", "--strategy-module", module,
                                     "--search", "users_thrifty", "--setting", "patience=3",
                                     "o gato"])
    search = translate_cli.search_strategy(args)
    assert type(search).__name__ == "Thrifty" and search.patience == 3
    assert "--strategy-module" in serve_cli.build_parser().format_help()
    with pytest.raises(SystemExit):
        translate_cli.parse_args(["--run", ".", "--strategy-module", "no_such_module_here",
                                  "o gato"])
    assert "--strategy-module no_such_module_here: ModuleNotFoundError" in capsys.readouterr().err
