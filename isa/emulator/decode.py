"""Decode a program once into ``Op`` objects: rules checked, views built, costs computed.

Each ``Op`` carries a ``run`` closure over pre-built numpy views (``isa.emulator.kernels``), so
executing an instruction is a handful of numpy calls with no per-instruction lookups.

``rules=False`` (``--checks off``) skips the machine-rule checks of ``isa.emulator.rules`` and keeps
only the structural ones (known engine, opcode and operands): for programs the compiler produced,
whose rules were checked when they were first run or tested; a broken program then fails with
whatever numpy says instead of a RuleViolation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from isa.dtypes import DTYPES
from isa.emulator.indirect import IndirectTransfer, indirect_effective_bytes
from isa.emulator.kernels import BUILDERS, Ctx, EngineState, Runner
from isa.emulator.memory import Memory
from isa.emulator.rules import RuleChecker, describe, free_size
from isa.emulator.timing import COSTS, dependent_extra, dma_effective_bytes
from isa.errors import ProgramError
from isa.instructions import OPCODES, OpcodeSpec, indirect_side
from isa.program import ENGINES, AccessPattern, Instruction, Program
from isa.target import Target


@dataclass(eq=False)
class Op:
    """One decoded instruction."""

    index: int
    inst: Instruction
    engine: str
    opcode: str
    waits: tuple[tuple[int, int], ...]
    signals: tuple[int, ...]
    duration: float  # ns on its engine (dma: the SP trigger)
    run: Runner
    reads: tuple[AccessPattern, ...] = ()
    writes: tuple[AccessPattern, ...] = ()
    macs: int = 0
    # dma only
    queue: int = -1
    transfer_bytes: float = 0.0  # effective bytes, descriptor overhead included
    hbm_read: int = 0
    hbm_write: int = 0
    label: str = field(default="", repr=False)
    is_load: bool = False  # load_stationary: may overlap the previous PE instruction
    # dma_indirect: the HBM rows its index tile selects right now, as (access, writes) pairs (checked mode)
    resolve: Callable[[], list[tuple[AccessPattern, bool]]] | None = None


def _structure(index: int, inst: Instruction, known: dict[tuple, OpcodeSpec]) -> OpcodeSpec:
    """The structural checks kept when the machine rules are off: engine, opcode, operands (``known``: the
    (engine, opcode, operand names) already found valid)."""
    key = (inst.engine, inst.opcode, tuple(inst.operands))
    spec = known.get(key)
    if spec is None:
        spec = known[key] = _check_structure(index, inst)
    return spec


def _check_structure(index: int, inst: Instruction) -> OpcodeSpec:
    spec = OPCODES.get(inst.opcode)
    if inst.engine not in ENGINES or spec is None:
        raise ProgramError(f"{describe(index, inst)}: unknown engine or opcode")
    names = {o.name for o in spec.operands}
    if not names.issuperset(inst.operands) or any(not o.optional and o.name not in inst.operands
                                                  for o in spec.operands):
        raise ProgramError(f"{describe(index, inst)}: operands {', '.join(inst.operands)} do not match "
                           f"{spec.name}'s ({', '.join(names)})")
    return spec


def decode_program(program: Program, target: Target, memory: Memory, *, rules: bool = True,
                   state: EngineState | None = None) -> list[Op]:
    """Check every instruction's rules (unless ``rules=False``) and build its ``Op`` (views over
    ``memory``; engine state in ``state``, a fresh one when not given)."""
    checker = RuleChecker(program, target) if rules else None
    state = state or EngineState(target.partitions)
    stationary_k = 0
    previous: dict[str, Instruction] = {}  # the last instruction of each engine so far
    access: dict[str, dict[str, str]] = {name: {o.name: o.access for o in spec.operands}
                                         for name, spec in OPCODES.items()}
    known, make_view = memory.views, memory.make_view  # one view per distinct pattern
    structures: dict[tuple, OpcodeSpec] = {}
    ops: list[Op] = []
    for index, inst in enumerate(program.instructions):
        spec = checker.check(index, inst) if checker else _structure(index, inst, structures)
        operands = inst.operands
        kinds = access[inst.opcode]
        side = indirect_side(inst.opcode, inst.attrs)  # dma_indirect: resolved per run, no static view
        moved = ("dst", "src") if side else ()  # dma_indirect: its rows come from resolve() at transfer time
        views: dict[str, np.ndarray] = {}
        read_aps: list[AccessPattern] = []
        write_aps: list[AccessPattern] = []
        for name, ap in operands.items():
            if name != side:
                array = known.get(ap)
                views[name] = array if array is not None else make_view(ap)
            if name not in moved:
                kind = kinds[name]
                if kind == "r":
                    read_aps.append(ap)
                elif kind == "w":
                    write_aps.append(ap)
        reads, writes = tuple(read_aps), tuple(write_aps)
        duration = COSTS[spec.cost](target, inst) + dependent_extra(target, inst, previous.get(inst.engine))
        previous[inst.engine] = inst
        indirect = IndirectTransfer(inst, memory, views, describe(index, inst)) if side else None
        op = Op(index=index, inst=inst, engine=inst.engine, opcode=inst.opcode,
                waits=tuple((int(s), int(v)) for s, v in inst.waits),
                signals=tuple(int(s) for s in inst.signals),
                duration=duration, run=indirect.run if indirect else BUILDERS[inst.opcode](Ctx(inst, views, state)),
                reads=reads, writes=writes, label=describe(index, inst),
                is_load=inst.opcode == "load_stationary", resolve=indirect.resolve if indirect else None)
        if inst.opcode == "load_stationary":
            stationary_k = inst.operands["src"].partitions
        elif inst.opcode == "multiply_moving":
            dst = inst.operands["dst"]
            op.macs = stationary_k * dst.partitions * free_size(dst)
            if inst.attrs.get("acc", 0):
                op.reads = (*op.reads, dst)
        elif inst.opcode == "dma":
            dst, src = inst.operands["dst"], inst.operands["src"]
            op.queue = int(inst.attrs.get("queue", 0))
            op.transfer_bytes = dma_effective_bytes(target, dst, src)
            nbytes = src.partitions * free_size(src) * DTYPES[src.dtype].itemsize
            op.hbm_read = nbytes if src.memory == "hbm" else 0
            op.hbm_write = nbytes if dst.memory == "hbm" else 0
        elif indirect is not None:
            op.queue = int(inst.attrs.get("queue", 0))
            op.transfer_bytes = indirect_effective_bytes(target, inst)
            nbytes = inst.operands[side].nbytes
            rmw = inst.attrs.get("rmw", "none") != "none"
            direct = inst.operands["dst" if side == "src" else "src"]
            op.hbm_read = nbytes * (side == "src" or rmw) + (nbytes if direct.memory == "hbm" and side == "dst" else 0)
            op.hbm_write = nbytes * (side == "dst") + (nbytes if direct.memory == "hbm" and side == "src" else 0)
        ops.append(op)
    return ops
