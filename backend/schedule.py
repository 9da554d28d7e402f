"""Engine streams and semaphores: list scheduling, engine balancing, DMA queues and minimal waits.

1. Dependencies come from deps.py (RAW/WAR/WAW on buffers and HBM, PE's stationary tile).
2. Placement, on an estimated timeline that follows the emulator's timing rules (costs.py; PE's
   LoadStationary overlaps the previous PE instruction, a DMA reaches its queue a fixed cost after
   SP triggers it and queues run in parallel):
   - "list" (critical path): whenever an engine can start something, it starts the ready instruction
     with the longest path of estimated time to the end of the program (its bottom level), so the
     loads and transposes that feed long chains of PE work go first and a store that waits on compute
     never holds up SP's prefetch triggers. An instruction more than one engine can run (copies,
     elementwise ALU ops, memset, iota; the ISA table and the engines' memories decide, e.g. POOL
     never touches PSUM) goes to the engine where it finishes first; a plain ACT copy moved to DVE or
     POOL becomes a tensor_copy. PE orders its stationary groups (a LoadStationary and the matmuls
     that use it; deps.py leaves the stationary tile out of the dependencies) freely, keeping each
     together and opening one only when its data is due (_PeGroups), so e.g. the next attention
     head's QK^T runs while the previous head's softmax does. A DMA goes to the queue it can start
     on first. Queues are FIFO, so SP takes the next transfer only when it would reach a queue as
     that queue frees (DMA_BACKLOG_NS): an early trigger of a prefetch needed late would hold up a
     transfer needed sooner that becomes ready meanwhile. (The emulator's SP does not wait for that
     moment: only the order matters.)
   - "ready_time": the same loop, but each engine takes the earliest-emitted ready instruction and PE
     keeps program order (the first list scheduler of this backend; kept for comparison).
   - "inorder": program order, engines as the kernels chose them, DMA queues round robin.
   Every placement order is a topological order, so the per-engine streams it induces cannot deadlock.
3. Semaphores, "timeline" scheme: a stream whose instructions complete in order (ACT, DVE, POOL, each
   DMA queue; PE's matmuls and transposes; PE's LoadStationary, which completes ahead of the matmul it
   overlaps, on a semaphore of its own) counts its completed producers on one semaphore, so waiting
   for producer number n is `sem >= n`. Only instructions something waits on signal. A wait is left
   out when the consumer's stream already knows it (vector clocks propagate what every completed
   instruction had waited for) or when another wait of the same instruction implies it: the waits
   are the transitive reduction of the cross-stream dependencies.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from backend.costs import CostModel
from backend.deps import dependencies, stationary_groups
from backend.registry import SCHEDULER_NAMES, SchedulerSpec, StrategyError
from backend.registry import SCHEDULERS as REGISTRY
from backend.semaphores import add_semaphores, sem_name
from isa.dtypes import WIDE_INTEGERS
from isa.dtypes import dtype as isa_dtype
from isa.emulator.rules import ENGINE_MEMORIES
from isa.instructions import DMA_OPCODES, OPCODES
from isa.program import Instruction

COMPUTE_ENGINES = ("pe", "act", "dve", "pool")
SCHEDULERS = SCHEDULER_NAMES
DMA_BACKLOG_NS = 0.0  # list scheduling: a transfer reaches its queue at most this long before the queue frees
COPY_ENGINES = OPCODES["tensor_copy"].engines


@dataclass
class Placement:
    """Where and when every instruction runs (estimates in ns)."""

    order: list[int]  # indices into the op list, in placement order (a topological order)
    engines: list[str]
    queues: dict[int, int]  # DMA op index -> queue
    start: list[float]
    finish: list[float]  # when the effect is visible (DMA: transfer complete)

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)


@dataclass
class ScheduleResult:
    order: list[int]
    queues: dict[int, int]
    text: str
    estimate_ns: float  # the scheduler's estimated end of the program


# -- engine choice ---------------------------------------------------------------------------------------------

def is_plain_copy(inst: Instruction) -> bool:
    """An ACT activation that only copies (and converts) a float tensor: a tensor_copy anywhere."""
    if inst.opcode != "activation" or inst.attrs.get("func") not in ("copy", "identity"):
        return False
    if float(inst.attrs.get("scale", 1.0)) != 1.0 or inst.attrs.get("acc_cmd", "idle") != "idle":
        return False
    if set(inst.operands) != {"dst", "src"}:
        return False
    return all(isa_dtype(ap.dtype).is_float for ap in inst.operands.values())


def engine_choices(inst: Instruction) -> tuple[str, ...]:
    """Engines that may run `inst` (its own first): the ISA table's engines whose memories hold all
    its operands. PE, SP, nops (semaphore carriers) and stateful instructions stay where they are."""
    if inst.opcode == "nop" or inst.engine not in COMPUTE_ENGINES[1:] or inst.attrs.get("math") == "int" or \
            any(ap.dtype in WIDE_INTEGERS for ap in inst.operands.values()):
        return (inst.engine,)  # math=int and 64-bit integers: GpSimd's exact integer mode exists on POOL only
    engines = COPY_ENGINES if is_plain_copy(inst) else OPCODES[inst.opcode].engines
    memories = {ap.memory for ap in inst.operands.values()}
    allowed = [e for e in engines if e in COMPUTE_ENGINES[1:] and memories <= set(ENGINE_MEMORIES[e])]
    return tuple(dict.fromkeys([inst.engine] + allowed))


def move_to(inst: Instruction, engine: str) -> None:
    """Run `inst` on `engine` (one of engine_choices(inst))."""
    if engine == inst.engine:
        return
    if inst.opcode == "activation":
        inst.opcode, inst.attrs = "tensor_copy", {}
    inst.engine = engine


# -- the estimated machine -------------------------------------------------------------------------------------

class Timeline:
    """Estimated state of the engines and DMA queues while instructions are placed in order."""

    def __init__(self, costs: CostModel, n_queues: int, backlog_ns: float | None = None):
        self.costs = costs
        self.backlog_ns = backlog_ns
        self.end = dict.fromkeys((*COMPUTE_ENGINES, "sp"), 0.0)
        self.load_end = 0.0  # PE: completion of the last LoadStationary
        self.last_start = 0.0  # PE: start of the last instruction
        self.previous: dict[str, Instruction] = {}
        self.queue_free = [0.0] * n_queues
        self.trigger = costs.trigger_ns()
        self.busy = dict.fromkeys((*COMPUTE_ENGINES, "sp", "dma"), 0.0)

    def free(self, engine: str) -> float:
        """When `engine` could start its next (non-load) instruction. With a backlog limit, SP
        takes a transfer only when it would reach a queue at most `backlog_ns` before the queue
        frees: queues are FIFO, so an early trigger of a transfer needed late would hold up one
        needed sooner that becomes ready meanwhile."""
        if engine == "pe":
            return max(self.end["pe"], self.load_end)
        if engine == "sp" and self.backlog_ns is not None:
            first_free = min(self.queue_free) - self.trigger - self.costs.fixed_ns - self.backlog_ns
            return max(self.end["sp"], first_free)
        return self.end[engine]

    def estimate(self, inst: Instruction, engine: str, ready: float) -> tuple[float, float]:
        """(start, finish) of `inst` on the compute engine `engine` if placed now."""
        duration = self.costs.engine_ns(inst, engine, self.previous.get(engine))
        if inst.opcode == "load_stationary":
            start = max(ready, self.last_start, self.load_end)
        else:
            start = max(ready, self.free(engine))
        return start, start + duration

    def place(self, inst: Instruction, engine: str, ready: float) -> tuple[float, float]:
        start, finish = self.estimate(inst, engine, ready)
        if engine == "pe":
            self.last_start = start
            if inst.opcode == "load_stationary":
                self.load_end = finish
            else:
                self.end["pe"] = finish
        else:
            self.end[engine] = finish
        self.previous[engine] = inst
        self.busy[engine] += finish - start
        return start, finish

    def place_dma(self, inst: Instruction, ready: float, queue: int | None) -> tuple[float, float, int]:
        """(trigger start, transfer end, queue): the queue given, or the one the transfer starts on first."""
        start = max(ready, self.free("sp"))
        self.end["sp"] = start + self.trigger
        self.busy["sp"] += self.trigger
        arrive = start + self.trigger + self.costs.fixed_ns
        if queue is None:  # the first queue free on arrival, else the first of those that free first
            free = self.queue_free
            soonest = min(free)
            queue = next(q for q, f in enumerate(free) if f <= arrive) if soonest <= arrive else free.index(soonest)
        begin = max(arrive, self.queue_free[queue])
        transfer = self.costs.transfer_ns(inst)
        self.queue_free[queue] = begin + transfer
        self.busy["dma"] += transfer
        return start, begin + transfer, queue


# -- placement ---------------------------------------------------------------------------------------------------

def _successors(preds: list[list[int]]) -> list[list[int]]:
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return succs


def bottom_levels(ops: list[Instruction], succs: list[list[int]], costs: CostModel,
                  choices: list[tuple[str, ...]]) -> list[float]:
    """Longest estimated time from each instruction's start to the end of the program."""
    level = [0.0] * len(ops)
    for i in range(len(ops) - 1, -1, -1):  # program order is a topological order
        inst = ops[i]
        if inst.opcode in DMA_OPCODES:
            own = costs.dma_ns(inst)
        else:
            own = min(costs.engine_ns(inst, e) for e in choices[i])
        level[i] = own + max(map(level.__getitem__, succs[i]), default=0.0)
    return level


