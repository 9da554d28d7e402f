"""Where the time goes: a run's time attributed to the origins (HLO ops) of its instructions.

Attribution rule, "each busy engine's share of each time slice":

- The run is cut into slices at every start and end of an instruction, of a DMA transfer and of a DMA
  fixed-cost window (from the end of SP's trigger to the start of the transfer: descriptor setup and
  queueing).
- In a slice, the busy resources share it equally: the compute engines pe, act, dve, pool, the SP
  engine (its DMA triggers) and the 16 DMA queues taken together as one resource. Within a resource
  the share is split equally between its busy intervals (PE's load_stationary running behind a
  matmul; transfers on several queues at once) and each interval's part goes to its instruction's
  origin.
- A slice in which no resource is busy but transfers sit in their fixed-cost window goes to those
  transfers' origins (split equally). A slice with nothing in flight at all goes to the origin of the
  instruction that starts when it ends (it was the one waiting).

So every nanosecond is attributed exactly once and the rows add up to the run's time. What an origin
gets through pe/act/dve/pool is its ``compute_us``, through the DMA queues its ``memory_us``, through SP
triggers, fixed-cost windows and empty slices its ``overhead_us``; the largest of the three names what it
is bound by. Its roofline ``bound_us`` is max(flops at the PE peak, compulsory HBM bytes at the HBM
bandwidth), figures from the target file (machine-model.md "Targets": PE peak 128x128 MACs per PE
cycle, 1/fp32_factor of it for fp32 matmuls, fp8_rate times it for fp8; "HBM bandwidth share per core").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from isa.program import ENGINES, Origin

RESOURCES = (*ENGINES, "dma")  # pe act dve pool sp dma: each takes an equal share of a slice it is busy in
_COMPUTE = tuple(ENGINES.index(e) for e in ("pe", "act", "dve", "pool"))
_DMA = len(ENGINES)
_LATENCY = _DMA + 1
CATEGORIES = ("compute", "memory", "overhead")
UNTAGGED = "(untagged)"  # the row of instructions without an origin
NO_MODULE = "(no module)"  # the layer of rows without a torch module path


@dataclass
class Records:
    """Per-instruction facts of one run, arrays in program order (DMA fields -1 / 0 elsewhere)."""

    names: list[str]  # origin names; ``origin`` indexes it ("" for untagged)
    origin: np.ndarray  # int32
    engine: np.ndarray  # int8, index in ENGINES
    start: np.ndarray  # float64 ns
    end: np.ndarray
    stall: np.ndarray  # ns its engine sat waiting on semaphores before it could start
    queue: np.ndarray  # int16, -1 for non-DMA
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    nbytes: np.ndarray  # int64 bytes a DMA moves
    hbm_bytes: np.ndarray  # int64 bytes it reads from or writes to HBM
    pe_rate: np.ndarray  # float64 per origin: its matmuls' PE peak relative to bf16 (0.25 for fp32)
    total_ns: float


@dataclass
class OpRow:
    """One origin (an HLO instruction or fusion of exe.hlo) and where its time went."""

    name: str
    source: str  # "module: op" of each torch origin, "; "-separated
    modules: tuple[str, ...]
    time_us: float  # attributed (the rows sum to the run's time)
    share: float  # of the run's time
    compute_us: float
    memory_us: float
    overhead_us: float
    bound_by: str  # compute | memory | overhead: the largest of the three above
    busy_us: dict[str, float]  # per engine (and "dma": transfer time summed over queues), not attributed
    stall_us: float  # semaphore waits of its instructions
    instructions: int
    dma_count: int
    dma_bytes: int
    bytes_per_dma: float
    flops: int
    hbm_bytes: int  # compulsory (the origin table)
    dma_hbm_bytes: int  # what its DMAs actually moved to or from HBM
    bound_us: float  # roofline: max(flops at PE peak, hbm_bytes at HBM bandwidth)
    roof: str  # "compute" or "memory": which term of bound_us is larger ("" when both are 0)
    locations: tuple[str, ...] = ()

    @property
    def efficiency(self) -> float:
        """bound_us / time_us: 1.0 runs at its roofline."""
        return self.bound_us / self.time_us if self.time_us else 0.0

    @property
    def dma_gbps(self) -> float:
        """Bytes its DMAs moved per second of transfer time (summed over queues), GB/s: far below a
        queue's rate when transfers are made of many small contiguous runs."""
        return self.dma_bytes / self.busy_us["dma"] / 1e3 if self.busy_us.get("dma") else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["modules"], data["locations"] = list(self.modules), list(self.locations)
        return data


