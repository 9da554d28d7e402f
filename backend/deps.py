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


def _period(runs: tuple[np.ndarray, int]) -> tuple[int, int, int]:
    """(period, first, last) when the runs repeat every `period` bytes and each stays within its period
    (rows of a tile in a wider matrix): every byte then lies at an offset in [first, last) modulo the
    period; (0, 0, 0) otherwise."""
    starts, length = runs
    if len(starts) < 2:
        return 0, 0, 0
    period = int(starts[1] - starts[0])
    if period <= 0:  # a run read twice (a broadcast)
        return 0, 0, 0
    first = int(starts[0]) % period
    if first + length > period or (len(starts) > 2 and np.any(np.diff(starts) != period)):
        return 0, 0, 0
    return period, first, first + length


class _Space:
    """The live accesses of one memory space (sbuf, psum, an HBM tensor or PE's stationary): the box
    bounds as one contiguous array each (the masks below read whole columns). An HBM access also keeps
    its runs, and their period (_period) when they have one: two accesses of one period whose offsets
    within it are disjoint never overlap (column tiles of a matrix), decided without their runs.

    On chip, reads of one exact box share a record (`more`: its ops after the first): they conflict, are
    covered and are trimmed alike, and thousands of matmuls read one identity or stationary box (Llama:
    ~4,200 live records, ~1,400 boxes), which every query's masks would otherwise scan."""

    FIELDS = ("p0", "p1", "lo", "hi", "write", "alive", "op", "period", "first", "last")

    def __init__(self) -> None:
        self.n = 0
        self.compactions = 0  # how many times add() moved the records (indices change)
        self._alloc(64)
        self.runs: list[tuple[np.ndarray, int] | None] = []
        self.more: dict[int, list[int]] = {}  # record -> the ops after its first (merged on-chip reads)
        self.read_of: dict[tuple[int, int, int, int], int] = {}  # on-chip box -> its latest read record

    def _alloc(self, size: int) -> None:
        for name in self.FIELDS:
            setattr(self, name, np.zeros(size, dtype=bool if name in ("write", "alive") else np.int64))

    def add(self, box: tuple[int, int, int, int], write: bool, op: int, runs) -> None:
        if not write and runs is None:
            j = self.read_of.get(box)
            if (j is not None and self.alive[j] and self.p0[j] == box[0] and self.p1[j] == box[1]
                    and self.lo[j] == box[2] and self.hi[j] == box[3]):
                self.more.setdefault(j, []).append(op)
                return
        if self.n == len(self.write):
            keep = np.flatnonzero(self.alive[:self.n])
            old = [getattr(self, name)[keep] for name in self.FIELDS]
            self.runs = [self.runs[i] for i in keep]
            if self.more:
                moved = dict(zip(keep.tolist(), range(len(keep))))
                self.more = {moved[j]: ops for j, ops in self.more.items() if j in moved}
            self.read_of = {}
            self.compactions += 1
            self._alloc(max(64, 2 * len(keep)))
            n = len(keep)
            for name, values in zip(self.FIELDS, old):
                getattr(self, name)[:n] = values
            self.n = n
        i = self.n
        self.p0[i], self.p1[i], self.lo[i], self.hi[i] = box
        self.write[i] = write
        self.alive[i] = True
        self.op[i] = op
        if runs is not None:
            self.period[i], self.first[i], self.last[i] = _period(runs)
        elif not write:
            self.read_of[box] = i
        self.runs.append(runs)
        self.n += 1

    def conflicts(self, box, write: bool, runs) -> tuple[np.ndarray, list[int]]:
        """Indices of the live records whose boxes overlap `box` (of every record for a write, of the
        writes for a read), and the ops of those that conflict (their runs overlap too, in HBM)."""
        n = self.n
        mask = self.alive[:n] if write else self.alive[:n] & self.write[:n]
        mask = mask & (self.p0[:n] < box[1])
        mask &= self.p1[:n] > box[0]
        mask &= self.lo[:n] < box[3]
        mask &= self.hi[:n] > box[2]
        overlap = idx = mask.nonzero()[0]
        if runs is not None and len(idx):
            period, first, last = _period(runs)
            if period:
                apart = (self.period[idx] == period) & ((self.last[idx] <= first) | (self.first[idx] >= last))
                idx = idx[~apart]
            idx = np.array([i for i in idx if _runs_overlap(runs, self.runs[i])],
                           dtype=np.int64)
        if not len(idx):
            return overlap, []
        ops = self.op[idx].tolist()
        if write and self.more:  # (a read conflicts with writes only, which are never merged)
            more = self.more
            for j in idx.tolist():
                if j in more:
                    ops.extend(more[j])
        return overlap, ops

    def cover(self, box, exclude: int, candidates: np.ndarray | None = None, since: int = 0) -> None:
        """Retire what a write to `box` hides: records inside it go, and a record it cuts at one end
        (all of its partitions and a prefix or suffix of its bytes, or all of its bytes and a prefix or
        suffix of its partitions) shrinks to the rest. A later access that conflicts with the part
        removed conflicts with this write, which follows the record: the order stays, through the
        write, without an edge per record (a row-by-row reload of a buffer many matmuls read would
        otherwise gather every one of those reads for every later access).

        `candidates`: the records the write's conflict query found overlapping (all that can, with
        those added from index `since` on), so that only they are tested again."""
        n = self.n
        p0, p1, lo, hi = self.p0[:n], self.p1[:n], self.lo[:n], self.hi[:n]
        if candidates is None:
            idx = np.arange(n)
        else:
            idx = np.concatenate([candidates, np.arange(since, n)])
        if len(idx) <= _FEW:
            self._cover_few(box, exclude, idx)
            return
        idx = idx[idx != exclude]
        mask = self.alive[idx] & (p0[idx] < box[1])
        mask &= p1[idx] > box[0]
        mask &= lo[idx] < box[3]
        mask &= hi[idx] > box[2]
        idx = idx[mask]
        if not len(idx):
            return
        in_p = (p0[idx] >= box[0]) & (p1[idx] <= box[1])
        in_b = (lo[idx] >= box[2]) & (hi[idx] <= box[3])
        self.alive[idx[in_p & in_b]] = False
        bytes_cut = in_p & ~in_b  # every partition, some bytes: keep the side the box leaves
        low = bytes_cut & (lo[idx] >= box[2])
        high = bytes_cut & (hi[idx] <= box[3])
        lo[idx[low]] = box[3]
        hi[idx[high]] = box[2]
        parts_cut = in_b & ~in_p
        low = parts_cut & (p0[idx] >= box[0])
        high = parts_cut & (p1[idx] <= box[1])
        p0[idx[low]] = box[1]
        p1[idx[high]] = box[0]


    def _cover_few(self, box, exclude: int, idx: np.ndarray) -> None:
        """`cover` of a few candidates (no duplicates), one at a time: the same updates as the masks of
        `cover` (a record cut at one end keeps the other; one cut in its middle is kept whole), without
        their ~60 numpy calls (a write usually meets a dozen records)."""
        q0, q1, qlo, qhi = box
        ids = idx.tolist()
        alive, p0, p1, lo, hi = self.alive, self.p0, self.p1, self.lo, self.hi
        rows = zip(ids, alive[idx].tolist(), p0[idx].tolist(), p1[idx].tolist(), lo[idx].tolist(),
                   hi[idx].tolist())
        for i, live, a0, a1, b0, b1 in rows:
            if i == exclude or not live or not (a0 < q1 and a1 > q0 and b0 < qhi and b1 > qlo):
                continue
            in_p = a0 >= q0 and a1 <= q1
            in_b = b0 >= qlo and b1 <= qhi
            if in_p and in_b:
                alive[i] = False
            elif in_p:  # every partition, some bytes: keep the side the box leaves
                if b0 >= qlo:
                    lo[i] = qhi
                elif b1 <= qhi:
                    hi[i] = qlo
            elif in_b:
                if a0 >= q0:
                    p0[i] = q1
                elif a1 <= q1:
                    p1[i] = q0


_FEW = 48  # candidates up to which `cover` tests them one by one in Python (numpy's calls cost more)


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
        overlaps = []  # per access, what its query found overlapping: (records, their count, compactions)
        for space, box, runs, _, write in accesses:
            table = spaces.get(space)
            if table is not None:
                overlap, conflict_ops = table.conflicts(box, write, runs)
                found.update(conflict_ops)
                overlaps.append((overlap, table.n, table.compactions))
            else:
                overlaps.append((None, 0, 0))
        for (space, box, runs, dense, write), (overlap, since, compactions) in zip(accesses, overlaps):
            table = spaces.get(space)
            if table is None:
                table = spaces[space] = _Space()
            table.add(box, write, i, runs)
            if write and (dense or runs is None):  # on chip, conflicts are box overlaps: any write covers
                if overlap is None or compactions != table.compactions:
                    overlap, since = np.zeros(0, dtype=np.int64), 0  # new table, or indices moved: test all
                table.cover(box, table.n - 1, overlap, since)
        found.discard(i)
        preds.append(sorted(found))
    return preds
