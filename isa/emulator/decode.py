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
from dataclasses import dataclass
from functools import partial

import numpy as np

from isa.emulator.indirect import IndirectTransfer, indirect_effective_bytes
from isa.emulator.kernels import BUILDERS, Ctx, EngineState, Runner
from isa.emulator.memory import Memory
from isa.emulator.rules import CheckedStructure, RuleChecker, describe, free_size
from isa.emulator.timing import COSTS, contiguous_runs, dependent_extra
from isa.errors import ProgramError
from isa.instructions import OPCODES, OpcodeSpec, indirect_side
from isa.program import ENGINES, AccessPattern, Instruction, Program
from isa.target import Target


@dataclass(eq=False, slots=True)
class Op:
    """One decoded instruction (slotted: a program decodes tens of thousands, which the GC then scans)."""

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
    is_load: bool = False  # load_stationary: may overlap the previous PE instruction
    # dma_indirect: the HBM rows its index tile selects right now, as (access, writes) pairs (checked mode)
    resolve: Callable[[], list[tuple[AccessPattern, bool]]] | None = None
    source: int = -1  # a dynamic instance of a static op (isa.emulator.control): the static op's index

    @property
    def label(self) -> str:
        """How errors name the instruction (``describe``), built when asked: decode makes tens of thousands."""
        return describe(self.index if self.source < 0 else self.source, self.inst)


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


# cost classes whose figure depends only on the target and the engine: computed once per (class, engine)
ENGINE_COSTS = frozenset({"dma", "sync", "control", "reg_load", "branch"})


def _windows(base: np.ndarray, dt: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray | None:
    """Every view of this layout over ``base``, by its byte offset: ``windows[offset]`` is
    ``np.ndarray(shape, dt, base, offset, strides)`` (same memory, shape, strides and flags, the alignment
    found for its own address) at a fraction of the constructor's cost. None when a stride is negative or the
    layout does not fit in ``base``."""
    if any(stride < 0 for stride in strides):
        return None
    positions = base.nbytes - (sum(stride * (count - 1) for stride, count in zip(strides, shape)) + dt.itemsize)
    if positions < 0:
        return None
    return np.ndarray((positions + 1, *shape), dt, base, 0, (1, *strides))


_ALL = slice(None)


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether a layout's elements lie one after the other in C order (numpy's C-contiguous: dimensions of one
    element may have any stride)."""
    step = itemsize
    for count, stride in zip(reversed(shape), reversed(strides)):
        if count != 1 and stride != step:
            return False
        step *= count
    return True


def _reshaped(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``src.reshape(shape)`` when that is a view of the same memory (no copy), else None."""
    view = src.view()
    try:
        view.shape = shape
    except AttributeError:
        return None
    return view


def _dma_runner(dst: np.ndarray, src: np.ndarray) -> Runner:
    """``dst[...] = src.reshape(dst.shape)``: with the reshaped source built once when it is a view (a C call
    per run, no Python frame)."""
    source = src if src.shape == dst.shape else _reshaped(src, dst.shape)
    if source is None:
        return lambda: dst.__setitem__(Ellipsis, src.reshape(dst.shape))
    return partial(dst.__setitem__, Ellipsis, source)


def _view_at(geometry: tuple, offset: int) -> np.ndarray:
    """The view of a geometry (``decode_program``'s ``geometries`` entry) starting at byte ``offset`` of its buffer:
    from its windows when they reach it, else built."""
    base, dt, shape, strides, _, windows, positions = geometry[:7]
    return windows[offset] if 0 <= offset < positions else np.ndarray(shape, dt, base, offset, strides)


