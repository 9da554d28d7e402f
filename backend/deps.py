"""Dependencies between instructions: RAW, WAR and WAW on SBUF/PSUM boxes and HBM byte runs.

On chip an access is a box (partition range x byte range within each partition). In HBM it is a set of
contiguous byte runs of one tensor, compared exactly (tiles of a row-major matrix interleave, and a
bounding box would serialize every store). Tensors nothing writes (inputs, constants) are not tracked.

PE's stationary tile is one more resource: load_stationary writes it, multiply_moving reads it, which
chains every stationary group (a load and the matmuls that use it) after the previous one in program
order. Without that chain (`chain_stationary=False`) a matmul depends on its own load only, and the
scheduler must keep each group together on PE (`stationary_groups`) but may order the groups freely.
"""

from __future__ import annotations

import numpy as np

from isa.dtypes import dtype as isa_dtype
from isa.instructions import OPCODES, indirect_side
from isa.program import AccessPattern, Instruction

STATIONARY = "pe:stationary"
WHOLE = (0, 1, 0, 1 << 62)  # the box of a whole HBM tensor (a dma_indirect's indirectly addressed side)


def _runs(ap: AccessPattern) -> tuple[np.ndarray, int]:
    """Sorted start bytes and the common length of the contiguous runs of an HBM access."""
    item = isa_dtype(ap.dtype).itemsize
    dims = [(ap.partition_stride, ap.partitions)] + list(ap.pattern)
    dims = [(s, c) for s, c in dims if c > 1]
    run = 1
    while dims and dims[-1][0] == run:
        run *= dims[-1][1]
        dims.pop()
    starts = np.array([ap.offset], dtype=np.int64)
    for stride, count in dims:
        starts = (starts[:, None] + np.arange(count, dtype=np.int64) * stride * item).reshape(-1)
    return np.sort(starts), run * item


def _runs_overlap(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]) -> bool:
    if len(a[0]) > len(b[0]):  # search the fewer runs in the more (symmetric; 32 lookups, not 16384)
        a, b = b, a
    (sa, la), (sb, lb) = a, b
    if len(sa) == 1 and len(sb) == 1:  # one run each (most DMA of whole rows): no numpy needed
        a0, b0 = int(sa[0]), int(sb[0])
        return a0 < b0 + lb and b0 < a0 + la
    if a is b:
        return len(sa) > 0
    idx = np.searchsorted(sb, sa + la, side="left") - 1
    ok = idx >= 0
    return bool(np.any(sb[idx[ok]] + lb > sa[ok]))


class _Space:
    """The live accesses of one memory space (sbuf, psum, an HBM tensor or PE's stationary)."""

    def __init__(self) -> None:
        self.n = 0
        self.box = np.zeros((64, 4), dtype=np.int64)  # p0, p1, lo, hi
        self.write = np.zeros(64, dtype=bool)
        self.alive = np.zeros(64, dtype=bool)
        self.op = np.zeros(64, dtype=np.int64)
        self.runs: list[tuple[np.ndarray, int] | None] = []

    def add(self, box: tuple[int, int, int, int], write: bool, op: int, runs) -> None:
        if self.n == len(self.write):
            keep = np.flatnonzero(self.alive[:self.n])
            size = max(64, 2 * len(keep))
            box_, write_, op_ = self.box[keep], self.write[keep], self.op[keep]
            self.runs = [self.runs[i] for i in keep]
            self.box = np.zeros((size, 4), dtype=np.int64)
            self.write = np.zeros(size, dtype=bool)
            self.alive = np.zeros(size, dtype=bool)
            self.op = np.zeros(size, dtype=np.int64)
            n = len(keep)
            self.box[:n], self.write[:n], self.op[:n], self.alive[:n] = box_, write_, op_, True
            self.n = n
        i = self.n
        self.box[i] = box
        self.write[i] = write
        self.alive[i] = True
        self.op[i] = op
        self.runs.append(runs)
        self.n += 1

    def conflicts(self, box, write: bool, runs) -> tuple[np.ndarray, np.ndarray]:
        """Indices of live overlapping records that conflict (any write involved), and the ops."""
        n = self.n
        b = self.box[:n]
        mask = (self.alive[:n] & (b[:, 0] < box[1]) & (box[0] < b[:, 1]) & (b[:, 2] < box[3]) & (box[2] < b[:, 3]))
        if not write:
            mask &= self.write[:n]
        idx = np.flatnonzero(mask)
        if runs is not None and len(idx):
            idx = np.array([i for i in idx if _runs_overlap(runs, self.runs[i])],
                           dtype=np.int64)
        return idx, self.op[idx] if len(idx) else np.zeros(0, dtype=np.int64)

    def cover(self, box, exclude: int) -> None:
        """Retire records inside `box` (a dense write that every later conflicting access will see)."""
        n = self.n
        b = self.box[:n]
        mask = (self.alive[:n] & (b[:, 0] >= box[0]) & (b[:, 1] <= box[1]) & (b[:, 2] >= box[2])
                & (b[:, 3] <= box[3]))
        mask[exclude] = False
        self.alive[:n] &= ~mask