class _Placer:
    """Commits instructions one at a time to the timeline, tracking readiness of their successors."""

    def __init__(self, ops: list[Instruction], preds: list[list[int]], costs: CostModel, n_queues: int,
                 backlog_ns: float | None = None):
        self.ops = ops
        self.succs = _successors(preds)
        self.indeg = [len(ps) for ps in preds]
        self.ready = [0.0] * len(ops)
        self.timeline = Timeline(costs, n_queues, backlog_ns)
        n = len(ops)
        self.placement = Placement([], [op.engine for op in ops], {}, [0.0] * n, [0.0] * n)

    def commit(self, i: int, engine: str | None = None, queue: int | None = None) -> list[int]:
        """Place op i on `engine` (default: the kernel's; DMA: on `queue`, or the best one); returns the ops it
        made ready."""
        inst, p, tl = self.ops[i], self.placement, self.timeline
        engine = engine or inst.engine
        if inst.opcode in DMA_OPCODES:
            start, finish, q = tl.place_dma(inst, self.ready[i], queue)
            p.queues[i] = q
        else:
            move_to(inst, engine)
            start, finish = tl.place(inst, engine, self.ready[i])
        p.order.append(i)
        p.engines[i] = inst.engine
        p.start[i], p.finish[i] = start, finish
        released = []
        ready, indeg = self.ready, self.indeg
        if inst.engine == "pe":
            ops = self.ops
            for s in self.succs[i]:
                # PE orders its own stream (a LoadStationary may start under the previous matmul)
                if ready[s] < finish and ops[s].engine != "pe":
                    ready[s] = finish
                indeg[s] -= 1
                if not indeg[s]:
                    released.append(s)
        else:
            for s in self.succs[i]:
                if ready[s] < finish:
                    ready[s] = finish
                indeg[s] -= 1
                if not indeg[s]:
                    released.append(s)
        return released


