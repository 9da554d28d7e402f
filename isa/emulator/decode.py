"""Decode a program once into ``Op`` objects: rules checked, views built, costs computed.

Each ``Op`` carries a ``run`` closure over pre-built numpy views (``isa.emulator.kernels``), so
executing an instruction is a handful of numpy calls with no per-instruction lookups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isa.dtypes import DTYPES
from isa.emulator.kernels import BUILDERS, Ctx, EngineState, Runner
from isa.emulator.memory import Memory
from isa.emulator.rules import RuleChecker, describe, free_size
from isa.emulator.timing import COSTS, dependent_extra, dma_effective_bytes
from isa.program import AccessPattern, Instruction, Program
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


def decode_program(program: Program, target: Target, memory: Memory) -> list[Op]:
    """Check every instruction's rules and build its ``Op`` (views over ``memory``)."""
    rules = RuleChecker(program, target)
    state = EngineState(target.partitions)
    stationary_k = 0
    previous: dict[str, Instruction] = {}  # the last instruction of each engine so far
    ops: list[Op] = []
    for index, inst in enumerate(program.instructions):
        spec = rules.check(index, inst)
        views = {name: memory.view(ap) for name, ap in inst.operands.items()}
        reads = tuple(ap for name, ap in inst.operands.items() if spec.operand(name).access == "r")
        writes = tuple(ap for name, ap in inst.operands.items() if spec.operand(name).access == "w")
        duration = COSTS[spec.cost](target, inst) + dependent_extra(target, inst, previous.get(inst.engine))
        previous[inst.engine] = inst
        op = Op(index=index, inst=inst, engine=inst.engine, opcode=inst.opcode,
                waits=tuple((int(s), int(v)) for s, v in inst.waits),
                signals=tuple(int(s) for s in inst.signals),
                duration=duration, run=BUILDERS[inst.opcode](Ctx(inst, views, state)),
                reads=reads, writes=writes, label=describe(index, inst),
                is_load=inst.opcode == "load_stationary")
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
        ops.append(op)
    return ops