class _Plan:
    """What decoding needs of one instruction structure (engine, opcode, operand names), found once: the spec,
    the cost (a fixed figure when it depends only on the engine), the operands' access kinds in the
    instruction's order and whether it is a dma_indirect."""

    __slots__ = ("spec", "cost", "duration", "dependent", "kinds", "indirect")

    def __init__(self, spec: OpcodeSpec, inst: Instruction, target: Target, dependent: frozenset[str]):
        self.spec = spec
        self.cost = COSTS[spec.cost]
        self.duration = self.cost(target, inst) if spec.cost in ENGINE_COSTS else None
        self.dependent = inst.engine in dependent
        access = {o.name: o.access for o in spec.operands}
        self.kinds = tuple(access[name] for name in inst.operands)
        self.indirect = inst.opcode == "dma_indirect"  # its side (an attribute) found per instruction


class _Twin:
    """What instructions of one structure, operands (pattern objects) and attributes share: the numerics closure,
    the patterns read and written, the cost before the dependent overhead, and the rule checker's structure."""

    __slots__ = ("run", "reads", "writes", "duration", "checked")

    def __init__(self, run: Runner, reads: tuple[AccessPattern, ...], writes: tuple[AccessPattern, ...],
                 duration: float, checked: CheckedStructure | None):
        self.run, self.reads, self.writes, self.duration = run, reads, writes, duration
        self.checked = checked  # the rules' view of its structure (checks on)


def _built(inst: Instruction, plan: _Plan, target: Target, state: EngineState,
           view_of: Callable[[AccessPattern], np.ndarray]
           ) -> tuple[Runner, tuple[AccessPattern, ...], tuple[AccessPattern, ...], float]:
    """The numerics closure, reads, writes and cost (before the dependent overhead) of an instruction that is
    not a DMA."""
    views: dict[str, np.ndarray] = {}
    reads: list[AccessPattern] = []
    writes: list[AccessPattern] = []
    for (name, ap), kind in zip(inst.operands.items(), plan.kinds):
        views[name] = view_of(ap)
        if kind == "r":
            reads.append(ap)
        elif kind == "w":
            writes.append(ap)
    if inst.opcode == "multiply_moving" and inst.attrs.get("acc", 0):
        reads.append(inst.operands["dst"])
    duration = plan.duration if plan.duration is not None else plan.cost(target, inst)
    return BUILDERS[inst.opcode](Ctx(inst, views, state)), tuple(reads), tuple(writes), duration


