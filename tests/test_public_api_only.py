"""The paper's modules use public Keras and TensorFlow API only.

positional, masking, attention, layers, model and training implement the
paper and are what a reader studies; what reaches into Keras' private members
for speed lives in `transformer.kernels`. A private member is a name with a
leading underscore that is not a dunder. Read from the source with `ast`, a
paper module must not:

- access `obj._name` on anything but `self` or `cls` (`super()._name`,
  `optimizer._learning_rate`, `getattr(obj, "_name")` included);
- access `self._name` (or `cls._name`) unless the module itself defines
  `_name` (assigns it, defines it as a method or function, or sets it with
  `setattr`): otherwise it is inherited from Keras;
- import from a private module (`keras.src`, `tensorflow.python`, `_name`)
  or use `tf.__internal__`;

and, introspected after import, no method or class attribute of its classes
may override a private member of a Keras or TensorFlow base class. Nor does a
paper module import `transformer.kernels`: it takes the kernels' drop-in
layers and optimizer from `transformer.seams`, which chooses them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import keras
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
PAPER_MODULES = ("positional", "masking", "attention", "layers", "model", "training")
# Calls that name an attribute by a string: (function, whether it sets the attribute).
_BY_NAME = {"getattr": False, "hasattr": False, "delattr": False, "setattr": True,
            "__getattribute__": False, "__setattr__": True, "__delattr__": False}
_PRIVATE_MODULES = ("keras.src", "tensorflow.python", "tf_keras")


def _is_private(name: str) -> bool:
    return name.startswith("_") and len(name) > 1 and not (
        name.startswith("__") and name.endswith("__"))


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _by_name(node: ast.Call):
    """(target, name, sets) of `getattr(target, "name")` and the like, else None."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else None)
    if called not in _BY_NAME or len(node.args) < 2:
        return None
    name = node.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    return node.args[0], name.value, _BY_NAME[called]


def _defined_names(tree: ast.AST) -> set[str]:
    """Names the module defines itself: functions, classes, assignments, `setattr`s."""
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Call) and (found := _by_name(node)) and found[2]:
            defined.add(found[1])
    return defined


def _private_import(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return None
    for name in names:
        parts = name.split(".")
        external = parts[0] in ("keras", "tensorflow", "tf_keras")
        if external and (name.startswith(_PRIVATE_MODULES) or any(map(_is_private, parts))):
            return name
    return None


def private_uses(source: str) -> list[str]:
    """`line: what` for each private member of Keras or TensorFlow that `source` touches."""
    tree = ast.parse(source)
    defined = _defined_names(tree)
    found = []
    for node in ast.walk(tree):
        where = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute):
            target, name = node.value, node.attr
        elif isinstance(node, ast.Call) and (by_name := _by_name(node)):
            target, name, _ = by_name
        else:
            imported = _private_import(node)
            if imported:
                found.append(f"{where}: import {imported}")
            continue
        if name == "__internal__":
            found.append(f"{where}: {ast.unparse(node)}")
        elif not _is_private(name):
            continue
        elif not _is_self(target):
            found.append(f"{where}: {ast.unparse(node)} (a private member of another object)")
        elif name not in defined:
            found.append(f"{where}: {ast.unparse(node)} (inherited, not defined in the module)")
    return sorted(set(found), key=lambda item: (int(item.split(":")[0]), item))


def _is_library(cls: type) -> bool:
    return cls.__module__.split(".")[0] in ("keras", "tensorflow", "tf_keras")


def private_overrides(classes) -> list[str]:
    """`Class.name` for each private member of a Keras or TensorFlow base class
    that one of `classes` overrides (a method or a class attribute)."""
    found = []
    for cls in classes:
        bases = [base for base in cls.__mro__[1:] if _is_library(base)]
        for name in cls.__dict__:
            if _is_private(name) and any(name in vars(base) for base in bases):
                found.append(f"{cls.__qualname__}.{name}")
    return found


def _module_classes(module) -> list[type]:
    return [value for _, value in inspect.getmembers(module, inspect.isclass)
            if value.__module__ == module.__name__]


