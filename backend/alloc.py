"""SBUF and PSUM allocation with liveness: per-kernel pools of rotating buffers, resident tensor images,
persistent buffers, and the memory plan.

- A kernel declares all its pools up front (`Allocator.begin_kernel`); they live until `end_kernel`.
  They are placed as one block in the SBUF space that the images of resident tensors (residency.py)
  leave free while the kernel runs, next-fit from where the previous kernel's block ended: the next
  kernel's prologue (weight loads) does not wait for the previous kernel's buffers to drain, and
  addresses freed earliest are reused first. PSUM banks are handed out the same way.
- Images of resident tensors were placed before lowering (residency.plan_residency) over their
  lifetimes in kernels; they occupy [offset, offset + nbytes) from their producer to their last consumer.
- Buffers that live for the whole program (identity matrices, ones) are taken from the top of SBUF.
Reuse of an address is made safe by the scheduler's dependency analysis, not by the allocator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from backend.residency import Image, ResidencyMismatch
from backend.weight_plan import PERSISTENT_GUARD, KernelShape, Reservation
from hlo.errors import CompilationError
from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern
from isa.target import Target

ALIGN = 64  # bytes; pool bases are aligned to this within a partition
BLOCK_AVOID = 1  # a kernel's (not prefetched) pools avoid the SBUF of the last BLOCK_AVOID kernels when they can


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class PoolSpec:
    """A request: `bufs` rotating buffers of `nbytes` per partition in `memory` (psum: whole banks).
    `source`: the scratch tensor this pool stages; kept on chip, the tensor's image replaces the pool.
    `spare`: bytes per partition of it the kernel can do without (it then takes a smaller variant), so the
    residency plan need not leave them free."""

    name: str
    memory: str
    nbytes: int
    bufs: int
    source: str | None = None
    prefetch: bool = False  # filled once at the kernel's start from constants: placed apart, see Allocator
    spare: int = 0


@dataclass
class Tile:
    """One buffer of a pool: `nbytes` per partition at byte `offset` of every partition."""

    memory: str
    offset: int
    nbytes: int
    pool: Pool

    def ap(self, dtype: str, partitions: int, pattern: list[tuple[int, int]] | tuple[tuple[int, int], ...],
           elem_offset: int = 0) -> AccessPattern:
        """A [partitions x pattern] view starting at element `elem_offset` of this buffer."""
        item = isa_dtype(dtype).itemsize
        return AccessPattern(self.memory, dtype, self.offset + elem_offset * item, tuple(pattern),
                             start_partition=0, partitions=partitions)

    def flat(self, dtype: str, partitions: int, count: int, elem_offset: int = 0) -> AccessPattern:
        return self.ap(dtype, partitions, [(1, count)], elem_offset)


@dataclass
class Pool:
    name: str
    memory: str
    offset: int
    buf_bytes: int
    bufs: int
    kernel: str
    first_op: int
    last_op: int = -1
    tiles: list[Tile] = field(default_factory=list)
    _next: int = 0
    clock: Callable[[], int] | None = None  # the allocator's instruction clock
    last_use: int = -1  # instruction index when a buffer was last handed out

    def next(self) -> Tile:
        """The next buffer in rotation."""
        tile = self.tiles[self._next % self.bufs]
        self._next += 1
        self.touch()
        return tile

    def touch(self) -> None:
        """Note that a buffer of the pool is (re)used by the instructions emitted from now on."""
        if self.clock is not None:
            self.last_use = self.clock()

    @property
    def nbytes(self) -> int:
        return self.buf_bytes * self.bufs


@dataclass
class KernelRecord:
    name: str
    where: str
    sbuf: tuple[int, int]  # block of its pools (but the prefetched ones placed apart)
    banks: int
    need: int  # SBUF bytes per partition of all its pools
    first_op: int
    last_op: int = -1
    spare: int = 0  # of `need`, what a smaller variant of the kernel does without (PoolSpec.spare)


class Allocator:
    """Places pools in SBUF and PSUM around resident images and records everything for the memory plan."""

    def __init__(self, target: Target, op_clock, images: list[Image] | None = None, sbuf_budget: int = 0):
        self.sbuf_bytes = min(target.sbuf_partition_bytes, sbuf_budget or target.sbuf_partition_bytes)
        self.bank_bytes = target.psum_bank_bytes
        self.banks = target.psum_partition_bytes // target.psum_bank_bytes
        self._clock = op_clock  # callable: index of the next instruction
        self.images = list(images or [])
        self.persistent_top = self.sbuf_bytes  # persistent buffers live in [persistent_top, sbuf_bytes)
        self._sbuf_next = 0
        self._psum_next = 0
        self._psum_last = 0  # banks of the last kernel that had PSUM pools
        self._bank_used = [-1] * self.banks  # per PSUM bank: when a buffer in it was last handed out
        self.pools: list[Pool] = []
        self.kernels: list[KernelRecord] = []
        self.staged: list[dict[str, int]] = []  # per kernel: bytes of pools staging each scratch tensor
        self.shapes: list[KernelShape] = []  # per kernel: its SBUF pools, for the weights' plan (weight_plan.py)
        self.reservations: list[Reservation] = []
        self.load_clock: Callable[[], dict[str, float]] | None = None  # engines' estimated busy ns so far
        self.compute_ns: list[float] = []  # per kernel: its busiest compute engine's estimated ns (load_clock)
        self.dma_ns: list[float] = []  # per kernel: its DMAs' estimated queue time (load_clock)
        self._load_start: dict[str, float] = {}
        self._own: dict[int, Reservation] = {}
        self._open: list[Pool] = []
        self._kernel: str | None = None
        self._used = np.full(-(-self.sbuf_bytes // ALIGN), -1, dtype=np.int64)  # per 64 B: last kernel using it

    # -- kernels --------------------------------------------------------------------------------------------
    @property
    def kernel_index(self) -> int:
        """Index of the open (or last) kernel."""
        return len(self.kernels) - 1

    def sbuf_capacity(self) -> int:
        """Bytes per partition the next kernel may use: the largest gap the images live during it leave (a
        kernel sized for more would not find its block, and the tensor kept on chip would go back to HBM)."""
        return max((hi - lo for lo, hi in self._free(len(self.kernels), [], guard=False)), default=0)

    def sbuf_need(self, specs: list[PoolSpec]) -> int:
        return sum(_align(s.nbytes) * s.bufs for s in specs if s.memory == "sbuf")

    def fits(self, specs: list[PoolSpec]) -> bool:
        banks = sum(s.bufs for s in specs if s.memory == "psum")
        return self.sbuf_need(specs) <= self.sbuf_capacity() and banks <= self.banks

    def begin_kernel(self, kernel: str, specs: list[PoolSpec], where: str) -> dict[str, Pool]:
        """Place all pools of one kernel; raises CompilationError (naming `where`) if they cannot fit."""
        assert self._kernel is None, "kernels do not nest"
        need = self.sbuf_need(specs)
        banks = sum(s.bufs for s in specs if s.memory == "psum")
        if need > self.sbuf_capacity():
            detail = ", ".join(f"{s.name} {s.bufs}x{s.nbytes} B" for s in specs if s.memory == "sbuf")
            raise CompilationError(f"{where}: the kernel needs {need} bytes of SBUF per partition ({detail}) "
                                   f"but only {self.sbuf_capacity()} are available")
        if banks > self.banks:
            raise CompilationError(f"{where}: the kernel needs {banks} PSUM banks, the target has {self.banks}")
        index = len(self.kernels)
        staged: dict[str, int] = {}
        for spec in specs:
            if spec.source is not None and spec.memory == "sbuf":
                staged[spec.source] = staged.get(spec.source, 0) + _align(spec.nbytes) * spec.bufs
        self.staged.append(staged)
        for image in self.images:
            if image.live(index):
                self._mark(image.offset, image.nbytes, index)
        sbuf_specs = [s for s in specs if s.memory == "sbuf"]
        ahead = [s for s in sbuf_specs if s.prefetch]
        ahead_bytes = sum(_align(s.nbytes) * s.bufs for s in ahead)
        self.shapes.append(KernelShape(ahead_bytes, need - ahead_bytes, tuple(staged.items())))
        if self.load_clock is not None:
            self._load_start = self.load_clock()
        held = [r.span for r in self.reservations if r.covers(index)]  # later kernels' weights: keep out
        bases = None
        if ahead:  # the plan's region, else the window unused longest outside the plan's, else anywhere
            parts = (ahead_bytes, need - ahead_bytes, index)
            bases = (self._place_planned(*parts, held) or self._place_apart(*parts, held)
                     or self._place_apart(*parts, []))
        apart_bytes = ahead_bytes if bases is not None else 0
        if bases is None:
            bases = (self._place(need, index, where, held), None)
        block, apart = bases
        self._mark(block, need - apart_bytes, index)
        if apart is not None:
            self._mark(apart, apart_bytes, index)
        bank = self._psum_start(banks)
        self._kernel = kernel
        self.kernels.append(KernelRecord(kernel, where, (block, block + need - apart_bytes), banks, need=need,
                                         first_op=self._clock(),
                                         spare=sum(s.spare for s in specs if s.memory == "sbuf")))
        pools: dict[str, Pool] = {}
        offsets = {False: block, True: apart}
        for spec in specs:
            if spec.memory == "sbuf":
                size = _align(spec.nbytes)
                key = spec.prefetch and apart is not None
                base = offsets[key]
                pool = Pool(spec.name, "sbuf", base, size, spec.bufs, kernel, self._clock())
                pool.tiles = [Tile("sbuf", base + i * size, size, pool) for i in range(spec.bufs)]
                offsets[key] = base + size * spec.bufs
            else:
                pool = Pool(spec.name, "psum", bank * self.bank_bytes, self.bank_bytes, spec.bufs, kernel,
                            self._clock(), clock=self._clock)
                pool.tiles = [Tile("psum", (bank + i) * self.bank_bytes, self.bank_bytes, pool)
                              for i in range(spec.bufs)]
                bank += spec.bufs
            pools[spec.name] = pool
            self.pools.append(pool)
            self._open.append(pool)
        self._psum_next = bank
        if banks:
            self._psum_last = banks
        return pools

    def _psum_start(self, banks: int) -> int:
        """First of `banks` consecutive PSUM banks for a kernel: those whose buffers the earlier kernels
        handed out least recently (a kernel's transpose banks, used for its operands before its
        accumulators, are free sooner), so the kernel's first PE work waits on the fewest earlier reads;
        ties: next fit from where the previous kernel's banks ended."""
        if banks == 0:
            return self._psum_next if self._psum_next <= self.banks else 0
        starts = range(self.banks - banks + 1)
        nxt = self._psum_next if self._psum_next + banks <= self.banks else 0
        return min(starts, key=lambda b: (max(self._bank_used[b:b + banks]), b != nxt, b))

    def psum_budget(self, floor: int) -> int:
        """PSUM banks a kernel may take and still leave the last PSUM-using kernel's banks alone (at least
        `floor`): consecutive kernels then overlap on PE instead of the second one's first accumulation
        waiting for the first one's last reads of the same bank."""
        return max(floor, self.banks - self._psum_last)

    # -- placement apart: prefetched pools where SBUF was used longest ago ------------------------------------
    def _mark(self, offset: int, nbytes: int, index: int) -> None:
        self._used[offset // ALIGN:-(-(offset + nbytes) // ALIGN)] = index

    def _free(self, index: int, busy: list[tuple[int, int]], guard: bool = True) -> list[tuple[int, int]]:
        """Gaps that the images live at kernel `index` and `busy` leave in [0, persistent_top), less (`guard`)
        the top PERSISTENT_GUARD bytes (a persistent buffer a kernel takes while its pools are placed goes there)."""
        used = sorted([(i.offset, i.offset + i.nbytes) for i in self.images if i.live(index)] + busy)
        gaps, pos = [], 0
        for lo, hi in used:
            if lo > pos:
                gaps.append((pos, lo))
            pos = max(pos, hi)
        top = self._apart_top() if guard else self.persistent_top
        gaps.append((pos, top))
        return [(lo, min(hi, top)) for lo, hi in gaps if min(hi, top) > lo]

    def _windows(self, need: int, gaps: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """(latest kernel that used any byte of it, start) of the windows of `need` bytes worth trying in
        `gaps`: every one that starts or ends where the kernel last using SBUF changes, or at a gap's end."""
        n = -(-need // ALIGN)
        used = self._used
        changes = np.flatnonzero(np.diff(used)) + 1
        found = []
        for lo, hi in gaps:
            g0, g1 = -(-lo // ALIGN), hi // ALIGN
            if g1 - g0 < n:
                continue
            inner = changes[(changes > g0) & (changes < g1)]
            starts = {g0, g1 - n, *inner.tolist(), *(inner - n).tolist()}
            for g in starts:
                if g0 <= g <= g1 - n:
                    found.append((int(used[g:g + n].max()), g * ALIGN))
        return found

    def reserve(self, plan: list[Reservation]) -> None:
        """Follow a plan of the weights' regions (weight_plan.py) made from the survey."""
        self.reservations = list(plan)
        self._own = {r.kernel: r for r in plan}

    def _apart_top(self) -> int:
        """The top of the SBUF pools may take while the persistent buffers could still grow (PERSISTENT_GUARD)."""
        return min(self.persistent_top, self.sbuf_bytes - PERSISTENT_GUARD)

    def _place_planned(self, ahead: int, rest: int, index: int,
                       held: list[tuple[int, int]]) -> tuple[int, int] | None:
        """(block, apart) with the prefetched pools in the region the plan reserved for them, or None when
        there is none, its size differs from the survey's, or the rest of the pools do not fit beside it."""
        own = self._own.get(index)
        if own is None or own.nbytes != ahead:
            return None
        lo, hi = own.span
        if any(i.offset < hi and lo < i.offset + i.nbytes for i in self.images if i.live(index)):
            return None
        if hi > self._apart_top():
            return None
        if not rest:
            return hi, lo
        block = self._block(rest, index, held + [own.span])
        return None if block is None else (block, lo)

    def _block(self, rest: int, index: int, busy: list[tuple[int, int]]) -> int | None:
        """Where a kernel's pools that are not prefetched go: where SBUF was used most recently but not by
        the last BLOCK_AVOID kernels, else where it was used longest ago (see _place_apart)."""
        windows = self._windows(rest, self._free(index, busy))
        if not windows:
            return None
        old = [w for w in windows if w[0] < index - BLOCK_AVOID]
        return (max(old, key=lambda w: (w[0], -w[1])) if old else min(windows))[1]

    def _place_apart(self, ahead: int, rest: int, index: int,
                     held: list[tuple[int, int]]) -> tuple[int, int] | None:
        """(block, apart): offsets of a kernel's pools placed in two parts, or None when they do not fit so.
        The prefetched pools (weights loaded once at the kernel's start) go where SBUF was used longest
        ago, so their loads wait only for kernels long done and run that far ahead; the other pools go
        where SBUF was used most recently but not by the last BLOCK_AVOID kernels (which may still run),
        so that the space the weights of later kernels will take stays unused meanwhile: the blocks of
        consecutive kernels alternate between two places (ResNet-50: avoiding the last two kernels, three
        places, leaves less room for weights, 346 us; reusing the last kernel's, 373 us; two, 329 us)."""
        windows = self._windows(ahead, self._free(index, held))
        if not windows:
            return None
        _, apart = min(windows, key=lambda w: (w[0], -w[1]))
        if not rest:
            return apart + ahead, apart
        block = self._block(rest, index, held + [(apart, apart + ahead)])
        return None if block is None else (block, apart)

    def _place(self, need: int, index: int, where: str, held: list[tuple[int, int]] | None = None) -> int:
        """Next fit of `need` bytes in the space live images leave in [0, persistent_top), outside the regions
        `held` for later kernels' weights when it fits so."""
        gaps = self._free(index, held or [], guard=False) or [(0, 0)]
        fitting = [(lo, hi) for lo, hi in gaps if hi - lo >= need]
        if not fitting and held:
            gaps = self._free(index, [], guard=False) or [(0, 0)]
            fitting = [(lo, hi) for lo, hi in gaps if hi - lo >= need]
        live = [i for i in self.images if i.live(index)]
        if not fitting and live:  # the residency plan assumed less: keep the largest of them in HBM
            raise ResidencyMismatch(max(live, key=lambda i: i.nbytes).tensor)
        if not fitting:
            raise CompilationError(f"{where}: no contiguous {need} bytes of SBUF per partition left beside the "
                                   f"tensors kept on chip (largest gap {max(h - lo for lo, h in gaps)})")
        for lo, hi in fitting:  # from where the previous kernel ended, else from the bottom
            start = max(lo, _align(self._sbuf_next))
            if start + need <= hi:
                self._sbuf_next = start + need
                return start
        self._sbuf_next = fitting[0][0] + need
        return fitting[0][0]

    def end_kernel(self) -> None:
        end = self._clock() - 1
        for pool in self._open:
            pool.last_op = end
            if pool.memory == "psum":
                first = pool.offset // self.bank_bytes
                for b in range(first, first + pool.bufs):
                    self._bank_used[b] = max(pool.last_use, pool.first_op)
        self.kernels[-1].last_op = end
        if self.load_clock is not None:
            load = self.load_clock()
            spent = {e: load[e] - self._load_start.get(e, 0.0) for e in load}
            self.dma_ns.append(spent.pop("dma", 0.0))
            spent.pop("sp", None)
            self.compute_ns.append(max(spent.values(), default=0.0))
        self._open = []
        self._kernel = None

    def persistent(self, name: str, nbytes: int) -> Tile:
        """A buffer that lives from now to the end of the program, from the top of SBUF."""
        size = _align(nbytes)
        if self.persistent_top - size < ALIGN:
            raise CompilationError(f"no SBUF left for the persistent buffer {name}")
        self.persistent_top -= size
        clash = [p for p in self._open if p.memory == "sbuf" and p.offset + p.nbytes > self.persistent_top]
        if clash:  # a kernel that takes a persistent buffer while its own pools lie where it would go
            raise CompilationError(f"{clash[0].kernel}: the persistent buffer {name} would overlap the kernel's "
                                   f"pool {clash[0].name} (SBUF bytes {clash[0].offset}..."
                                   f"{clash[0].offset + clash[0].nbytes} per partition)")
        if self._sbuf_next > self.persistent_top:
            self._sbuf_next = 0
        pool = Pool(name, "sbuf", self.persistent_top, size, 1, "program", self._clock())
        pool.tiles = [Tile("sbuf", self.persistent_top, size, pool)]
        self.pools.append(pool)
        return pool.tiles[0]

    # -- report ---------------------------------------------------------------------------------------------
    def finish(self, n_ops: int) -> None:
        for pool in self.pools:
            if pool.last_op < 0:
                pool.last_op = n_ops - 1

    def image_ops(self, image: Image) -> tuple[int, int]:
        """Instruction range (emission order) over which an image is live."""
        return self.kernels[image.first].first_op, self.kernels[image.last].last_op

    def peak_sbuf_bytes(self) -> int:
        """Largest sum, over any instruction, of the SBUF bytes per partition of live pools and images."""
        spans = [(p.first_op, p.last_op, p.nbytes) for p in self.pools if p.memory == "sbuf"]
        spans += [(*self.image_ops(i), i.nbytes) for i in self.images]
        return _peak(spans)

    def peak_psum_banks(self) -> int:
        return _peak([(p.first_op, p.last_op, p.bufs) for p in self.pools if p.memory == "psum"])

    def memory_plan(self, tensors: list[str] | None = None, layout: list[str] | None = None) -> str:
        """The memory plan: `tensors` (lines describing every tensor between kernels) and `layout`
        (layout decisions) come from the builder."""
        lines = ["# memory plan (bytes per partition; buffer i of a pool is at offset + i * size; live ranges are",
                 "# instruction indices in emission order; kN: the N-th kernel of the kernel table)",
                 f"# SBUF {self.sbuf_bytes} B/partition x 128 partitions, PSUM {self.banks} banks x "
                 f"{self.bank_bytes} B"]
        if tensors:
            lines += ["", "== tensors between kernels (sbuf: kept on chip as an image of row-blocks; "
                      "hbm: spilled)"] + tensors
        lines += ["", "== on-chip buffers",
                  f"{'owner':<30} {'buffer':<16} {'mem':<5} {'offset':>7} {'size':>7} {'bufs':>4} {'total':>7}  live"]
        for i in self.images:
            first, last = self.image_ops(i)
            lines.append(f"{'tensor ' + i.tensor:<30} {'image':<16} {'sbuf':<5} {i.offset:>7} {i.nbytes:>7} "
                         f"{1:>4} {i.nbytes:>7}  [{first}, {last}] k{i.first}..k{i.last}")
        for p in self.pools:
            lines.append(f"{p.kernel:<30} {p.name:<16} {p.memory:<5} {p.offset:>7} {p.buf_bytes:>7} "
                         f"{p.bufs:>4} {p.nbytes:>7}  [{p.first_op}, {p.last_op}]")
        if self.reservations:
            lines += ["", "== weights' regions planned over the program (weight_plan.py): kept free for the "
                      "kernel's prefetched pools from the start of kernel `from`"]
            lines += [f"k{r.kernel:<5} from k{r.first:<5} offset {r.offset:>7} size {r.nbytes:>7}"
                      for r in self.reservations]
        if layout:
            lines += ["", "== layout (which axis is on the partitions; transposes inserted)"] + layout
        peak = self.peak_sbuf_bytes()
        lines += ["", f"peak SBUF: {peak} bytes per partition ({peak * 128} bytes over 128 partitions)",
                  f"peak PSUM: {self.peak_psum_banks()} of {self.banks} banks"]
        return "\n".join(lines) + "\n"


def _peak(spans: list[tuple[int, int, int]]) -> int:
    events: list[tuple[int, int]] = []
    for first, last, size in spans:
        events.append((first, size))
        events.append((last + 1, -size))
    events.sort(key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return peak
