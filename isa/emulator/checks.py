"""Checked mode: reads of never-written memory and races between engines/queues.

Uninitialized reads: a "written" bitmap per byte of SBUF, PSUM and every scratch/output HBM
tensor (inputs and constants start written); strided numpy views of the bitmaps make each check
a single vectorized ``all()``.

Races: each engine stream and each DMA queue is an *agent* with a vector clock. An event's clock
joins its agent's previous event (streams and queues are in order), the clocks of the semaphore
increments its waits consumed (a wait for value v happens after the first v increments), and for
a DMA transfer the clock of its SP trigger. Accesses are kept per memory region as boxes
(partition range x byte range) in numpy columns; a new access is compared with the overlapping
boxes of other agents, and two of them with at least one write and no happens-before edge are a
race (for strided accesses the exact byte sets are intersected before reporting).
Records that can no longer race are pruned: those covered by a later ordered access of the same
kind (a write covers everything, a read covers reads), and those every agent's future events
already happen after.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

import numpy as np

from isa.dtypes import DTYPES
from isa.emulator.decode import Op
from isa.emulator.memory import Memory
from isa.emulator.rules import byte_bounds
from isa.emulator.trace import format_ap
from isa.errors import RaceError, UninitializedReadError
from isa.program import ENGINES, AccessPattern, Program
from isa.target import Target

NEVER = np.iinfo(np.int64).max  # clock bound of an agent that will run no more events
PRUNE_EVERY = 256


@dataclass(eq=False)
class Access:
    """One operand access of one event, as a box plus the pattern for exact overlap."""

    region: str  # "sbuf", "psum" or "hbm:NAME"
    p0: int
    p1: int
    lo: int
    hi: int
    write: bool
    dense: bool
    ap: AccessPattern
    label: str


def _dims(ap: AccessPattern) -> list[tuple[int, int]]:
    dims = list(ap.pattern)
    if ap.memory == "hbm":
        dims.insert(0, (ap.partition_stride, ap.partitions))
    return dims


def is_dense(ap: AccessPattern) -> bool:
    """Whether the access touches every byte of its [lo, hi) span (per partition on chip)."""
    expected = 1
    for stride, count in sorted((abs(s), c) for s, c in _dims(ap) if c > 1 and s != 0):
        if stride != expected:
            return False
        expected *= count
    return True


def element_offsets(ap: AccessPattern) -> np.ndarray:
    """Byte offset of every element an access touches (per partition on chip, in the tensor in HBM)."""
    size = DTYPES[ap.dtype].itemsize
    offsets = np.array([ap.offset], dtype=np.int64)
    for stride, count in _dims(ap):
        offsets = (offsets[:, None] + np.arange(count, dtype=np.int64) * (stride * size)).reshape(-1)
    return offsets


def make_access(ap: AccessPattern, write: bool, label: str) -> Access:
    lo, hi = byte_bounds(ap)
    if ap.memory == "hbm":
        region, p0, p1 = f"hbm:{ap.tensor}", 0, 1
    else:
        region, p0, p1 = ap.memory, ap.start_partition, ap.start_partition + ap.partitions
    return Access(region, p0, p1, lo, hi, write, is_dense(ap), ap, label)


class RegionTable:
    """The live accesses of one memory region, as numpy columns."""

    COLUMNS = ("p0", "p1", "lo", "hi", "agent", "epoch")

    def __init__(self) -> None:
        self.n = 0
        self.cols = {c: np.zeros(64, dtype=np.int64) for c in self.COLUMNS}
        self.write = np.zeros(64, dtype=bool)
        self.alive = np.zeros(64, dtype=bool)
        self.accesses: list[Access] = []

    def candidates(self, acc: Access) -> np.ndarray:
        n, c = self.n, self.cols
        mask = (self.alive[:n] & (c["p0"][:n] < acc.p1) & (acc.p0 < c["p1"][:n])
                & (c["lo"][:n] < acc.hi) & (acc.lo < c["hi"][:n]))
        return np.flatnonzero(mask)

    def add(self, acc: Access, agent: int, epoch: int) -> None:
        if self.n == len(self.write):
            self._compact(grow=True)
        i = self.n
        for name, value in zip(self.COLUMNS, (acc.p0, acc.p1, acc.lo, acc.hi, agent, epoch), strict=True):
            self.cols[name][i] = value
        self.write[i] = acc.write
        self.alive[i] = True
        self.accesses.append(acc)
        self.n += 1

    def prune(self, bound: np.ndarray) -> None:
        """Drop records every future event already happens after (``bound``: per-agent minimum)."""
        n = self.n
        self.alive[:n] &= self.cols["epoch"][:n] > bound[self.cols["agent"][:n]]

    def _compact(self, grow: bool) -> None:
        keep = np.flatnonzero(self.alive[: self.n])
        size = max(64, 2 * len(keep)) if grow else len(self.write)
        for name, col in self.cols.items():
            new = np.zeros(size, dtype=np.int64)
            new[: len(keep)] = col[keep]
            self.cols[name] = new
        self.write = np.concatenate([self.write[keep], np.zeros(size - len(keep), dtype=bool)])
        self.alive = np.concatenate([np.ones(len(keep), dtype=bool), np.zeros(size - len(keep), dtype=bool)])
        self.accesses = [self.accesses[i] for i in keep]
        self.n = len(keep)


class Checker:
    """Scheduler observer implementing checked mode."""

    def __init__(self, program: Program, target: Target, memory: Memory):
        self.queues = target.data["dma"]["queues"]
        self.n_agents = len(ENGINES) + self.queues
        self.sp = ENGINES.index("sp")
        self.last_vc = np.zeros((self.n_agents, self.n_agents), dtype=np.int64)
        self.counter = [0] * self.n_agents
        self.finished = [False] * self.n_agents
        self.event_vc: dict[int, np.ndarray] = {}  # op.index (stream event) or ~op.index (transfer)
        self.sem_vc: dict[int, list[np.ndarray]] = defaultdict(list)
        self.pending: list[deque[np.ndarray]] = [deque() for _ in range(self.queues)]
        self.tables: dict[str, RegionTable] = defaultdict(RegionTable)
        self.inserted = 0
        self.written: dict[str, np.ndarray] = {
            "sbuf": np.zeros(memory.sbuf.shape, dtype=bool),
            "psum": np.zeros(memory.psum.shape, dtype=bool),
        }
        for name, decl in program.tensors.items():
            if decl.kind in ("scratch", "output"):
                self.written[f"hbm:{name}"] = np.zeros(decl.nbytes, dtype=bool)

    # scheduler hooks ---------------------------------------------------------------------------

    def on_start(self, op: Op) -> None:
        agent = ENGINES.index(op.engine)
        vc = self._new_event(agent, op.waits, None)
        self.event_vc[op.index] = vc
        if op.queue >= 0:
            self.pending[op.queue].append(vc)  # the transfer will happen after its trigger
            return
        self._accesses(op, agent, vc, op.label)

    def on_transfer(self, op: Op) -> None:
        agent = len(ENGINES) + op.queue
        vc = self._new_event(agent, (), self.pending[op.queue].popleft())
        self.event_vc[~op.index] = vc
        self._accesses(op, agent, vc, f"{op.label} (transfer on dma queue {op.queue})",
                       op.resolve() if op.resolve else ())

    def on_signal(self, op: Op, transfer: bool, sem: int) -> None:
        vc = self.event_vc[~op.index if transfer else op.index]
        history = self.sem_vc[sem]
        history.append(np.maximum(history[-1], vc) if history else vc)

    def on_stream_end(self, engine: str) -> None:
        self.finished[ENGINES.index(engine)] = True

    # vector clocks ---------------------------------------------------------------------------

    def _new_event(self, agent: int, waits: tuple[tuple[int, int], ...], extra: np.ndarray | None) -> np.ndarray:
        vc = self.last_vc[agent].copy()
        for sem, wanted in waits:
            if wanted > 0:
                np.maximum(vc, self.sem_vc[sem][wanted - 1], out=vc)
        if extra is not None:
            np.maximum(vc, extra, out=vc)
        self.counter[agent] += 1
        vc[agent] = self.counter[agent]
        self.last_vc[agent] = vc
        return vc

    def _bound(self) -> np.ndarray:
        """Per agent, the smallest clock entry any future event of any agent can carry."""
        rows = []
        sp_alive = not self.finished[self.sp]
        for agent in range(self.n_agents):
            if agent < len(ENGINES):
                if not self.finished[agent]:
                    rows.append(self.last_vc[agent])
                continue
            queue = agent - len(ENGINES)
            if self.pending[queue]:
                rows.append(np.maximum(self.last_vc[agent], self.pending[queue][0]))
            elif sp_alive:
                rows.append(np.maximum(self.last_vc[agent], self.last_vc[self.sp]))
        if not rows:
            return np.full(self.n_agents, NEVER, dtype=np.int64)
        return np.min(np.stack(rows), axis=0)

    # memory accesses -------------------------------------------------------------------------

    def _accesses(self, op: Op, agent: int, vc: np.ndarray, label: str,
                  resolved: list[tuple[AccessPattern, bool]] | tuple = ()) -> None:
        """``resolved``: the rows a dma_indirect touches with the index values it reads now."""
        accesses = [make_access(ap, False, label) for ap in op.reads]
        accesses += [make_access(ap, True, label) for ap in op.writes]
        accesses += [make_access(ap, write, label) for ap, write in resolved]
        for acc in accesses:
            if not acc.write:
                self._check_initialized(acc)
        for acc in accesses:
            self._check_races(acc, agent, vc)
        for acc in accesses:
            self.tables[acc.region].add(acc, agent, int(vc[agent]))
            if acc.write and acc.region in self.written:
                self._written_view(acc)[...] = True
        self.inserted += len(accesses)
        if self.inserted >= PRUNE_EVERY:
            self.inserted = 0
            bound = self._bound()
            for table in self.tables.values():
                table.prune(bound)

    def _written_view(self, acc: Access) -> np.ndarray:
        ap, bitmap = acc.ap, self.written[acc.region]
        size = DTYPES[ap.dtype].itemsize
        shape = (*ap.shape, size)
        free_strides = tuple(s * size for s, _ in ap.pattern)
        if ap.memory == "hbm":
            return np.ndarray(shape, dtype=bool, buffer=bitmap, offset=ap.offset,
                              strides=(ap.partition_stride * size, *free_strides, 1))
        row = bitmap.shape[1]
        return np.ndarray(shape, dtype=bool, buffer=bitmap, offset=ap.start_partition * row + ap.offset,
                          strides=(row, *free_strides, 1))

    def _check_initialized(self, acc: Access) -> None:
        if acc.region not in self.written:
            return  # program inputs and constants
        view = self._written_view(acc)
        if view.all():
            return
        missing = ~view
        first = np.argwhere(missing)[0]
        size = DTYPES[acc.ap.dtype].itemsize
        byte = acc.ap.offset + int(sum(int(i) * s * size for i, (s, _) in zip(first[1:-1], acc.ap.pattern,
                                                                             strict=True))) + int(first[-1])
        if acc.ap.memory == "hbm":
            byte += int(first[0]) * acc.ap.partition_stride * size
            where = f"byte {byte}"
        else:
            where = f"partition {acc.ap.start_partition + int(first[0])}, byte {byte}"
        raise UninitializedReadError(
            f"{acc.label} reads memory nothing wrote: {format_ap(acc.ap)} "
            f"({int(missing.sum())} of {missing.size} bytes unwritten; first at {where})")

    def _check_races(self, acc: Access, agent: int, vc: np.ndarray) -> None:
        table = self.tables.get(acc.region)
        if table is None or table.n == 0:
            return
        cols = table.cols
        for i in table.candidates(acc):
            other_agent, epoch = int(cols["agent"][i]), int(cols["epoch"][i])
            other = table.accesses[i]
            ordered = other_agent == agent or vc[other_agent] >= epoch
            if not ordered and (other.write or acc.write):
                common = _overlap(other, acc)
                if common is not None:
                    raise RaceError(_race_message(other, acc, common))
            elif (acc.write or not other.write) and _covers(acc, other):
                table.alive[i] = False


def _covers(big: Access, small: Access) -> bool:
    return (big.dense and big.p0 <= small.p0 and small.p1 <= big.p1
            and big.lo <= small.lo and small.hi <= big.hi)


def _overlap(a: Access, b: Access) -> tuple[int, int] | None:
    """[lo, hi) of the bytes both accesses touch (per partition on chip), None if they touch none."""
    if a.dense and b.dense:
        return max(a.lo, b.lo), min(a.hi, b.hi)  # the boxes overlap (the caller checked), both solid
    lo, hi = max(a.lo, b.lo), min(a.hi, b.hi)
    touched_a, touched_b = _bytes_in(a.ap, lo, hi), _bytes_in(b.ap, lo, hi)
    common = np.flatnonzero(touched_a & touched_b)
    return (lo + int(common[0]), lo + int(common[-1]) + 1) if common.size else None


def _bytes_in(ap: AccessPattern, lo: int, hi: int) -> np.ndarray:
    """Bitmap of the bytes of [lo, hi) an access touches (no sorting: linear in its elements)."""
    touched = np.zeros(hi - lo, dtype=bool)
    starts = element_offsets(ap) - lo
    for byte in range(DTYPES[ap.dtype].itemsize):
        at = starts + byte
        touched[at[(at >= 0) & (at < hi - lo)]] = True
    return touched


def _race_message(first: Access, second: Access, common: tuple[int, int]) -> str:
    def kind(acc: Access) -> str:
        return "writes" if acc.write else "reads"

    parts = ""
    if not first.region.startswith("hbm"):
        parts = f" partitions [{max(first.p0, second.p0)}, {min(first.p1, second.p1)})"
    return (f"race on {first.region}{parts} bytes [{common[0]}, {common[1]}): "
            f"{first.label} {kind(first)} {format_ap(first.ap)} and {second.label} {kind(second)} "
            f"{format_ap(second.ap)} with no semaphore chain ordering them")
