"""Names a package face imports on first use (PEP 562): `lazy_exports`."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, table: dict[str, str],
                 namespace: dict) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` for the names of `table`
    (name -> its module under `package`): a name's module is imported when the
    name is first asked for, and the name is then bound in the package's
    `namespace` (its `globals()`), so it is looked up once."""

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
