"""``dma_indirect``: its machine rules, numerics, cost and the rows it actually touches (checked mode).

The indirect side (``side``: ``src`` for a gather, ``dst`` for a scatter) is an HBM access
``hbm:T@OFF[S,P][free...]`` whose row p starts at element ``OFF / size + index[p] * S`` (instead of
``p * S``); ``index`` is an integer [P, 1] tile in SBUF, read when the transfer starts. Which bytes the
transfer touches is known only then, so:

- the decode-time rules check everything static (engine, queue, dtypes, shapes, the index tile, that one
  row fits in T) and leave the row bounds to run time (``oob=error``: ``IndirectIndexError``;
  ``oob=skip``: the row is not moved);
- checked mode asks ``resolve`` for the rows of the current index values and checks them like any
  other access (never-written bytes, races), byte for byte;
- the cost is the ``dma`` class's, with one descriptor per contiguous run of every row: a gather of R
  rows of B bytes pays R descriptors, so small rows are slow and large rows approach the queue rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from isa.dtypes import DTYPES
from isa.emulator.memory import Memory
from isa.emulator.rules import OPCODE_RULES, RuleChecker, free_size
from isa.emulator.timing import contiguous_runs
from isa.errors import IndirectIndexError, ProgramError
from isa.program import AccessPattern, Instruction
from isa.target import Target

Resolver = Callable[[], list[tuple[AccessPattern, bool]]]


def sides(inst: Instruction) -> tuple[str, str]:
    """(the indirect operand, the direct one)."""
    side = str(inst.attrs.get("side", "src"))
    return side, "dst" if side == "src" else "src"


# -- rules ------------------------------------------------------------------------------------------------

def check_dma_indirect(checker: RuleChecker, who: str, inst: Instruction) -> None:
    side, other = sides(inst)
    ind, direct, index = inst.operands[side], inst.operands[other], inst.operands["index"]
    fail = checker._fail
    queues = checker.target.data["dma"]["queues"]
    queue = inst.attrs.get("queue", 0)
    if not 0 <= queue < queues:
        fail(who, "DMA queue out of range", f"queue {queue}, target has {queues}")
    if ind.memory != "hbm":
        fail(who, f"operand {side}: the indirect side of dma_indirect must be in HBM", ind.memory)
    decl = checker.program.tensors.get(ind.tensor or "")
    if decl is None:
        raise ProgramError(f"{who}: operand {side}: unknown HBM tensor {ind.tensor!r}")
    if ind.dtype not in DTYPES:
        fail(who, f"operand {side}: unknown dtype", repr(ind.dtype))
    if len(ind.pattern) > 4 or any(c < 1 for _, c in ind.pattern) or ind.partitions < 1:
        fail(who, f"operand {side}: bad free pattern or row count",
             f"{ind.partitions} rows, pattern {list(ind.pattern)}")
    if ind.partition_stride < 1:
        fail(who, f"operand {side}: the row scale (partition stride) must be >= 1", str(ind.partition_stride))
    size = DTYPES[ind.dtype].itemsize
    if ind.offset % size:
        fail(who, f"operand {side}: the offset must be a whole number of {ind.dtype} elements", str(ind.offset))
    lo, hi = row_span(ind)
    if hi - lo > decl.nbytes:
        fail(who, f"operand {side}: one row does not fit in HBM tensor {ind.tensor}",
             f"{hi - lo} bytes per row, tensor of {decl.nbytes}")
    if not DTYPES[index.dtype].is_integer or index.dtype == "pred":
        fail(who, "operand index: the index tile must be an integer type", index.dtype)
    if free_size(index) != 1 or index.partitions != ind.partitions:
        fail(who, "operand index must be [P, 1] with P the rows of the indirect side",
             f"index {index.partitions}x{free_size(index)}, {ind.partitions} rows")
    if direct.dtype != ind.dtype:
        fail(who, "DMA sides differ in dtype", f"dst {inst.operands['dst'].dtype}, src {inst.operands['src'].dtype}")
    if direct.partitions != ind.partitions or free_size(direct) != free_size(ind):
        fail(who, f"operands {other} and {side} differ in shape",
             f"{direct.partitions}x{free_size(direct)} vs {ind.partitions}x{free_size(ind)}")
    if inst.attrs.get("rmw", "none") != "none":
        if side != "dst":
            fail(who, "rmw needs side=dst (it combines into the indirectly addressed rows)", f"side={side}")
        if ind.dtype == "pred":
            fail(who, "rmw=add on pred rows", ind.dtype)


OPCODE_RULES["dma_indirect"] = check_dma_indirect


# -- geometry ---------------------------------------------------------------------------------------------

def row_span(ap: AccessPattern) -> tuple[int, int]:
    """[lo, hi) bytes of one row relative to its start."""
    size = DTYPES[ap.dtype].itemsize
    lo = hi = 0
    for stride, count in ap.pattern:
        reach = stride * (count - 1) * size
        lo += min(0, reach)
        hi += max(0, reach)
    return lo, hi + size


def _free_offsets(ap: AccessPattern) -> np.ndarray:
    """Element offset of every element of one row, in C order of the free pattern."""
    offsets = np.zeros(1, dtype=np.int64)
    for stride, count in ap.pattern:
        offsets = (offsets[:, None] + np.arange(count, dtype=np.int64) * stride).reshape(-1)
    return offsets


def indirect_effective_bytes(target: Target, inst: Instruction) -> float:
    """machine-model.md "DMA" (fixed cost + bytes / queue rate; small runs below peak): the ``dma``
    class's descriptor model, with every row of the indirect side its own descriptor(s). ``rmw=add``
    reads the destination rows as well as writing them."""
    side, other = sides(inst)
    ind, direct = inst.operands[side], inst.operands[other]
    overhead = target.data["dma"]["descriptor_overhead_bytes"]
    one_row = replace(ind, partitions=1, partition_stride=0)
    runs = max(ind.partitions * contiguous_runs(one_row), contiguous_runs(direct))
    nbytes = direct.nbytes * (2 if inst.attrs.get("rmw", "none") != "none" else 1)
    return nbytes + overhead * runs


# -- numerics ---------------------------------------------------------------------------------------------

class IndirectTransfer:
    """The run closure and the resolver of one decoded dma_indirect."""

    def __init__(self, inst: Instruction, memory: Memory, views: dict[str, np.ndarray], label: str):
        self.side, other = sides(inst)
        self.ind = inst.operands[self.side]
        self.label = label
        self.oob = str(inst.attrs.get("oob", "error"))
        self.rmw = str(inst.attrs.get("rmw", "none"))
        self.direct = views[other]
        self.direct_ap = inst.operands[other]
        self.index = views["index"]
        dt = DTYPES[self.ind.dtype].numpy
        self.size = dt.itemsize
        raw = memory.hbm[self.ind.tensor]
        self.flat = raw[: raw.size // self.size * self.size].view(dt)
        self.base = self.ind.offset // self.size
        self.scale = self.ind.partition_stride
        self.free = _free_offsets(self.ind)
        self.fmin, self.fmax = int(self.free.min()), int(self.free.max())

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(the partitions whose rows are moved, their start elements) for the current index tile."""
        idx = self.index.reshape(-1).astype(np.int64)
        starts = self.base + idx * self.scale
        ok = (starts + self.fmin >= 0) & (starts + self.fmax < self.flat.size)
        if ok.all():
            return np.arange(len(starts)), starts
        if self.oob == "error":
            p = int(np.flatnonzero(~ok)[0])
            raise IndirectIndexError(
                f"{self.label}: index {int(idx[p])} at partition {p} (of {int((~ok).sum())} out of range) takes "
                f"its row to elements [{int(starts[p] + self.fmin)}, {int(starts[p] + self.fmax) + 1}) of HBM "
                f"tensor {self.ind.tensor}, which holds {self.flat.size} {self.ind.dtype} elements (oob=error)")
        keep = np.flatnonzero(ok)
        return keep, starts[keep]

    def run(self) -> None:
        parts, starts = self.rows()
        if not len(parts):
            return
        addrs = starts[:, None] + self.free[None, :]
        direct = self.direct
        if self.side == "src":
            values = self.flat[addrs]
            if len(parts) == direct.shape[0]:
                direct[...] = values.reshape(direct.shape)
            else:
                direct[parts] = values.reshape((len(parts), *direct.shape[1:]))
            return
        values = direct[parts].reshape(len(parts), -1)
        if self.rmw == "add":
            np.add.at(self.flat, addrs.reshape(-1), values.reshape(-1))  # in order: repeats accumulate
        elif np.unique(addrs).size == addrs.size:
            self.flat[addrs] = values
        else:
            for row, value in zip(addrs, values, strict=True):  # overlapping rows: partition order, last wins
                self.flat[row] = value

    def resolve(self) -> list[tuple[AccessPattern, bool]]:
        """The accesses of the rows the current index tile selects, each with whether it writes: on the
        indirect side (one pattern for evenly spaced rows; rmw rows are read and written) and on the direct
        side (the partitions of the moved rows only: a skipped row is neither read nor written)."""
        parts, starts = self.rows()
        if not len(starts):
            return []
        direct = [(ap, self.side == "src") for ap in _partition_runs(self.direct_ap, parts)]
        row = replace(self.ind, partitions=1, partition_stride=0)
        steps = np.diff(starts)
        if len(starts) == 1:
            aps = [replace(row, offset=int(starts[0]) * self.size)]
        elif steps[0] > 0 and np.all(steps == steps[0]):
            aps = [replace(row, offset=int(starts[0]) * self.size, partitions=len(starts),
                           partition_stride=int(steps[0]))]
        else:
            aps = [replace(row, offset=int(s) * self.size) for s in np.unique(starts)]
        if self.side == "src":
            return direct + [(ap, False) for ap in aps]
        reads = [(ap, False) for ap in aps] if self.rmw != "none" else []
        return direct + reads + [(ap, True) for ap in aps]


def _partition_runs(ap: AccessPattern, parts: np.ndarray) -> list[AccessPattern]:
    """The rows `parts` (sorted partitions of the access) as accesses of runs of consecutive rows."""
    if len(parts) == ap.partitions:
        return [ap]
    breaks = np.flatnonzero(np.diff(parts) != 1) + 1
    runs = []
    for run in np.split(parts, breaks):
        first, count = int(run[0]), len(run)
        if ap.memory == "hbm":
            runs.append(replace(ap, offset=ap.offset + first * ap.partition_stride * ap.itemsize, partitions=count,
                                partition_stride=ap.partition_stride if count > 1 else 0))
        else:
            runs.append(replace(ap, start_partition=ap.start_partition + first, partitions=count))
    return runs