def inorder_schedule(ops: list[Instruction], preds: list[list[int]], costs: CostModel, n_queues: int) -> Placement:
    """Program order, the kernels' engines, DMA queues round robin."""
    placer = _Placer(ops, preds, costs, n_queues)
    n_dma = 0
    for i, inst in enumerate(ops):
        queue = None
        if inst.opcode in DMA_OPCODES:
            queue, n_dma = n_dma % n_queues, n_dma + 1
        placer.commit(i, inst.engine, queue)
    return placer.placement


class _PeGroups:
    """Stationary groups (a load_stationary and the matmuls that use it) kept together on PE in any
    order: a load is released once every predecessor of its group from outside the group is placed (so
    the group, once open, can always complete), and while a group is open PE takes only its members and
    instructions that do not touch the stationary tile (transposes)."""

    def __init__(self, ops: list[Instruction], preds: list[list[int]], groups: list[int]):
        self.members: dict[int, list[int]] = {i: [] for i, op in enumerate(ops) if op.opcode == "load_stationary"}
        for i, load in enumerate(groups):
            if load >= 0:
                self.members[load].append(i)
        self.preds = preds
        self.blockers: dict[int, int] = {}
        self.unblocks: dict[int, list[int]] = {}
        for load, members in self.members.items():
            inside = {load, *members}
            outside = {p for m in (load, *members) for p in preds[m]} - inside
            self.blockers[load] = len(outside)
            for p in outside:
                self.unblocks.setdefault(p, []).append(load)
        self.open = -1  # the load whose group PE is in
        self.remaining = 0

    def released(self) -> list[int]:
        return [load for load, n in self.blockers.items() if n == 0]

    def ready_time(self, load: int, ops: list[Instruction], placer: _Placer, costs: CostModel) -> float:
        """When to open the group of a released `load` so that no member waits for its data: the
        latest outside input of each member, less the PE time of the group before that member."""
        finish = placer.placement.finish
        inside = {load, *self.members[load]}
        ready, offset = placer.ready[load], 0.0
        for m in (load, *self.members[load]):
            outside = [finish[p] for p in self.preds[m] if p not in inside]
            if outside:
                ready = max(ready, max(outside) - offset)
            offset += costs.engine_ns(ops[m])
        return ready

    def place(self, i: int, inst: Instruction) -> list[int]:
        """Note that op i was placed; returns the loads this releases."""
        if inst.opcode == "load_stationary":
            self.open, self.remaining = (i, len(self.members[i])) if self.members[i] else (-1, 0)
        elif self.open >= 0 and inst.opcode == "multiply_moving":
            self.remaining -= 1
            if self.remaining == 0:
                self.open = -1
        out = []
        for load in self.unblocks.pop(i, ()):
            self.blockers[load] -= 1
            if self.blockers[load] == 0:
                out.append(load)
        return out


