"""Small builders for hand-written emulator test programs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from isa.program import AccessPattern, Instruction, Program

Pairs = Sequence[Sequence[int]]


def _pairs(pattern: Pairs) -> tuple[tuple[int, int], ...]:
    return tuple((int(s), int(c)) for s, c in pattern)


def sb(p0: int, p1: int, off: int, pattern: Pairs, dt: str = "f32") -> AccessPattern:
    """SBUF partitions [p0, p1), byte offset ``off``, free (stride, count) pairs."""
    return AccessPattern("sbuf", dt, off, _pairs(pattern), p0, p1 - p0)


def ps(p0: int, p1: int, off: int, pattern: Pairs, dt: str = "f32") -> AccessPattern:
    return AccessPattern("psum", dt, off, _pairs(pattern), p0, p1 - p0)


def hb(name: str, off: int, pattern: Pairs, dt: str = "f32") -> AccessPattern:
    """HBM tensor ``name``: the first pair is the partition dimension (stride, count)."""
    (pstride, pcount), *free = _pairs(pattern)
    return AccessPattern("hbm", dt, off, tuple(free), partitions=pcount, tensor=name,
                         partition_stride=pstride)


def ins(engine: str, opcode: str, *, waits: Iterable[tuple[int, int]] = (), signals: Iterable[int] = (),
        line: int | None = None, **fields: object) -> Instruction:
    """An instruction; access-pattern keyword arguments are operands, the rest attributes."""
    operands = {k: v for k, v in fields.items() if isinstance(v, AccessPattern)}
    attrs = {k: v for k, v in fields.items() if not isinstance(v, AccessPattern)}
    return Instruction(engine, opcode, operands, attrs, list(waits), list(signals), line)


def program(tensors: Iterable[tuple[str, str, str, tuple[int, ...]]], instructions: list[Instruction],
            target: str = "trn1", constants: dict[str, np.ndarray] | None = None,
            meta: dict | None = None) -> Program:
    """``tensors``: (name, kind, dtype, shape) tuples."""
    prog = Program(target)
    for name, kind, dt, shape in tensors:
        prog.add_tensor(name, kind, dt, shape)
    prog.instructions = list(instructions)
    prog.constants = dict(constants or {})
    prog.meta = dict(meta or {})
    return prog
