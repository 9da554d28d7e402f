"""Typed errors of the compiler: every failure a user can cause has its own class."""

from __future__ import annotations


class NeuroncError(Exception):
    """Base class of every error the compiler reports to a user."""


class HloParseError(NeuroncError):
    """Malformed HLO text; names line:column and the offending token."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        where = ""
        if line is not None:
            where = f"{source + ':' if source else ''}{line}:{column}: "
        super().__init__(f"{where}{message}")
        self.line, self.column, self.source = line, column, source


class VerificationError(NeuroncError):
    """The HLO module is ill-formed (shape/dtype mismatch, undefined name, cycle...)."""


class UnsupportedOpError(NeuroncError):
    """The model uses an operator the compiler cannot lower."""


class LoweringError(NeuroncError):
    """A supported op was used in a way the compiler cannot lower (names the op and source)."""


class CompilationError(NeuroncError):
    """A later stage (tiling, allocation, scheduling) could not handle the module."""


class ModelLoadError(NeuroncError):
    """A model file could not be loaded (raises, lacks get_model, wrong format)."""