def list_schedule(ops: list[Instruction], preds: list[list[int]], costs: CostModel, n_queues: int,
                  priority: str = "list", groups: list[int] | None = None) -> Placement:
    """List scheduling on the estimated timeline; `priority` "list" (critical path) or "ready_time".
    `groups` (deps.stationary_groups, with preds computed without the stationary chain): PE may order
    stationary groups freely."""
    n = len(ops)
    placer = _Placer(ops, preds, costs, n_queues, DMA_BACKLOG_NS if priority == "list" else None)
    tl = placer.timeline
    choices = [engine_choices(op) if priority == "list" else (op.engine,) for op in ops]
    if priority == "list":
        level = bottom_levels(ops, placer.succs, costs, choices)
        key = [(-level[i], i) for i in range(n)]
    else:
        key = [(0.0, i) for i in range(n)]
    pe_groups = _PeGroups(ops, preds, groups) if groups is not None else None
    if pe_groups is not None:
        for load in pe_groups.members:
            choices[load] = ("pe.load",)  # a lane of its own, closed while a group is open
    lanes = (*COMPUTE_ENGINES, "sp") + (("pe.load",) if pe_groups is not None else ())
    waiting: dict[str, list[tuple[float, int]]] = {e: [] for e in lanes}  # (ready time, op)
    avail: dict[str, list[tuple[tuple[float, int], int]]] = {e: [] for e in lanes}  # (priority key, op)
    placed = [False] * n

    def release(ops_ready: list[int], loads: bool = False) -> None:
        for s in ops_ready:
            if pe_groups is not None and choices[s] == ("pe.load",):
                if loads:  # released by its group, opened once the members' data is due
                    heapq.heappush(waiting["pe.load"], (pe_groups.ready_time(s, ops, placer, costs), s))
                continue
            for e in choices[s]:
                heapq.heappush(waiting[e], (placer.ready[s], s))

    release([i for i in range(n) if placer.indeg[i] == 0])
    if pe_groups is not None:
        release(pe_groups.released(), loads=True)
    for _ in range(n):
        best: tuple[float, tuple[float, int], str] | None = None
        for e in lanes:
            if e == "pe.load" and pe_groups is not None and pe_groups.open >= 0:
                continue
            w, a = waiting[e], avail[e]
            free = tl.free(e[:2] if e == "pe.load" else e)
            while w and (w[0][0] <= free or placed[w[0][1]]):
                _, i = heapq.heappop(w)
                if not placed[i]:
                    heapq.heappush(a, (key[i], i))
            while a and placed[a[0][1]]:
                heapq.heappop(a)
            if a:
                cand = (free, a[0][0], e)
            elif w:
                cand = (w[0][0], key[w[0][1]], e)
            else:
                continue
            if best is None or cand < best:
                best = cand
        assert best is not None, "dependency cycle"
        at, _, e = best
        w, a = waiting[e], avail[e]
        while w and w[0][0] <= at:
            _, i = heapq.heappop(w)
            if not placed[i]:
                heapq.heappush(a, (key[i], i))
        _, i = heapq.heappop(a)
        placed[i] = True
        engine = "pe" if e == "pe.load" else e
        if len(choices[i]) > 1:  # the engine where it finishes first (the picking engine on ties)
            ready = placer.ready[i]
            engine = min(choices[i], key=lambda c: (tl.estimate(ops[i], c, ready)[1], c != e))
        release(placer.commit(i, engine))
        if pe_groups is not None:
            release(pe_groups.place(i, ops[i]), loads=True)
    return placer.placement


