"""SBUF and PSUM allocation: per-kernel pools of rotating buffers, placed in a ring, plus a memory plan.

A kernel declares all its pools up front (`Allocator.begin_kernel`); they live until `end_kernel`.
Kernels are placed one after another in a ring over the SBUF (and over the PSUM banks) so that the
next kernel's prologue (weight loads) does not have to wait for the previous kernel's buffers to drain.
Buffers that live for the whole program (the identity matrix of PE transposes) are taken from the top
of SBUF. Reuse of an address is made safe by the scheduler's dependency analysis, not by the allocator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.errors import CompilationError
from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern
from isa.target import Target

ALIGN = 64  # bytes; pool bases are aligned to this within a partition


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class PoolSpec:
    """A request: `bufs` rotating buffers of `nbytes` per partition in `memory` (psum: whole banks)."""

    name: str
    memory: str
    nbytes: int
    bufs: int


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

    def next(self) -> Tile:
        """The next buffer in rotation."""
        tile = self.tiles[self._next % self.bufs]
        self._next += 1
        return tile

    @property
    def nbytes(self) -> int:
        return self.buf_bytes * self.bufs


class Allocator:
    """Places pools in SBUF and PSUM and records every placement for the memory plan."""

    def __init__(self, target: Target, op_clock):
        self.sbuf_bytes = target.sbuf_partition_bytes
        self.bank_bytes = target.psum_bank_bytes
        self.banks = target.psum_partition_bytes // target.psum_bank_bytes
        self._clock = op_clock  # callable: index of the next instruction
        self.persistent_top = self.sbuf_bytes  # persistent buffers live in [persistent_top, sbuf_bytes)
        self._sbuf_ring = 0
        self._psum_ring = 0
        self.pools: list[Pool] = []
        self._open: list[Pool] = []
        self._kernel: str | None = None

    # -- kernels --------------------------------------------------------------------------------------------
    def sbuf_capacity(self) -> int:
        """Bytes per partition a kernel may use."""
        return self.persistent_top

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
        base = self._sbuf_ring if self._sbuf_ring + need <= self.sbuf_capacity() else 0
        bank = self._psum_ring if self._psum_ring + banks <= self.banks else 0
        self._kernel = kernel
        pools: dict[str, Pool] = {}
        for spec in specs:
            if spec.memory == "sbuf":
                size = _align(spec.nbytes)
                pool = Pool(spec.name, "sbuf", base, size, spec.bufs, kernel, self._clock())
                pool.tiles = [Tile("sbuf", base + i * size, size, pool) for i in range(spec.bufs)]
                base += size * spec.bufs
            else:
                pool = Pool(spec.name, "psum", bank * self.bank_bytes, self.bank_bytes, spec.bufs, kernel,
                            self._clock())
                pool.tiles = [Tile("psum", (bank + i) * self.bank_bytes, self.bank_bytes, pool)
                              for i in range(spec.bufs)]
                bank += spec.bufs
            pools[spec.name] = pool
            self.pools.append(pool)
            self._open.append(pool)
        self._sbuf_ring, self._psum_ring = base, bank
        return pools

    def end_kernel(self) -> None:
        end = self._clock() - 1
        for pool in self._open:
            pool.last_op = end
        self._open = []
        self._kernel = None

    def persistent(self, name: str, nbytes: int) -> Tile:
        """A buffer that lives from now to the end of the program, from the top of SBUF."""
        size = _align(nbytes)
        if self.persistent_top - size < ALIGN:
            raise CompilationError(f"no SBUF left for the persistent buffer {name}")
        self.persistent_top -= size
        if self._sbuf_ring > self.persistent_top:
            self._sbuf_ring = 0
        pool = Pool(name, "sbuf", self.persistent_top, size, 1, "program", self._clock())
        pool.tiles = [Tile("sbuf", self.persistent_top, size, pool)]
        self.pools.append(pool)
        return pool.tiles[0]

    # -- report ---------------------------------------------------------------------------------------------
    def finish(self, n_ops: int) -> None:
        for pool in self.pools:
            if pool.last_op < 0:
                pool.last_op = n_ops - 1

    def peak_sbuf_bytes(self) -> int:
        """Largest sum, over any instruction, of the SBUF bytes per partition of live pools."""
        events: list[tuple[int, int]] = []
        for pool in self.pools:
            if pool.memory == "sbuf":
                events.append((pool.first_op, pool.nbytes))
                events.append((pool.last_op + 1, -pool.nbytes))
        events.sort(key=lambda e: (e[0], e[1]))
        peak = cur = 0
        for _, delta in events:
            cur += delta
            peak = max(peak, cur)
        return peak

    def memory_plan(self) -> str:
        lines = ["# memory plan: every on-chip pool (bytes per partition; buffer i of a pool is at",
                 "# offset + i * size; live range in instruction indices of the emitted program order)",
                 f"# SBUF {self.sbuf_bytes} B/partition, PSUM {self.banks} banks x {self.bank_bytes} B",
                 f"{'kernel':<28} {'pool':<14} {'mem':<5} {'offset':>7} {'size':>7} {'bufs':>4} "
                 f"{'total':>7}  live"]
        for p in self.pools:
            lines.append(f"{p.kernel:<28} {p.name:<14} {p.memory:<5} {p.offset:>7} {p.buf_bytes:>7} "
                         f"{p.bufs:>4} {p.nbytes:>7}  [{p.first_op}, {p.last_op}]")
        lines.append(f"peak SBUF: {self.peak_sbuf_bytes()} bytes per partition "
                     f"({self.peak_sbuf_bytes() * 128} bytes over 128 partitions)")
        return "\n".join(lines) + "\n"
