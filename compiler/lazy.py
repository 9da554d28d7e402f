"""Modules that load on first use, so that a path which never touches them does not pay their import.

A compile-cache hit of an HLO file, `neuronc disasm` or `neuronc run` of a .neff need neither torch (~1.7 s of
import) nor the frontend, the pass pipeline or the backend; a torch model's compile needs them all. Importing
them through ``lazy_import`` keeps the import graph as it is (the arrows still point down) while the cost is
paid where the module is first used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for a module until an attribute is read from it; then imports it and reads from it.

    Unlike ``importlib.util.LazyLoader``, nothing is put in ``sys.modules`` before the import: a library that
    walks ``sys.modules`` while it is itself being imported (torch does) cannot set the import off halfway.
    """

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r}, {state}>"


def lazy_import(name: str) -> Any:
    """The module ``name`` when it is already imported, else a ``LazyModule`` that imports it on first use.
    A module that does not exist is refused now (its parent package is imported to find it)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    return LazyModule(name)
