"""Control flow in the emulator: per-stream registers, branches and loops, register waits, semaphore resets.

A program with control instructions (``isa.instructions.CONTROL_OPCODES``) runs on ``ControlScheduler``, the
event scheduler of ``isa.emulator.scheduler`` with three additions:

- Each engine stream has its own register file (``control.registers`` int32 registers, 32-bit two's-complement
  arithmetic). Reading a register nothing wrote is an error (ProgramError), as is a register out of range.
- ``branch``/``jump``/``loop`` move the stream's position to the labelled instruction of the same stream. An
  instruction runs once per time the stream reaches it: every execution is a *dynamic* instruction with its own
  index, start and end (the profile and the timeline show every iteration). A backward branch taken more than
  ``control.max_trips`` times is a runaway loop (LoopLimitError).
- ``sem_reset`` sets semaphores back to 0 when it completes. Semaphores are kept as absolute counts with a base
  per semaphore (the count at its last reset); a wait ``sem >= v`` holds when count - base >= v. The dynamic
  instruction handed to the profile and the race detector carries absolute waits (base + v), so "a wait for
  value v happens after the first v increments" stays true across resets and the race detector sees every
  iteration's accesses with their real ordering.

Timing does not depend on data in a straight-line program; with a data-dependent branch (a register loaded from
SBUF) it does, so the emulator schedules every run of a program with control flow (no replay).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter

import numpy as np

from isa.dtypes import DTYPES
from isa.emulator.decode import Op
from isa.emulator.memory import Memory
from isa.emulator.scheduler import START, Observer, Scheduler, Stream, Timeline
from isa.errors import IsaError, ProgramError, RuleViolation
from isa.instructions import BRANCH_OPCODES, CONTROL_OPCODES
from isa.program import ENGINES, Program
from isa.target import Target

_op_fields = attrgetter(*(f.name for f in fields(Op)))  # an Op's fields in the order its constructor takes them

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
CONTROL = frozenset(CONTROL_OPCODES)


class LoopLimitError(IsaError):
    """A backward branch was taken more times than the target's ``control.max_trips``: a runaway loop."""


def has_control(program: Program) -> bool:
    """Whether the program uses any control instruction (registers, branches, register waits, resets)."""
    return any(inst.opcode in CONTROL for inst in program.instructions)


def wrap32(value: int) -> int:
    """``value`` wrapped to int32 (two's complement)."""
    return (value + 2 ** 31) % 2 ** 32 - 2 ** 31


def _compare(op: str) -> Callable[[int, int], bool]:
    return {"is_equal": int.__eq__, "not_equal": int.__ne__, "is_gt": int.__gt__, "is_ge": int.__ge__,
            "is_lt": int.__lt__, "is_le": int.__le__}[op]


REG_ALU: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "max": max,
    "min": min,
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    **{op: (lambda f: lambda a, b: int(f(a, b)))(_compare(op))
       for op in ("is_equal", "not_equal", "is_gt", "is_ge", "is_lt", "is_le")},
}


def register_value(value: np.generic, dtype: str) -> int:
    """One SBUF element as reg_load reads it: integers and pred exactly (wrapped to 32 bits), floats truncated
    toward zero and saturated to int32, NaN -> 0."""
    if DTYPES[dtype].is_integer:
        return wrap32(int(value))
    x = float(value)
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return INT32_MAX if x > 0 else INT32_MIN
    return min(INT32_MAX, max(INT32_MIN, int(x)))


def stream_labels(program: Program) -> dict[str, dict[str, int]]:
    """Per engine: label -> position of the labelled instruction in that engine's stream."""
    labels: dict[str, dict[str, int]] = {e: {} for e in ENGINES}
    count = dict.fromkeys(ENGINES, 0)
    for inst in program.instructions:
        if inst.engine in count:
            if inst.label:
                labels[inst.engine][inst.label] = count[inst.engine]
            count[inst.engine] += 1
    return labels


