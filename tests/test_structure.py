"""The package's shape (and the size of bench/'s scripts), read from the source
with `ast` (nothing is imported).

No module over 650 lines and no function over 90 lines of code (argparse
declarations aside), in `transformer` and in `bench/` (subfolders included);
no import cycle between the modules of `transformer`, at most 3 imports of
`transformer` modules inside functions, and the console scripts of
pyproject.toml point at modules with a `main`. docs/design.md states the same
three limits, and so does this docstring (both are checked).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "transformer"
BENCH = REPO / "bench"

MAX_MODULE_LINES = 650
MAX_FUNCTION_CODE_LINES = 90
# `transformer.decoding.engines`, which imports the translator and the exports
# (and TensorFlow) only when an engine is loaded, so that the command lines
# check their options first, and the search strategies, which reach the search
# loops (TensorFlow) only when they first search, so that importing
# `transformer.decoding.strategies` does not start TensorFlow. One is spare.
# (train.py reaches the trainer through the lazy `transformer.run` package.)
MAX_FUNCTION_LEVEL_IMPORTS = 3

# Exemptions, none today. Entries are module paths (relative to the repository),
# exempt from all three limits, or "path::function" for one function over its limit.
_KNOWN_OVER_LIMIT: set[str] = set()


def _modules() -> dict[str, Path]:
    """Dotted module name -> path, for every module of the package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _sized_files() -> list[Path]:
    """The files the size limits apply to: the package's modules and bench/'s scripts."""
    # Not the peer benchmark's virtual environment (bench/peer_joeynmt/.venv).
    bench = [path for path in sorted(BENCH.rglob("*.py")) if ".venv" not in path.parts]
    return [*_modules().values(), *bench]


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _is_argparse_declaration(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("add_argument", "add_argument_group", "add_mutually_exclusive_group")
    )


def _code_lines(function: ast.AST, source_lines: list[str]) -> int:
    """Lines of `function` holding code: no blank, comment, docstring or argparse line."""
    skipped = set()
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        skipped.update(range(body[0].lineno, body[0].end_lineno + 1))
    for node in ast.walk(function):
        if _is_argparse_declaration(node):
            skipped.update(range(node.lineno, node.end_lineno + 1))
    count = 0
    for number in range(function.lineno, function.end_lineno + 1):
        text = source_lines[number - 1].strip()
        if text and not text.startswith("#") and number not in skipped:
            count += 1
    return count


