"""Typed errors raised by the ISA layer (assembler, container, emulator)."""

from __future__ import annotations


class IsaError(Exception):
    """Base class of every error the ISA layer raises."""


class AsmError(IsaError):
    """Malformed ISA text; names line:column and the offending token."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = f"{line}:{column}: " if line is not None else ""
        super().__init__(f"{where}{message}")
        self.line = line
        self.column = column


class NeffError(IsaError):
    """A .neff container that is truncated, corrupted, foreign or of another version."""


class ProgramError(IsaError):
    """A structurally invalid program (unknown tensor, bad operand, wrong engine)."""


class RuleViolation(IsaError):
    """An instruction broke a machine rule of machine-model.md (bounds, partitions, banks...)."""


class UninitializedReadError(IsaError):
    """Checked mode: an instruction read memory nothing wrote."""


class RaceError(IsaError):
    """Checked mode: two engines touched overlapping bytes with no semaphore ordering them."""


class DeadlockError(IsaError):
    """Every engine is waiting on a semaphore that can no longer be signalled."""


class InputError(IsaError):
    """Wrong number, shape or dtype of inputs given to a program."""


class IndirectIndexError(IsaError):
    """A dma_indirect with oob=error met an index that takes its row outside the tensor."""