def decode_program(program: Program, target: Target, memory: Memory, *, rules: bool = True,
                   state: EngineState | None = None) -> list[Op]:
    """Check every instruction's rules (unless ``rules=False``) and build its ``Op`` (views over
    ``memory``; engine state in ``state``, a fresh one when not given).

    Per-instruction work is kept to dictionary lookups: the compiler's programs share one
    ``AccessPattern`` object per distinct pattern (the .neff decoder builds one per encoding), so views,
    DMA run counts and sizes are looked up by identity, and found per geometry (the pattern but its start)
    when new; what depends only on an instruction's structure (engine, opcode, operand names) is found once
    per structure, and costs that depend only on the target and engine once per engine. A dma (most of a
    program) takes a short path of its own."""
    checker = RuleChecker(program, target) if rules else None
    state = state or EngineState(target.partitions)
    stationary_k = 0
    # the last instruction of each engine so far (engines with a dependent overhead), with its twin (None: none)
    previous: dict[str, tuple[Instruction, _Twin | None]] = {}
    twins: dict[tuple, _Twin] = {}
    extras: dict[tuple[_Twin, _Twin], float] = {}  # a twin's duration after a twin on its engine
    geometry_of = memory.geometry_of
    # id(pattern) -> (its view or None until asked for, its shape, contiguous_runs, nbytes, is it in HBM, its bytes
    # as a memoryview when they are contiguous, its geometry, its offset in the buffer); patterns live as long as
    # the program
    by_id: dict[int, tuple] = {}
    # the geometry (the pattern but where it starts) -> (buffer, dtype, shape, strides, row, windows, their count,
    # runs, nbytes, hbm, the buffer's bytes as a memoryview when the layout is contiguous, their count)
    geometries: dict[tuple, tuple] = {}
    flat_buffers: dict[int, memoryview] = {}  # id(buffer) -> its bytes
    overhead = target.data["dma"]["descriptor_overhead_bytes"]
    dependent = frozenset(target.data["stream"]["dependent_overhead_engines"])
    plans: dict[tuple, _Plan] = {}
    ops: list[Op] = []
    append = ops.append

    def info_of(ap: AccessPattern) -> tuple:
        """``by_id``'s entry of a pattern not seen before; all but the view and bytes, and the view's layout, are
        the same for patterns that differ only in where they start. A pattern whose bytes are contiguous gets
        them as a memoryview (a DMA between two such copies bytes) and its view only when asked for
        (``view_of``)."""
        key = (ap.pattern, ap.memory, ap.tensor, ap.dtype, ap.partitions, ap.partition_stride)
        geometry = geometries.get(key)
        if geometry is None:
            base, dt, shape, strides, row = layout = geometry_of(ap)
            windows = _windows(base, dt, shape, strides)
            flat = None
            if base.flags.c_contiguous and _contiguous(shape, strides, dt.itemsize):
                flat = flat_buffers.get(id(base))
                if flat is None:
                    flat = flat_buffers[id(base)] = memoryview(base).cast("B")
            geometry = geometries[key] = (*layout, windows, 0 if windows is None else len(windows),
                                          contiguous_runs(ap), ap.nbytes, ap.memory == "hbm", flat,
                                          0 if flat is None else len(flat))
        base, dt, shape, strides, row, windows, positions, runs, nbytes, hbm, flat, flat_bytes = geometry
        offset = ap.offset if row is None else ap.start_partition * row + ap.offset
        if flat is not None and 0 <= offset and offset + nbytes <= flat_bytes:
            info = by_id[id(ap)] = (None, shape, runs, nbytes, hbm, flat[offset:offset + nbytes], geometry, offset)
            return info
        info = by_id[id(ap)] = (_view_at(geometry, offset), shape, runs, nbytes, hbm, None, geometry, offset)
        return info

    def view_of(ap: AccessPattern) -> np.ndarray:
        info = by_id.get(id(ap)) or info_of(ap)
        view = info[0]
        if view is None:
            view = _view_at(info[6], info[7])
            by_id[id(ap)] = (view, *info[1:])
        return view

    for index, inst in enumerate(program.instructions):
        engine, opcode, operands = inst.engine, inst.opcode, inst.operands
        key = (engine, opcode, *operands)
        plan = plans.get(key)
        if plan is None:
            spec = checker.structure(index, inst).spec if checker is not None else _check_structure(index, inst)
            plan = plans[key] = _Plan(spec, inst, target, dependent)
        twin = None
        if opcode == "dma" or plan.indirect:
            if checker is not None:
                checker.check(index, inst)
        else:
            # an instruction of the same structure, operands (the same pattern objects: the same views) and
            # attributes as one decoded before runs the same numerics at the same cost, and passes the same
            # operand rules: the repeated layers of a model reuse their tiles' addresses, so most have a twin
            attrs = inst.attrs
            twin_key = (plan, *map(id, operands.values()), *attrs, *attrs.values(), *map(type, attrs.values()))
            twin = twins.get(twin_key)
            if twin is None:
                checked = None
                if checker is not None:
                    checked = checker.structure(index, inst)
                    checker.check_as(index, inst, checked)
                twin = twins[twin_key] = _Twin(*_built(inst, plan, target, state, view_of), checked)
            elif checker is not None:  # its operands passed as the twin's; its semaphores and opcode rule now
                checker.check_as(index, inst, twin.checked, operands_known=True)
        waits, signals = inst.waits, inst.signals
        if waits:
            waits = tuple([(int(s), int(v)) for s, v in waits])
        else:
            waits = ()
        signals = tuple([int(s) for s in signals]) if signals else ()
        duration = plan.duration
        if opcode == "dma":  # the bulk of a program: its own short path
            if duration is None:  # a dma on an engine whose cost is not fixed: not the table's
                duration = plan.cost(target, inst)
            dst, src = operands["dst"], operands["src"]
            _, _, dst_runs, dst_bytes, dst_hbm, dst_flat, _, _ = by_id.get(id(dst)) or info_of(dst)
            _, _, src_runs, nbytes, src_hbm, src_flat, _, _ = by_id.get(id(src)) or info_of(src)
            if dst_flat is not None and src_flat is not None and dst_bytes == nbytes and dst.dtype == src.dtype:
                # contiguous on both sides, one type: ``dst[...] = src.reshape(dst.shape)`` is a copy of bytes
                # (memmove: overlapping sides too), without numpy's indexing
                run = partial(dst_flat.__setitem__, _ALL, src_flat)
            else:
                run = _dma_runner(view_of(dst), view_of(src))
            append(Op(index, inst, engine, opcode, waits, signals, duration, run, (src,), (dst,), 0,
                      int(inst.attrs.get("queue", 0)),
                      nbytes + overhead * (src_runs if src_runs > dst_runs else dst_runs),  # dma_effective_bytes
                      nbytes if src_hbm else 0, nbytes if dst_hbm else 0))
            if plan.dependent:
                previous[engine] = (inst, None)
            continue
        if twin is not None:
            run, reads, writes, base = twin.run, twin.reads, twin.writes, twin.duration
            if plan.dependent:  # the figure depends on the instruction before on the engine too
                before = previous.get(engine)
                if before is None or before[1] is None:  # first on its engine, or after an instruction without a twin
                    duration = base + dependent_extra(target, inst, before[0] if before is not None else None)
                else:
                    pair = (twin, before[1])
                    duration = extras.get(pair)
                    if duration is None:
                        duration = extras[pair] = base + dependent_extra(target, inst, before[0])
                previous[engine] = (inst, twin)
            else:
                duration = base
            op = Op(index, inst, engine, opcode, waits, signals, duration, run, reads, writes,
                    is_load=opcode == "load_stationary")
            if opcode == "load_stationary":
                stationary_k = operands["src"].partitions
            elif opcode == "multiply_moving":
                dst = operands["dst"]
                op.macs = stationary_k * dst.partitions * free_size(dst)
            append(op)
            continue
        attrs = inst.attrs
        side = indirect_side(opcode, attrs)  # dma_indirect: resolved per run, no static view of the side
        if duration is None:
            duration = plan.cost(target, inst)
            if plan.dependent:
                before = previous.get(engine)
                duration += dependent_extra(target, inst, before[0] if before is not None else None)
        if plan.dependent:
            previous[engine] = (inst, None)
        views: dict[str, np.ndarray] = {}
        read_aps: list[AccessPattern] = []
        write_aps: list[AccessPattern] = []
        for (name, ap), kind in zip(operands.items(), plan.kinds):
            if name != side:
                views[name] = view_of(ap)
            if name != "dst" and name != "src":  # dma_indirect: its rows come from resolve()
                if kind == "r":
                    read_aps.append(ap)
                elif kind == "w":
                    write_aps.append(ap)
        indirect = IndirectTransfer(inst, memory, views, describe(index, inst))
        op = Op(index, inst, engine, opcode, waits, signals, duration, indirect.run, tuple(read_aps),
                tuple(write_aps), resolve=indirect.resolve)
        op.queue = int(attrs.get("queue", 0))
        op.transfer_bytes = indirect_effective_bytes(target, inst)
        nbytes = operands[side].nbytes
        rmw = attrs.get("rmw", "none") != "none"
        direct = operands["dst" if side == "src" else "src"]
        op.hbm_read = nbytes * (side == "src" or rmw) + (nbytes if direct.memory == "hbm" and side == "dst" else 0)
        op.hbm_write = nbytes * (side == "dst") + (nbytes if direct.memory == "hbm" and side == "src" else 0)
        append(op)
    return ops