def check_control(program: Program, target: Target) -> dict[str, dict[str, int]]:
    """The static rules of control flow, checked before anything runs: labels are unique, every branch target
    labels an instruction of the branch's own stream, registers and semaphores are in range. Returns
    ``stream_labels``."""
    registers = target.data["control"]["registers"]
    n_sems = target.data["semaphores"]
    seen: set[str] = set()
    for index, inst in enumerate(program.instructions):
        if inst.label:
            if inst.label in seen:
                raise ProgramError(f"instruction {index} ({inst.engine}.{inst.opcode}): label {inst.label!r} "
                                   "is defined twice")
            seen.add(inst.label)
    labels = stream_labels(program)
    for index, inst in enumerate(program.instructions):
        if inst.opcode not in CONTROL:
            continue
        who = f"instruction {index} ({inst.engine}.{inst.opcode}, line {inst.line})"
        for name in ("reg", "a"):
            if name in inst.attrs and not 0 <= int(inst.attrs[name]) < registers:
                raise RuleViolation(f"{who}: register r{inst.attrs[name]} out of range: the target has "
                                    f"{registers} per engine")
        if inst.opcode == "reg_op" and not -1 <= int(inst.attrs.get("b", -1)) < registers:
            raise RuleViolation(f"{who}: register b=r{inst.attrs['b']} out of range (-1: the immediate)")
        if inst.opcode in BRANCH_OPCODES and str(inst.attrs.get("target")) not in labels[inst.engine]:
            raise ProgramError(f"{who}: branch target {inst.attrs.get('target')!r} labels no {inst.engine} "
                               "instruction")
        if inst.opcode == "sem_wait" and not 0 <= int(inst.attrs["sem"]) < n_sems:
            raise RuleViolation(f"{who}: semaphore id {inst.attrs['sem']} out of range (target has {n_sems})")
        if inst.opcode == "sem_reset":
            first, count = int(inst.attrs["first"]), int(inst.attrs["count"])
            if first < 0 or count < 1 or first + count > n_sems:
                raise RuleViolation(f"{who}: semaphores {first}..{first + count - 1} out of range "
                                    f"(target has {n_sems})")
        if inst.opcode in ("reg_set", "reg_op", "branch", "sem_wait"):
            for name in ("value", "imm"):
                if name in inst.attrs and not INT32_MIN <= int(inst.attrs[name]) <= INT32_MAX:
                    raise RuleViolation(f"{who}: {name}={inst.attrs[name]} is not a 32-bit integer")
    return labels