@dataclass
class LayerRow:
    """The rows of one torch module path (at some depth), summed; a row spanning several modules
    is split equally between them."""

    path: str
    time_us: float
    share: float
    compute_us: float
    memory_us: float
    overhead_us: float
    bound_us: float
    flops: float
    hbm_bytes: float
    dma_count: float
    dma_bytes: float
    stall_us: float
    ops: list[str] = field(default_factory=list)

    @property
    def bound_by(self) -> str:
        values = (self.compute_us, self.memory_us, self.overhead_us)
        return CATEGORIES[int(np.argmax(values))]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bound_by": self.bound_by}


def attribute(rec: Records) -> np.ndarray:
    """[origins, 3] ns attributed to each origin as compute, memory and overhead (the module docstring)."""
    n_origins = len(rec.names)
    is_dma = rec.queue >= 0
    dma_idx = np.flatnonzero(is_dma)
    res = np.concatenate([rec.engine.astype(np.int64), np.full(len(dma_idx), _DMA), np.full(len(dma_idx), _LATENCY)])
    s = np.concatenate([rec.start, rec.transfer_start[dma_idx], rec.end[dma_idx]])
    e = np.concatenate([rec.end, rec.transfer_end[dma_idx], rec.transfer_start[dma_idx]])
    o = np.concatenate([rec.origin, rec.origin[dma_idx], rec.origin[dma_idx]]).astype(np.int64)
    keep = e > s
    res, s, e, o = res[keep], s[keep], e[keep], o[keep]
    out = np.zeros((n_origins, len(CATEGORIES)))
    if rec.total_ns <= 0:
        return out
    cuts = np.unique(np.concatenate([s, e, [0.0, rec.total_ns]]))
    slices = len(cuts) - 1
    dt = np.diff(cuts)
    si, ei = np.searchsorted(cuts, s), np.searchsorted(cuts, e)
    counts = []
    for r in range(_LATENCY + 1):
        mine = res == r
        delta = np.bincount(si[mine], minlength=slices + 1) - np.bincount(ei[mine], minlength=slices + 1)
        counts.append(np.cumsum(delta)[:slices])
    n_active = np.zeros(slices, np.int64)
    for r in range(_LATENCY):
        n_active += counts[r] > 0
    category = {**{r: 0 for r in _COMPUTE}, _DMA: 1}
    for r in range(_LATENCY + 1):
        if r == _LATENCY:
            weight = np.where((n_active == 0) & (counts[r] > 0), dt / np.maximum(counts[r], 1), 0.0)
        else:
            weight = np.where(counts[r] > 0, dt / np.maximum(n_active, 1) / np.maximum(counts[r], 1), 0.0)
        prefix = np.concatenate([[0.0], np.cumsum(weight)])
        mine = res == r
        got = prefix[ei[mine]] - prefix[si[mine]]
        out[:, category.get(r, 2)] += np.bincount(o[mine], got, minlength=n_origins)
    idle = np.flatnonzero((n_active == 0) & (counts[_LATENCY] == 0) & (dt > 0))
    if len(idle):  # nothing in flight: the instruction starting at the slice's end was waiting
        order = np.argsort(rec.start, kind="stable")
        j = np.minimum(np.searchsorted(rec.start[order], cuts[idle + 1]), len(order) - 1)
        out[:, 2] += np.bincount(rec.origin[order[j]], dt[idle], minlength=n_origins)
    return out