def _imported_modules(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The `transformer` modules an import statement imports (submodules resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:  # relative import
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = []
    for alias in node.names:
        submodule = f"{target}.{alias.name}"
        if submodule in known:
            found.append(submodule)
        elif target in known:
            found.append(target)
    return sorted(set(found))


def _import_graph():
    """(module -> imported transformer modules, [(path, line) of function-level imports])."""
    modules = _modules()
    known = set(modules)
    graph, function_level = {}, []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = {
            id(node) for function in _functions(tree) for node in ast.walk(function)
            if isinstance(node, (ast.Import, ast.ImportFrom))
        }
        edges = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = _imported_modules(node, module, path.name == "__init__.py", known)
            edges.update(t for t in targets if t != module)
            if targets and id(node) in inside:
                function_level.append(f"{_relative(path)}:{node.lineno}")
        graph[module] = edges
    return graph, function_level


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "active"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "active":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


# Experiment figures (BLEU scores, percentages, seeds, speed-ups, seconds gained)
# belong in BENCHMARKS.md; the library's comments, docstrings and help texts
# say what and why and point there.
_EXPERIMENT_FIGURE = re.compile(
    r"\d\s?%(?!\w)|\d\s?BLEU|BLEU\s(?:of\s)?\d|(?<![-\w])seeds?\s\d"
    r"|\d(?:\.\d+)?x\s(?:the|faster|slower)|\d\s?(?:s|seconds|minutes)\s(?:more|less|faster)"
)


def test_no_experiment_figures_in_the_library():
    found = [
        f"{_relative(path)}:{number}: {line.strip()}"
        for path in _modules().values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _EXPERIMENT_FIGURE.search(line)
    ]
    assert found == []


def test_the_size_limits_cover_the_package_and_the_bench_scripts():
    checked = {_relative(path) for path in _sized_files()}
    assert {"transformer/run/trainer.py", "bench/train_speed.py", "bench/speed/step.py",
            "bench/peer_joeynmt/run.py"} <= checked


def test_no_module_over_the_line_limit():
    over = {
        _relative(path): len(path.read_text(encoding="utf-8").splitlines())
        for path in _sized_files()
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES
    }
    assert set(over) - _KNOWN_OVER_LIMIT == set(), over


def test_no_function_over_the_line_limit():
    over = {}
    for path in _sized_files():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for function in _functions(ast.parse(source)):
            count = _code_lines(function, lines)
            if count > MAX_FUNCTION_CODE_LINES:
                over[f"{_relative(path)}::{function.name}"] = count
    unexpected = {
        name: count for name, count in over.items()
        if name not in _KNOWN_OVER_LIMIT and name.split("::")[0] not in _KNOWN_OVER_LIMIT
    }
    assert unexpected == {}


# How docs/design.md and this module's docstring state the limits.
_STATED_LIMITS = {
    "MAX_MODULE_LINES": r"module (?:is )?over (\d+) lines",
    "MAX_FUNCTION_CODE_LINES": r"function (?:is )?over (\d+) lines of code",
    "MAX_FUNCTION_LEVEL_IMPORTS": r"at most (\d+) imports of `transformer` modules",
}


def _stated_limits(text: str) -> dict[str, list[int]]:
    text = " ".join(text.split())  # a sentence may wrap anywhere
    return {name: [int(n) for n in re.findall(pattern, text)]
            for name, pattern in _STATED_LIMITS.items()}


def test_the_design_document_and_this_docstring_state_the_enforced_limits():
    enforced = {name: [globals()[name]] for name in _STATED_LIMITS}
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    assert _stated_limits(design) == enforced
    assert _stated_limits(__doc__) == enforced


def test_no_import_cycle_between_transformer_modules():
    graph, _ = _import_graph()
    assert "transformer.run.trainer" in graph  # the graph covers the subpackages
    assert _find_cycle(graph) is None, " -> ".join(_find_cycle(graph))


def test_few_function_level_imports_of_the_package():
    _, function_level = _import_graph()
    counted = [where for where in function_level if where.split(":")[0] not in _KNOWN_OVER_LIMIT]
    assert len(counted) <= MAX_FUNCTION_LEVEL_IMPORTS, counted


def test_translator_does_not_import_the_run_package():
    graph, _ = _import_graph()
    def is_run(name):
        return name == "transformer.run" or name.startswith("transformer.run.")

    assert not {m for m in graph["transformer.decoding.translator"] if is_run(m)}
    assert not {m for m in graph["transformer.rundir"] if is_run(m)}


def _lazy_table(tree: ast.Module) -> dict[str, str] | None:
    """A package face's table of names imported on first use (`_EXPORTS` or
    `_LAZY`: name -> module under the package), or None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in ("_EXPORTS", "_LAZY")
            for target in node.targets
        ):
            return ast.literal_eval(node.value)
    return None


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    """Name -> module of the imports under the face's `if TYPE_CHECKING:`."""
    imports = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    for alias in statement.names:
                        imports[alias.asname or alias.name] = statement.module
    return imports


def test_every_lazily_imported_name_is_a_plain_import_for_static_tools():
    """A package face that imports names on first use (to keep TensorFlow out of
    an import that does not need it) lists the same names, from the same
    modules, as plain imports under `if TYPE_CHECKING:`, where readers, type
    checkers and editors find them."""
    faces = 0
    for module, path in _modules().items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        table = _lazy_table(tree)
        if table is None:
            continue
        faces += 1
        expected = {name: f"{module}.{submodule}" for name, submodule in table.items()}
        assert _type_checking_imports(tree) == expected, _relative(path)
    assert faces == 3  # transformer, transformer.data, transformer.run


def test_console_scripts_point_at_modules_with_main():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert section, "pyproject.toml has no [project.scripts]"
    scripts = dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+:\w+)"', section.group(1), re.M))
    assert scripts == {
        "transformer-train": "transformer.cli.train:main",
        "transformer-translate": "transformer.cli.translate:main",
        "transformer-export": "transformer.cli.export:main",
        "transformer-serve": "transformer.cli.serve:main",
    }
    modules = _modules()
    for target in scripts.values():
        module, function = target.split(":")
        assert module in modules, module
        tree = ast.parse(modules[module].read_text(encoding="utf-8"))
        assert function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_attention_projections_are_called_only_inside_the_attention_layer():
    """One decoder: nothing outside attention.py projects with `wq`/`wk`/`wv` itself."""
    callers = []
    for name, path in _modules().items():
        if name == "transformer.attention":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("wq", "wk", "wv")):
                callers.append(f"{_relative(path)}:{node.lineno}")
    assert not callers


def test_every_design_document_the_code_cites_exists():
    cited = set()
    for path in [*PACKAGE.rglob("*.py"), REPO / "README.md", *(REPO / "bench").glob("*.py")]:
        cited |= set(re.findall(r"\b(docs/[\w./-]+\.md|DESIGN\.md)\b",
                                path.read_text(encoding="utf-8")))
    assert cited, "nothing cites the design document"
    assert all((REPO / doc).is_file() for doc in cited), cited


def test_the_library_does_not_import_the_command_lines():
    """Only `transformer.cli` imports `transformer.cli`: the library (the server
    included) has what the command lines share, never the other way round."""
    graph, _ = _import_graph()

    def is_cli(name):
        return name == "transformer.cli" or name.startswith("transformer.cli.")

    assert "transformer.serving.app" in graph
    assert {module for module, imported in graph.items()
            if not is_cli(module) and any(is_cli(m) for m in imported)} == set()
