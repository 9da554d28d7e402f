"""Scheduling a program with control flow: regions scheduled one by one, barriers, loops and branches per stream.

Each region of the recorded structure (backend/control.py) is scheduled like a whole straight-line program
(backend/schedule.py: list scheduling, minimal semaphore waits counted from 0), plus a final POOL ``nop`` (the
*drain*) that depends on every instruction of the region, so that its waits cover the DMA transfers still in
flight. Then every region ends with a barrier over the five streams:

    pe/act/dve/pool:  nop signal(B)                              ; arrive: everything before it completed
    sp:               sem_reset first=0 count=G wait(B>=4) signal(G)  ; all arrived: counts back to 0
    pe/act/dve/pool:  reg_op r15 = r15 + 1; sem_wait sem=G reg=r15    ; leave once the reset is done

(B = BARRIER_SEM, G = GO_SEM, the last two semaphores of the target; r15 counts the barriers a stream passed,
so the wait on G, which only grows, is for this barrier's signal.) After a barrier every semaphore but G is 0
again, so the next region's waits (counted from 0) hold in every trip of a loop, and nothing of a region can
overlap the next one: the memory it reuses (the same SBUF tiles in every trip, the loop state in HBM) is ordered.

Constructs, per stream (every stream runs all of them, so all five take the same path):
- ``Loop``: ``reg_set r<d> = N`` ... body ... ``loop r<d> -> top``;
- ``While``: ``top:`` condition ... ``reg_load r<8+d> <- pred``; ``branch r<8+d> == 0 -> exit`` ... body ...
  ``jump top``; ``exit:``;
- ``Switch``: ``reg_load r<8+d> <- selector``; for a pred ``branch == 0 -> arm1``, arm 0, ``jump end``,
  ``arm1:`` arm 1; for an index ``branch == i -> arm_i`` (i < N-1), arm N-1 (any other index), ``jump end``,
  ``arm_i:`` arm i ``jump end`` ...; ``end:``.
Labels go on the next instruction of the stream (a ``nop`` when there is none, or when two labels meet).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.control import ControlRecorder, Loop, Region, Switch, While
from backend.costs import CostModel
from backend.deps import dependencies, stationary_groups
from backend.registry import SCHEDULERS as REGISTRY
from backend.schedule import ScheduleProblem, ScheduleResult, schedule_text
from backend.semaphores import add_semaphores
from isa.program import ENGINES, Instruction
from isa.target import Target

BARRIER_REG = 15
WORKERS = ("pe", "act", "dve", "pool")  # the streams that arrive at a barrier; SP resets and releases them


@dataclass
class _Label:
    """A label to attach to the next instruction of `engine` emitted after this point."""

    engine: str
    name: str


class _Emitter:
    def __init__(self, ops: list[Instruction], target: Target, costs: CostModel, untracked: set[str],
                 n_queues: int, mode: str):
        self.ops = ops
        self.costs = costs
        self.untracked = untracked
        self.n_queues = n_queues
        self.mode = mode
        n_sems = target.data["semaphores"]
        self.barrier_sem, self.go_sem = n_sems - 2, n_sems - 1
        self.out: list[Instruction | _Label] = []
        self.texts: list[str] = []
        self.estimate = 0.0
        self.labels = 0
        self.workers: tuple[str, ...] = WORKERS  # the workers of the current construct (see loop)
        self.done: dict[tuple[int, int], list[Instruction]] = {}

    def new(self, engine: str, opcode: str, comment: str, attrs: dict | None = None,
            waits: list[tuple[int, int]] | None = None, signals: list[int] | None = None) -> Instruction:
        inst = Instruction(engine, opcode, attrs=dict(attrs or {}), waits=list(waits or []),
                           signals=list(signals or []), comment=comment)
        self.out.append(inst)
        return inst

    def reserve(self, kind: str) -> str:
        """A fresh label name (per stream: NAME_ENGINE)."""
        self.labels += 1
        return f"{kind}{self.labels}"

    def mark(self, name: str, engines: tuple[str, ...] = ENGINES) -> None:
        """Label the next instruction of every stream NAME_ENGINE."""
        for engine in engines:
            self.out.append(_Label(engine, f"{name}_{engine}"))

    @property
    def streams(self) -> tuple[str, ...]:
        """The streams running the current construct: its workers and SP."""
        return (*self.workers, "sp")

    # regions and barriers -------------------------------------------------------------------------------
    def scheduled(self, region: Region) -> list[Instruction]:
        """The region's instructions (and its drain) in schedule order, semaphores filled (once per region)."""
        key = (region.start, region.end)
        if key in self.done:
            return self.done[key]
        seq = self.ops[region.start:region.end]
        drain = Instruction("pool", "nop", comment="region drained: every instruction above completed")
        seq = [*seq, drain]
        spec = REGISTRY.get(self.mode)
        groups = stationary_groups(seq) if spec.reorders_pe_groups else None
        preds = dependencies(seq, self.untracked, chain_stationary=groups is None)
        preds[-1] = list(range(len(seq) - 1))
        placement = spec.place(ScheduleProblem(seq, preds, self.costs, self.n_queues, groups))
        add_semaphores(seq, preds, placement.order, placement.queues)
        self.texts.append(f"# region of instructions {region.start}..{region.end - 1}\n"
                          + schedule_text(seq, placement, self.mode))
        self.estimate += placement.makespan
        self.done[key] = [seq[i] for i in placement.order]
        return self.done[key]

    def region(self, region: Region, last: bool = False) -> None:
        self.out.extend(self.scheduled(region))
        if not last:  # the program's last region needs no barrier
            self.barrier()

    def barrier(self) -> None:
        b, g = self.barrier_sem, self.go_sem
        for engine in self.workers:
            self.new(engine, "nop", "barrier: arrive", signals=[b])
        self.new("sp", "sem_reset", "barrier: all arrived, semaphores back to 0", {"first": 0, "count": g},
                 waits=[(b, len(self.workers))], signals=[g])
        for engine in self.workers:
            self.new(engine, "reg_op", "barrier: count", {"reg": BARRIER_REG, "a": BARRIER_REG, "op": "add",
                                                          "b": -1, "imm": 1})
            self.new(engine, "sem_wait", "barrier: leave", {"sem": g, "reg": BARRIER_REG, "imm": 0})

    def engines_in(self, items: list) -> set[str]:
        """The engines the instructions of these items' regions run on (after scheduling)."""
        used: set[str] = set()
        for item in items:
            if isinstance(item, Region):
                used.update(inst.engine for inst in self.scheduled(item))
            else:
                for part in _parts(item):
                    used |= self.engines_in(part)
        return used

    # constructs -----------------------------------------------------------------------------------------
    def items(self, items: list, depth: int) -> None:
        for item in items:
            if isinstance(item, Region):
                self.region(item)
            elif isinstance(item, Loop):
                self.loop(item, depth)
            elif isinstance(item, While):
                self.while_(item, depth)
            else:
                self.switch(item, depth)

    def loop(self, loop: Loop, depth: int) -> None:
        """A counted loop. A worker with no instruction in the body skips it when the number of barriers the
        loop passes is static: it adds that number to its barrier count and waits for the loop's last one."""
        total = barriers(loop.body)
        outer = self.workers
        if total is not None:
            used = self.engines_in(loop.body)
            self.workers = tuple(e for e in outer if e in used)
        for engine in self.streams:
            self.new(engine, "reg_set", f"{loop.name}: {loop.trips} trips", {"reg": depth, "value": loop.trips})
        top = self.reserve("loop")
        self.mark(top, self.streams)
        self.items(loop.body, depth + 1)
        for engine in self.streams:
            self.new(engine, "loop", f"{loop.name}: next trip", {"reg": depth, "target": f"{top}_{engine}"})
        for engine in [e for e in outer if e not in self.workers]:
            assert total is not None
            self.new(engine, "reg_op", f"{loop.name}: skipped, {total * loop.trips} barriers",
                     {"reg": BARRIER_REG, "a": BARRIER_REG, "op": "add", "b": -1, "imm": total * loop.trips})
            self.new(engine, "sem_wait", f"{loop.name}: wait for its end", {"sem": self.go_sem, "reg": BARRIER_REG,
                                                                           "imm": 0})
        self.workers = outer

    def while_(self, loop: While, depth: int) -> None:
        top, exit_ = self.reserve("while"), self.reserve("wend")
        self.mark(top, self.streams)
        self.items(loop.cond, depth + 1)
        reg = 8 + depth
        for engine in self.streams:
            self.new(engine, "reg_load", f"{loop.name}: condition", {"reg": reg}).operands["src"] = loop.pred
            self.new(engine, "branch", f"{loop.name}: leave when false",
                     {"reg": reg, "cmp": "is_equal", "imm": 0, "target": f"{exit_}_{engine}"})
        self.items(loop.body, depth + 1)
        for engine in self.streams:
            self.new(engine, "jump", f"{loop.name}: next trip", {"target": f"{top}_{engine}"})
        self.mark(exit_, self.streams)

    def switch(self, switch: Switch, depth: int) -> None:
        reg = 8 + depth
        n = len(switch.branches)
        arm = [self.reserve("arm") for _ in range(n)]
        end = self.reserve("send")
        for engine in self.streams:
            self.new(engine, "reg_load", f"{switch.name}: selector", {"reg": reg}).operands["src"] = switch.selector
            if switch.is_pred:  # branch 0 is the true computation
                self.new(engine, "branch", f"{switch.name}: false", {"reg": reg, "cmp": "is_equal", "imm": 0,
                                                                     "target": f"{arm[1]}_{engine}"})
            else:
                for i in range(n - 1):
                    self.new(engine, "branch", f"{switch.name}: branch {i}",
                             {"reg": reg, "cmp": "is_equal", "imm": i, "target": f"{arm[i]}_{engine}"})
        first = 0 if switch.is_pred else n - 1  # the fall-through arm
        order = [first, *[i for i in range(n) if i != first]]
        for i in order:
            if i != first:
                self.mark(arm[i], self.streams)
            self.items(switch.branches[i], depth + 1)
            for engine in self.streams:
                self.new(engine, "jump", f"{switch.name}: end", {"target": f"{end}_{engine}"})
        self.mark(end, self.streams)

    # labels ---------------------------------------------------------------------------------------------
    def resolve(self) -> list[Instruction]:
        """The instructions with every label on the next instruction of its stream."""
        pending: dict[str, list[str]] = {e: [] for e in ENGINES}
        result: list[Instruction] = []
        for entry in self.out:
            if isinstance(entry, _Label):
                pending[entry.engine].append(entry.name)
                continue
            names = pending[entry.engine]
            for name in names[:-1]:
                result.append(Instruction(entry.engine, "nop", comment="label", label=name))
            if names:
                entry.label = names[-1]
                names.clear()
            result.append(entry)
        for engine, names in pending.items():
            result.extend(Instruction(engine, "nop", comment="label", label=name) for name in names)
        return result