def schedule_text(ops: list[Instruction], placement: Placement, mode: str) -> str:
    """Per-engine streams with their waits and the scheduler's estimated start, one per line."""
    order = placement.order
    makespan = placement.makespan
    lines = [f"# schedule ({mode}): per-engine instruction streams in issue order",
             "# waits: sem>=value (sem = pe, pe.load, act, dve, pool or DMA queue qN; each counts the "
             "completions of its instructions that signal); times are the scheduler's",
             f"# estimates (backend/costs.py), not the emulator's; estimated end {makespan / 1000:.2f} us"]
    for engine in (*COMPUTE_ENGINES, "sp"):
        stream = [i for i in order if ops[i].engine == engine]
        busy = sum(placement.finish[i] - placement.start[i] for i in stream) if engine != "sp" else 0.0
        share = f", ~{100 * busy / makespan:.0f}% busy" if makespan and engine != "sp" else ""
        lines.append(f"\n== {engine} ({len(stream)} instructions{share})")
        for n, i in enumerate(stream):
            inst = ops[i]
            waits = ", ".join(f"{sem_name(s)}>={v}" for s, v in inst.waits)
            queue = f" q{inst.attrs['queue']}" if inst.opcode in DMA_OPCODES else ""
            signal = " +" + sem_name(inst.signals[0]) if inst.signals else ""
            lines.append(f"{n:6d} {placement.start[i] / 1000:9.2f}us {inst.opcode}{queue:<4} {inst.comment:<48}"
                         f"{'  wait ' + waits if waits else ''}{signal}")
    return "\n".join(lines) + "\n"