@pytest.mark.parametrize("name", PAPER_MODULES)
def test_the_paper_modules_touch_no_private_member_of_keras(name):
    found = private_uses((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
    assert found == [], (
        f"transformer/{name}.py uses private members of Keras or TensorFlow (use public "
        f"API, or move the speed trick to transformer/kernels/): {found}")


@pytest.mark.parametrize("name", PAPER_MODULES)
def test_the_paper_classes_override_no_private_member_of_keras(name):
    module = importlib.import_module(f"transformer.{name}")
    classes = _module_classes(module)
    assert classes or name == "masking"
    found = private_overrides(classes)
    assert found == [], f"transformer/{name}.py overrides private members of Keras: {found}"


def kernel_imports(source: str) -> list[str]:
    """`line: module` for each import of `transformer.kernels` (or a module in it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names
                  if name == "transformer.kernels" or name.startswith("transformer.kernels.")]
    return sorted(set(found))


@pytest.mark.parametrize("name", PAPER_MODULES)
def test_the_paper_modules_import_no_kernel(name):
    found = kernel_imports((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
    assert found == [], (
        f"transformer/{name}.py imports a speed kernel: {found}; take the layer or "
        "optimizer from transformer.seams, which chooses the kernels in one place")


def test_nothing_outside_the_seam_imports_a_kernel():
    """The run and the command lines take the kernels' services from the seam too."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("kernels/") or relative == "seams.py":
            continue
        imports = kernel_imports(path.read_text(encoding="utf-8"))
        if imports:
            found[relative] = imports
    assert found == {}, f"take these from transformer.seams: {found}"


def test_keras_own_layers_can_be_chosen_and_compute_the_same(tmp_path):
    """`seams.use_keras_layers()` builds on Keras's own classes, with the same weights
    and outputs; leaving its block chooses the kernels again."""
    import keras
    import numpy as np

    from transformer import seams
    from transformer.layers import EncoderLayer

    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    fast = EncoderLayer(d_model=16, num_heads=2, dff=32, normalize_first=True)
    with seams.use_keras_layers():
        plain = EncoderLayer(d_model=16, num_heads=2, dff=32, normalize_first=True)
    assert type(plain.ffn_layernorm) is keras.layers.LayerNormalization
    assert type(plain.ffn_dropout) is keras.layers.Dropout
    assert seams.LayerNormalization is not keras.layers.LayerNormalization
    assert type(fast.ffn_layernorm) is seams.LayerNormalization
    fast(x), plain(x)
    plain.set_weights(fast.get_weights())
    for ours, keras_own in zip(keras.tree.flatten(fast(x)), keras.tree.flatten(plain(x)),
                               strict=True):  # the output and the attention weights
        np.testing.assert_allclose(keras.ops.convert_to_numpy(keras_own),
                                   keras.ops.convert_to_numpy(ours), rtol=1e-5, atol=1e-5)
    seams.use_keras_layers()  # for good, until told otherwise
    try:
        assert seams.Dropout is keras.layers.Dropout
    finally:
        seams.use_keras_layers(False)
    assert seams.Dropout is not keras.layers.Dropout


def test_kernel_imports_are_found():
    source = "import transformer.kernels\nfrom transformer.kernels.fast_ops import Dropout\n"
    assert kernel_imports(source) == [
        "1: transformer.kernels", "2: transformer.kernels.fast_ops",
        "2: transformer.kernels.fast_ops.Dropout"]
    assert kernel_imports("from transformer.seams import Dropout\n") == []


def test_the_paper_modules_build_the_seams_kernels():
    """The seams' layers are what a model is built of: Keras's own classes or their
    drop-in subclasses, chosen in `transformer.seams` alone."""
    import keras

    from transformer import seams
    from transformer.attention import EncoderSelfAttention

    block = EncoderSelfAttention(16, 2)
    assert type(block.layernorm) is seams.LayerNormalization
    assert type(block.dropout) is seams.Dropout
    assert issubclass(seams.LayerNormalization, keras.layers.LayerNormalization)
    assert issubclass(seams.Dropout, keras.layers.Dropout)


# ----------------------------------------------- the checks find what they must

_SPEED_TRICKS = textwrap.dedent('''
    import keras
    from keras.src.optimizers import base_optimizer
    import tensorflow as tf


    class FusedAdam(keras.optimizers.Adam):
        def _backend_update_step(self, grads, variables, learning_rate):
            super()._backend_update_step(grads, variables, learning_rate)
            index = self._get_variable_index(variables[0])
            self._cache = tf.__internal__
            return self._momentums[index], self._cache


    def schedule(optimizer):
        return getattr(optimizer, "_learning_rate", None)


    def use_average(model):
        model.optimizer._overwrite_model_variables_with_average_value(model.weights)
''')


def test_private_uses_are_found():
    """The speed tricks that training.py held before `transformer.kernels`."""
    found = private_uses(_SPEED_TRICKS)
    assert [item.split(":")[0] for item in found] == [
        "3", "9", "10", "11", "12", "16", "20"], found
    assert "super()._backend_update_step" in found[1]
    assert "self._get_variable_index" in found[2] and "inherited" in found[2]
    assert "tf.__internal__" in found[3]
    assert "self._momentums" in found[4] and "self._cache" not in found[4]
    assert "_learning_rate" in found[5] and "another object" in found[5]


def test_private_members_the_module_defines_are_its_own():
    source = textwrap.dedent('''
        import keras


        class Layer(keras.layers.Layer):
            def __init__(self, table):
                super().__init__()
                object.__setattr__(self, "_table", table)
                self._scale = 2.0

            def _scaled(self, x):
                return x * self._scale + self._table.size + self.__class__.__name__.count("L")

            def call(self, x):
                return self._scaled(x)
    ''')
    assert private_uses(source) == []


def test_private_overrides_of_keras_classes_are_found():
    class Sneaky(keras.optimizers.Adam):
        def _backend_update_step(self, grads, trainable_variables, learning_rate):
            return None

        def _own_helper(self):
            return None

    class Plain(keras.layers.Layer):
        def _own_helper(self):
            return None

    assert private_overrides([Sneaky, Plain]) == [f"{Sneaky.__qualname__}._backend_update_step"]