def _parts(item: Loop | While | Switch) -> list[list]:
    if isinstance(item, Loop):
        return [item.body]
    if isinstance(item, While):
        return [item.cond, item.body]
    return list(item.branches)


def barriers(items: list) -> int | None:
    """How many barriers one run of these items passes; None when it depends on data (a while, a switch)."""
    total = 0
    for item in items:
        if isinstance(item, Region):
            total += 1
        elif isinstance(item, Loop):
            inner = barriers(item.body)
            if inner is None:
                return None
            total += inner * item.trips
        else:
            return None
    return total


def schedule_structured(rec: ControlRecorder, ops: list[Instruction], target: Target, costs: CostModel,
                        untracked: set[str], n_queues: int, list_scheduling: bool | str = True) -> ScheduleResult:
    """Schedule the recorded structure: regions, barriers and the per-stream control instructions. The new
    instructions (drains, barriers, control) are appended to `ops`; the result's order covers all of them."""
    mode = list_scheduling if isinstance(list_scheduling, str) else ("list" if list_scheduling else "inorder")
    em = _Emitter(ops, target, costs, untracked, n_queues, mode)
    for engine in ENGINES:
        em.new(engine, "reg_set", "barrier count", {"reg": BARRIER_REG, "value": 0})
    items = rec.finish()
    em.items(items[:-1] if isinstance(items[-1], Region) else items, 0)
    if isinstance(items[-1], Region):
        em.region(items[-1], last=True)
    program = em.resolve()
    index = {id(inst): i for i, inst in enumerate(ops)}
    order = []
    for inst in program:
        if id(inst) not in index:
            index[id(inst)] = len(ops)
            ops.append(inst)
        order.append(index[id(inst)])
    queues = {i: int(ops[i].attrs["queue"]) for i in order if ops[i].opcode == "dma"}
    text = (f"# schedule with control flow: {len(em.texts)} regions, each followed by a barrier\n"
            + "\n".join(em.texts))
    return ScheduleResult(order, queues, text, em.estimate)
