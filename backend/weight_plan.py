"""A whole-program plan of where the constant weights' SBUF regions go, so their loads start early.

A kernel's prefetched pools (PoolSpec.prefetch: weights loaded once at its start) can be filled as soon as
the SBUF they occupy is no longer used: the scheduler's dependencies on the region are all that holds the
loads. Placing them kernel by kernel (alloc.py's `_place_apart`, "the window unused longest") leaves that to
chance: the kernels in between put their own pools anywhere, so a weight region is typically free only from a
few kernels before its own. This plan, made once from the survey (the first lowering: every kernel's pools)
and the residency plan (the images kept on chip, fixed offsets), reserves for each kernel's prefetched pools
one region over an interval of kernels [first, kernel], by interval packing in program order: each one's
region as early as it can be kept free, given the images, the regions reserved before it and the room every
kernel of the interval needs for its own pools (one contiguous block, with room left for the block of the
kernel before it: consecutive kernels' blocks alternate between two places). During the interval the
allocator keeps every other pool out of the region, so the weights' loads wait for nothing after `first`
starts and run as far ahead as the DMA queues allow.

The plan is made only when the survey's estimates say the SBUF, not the DMA queues, holds the weights back
(queue_bound): in a queue-bound program (ResNet-50) loading weights earlier only puts them ahead of transfers
needed sooner (308.1 -> 322.1 us with the plan). ConvNeXt (trn1, matmult): 582.4 -> 561.5 us. MAX_LEAD was
measured on ConvNeXt: 32 kernels 573.5 us, 48 561.5, 64 567.2, 96 578.0 (the packing is greedy, so the
regions reserved longer ahead crowd out later ones); also measured and not kept: no room left for the previous
kernel's block (572.0), leads sized to each load's time at the queues' pace (574-593), only regions of at least
16 or 24 KiB (585), the lowest feasible offset (566.4) or the smallest gap (568.9) instead of the highest.

The plan only moves addresses: reuse of an address stays safe by the scheduler's dependency analysis, and a
kernel whose pools differ from the survey's (or do not fit beside the reservations) is placed as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.residency import Image

ALIGN = 64
PERSISTENT_GUARD = 8 * 1024  # pools placed apart keep off the top of SBUF: persistent buffers taken later go there
QUEUE_BOUND = 0.05  # the weights' queue time that may miss the queues' pace (ResNet-50 37%, ConvNeXt 0.2%)
MAX_LEAD = 48  # kernels: a region is reserved at most this many kernels before its own (bounds planning time)


@dataclass(frozen=True)
class KernelShape:
    """What the survey saw of one kernel: SBUF bytes per partition of its pools kept apart and of the rest,
    and (of the rest) bytes staging each scratch tensor (an image replaces them when the tensor stays)."""

    ahead: int
    rest: int
    staged: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Reservation:
    """SBUF [offset, offset + nbytes) of every partition kept for kernel `kernel`'s prefetched pools from the
    start of kernel `first` (their loads may start then) to the end of `kernel`."""

    kernel: int
    first: int
    offset: int
    nbytes: int

    def covers(self, kernel: int) -> bool:
        """Whether the region is kept free of other pools while `kernel` is placed."""
        return self.first <= kernel < self.kernel

    @property
    def span(self) -> tuple[int, int]:
        return self.offset, self.offset + self.nbytes


def _gaps(busy: list[tuple[int, int]], top: int) -> list[tuple[int, int]]:
    gaps, pos = [], 0
    for lo, hi in sorted(busy):
        if lo > pos:
            gaps.append((pos, min(lo, top)))
        pos = max(pos, hi)
    gaps.append((pos, top))
    return [(lo, hi) for lo, hi in gaps if hi > lo]


def plan_top(sbuf_bytes: int, persistent_top: int) -> int:
    """The top of the SBUF that pools may use in the final lowering: below the persistent buffers the survey
    took and the room kept for them (PERSISTENT_GUARD)."""
    return min(persistent_top, sbuf_bytes - PERSISTENT_GUARD)


def queue_bound(shapes: list[KernelShape], compute_ns: list[float], dma_ns: list[float], queues: int,
                weight_ns_per_byte: float) -> bool:
    """Whether the DMA queues, not the SBUF, hold the weights back: loaded in program order as late as the
    queues allow, some kernel's weights could not arrive by its start even from the program's start. Kernel
    j's spare queue time is its estimated duration (its busiest compute engine, or its other transfers over
    `queues` queues if longer) times the queues, less those transfers; each kernel's weights (the last first)
    take what the kernels before it leave. A weight byte per partition costs `weight_ns_per_byte` of queue
    time. Then loading weights earlier only moves them ahead of transfers needed sooner (ResNet-50's stages
    1-3: 308 -> 322 us with the plan), so the plan is not made."""
    n = len(shapes)
    weights = [s.ahead * weight_ns_per_byte for s in shapes]
    other = [max(0.0, dma_ns[k] - weights[k]) for k in range(n)]
    spare = [max(compute_ns[k] * queues, other[k]) - other[k] for k in range(n)]
    deficit = 0.0
    for k in range(n - 1, -1, -1):
        need = weights[k]
        for j in range(k - 1, -1, -1):
            if need <= 0:
                break
            take = min(spare[j], need)
            spare[j] -= take
            need -= take
        deficit += max(0.0, need)
    return deficit > QUEUE_BOUND * sum(weights)


def plan_weights(shapes: list[KernelShape], images: list[Image], top: int,
                 max_lead: int = MAX_LEAD) -> list[Reservation]:
    """Reservations for the kernels with prefetched pools; SBUF [0, top) is what pools may use."""
    return _Packer(shapes, images, top).plan(max_lead)


class _Packer:
    """Interval packing of the weights' regions over kernels, in program order."""

    def __init__(self, shapes: list[KernelShape], images: list[Image], top: int):
        chosen = {i.tensor for i in images}
        self.shapes = shapes
        self.top = top
        self.rest = [s.rest - sum(n for t, n in s.staged if t in chosen) for s in shapes]
        self.busy = [[(i.offset, i.offset + i.nbytes) for i in images if i.live(k)] for k in range(len(shapes))]
        self.reserved = [False] * len(shapes)
        self._free: dict[int, list[tuple[int, int]]] = {}  # kernel -> its gaps (dropped when busy changes)

    def need(self, j: int) -> int:
        return self.rest[j] + (0 if self.reserved[j] else self.shapes[j].ahead)

    def fits(self, j: int, extra: tuple[int, int], own: bool) -> bool:
        """Kernel j still finds a block for its pools (and room for the previous kernel's) beside `extra`."""
        if j not in self._free:
            self._free[j] = _gaps(self.busy[j], self.top)
        lo, hi = extra  # inside one gap: free over the region's whole interval, j's included
        largest, total = 0, -(hi - lo)
        for g0, g1 in self._free[j]:
            total += g1 - g0
            largest = max(largest, lo - g0, g1 - hi) if g0 <= lo and hi <= g1 else max(largest, g1 - g0)
        if own:  # the reservation is j's own: only the rest of its pools go elsewhere
            return largest >= self.rest[j]
        return largest >= self.need(j) and total >= self.need(j) + (self.rest[j - 1] if j else 0)

    def region(self, k: int, size: int, lowest: int) -> tuple[int, int] | None:
        """(first, offset) of the region for kernel k's `size` bytes kept free from the earliest kernel it can
        be (the highest offset that allows that: kernels' blocks go low), or None."""
        found = None
        union: set[tuple[int, int]] = set()
        memo: dict[tuple[int, int], bool] = {}
        for s in range(k, lowest - 1, -1):
            union.update(self.busy[s])
            feasible = []
            for lo, hi in _gaps(union, self.top):
                for o in {(hi - size) // ALIGN * ALIGN, -(-lo // ALIGN) * ALIGN}:
                    if lo <= o and o + size <= hi:
                        for j in range(s, k + 1):
                            if (j, o) not in memo:
                                memo[j, o] = self.fits(j, (o, o + size), j == k)
                            if not memo[j, o]:
                                break
                        else:
                            feasible.append(o)
            if not feasible:
                break
            found = (s, max(feasible))
        return found

    def plan(self, max_lead: int) -> list[Reservation]:
        plan: list[Reservation] = []
        for k, shape in enumerate(self.shapes):
            size = -(-shape.ahead // ALIGN) * ALIGN
            if not size or size + self.rest[k] > self.top:
                continue
            found = self.region(k, size, max(0, k - max_lead))
            if found is None:
                continue
            first, offset = found
            plan.append(Reservation(k, first, offset, size))
            self.reserved[k] = True
            for j in range(first, k + 1):
                self.busy[j].append((offset, offset + size))
                self._free.pop(j, None)
        return plan
