"""The pass interface (XLA's ``HloPassInterface``): a named HLO-to-HLO transformation.

A pass is an object with a ``name`` and ``run(module) -> bool`` (True when it changed the module). A pass that
explains its choices (fusion) also offers ``decision_lines()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol, runtime_checkable

from hlo.ir import Module


class HloPass(ABC):
    """One HLO-to-HLO transformation. Subclasses set ``name`` and implement ``run``."""

    name: str = ""

    @abstractmethod
    def run(self, module: Module) -> bool:
        """Transform ``module`` in place; return True if anything changed."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


@runtime_checkable
class RecordsDecisions(Protocol):
    """A pass that explains itself (the fusion pass): one human-readable line per decision of its last run."""

    def decision_lines(self) -> list[str]: ...
