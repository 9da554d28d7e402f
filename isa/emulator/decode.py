"""Decode a program once into ``Op`` objects: rules checked, views built, costs computed.

Each ``Op`` carries a ``run`` closure over pre-built numpy views, so executing an instruction is a
handful of numpy calls with no per-instruction lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from isa.dtypes import DTYPES
from isa.emulator.memory import Memory
from isa.emulator.numerics import ACTIVATIONS, ALU, REDUCE, make_store, read_f32, read_int
from isa.emulator.rules import RuleChecker, describe, free_size
from isa.emulator.timing import COSTS, dma_effective_bytes
from isa.instructions import OPCODES
from isa.program import AccessPattern, Instruction, Program
from isa.target import Target

Runner = Callable[[], None]


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


class PeArray:
    """The systolic array's stationary tile, as fp32 [K, M]."""

    def __init__(self) -> None:
        self.stationary = np.zeros((0, 0), dtype=np.float32)


@dataclass
class Ctx:
    """What a numerics builder needs: the views of the operands and the attributes."""

    inst: Instruction
    views: dict[str, np.ndarray]
    pe: PeArray

    def attr(self, name: str) -> int | float | str:
        """The attribute's value, or its default from the opcode table."""
        if name in self.inst.attrs:
            return self.inst.attrs[name]
        for a in OPCODES[self.inst.opcode].attrs:
            if a.name == name:
                return a.default
        raise KeyError(name)


def _nop(ctx: Ctx) -> Runner:
    return lambda: None


def _load_stationary(ctx: Ctx) -> Runner:
    src, pe = ctx.views["src"], ctx.pe

    def run() -> None:
        pe.stationary = read_f32(src)

    return run


# MACs per BLAS call: OpenBLAS runs smaller GEMMs on one thread. Bigger ones spawn threads, and
# on a small shared machine (2 cores, parallel test workers) oversubscribed BLAS threads make a
# 128x128x512 product 20-100x slower than a few single-threaded calls.
BLAS_CHUNK_MACS = 1 << 18


def _multiply_moving(ctx: Ctx) -> Runner:
    dst, src, pe = ctx.views["dst"], ctx.views["src"], ctx.pe
    acc = bool(ctx.attr("acc"))
    m, n = dst.shape[0], free_size(ctx.inst.operands["src"])
    k = ctx.inst.operands["src"].partitions
    step = max(1, BLAS_CHUNK_MACS // max(1, k * m))
    product = np.empty((m, n), dtype=np.float32)

    def run() -> None:
        stationary_t = np.ascontiguousarray(pe.stationary.T)
        moving = read_f32(src)  # exact upcast; fp32 products accumulated in fp32
        for j in range(0, n, step):
            np.matmul(stationary_t, moving[:, j:j + step], out=product[:, j:j + step])
        if acc:
            dst[...] = (product + dst.reshape(m, n)).reshape(dst.shape)
        else:
            dst[...] = product.reshape(dst.shape)

    return run


def _activation(ctx: Ctx) -> Runner:
    v = ctx.views
    dst, src, bias, scale_vec = v["dst"], v["src"], v.get("bias"), v.get("scale_vec")
    func, store = ACTIVATIONS[ctx.attr("func")], make_store(ctx.inst.operands["dst"].dtype)
    scale = np.float32(ctx.attr("scale"))

    def run() -> None:
        x = read_f32(src)
        if scale_vec is not None:
            x = x * read_f32(scale_vec)
        elif scale != 1:
            x = x * scale
        if bias is not None:
            x = x + read_f32(bias)
        store(dst, func(x))

    return run


def _alu_reader(op: str) -> Callable[[np.ndarray], np.ndarray]:
    return read_int if ALU[op][0] == "int" else read_f32


def _tensor_tensor(ctx: Ctx) -> Runner:
    dst, a, b = ctx.views["dst"], ctx.views["a"], ctx.views["b"]
    op = ctx.attr("op")
    fn, read, store = ALU[op][1], _alu_reader(op), make_store(ctx.inst.operands["dst"].dtype)
    return lambda: store(dst, fn(read(a), read(b)))


def _tensor_scalar(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    op = ctx.attr("op")
    fn, read, store = ALU[op][1], _alu_reader(op), make_store(ctx.inst.operands["dst"].dtype)
    scalar = np.int64(ctx.attr("scalar")) if ALU[op][0] == "int" else np.float32(ctx.attr("scalar"))
    return lambda: store(dst, fn(read(src), scalar))


def _tensor_copy(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    store = make_store(ctx.inst.operands["dst"].dtype)
    if ctx.inst.operands["dst"].dtype == ctx.inst.operands["src"].dtype:
        return lambda: dst.__setitem__(Ellipsis, src.reshape(dst.shape))
    if src.dtype.kind in "iu":
        return lambda: store(dst, read_int(src))
    return lambda: store(dst, read_f32(src))


def _tensor_reduce(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    fn, store = REDUCE[ctx.attr("op")], make_store(ctx.inst.operands["dst"].dtype)
    return lambda: store(dst, fn(read_f32(src)))


def _memset(ctx: Ctx) -> Runner:
    dst = ctx.views["dst"]
    store = make_store(ctx.inst.operands["dst"].dtype)
    value = np.full(dst.shape, ctx.attr("value"), dtype=np.float32)
    return lambda: store(dst, value)


def _iota(ctx: Ctx) -> Runner:
    dst = ctx.views["dst"]
    parts, free = dst.shape[0], int(np.prod(dst.shape[1:]))
    base, mult = ctx.attr("base"), ctx.attr("channel_multiplier")
    values = base + mult * np.arange(parts, dtype=np.int64)[:, None] + np.arange(free, dtype=np.int64)
    store = make_store(ctx.inst.operands["dst"].dtype)
    return lambda: store(dst, values)


def _dma(ctx: Ctx) -> Runner:
    dst, src = ctx.views["dst"], ctx.views["src"]
    return lambda: dst.__setitem__(Ellipsis, src.reshape(dst.shape))


BUILDERS: dict[str, Callable[[Ctx], Runner]] = {
    "load_stationary": _load_stationary,
    "multiply_moving": _multiply_moving,
    "activation": _activation,
    "tensor_tensor": _tensor_tensor,
    "tensor_scalar": _tensor_scalar,
    "tensor_copy": _tensor_copy,
    "tensor_reduce": _tensor_reduce,
    "memset": _memset,
    "iota": _iota,
    "dma": _dma,
    "nop": _nop,
}


def decode_program(program: Program, target: Target, memory: Memory) -> list[Op]:
    """Check every instruction's rules and build its ``Op`` (views over ``memory``)."""
    rules = RuleChecker(program, target)
    pe = PeArray()
    stationary_k = 0
    ops: list[Op] = []
    for index, inst in enumerate(program.instructions):
        spec = rules.check(index, inst)
        views = {name: memory.view(ap) for name, ap in inst.operands.items()}
        reads = tuple(ap for name, ap in inst.operands.items() if spec.operand(name).access == "r")
        writes = tuple(ap for name, ap in inst.operands.items() if spec.operand(name).access == "w")
        op = Op(index=index, inst=inst, engine=inst.engine, opcode=inst.opcode,
                waits=tuple((int(s), int(v)) for s, v in inst.waits),
                signals=tuple(int(s) for s in inst.signals),
                duration=COSTS[spec.cost](target, inst),
                run=BUILDERS[inst.opcode](Ctx(inst, views, pe)),
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
