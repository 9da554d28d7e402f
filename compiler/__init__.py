"""neuronc compiler: HLO IR, passes, and the public API (compile, load)."""

from __future__ import annotations

from typing import Any

__all__ = ["compile", "load", "Executable"]


def __getattr__(name: str) -> Any:
    # The driver imports every layer; load it lazily so that `import compiler.hlo.ir`
    # from the backend or frontend does not pull the whole compiler in.
    if name in __all__:
        from compiler import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")
