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


SLOT_BYTES = 8192  # SBUF bytes per partition given to each tile of ``tile_program``


def tile_program(inputs: dict[str, tuple[str, np.ndarray]], outputs: dict[str, tuple[str, tuple[int, int]]],
                 compute, target: str = "trn1") -> tuple[Program, dict[str, np.ndarray]]:
    """A program that DMAs each [P, F] input into SBUF, runs ``compute(tiles)`` and DMAs the outputs out.

    ``tiles`` maps every input and output name to its SBUF access pattern (one 8 KiB slot per
    partition each). Every compute instruction waits for the loads (semaphore 0) and signals
    semaphore 1, which the output DMAs wait on (for all of them: the body may span several
    engines). Returns the program and its input arrays.
    """
    from isa.dtypes import dtype as lookup

    tiles: dict[str, AccessPattern] = {}
    tensors, loads, stores, arrays = [], [], [], {}
    for slot, (name, (dt, array)) in enumerate(inputs.items()):
        parts, free = array.shape
        tiles[name] = sb(0, parts, slot * SLOT_BYTES, [[1, free]], dt)
        tensors.append((name, "input", dt, (parts, free)))
        arrays[name] = array.astype(lookup(dt).numpy)
        loads.append(ins("sp", "dma", dst=tiles[name], src=hb(name, 0, [[free, parts], [1, free]], dt),
                         queue=slot % 16, signals=[0]))
    for slot, (name, (dt, (parts, free))) in enumerate(outputs.items(), start=len(inputs)):
        tiles[name] = sb(0, parts, slot * SLOT_BYTES, [[1, free]], dt)
        tensors.append((name, "output", dt, (parts, free)))
        stores.append(ins("sp", "dma", dst=hb(name, 0, [[free, parts], [1, free]], dt), src=tiles[name],
                          queue=slot % 16, waits=[(1, 1)]))
    body = compute(tiles)
    for inst in body:
        inst.waits.append((0, len(loads)))
        inst.signals.append(1)
    for store in stores:
        store.waits[:] = [(1, len(body))]
    return program(tensors, loads + body + stores, target), arrays
