"""Tiled kernels -> ISA: instruction selection, SBUF/PSUM allocation, multi-engine scheduling.

``compile_module`` and ``BackendResult`` (backend.api) load on first use: the registries and options of this
package are read by the compiler's option parsing, which must not pay for the whole backend.
"""

from importlib import import_module
from typing import Any

from backend.options import BackendOptions

__all__ = ["BackendOptions", "BackendResult", "compile_module"]
_LAZY = {"BackendResult": "backend.api", "compile_module": "backend.api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'backend' has no attribute {name!r}")