@dataclass
class ScheduleProblem:
    """What a scheduler (a built-in or a plug-in, backend/registry.py) is given: the instructions in program
    order, each one's predecessors (indices), the cost model of the estimated timeline, the DMA queues it may
    use and, for a scheduler that reorders PE's stationary groups, the groups (deps.stationary_groups)."""

    ops: list[Instruction]
    preds: list[list[int]]
    costs: CostModel
    n_queues: int
    groups: list[int] | None = None

    def placer(self, backlog_ns: float | None = None) -> _Placer:
        """A fresh estimated timeline: commit(i, engine=None, queue=None) places op i and returns the ops it
        made ready; .placement is the result to return."""
        return _Placer(self.ops, self.preds, self.costs, self.n_queues, backlog_ns)


def _check_placement(name: str, problem: ScheduleProblem, placement: Placement) -> None:
    """A scheduler's placement must be a topological order of every op with a valid queue for every DMA."""
    n = len(problem.ops)
    if not isinstance(placement, Placement):
        raise StrategyError(f"scheduler {name!r} returned {type(placement).__name__}, not a Placement "
                            f"(return problem.placer().placement after committing every op)")
    if sorted(placement.order) != list(range(n)):
        raise StrategyError(f"scheduler {name!r} placed {len(placement.order)} instructions of {n} "
                            f"(each exactly once is required)")
    position = [0] * n
    for k, i in enumerate(placement.order):
        position[i] = k
    for i, preds in enumerate(problem.preds):
        late = [p for p in preds if position[p] > position[i]]
        if late:
            raise StrategyError(f"scheduler {name!r} placed instruction {i} ({problem.ops[i].opcode} "
                                f"{problem.ops[i].comment}) before its predecessor {late[0]}")
    for i, op in enumerate(problem.ops):
        if op.opcode in DMA_OPCODES and not 0 <= placement.queues.get(i, -1) < problem.n_queues:
            raise StrategyError(f"scheduler {name!r} gave DMA {i} no queue in 0..{problem.n_queues - 1}")


def schedule(ops: list[Instruction], costs: CostModel, untracked: set[str], n_queues: int,
             list_scheduling: bool | str = True) -> ScheduleResult:
    """Order `ops` into engine streams with semaphores. `list_scheduling`: True ("list"), False
    ("inorder") or the name of a registered scheduler (backend/registry.py)."""
    mode = list_scheduling if isinstance(list_scheduling, str) else ("list" if list_scheduling else "inorder")
    spec = REGISTRY.get(mode)
    groups = stationary_groups(ops) if spec.reorders_pe_groups else None
    preds = dependencies(ops, untracked, chain_stationary=groups is None)
    problem = ScheduleProblem(ops, preds, costs, n_queues, groups)
    placement = spec.place(problem)
    _check_placement(mode, problem, placement)
    add_semaphores(ops, preds, placement.order, placement.queues)
    return ScheduleResult(placement.order, placement.queues, schedule_text(ops, placement, mode), placement.makespan)


REGISTRY.register("list", SchedulerSpec(
    "list", lambda p: list_schedule(p.ops, p.preds, p.costs, p.n_queues, "list", p.groups), reorders_pe_groups=True,
    description="critical-path list scheduling, engine balancing, PE stationary groups reordered"))
REGISTRY.register("ready_time", SchedulerSpec(
    "ready_time", lambda p: list_schedule(p.ops, p.preds, p.costs, p.n_queues, "ready_time", None),
    description="each engine takes its earliest-emitted ready instruction (the first list scheduler)"))
REGISTRY.register("inorder", SchedulerSpec(
    "inorder", lambda p: inorder_schedule(p.ops, p.preds, p.costs, p.n_queues),
    description="program order, the kernels' engines, DMA queues round robin"))