def _access(ap: AccessPattern) -> tuple[str, tuple[int, int, int, int], tuple[np.ndarray, int] | None, bool]:
    """(space, box, runs or None, dense) of an access pattern."""
    item = isa_dtype(ap.dtype).itemsize
    lo = hi = ap.offset
    dims = list(ap.pattern) + ([(ap.partition_stride, ap.partitions)] if ap.memory == "hbm" else [])
    for stride, count in dims:
        reach = stride * (count - 1) * item
        lo += min(0, reach)
        hi += max(0, reach)
    hi += item
    if ap.memory == "hbm":
        runs = _runs(ap)
        dense = len(runs[0]) == 1 and runs[1] == hi - lo
        return f"hbm:{ap.tensor}", (0, 1, lo, hi), runs, dense
    box = (ap.start_partition, ap.start_partition + ap.partitions, lo, hi)
    expected = 1
    for stride, count in sorted((s, c) for s, c in ap.pattern if c > 1):
        if stride != expected:
            return ap.memory, box, None, False
        expected *= count
    return ap.memory, box, None, True


def stationary_groups(ops: list[Instruction]) -> list[int]:
    """For every multiply_moving the index of the load_stationary it uses (the last one before it in
    program order); -1 for every other instruction (and for a matmul no load precedes)."""
    groups, load = [], -1
    for i, inst in enumerate(ops):
        if inst.opcode == "load_stationary":
            load = i
        groups.append(load if inst.opcode == "multiply_moving" else -1)
    return groups


def dependencies(ops: list[Instruction], untracked: set[str], chain_stationary: bool = True) -> list[list[int]]:
    """For every instruction, the earlier instructions it must follow.

    `untracked` names HBM tensors no instruction writes (inputs, constants). With `chain_stationary`
    False, PE's stationary tile links a matmul to its own load only (see the module docstring).
    """
    groups = None if chain_stationary else stationary_groups(ops)
    spaces: dict[str, _Space] = {}
    preds: list[list[int]] = []
    for i, inst in enumerate(ops):
        spec = OPCODES[inst.opcode]
        accesses = []
        indirect = indirect_side(inst.opcode, inst.attrs)
        for operand in spec.operands:
            ap = inst.operands.get(operand.name)
            if ap is None or (ap.memory == "hbm" and ap.tensor in untracked):
                continue
            if operand.name == indirect:  # rows chosen at run time: the whole tensor
                accesses.append((f"hbm:{ap.tensor}", WHOLE, (np.zeros(1, dtype=np.int64), WHOLE[3]), False,
                                 operand.access == "w"))
                if inst.attrs.get("rmw", "none") != "none":
                    accesses.append((f"hbm:{ap.tensor}", WHOLE, (np.zeros(1, dtype=np.int64), WHOLE[3]), False,
                                     False))
                continue
            space, box, runs, dense = _access(ap)
            accesses.append((space, box, runs, dense, operand.access == "w"))
        found: set[int] = set()
        if groups is not None:
            if groups[i] >= 0:
                found.add(groups[i])
        elif inst.opcode == "load_stationary":
            accesses.append((STATIONARY, (0, 1, 0, 1), None, True, True))
        elif inst.opcode == "multiply_moving":
            accesses.append((STATIONARY, (0, 1, 0, 1), None, True, False))
        for space, box, runs, _, write in accesses:
            table = spaces.get(space)
            if table is not None:
                _, conflict_ops = table.conflicts(box, write, runs)
                found.update(int(o) for o in conflict_ops)
        for space, box, runs, dense, write in accesses:
            table = spaces.setdefault(space, _Space())
            table.add(box, write, i, runs)
            if write and dense:
                table.cover(box, table.n - 1)
        found.discard(i)
        preds.append(sorted(found))
    return preds