class ControlScheduler(Scheduler):
    """The scheduler with per-stream control flow (module doc). ``dynamic`` lists every executed instruction,
    its index being its position; the timeline is indexed by it."""

    def __init__(self, ops: list[Op], target: Target, memory: Memory, labels: dict[str, dict[str, int]],
                 observer: Observer | None = None, progress: Callable[[int, int], None] | None = None):
        super().__init__(ops, target, observer, progress)
        control = target.data["control"]
        self.max_trips = int(control["max_trips"])
        registers = int(control["registers"])
        self.labels = labels
        self.regs = {e: [0] * registers for e in ENGINES}
        self.reg_written = {e: [False] * registers for e in ENGINES}
        self.base = [0] * len(self.sems)
        self.dynamic: list[Op] = []
        self.trips: dict[int, int] = defaultdict(int)
        self.reg_views = {op.index: memory.view(op.inst.operands["src"]) for op in ops if op.opcode == "reg_load"}
        self.timeline = Timeline([], [])

    # registers -------------------------------------------------------------------------------

    def _read(self, engine: str, op: Op, reg: int) -> int:
        if not self.reg_written[engine][reg]:
            raise ProgramError(f"{op.label}: reads register r{reg} of {engine}, which nothing wrote")
        return self.regs[engine][reg]

    def _write(self, engine: str, reg: int, value: int) -> None:
        self.regs[engine][reg] = wrap32(value)
        self.reg_written[engine][reg] = True

    # engine streams --------------------------------------------------------------------------

    def _waits(self, stream: Stream, op: Op) -> tuple[tuple[int, int], ...]:
        """The instruction's waits as (semaphore, value since its last reset); sem_wait adds its register's."""
        if op.opcode != "sem_wait":
            return op.waits
        attrs = op.inst.attrs
        wanted = self._read(stream.name, op, int(attrs["reg"])) + int(attrs.get("imm", 0))
        return (*op.waits, (int(attrs["sem"]), wanted))

    def _try_issue(self, stream: Stream, cause: int | None) -> None:
        if stream.pending or stream.pos >= len(stream.ops):
            return
        op = stream.ops[stream.pos]
        sems, base = self.sems, self.base
        waits = self._waits(stream, op)
        for sem, wanted in waits:
            if sems[sem] - base[sem] < wanted:
                self.waiters[sem].append(stream)
                return
        earliest = max(stream.last_start, stream.load_end) if op.is_load else max(stream.end, stream.load_end)
        if cause is not None and self.now > earliest:
            self.timeline.stalls[stream.name][self.sem_source[cause]] += self.now - earliest
        stream.pending = True
        dyn = Op(*_op_fields(op))  # a copy of the decoded op (dataclasses.replace is 5x slower)
        dyn.source = op.index
        dyn.index = len(self.dynamic)
        dyn.waits = tuple((s, base[s] + v) for s, v in waits if v > 0)
        self.dynamic.append(dyn)
        self.timeline.start.append(math.nan)
        self.timeline.end.append(math.nan)
        self._push(max(self.now, earliest), START, dyn, dyn.index)

    def _next_position(self, stream: Stream, op: Op) -> int:
        return self._control(stream, op) if op.opcode in CONTROL else stream.pos + 1

    def _control(self, stream: Stream, op: Op) -> int:
        """Run a control instruction at its start; returns the stream's next position."""
        engine, attrs, here = stream.name, op.inst.attrs, stream.pos
        opcode = op.opcode
        if opcode == "reg_set":
            self._write(engine, int(attrs["reg"]), int(attrs["value"]))
        elif opcode == "reg_load":
            src = op.inst.operands["src"]
            view = self.reg_views[stream.ops[here].index]
            self._write(engine, int(attrs["reg"]), register_value(view.reshape(-1)[0], src.dtype))
        elif opcode == "reg_op":
            a = self._read(engine, op, int(attrs["a"]))
            b_reg = int(attrs.get("b", -1))
            b = self._read(engine, op, b_reg) if b_reg >= 0 else int(attrs.get("imm", 0))
            self._write(engine, int(attrs["reg"]), REG_ALU[str(attrs["op"])](a, b))
        elif opcode in BRANCH_OPCODES:
            taken = True
            if opcode == "branch":
                taken = _compare(str(attrs["cmp"]))(self._read(engine, op, int(attrs["reg"])), int(attrs.get("imm", 0)))
            elif opcode == "loop":
                reg = int(attrs["reg"])
                left = self._read(engine, op, reg) - 1
                self._write(engine, reg, left)
                taken = left > 0
            if taken:
                target = self.labels[engine][str(attrs["target"])]
                if target <= here:
                    static = stream.ops[here].index
                    self.trips[static] += 1
                    if self.trips[static] > self.max_trips:
                        raise LoopLimitError(f"{op.label}: runaway loop: branched back to {attrs['target']!r} more "
                                             f"than {self.max_trips} times (the target's control.max_trips)")
                return target
        return here + 1

    def _done(self, op: Op) -> None:
        if op.opcode == "sem_reset":
            first, count = int(op.inst.attrs["first"]), int(op.inst.attrs["count"])
            self.base[first:first + count] = self.sems[first:first + count]
        super()._done(op)

    def _unmet(self, stream: Stream, op: Op) -> list[tuple[int, int, int]]:
        return [(s, self.sems[s] - self.base[s], v) for s, v in self._waits(stream, op)
                if self.sems[s] - self.base[s] < v]
