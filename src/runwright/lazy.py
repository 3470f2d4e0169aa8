"""Packages whose public names are imported on first use (PEP 562).

`runwright.ckpt` and `runwright.data` publish names whose modules need torch. A command that only
reads a manifest or a fence (the CLI, `runwright status`, the store) imports one light submodule
of such a package, and Python runs the package's `__init__` first: with eager imports there, it
would pay seconds for torch it never uses."""

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, home: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose public name N lives in submodule
    `home[N]` (relative to the package, dotted)."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        where = home.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where}"), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__
