"""Engine streams and semaphores: list scheduling, DMA queue assignment and minimal waits.

1. Dependencies come from deps.py (RAW/WAR/WAW on buffers and HBM, PE's stationary tile).
2. List scheduling with the cost model: repeatedly place the instruction that can start earliest
   (ties: earliest in program order) on its engine; a DMA goes to the queue that frees up first. The
   placement order is a topological order, so the per-engine streams it induces cannot deadlock; and SP
   issues a prefetch load that is ready before a store that waits on compute.
3. Semaphores, "timeline" scheme: every instruction of engine E signals sem(E) when it completes and
   every DMA of queue q signals sem(q); streams and queues complete in order, so waiting for producer
   number n of a stream is `sem >= n + 1`. Per instruction only the largest value per semaphore is
   kept, and a wait is dropped when the consumer's stream already knows it (vector clocks propagate
   what each completed instruction had waited for).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from backend.costs import CostModel
from backend.deps import dependencies
from isa.program import Instruction

ENGINE_SEMS = {"pe": 0, "act": 1, "dve": 2, "pool": 3}
QUEUE_SEM_BASE = 4


@dataclass
class ScheduleResult:
    order: list[int]  # indices into the op list, in placement order
    queues: dict[int, int]  # DMA op index -> queue
    text: str


def _stream_key(inst: Instruction, queue: int | None) -> str:
    return f"q{queue}" if inst.opcode == "dma" else inst.engine


def _sem(stream: str) -> int:
    return QUEUE_SEM_BASE + int(stream[1:]) if stream.startswith("q") else ENGINE_SEMS[stream]


def list_schedule(ops: list[Instruction], preds: list[list[int]], costs: CostModel, n_queues: int,
                  enabled: bool = True, estimate: dict[int, tuple[float, float]] | None = None
                  ) -> tuple[list[int], dict[int, int]]:
    """Placement order and DMA queue of every instruction; `estimate` receives (start, end) in ns."""
    n = len(ops)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, ps in enumerate(preds):
        indeg[i] = len(ps)
        for p in ps:
            succs[p].append(i)
    finish = [0.0] * n
    ready_at = [0.0] * n
    engine_free: dict[str, float] = {}
    queue_free = [0.0] * n_queues
    # per engine: heap of (ready time, index) not yet ready at the engine's free time, and a heap of
    # indices (program order) that are
    waiting: dict[str, list[tuple[float, int]]] = {}
    avail: dict[str, list[int]] = {}
    for i in range(n):
        if indeg[i] == 0:
            heapq.heappush(waiting.setdefault(ops[i].engine, []), (0.0, i))
    order: list[int] = []
    queues: dict[int, int] = {}
    trigger = costs.trigger_ns()
    rr = 0
    while len(order) < n:
        best: tuple[float, int, str] | None = None
        for engine in set(waiting) | set(avail):
            free = engine_free.get(engine, 0.0)
            w, a = waiting.setdefault(engine, []), avail.setdefault(engine, [])
            while w and (w[0][0] <= free or not enabled):
                heapq.heappush(a, heapq.heappop(w)[1])
            if a:
                cand = (free, a[0], engine)
            elif w:
                cand = (w[0][0], w[0][1], engine)
            else:
                continue
            if not enabled:
                cand = (0.0, cand[1], engine)
            if best is None or cand[:2] < best[:2]:
                best = cand
        assert best is not None, "dependency cycle"
        start, i, engine = best
        a = avail[engine]
        if a and a[0] == i:
            heapq.heappop(a)
        else:
            heapq.heappop(waiting[engine])
        inst = ops[i]
        start = max(start, ready_at[i], engine_free.get(engine, 0.0))
        if inst.opcode == "dma":
            q = min(range(n_queues), key=lambda k: (queue_free[k], (k - rr) % n_queues))
            rr = (q + 1) % n_queues
            queues[i] = q
            engine_free[engine] = start + trigger
            begin = max(start + trigger + costs.dma_cfg["fixed_cost_ns"], queue_free[q])
            finish[i] = begin + costs.dma_ns(inst) - costs.dma_cfg["fixed_cost_ns"]
            queue_free[q] = finish[i]
        else:
            finish[i] = start + costs.duration(inst)
            engine_free[engine] = finish[i]
        order.append(i)
        if estimate is not None:
            estimate[i] = (start, finish[i])
        for s in succs[i]:
            ready_at[s] = max(ready_at[s], finish[i])
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(waiting.setdefault(ops[s].engine, []), (ready_at[s], s))
    return order, queues


def add_semaphores(ops: list[Instruction], preds: list[list[int]], order: list[int],
                   queues: dict[int, int]) -> None:
    """Fill `waits`, `signals` and the DMA `queue` attribute of every instruction (in place)."""
    stream_of: dict[int, str] = {}
    ordinal: dict[int, int] = {}
    at: dict[tuple[str, int], int] = {}  # (stream, ordinal) -> op
    counts: dict[str, int] = {}
    known_after: dict[int, dict[str, int]] = {}  # what is known to have completed once op i completed
    issue_known: dict[str, dict[str, int]] = {}  # per issuing engine: what it knows now
    queue_known: dict[str, dict[str, int]] = {}  # per DMA queue: knowledge of its last transfer
    for i in order:
        inst = ops[i]
        stream = _stream_key(inst, queues.get(i))
        stream_of[i] = stream
        ordinal[i] = counts.get(stream, 0)
        counts[stream] = ordinal[i] + 1
        at[(stream, ordinal[i])] = i
        know = dict(issue_known.get(inst.engine, {}))
        needed: dict[str, int] = {}
        for p in preds[i]:
            ps = stream_of[p]
            if ps == stream:
                continue  # same engine or same DMA queue: in order
            value = ordinal[p] + 1
            if needed.get(ps, 0) < value:
                needed[ps] = value
        # drop waits implied by what the stream knows or by what another wait brings along
        waits = []
        for ps, value in sorted(needed.items()):
            if know.get(ps, 0) >= value:
                continue
            implied = any(known_after[at[(other, v - 1)]].get(ps, 0) >= value
                          for other, v in needed.items() if other != ps)
            if implied:
                continue
            waits.append((ps, value))
        for ps, value in waits:
            producer = at[(ps, value - 1)]
            _merge(know, known_after[producer])
            know[ps] = max(know.get(ps, 0), value)
        inst.waits = [(_sem(ps), value) for ps, value in waits]
        inst.signals = [_sem(stream)]
        issue_known[inst.engine] = know
        after = dict(know)
        if inst.opcode == "dma":
            inst.attrs["queue"] = queues[i]
            _merge(after, queue_known.get(stream, {}))
            queue_known[stream] = after
        after[stream] = ordinal[i] + 1
        known_after[i] = after


def _merge(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def schedule_text(ops: list[Instruction], order: list[int],
                  estimate: dict[int, tuple[float, float]] | None = None) -> str:
    """Per-engine streams with their waits (and the scheduler's estimated start), one per line."""
    names = {v: k for k, v in ENGINE_SEMS.items()}
    lines = ["# schedule: per-engine instruction streams in issue order",
             "# waits: sem>=value (sem = engine pe/act/dve/pool or DMA queue qN); every instruction "
             "signals its engine's (DMA: its queue's) semaphore on completion; times are the list",
             "# scheduler's estimates (backend/costs.py), not the emulator's"]
    for engine in ("pe", "act", "dve", "pool", "sp"):
        stream = [i for i in order if ops[i].engine == engine]
        lines.append(f"\n== {engine} ({len(stream)} instructions)")
        for n, i in enumerate(stream):
            inst = ops[i]
            waits = ", ".join(f"{names.get(s, f'q{s - QUEUE_SEM_BASE}')}>={v}" for s, v in inst.waits)
            queue = f" q{inst.attrs['queue']}" if inst.opcode == "dma" else ""
            at = f"{estimate[i][0] / 1000:9.2f}us " if estimate and i in estimate else ""
            lines.append(f"{n:6d} {at}{inst.opcode}{queue:<4} {inst.comment:<48}"
                         f"{'  wait ' + waits if waits else ''}")
    return "\n".join(lines) + "\n"


def schedule(ops: list[Instruction], costs: CostModel, untracked: set[str], n_queues: int,
             list_scheduling: bool = True) -> ScheduleResult:
    preds = dependencies(ops, untracked)
    estimate: dict[int, tuple[float, float]] = {}
    order, queues = list_schedule(ops, preds, costs, n_queues, list_scheduling, estimate)
    add_semaphores(ops, preds, order, queues)
    return ScheduleResult(order, queues, schedule_text(ops, order, estimate))