def op_rows(rec: Records, origins: dict[str, Origin], pe_flops_per_ns: float,
            hbm_bytes_per_ns: float) -> list[OpRow]:
    """One row per origin that ran, by attributed time (largest first)."""
    n = len(rec.names)
    by_category = attribute(rec)
    duration = rec.end - rec.start
    busy = {engine: np.bincount(rec.origin, np.where(rec.engine == i, duration, 0.0), minlength=n)
            for i, engine in enumerate(ENGINES)}
    is_dma = rec.queue >= 0
    transfer = np.where(is_dma, rec.transfer_end - rec.transfer_start, 0.0)
    busy["dma"] = np.bincount(rec.origin, transfer, minlength=n)
    count = np.bincount(rec.origin, minlength=n)
    dma_count = np.bincount(rec.origin, is_dma.astype(np.float64), minlength=n)
    dma_bytes = np.bincount(rec.origin, rec.nbytes.astype(np.float64), minlength=n)
    dma_hbm = np.bincount(rec.origin, rec.hbm_bytes.astype(np.float64), minlength=n)
    stall = np.bincount(rec.origin, rec.stall, minlength=n)
    total = max(rec.total_ns, 1e-30)
    rows = []
    for i, name in enumerate(rec.names):
        if count[i] == 0:
            continue
        origin = origins.get(name, Origin())
        compute_ns = origin.flops / (pe_flops_per_ns * rec.pe_rate[i]) if origin.flops else 0.0
        memory_ns = origin.hbm_bytes / hbm_bytes_per_ns if origin.hbm_bytes else 0.0
        cats = by_category[i]
        rows.append(OpRow(
            name=name or UNTAGGED, source=describe_sources(origin), modules=origin.modules,
            time_us=float(cats.sum()) / 1000, share=float(cats.sum()) / total,
            compute_us=float(cats[0]) / 1000, memory_us=float(cats[1]) / 1000, overhead_us=float(cats[2]) / 1000,
            bound_by=CATEGORIES[int(np.argmax(cats))],
            busy_us={k: float(v[i]) / 1000 for k, v in busy.items()}, stall_us=float(stall[i]) / 1000,
            instructions=int(count[i]), dma_count=int(dma_count[i]), dma_bytes=int(dma_bytes[i]),
            bytes_per_dma=float(dma_bytes[i] / dma_count[i]) if dma_count[i] else 0.0,
            flops=origin.flops, hbm_bytes=origin.hbm_bytes, dma_hbm_bytes=int(dma_hbm[i]),
            bound_us=max(compute_ns, memory_ns) / 1000,
            roof="" if not (compute_ns or memory_ns) else "compute" if compute_ns >= memory_ns else "memory",
            locations=tuple(dict.fromkeys(s.location for s in origin.sources if s.location))))
    rows.sort(key=lambda r: (-r.time_us, r.name))
    return rows


def describe_sources(origin: Origin) -> str:
    """``module: op, op`` per module of its torch origins, "; "-separated (the top level is ``(top)``)."""
    ops: dict[str, dict[str, None]] = {}
    for source in origin.sources:
        ops.setdefault(source.module or "(top)", {})
        if source.op:
            ops[source.module or "(top)"][source.op] = None
    return "; ".join(f"{m}: {', '.join(o)}" if o else m for m, o in ops.items())


def layer_of(module: str, depth: int | None) -> str:
    """The first ``depth`` dot-separated components of a module path (all of them for None)."""
    if depth is None:
        return module
    return ".".join(module.split(".")[:depth])


def layer_rows(rows: list[OpRow], depth: int | None, total_us: float) -> list[LayerRow]:
    """``rows`` grouped by module path cut to ``depth``; largest first."""
    groups: dict[str, LayerRow] = {}
    for row in rows:
        paths = list(dict.fromkeys(layer_of(m, depth) for m in row.modules)) or [NO_MODULE]
        part = 1.0 / len(paths)
        for path in paths:
            g = groups.get(path)
            if g is None:
                g = groups[path] = LayerRow(path, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            g.time_us += row.time_us * part
            g.compute_us += row.compute_us * part
            g.memory_us += row.memory_us * part
            g.overhead_us += row.overhead_us * part
            g.bound_us += row.bound_us * part
            g.flops += row.flops * part
            g.hbm_bytes += row.hbm_bytes * part
            g.dma_count += row.dma_count * part
            g.dma_bytes += row.dma_bytes * part
            g.stall_us += row.stall_us * part
            g.ops.append(row.name)
    for g in groups.values():
        g.share = g.time_us / total_us if total_us else 0.0
    return sorted(groups.values(), key=lambda g: (-g.time_us, g.path))
