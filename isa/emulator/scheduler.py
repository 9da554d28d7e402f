"""Event-driven execution in global time order: five in-order engine streams and 16 DMA queues.

An instruction starts when its engine is free and all its semaphore waits hold; its numerics run
at its start, in global time order (straight-line code without an observer: recorded in that order and
run by the caller once the schedule is known, see ``Scheduler.defer``). Completions increment
semaphores (``dma``: when the transfer completes, not when SP triggers it). A heap of timed events
drives everything; when it runs dry while an engine still has instructions, the program is deadlocked.

Timing (figures from the target file, rules from machine-model.md):
- PE: ``load_stationary`` may start once the previous PE instruction has *started* (it runs in the
  background of the previous multiply_moving); the next non-load PE instruction starts after both
  the previous one and the load have completed.
- act/dve/pool/sp: one instruction at a time, ``duration`` from ``isa.emulator.timing``.
- DMA: a transfer reaches its queue ``fixed_cost_ns`` after its trigger ends, starts when the queue
  is free, and moves ``transfer_bytes`` at ``min(queue_bytes_per_ns, hbm_bytes_per_ns / n)``
  where n is the number of active transfers touching HBM (fair share, recomputed whenever a
  transfer starts or finishes).
- Where that share can never bind (``share_can_bind``: hbm_bytes_per_ns / queues >= queue_bytes_per_ns, as on
  trn1; a queue has one active transfer at a time, so n <= queues), every transfer moves at the queue rate and
  ends at start + transfer_bytes / queue_bytes_per_ns, known when it starts: one DMA_DONE event per transfer,
  nothing to reschedule (``_ready_q``/``_done_q``). The fair-share path reaches the same ends through a chain of
  rounded ``remaining -= rate * elapsed`` updates and completes a transfer once within EPS_BYTES * max(1, rate)
  bytes of its end (with any other that close to its own end), so its times can differ in the last bits (~1e-16
  relative on the stored programs, ~EPS_BYTES ns at most) and two completions that close can fire as one event
  or two; each queue's order is the same (tests/isa/test_scheduler.py compares the two paths).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from isa.emulator.decode import Op
from isa.errors import DeadlockError
from isa.program import ENGINES
from isa.target import Target

START, DONE, DMA_READY, DMA_DONE = range(4)
EPS_BYTES = 1e-6


class Observer(Protocol):
    """Checked mode hooks (see ``isa.emulator.checks``)."""

    def on_start(self, op: Op) -> None: ...
    def on_transfer(self, op: Op) -> None: ...
    def on_signal(self, op: Op, transfer: bool, sem: int) -> None: ...
    def on_stream_end(self, engine: str) -> None: ...


@dataclass(eq=False)
class Stream:
    name: str
    ops: list[Op]
    pos: int = 0
    pending: bool = False  # the head has a START event scheduled
    end: float = 0.0  # completion of the last non-load instruction
    load_end: float = 0.0  # completion of the last load_stationary (PE)
    last_start: float = 0.0


@dataclass(eq=False, slots=True)
class Transfer:
    op: Op
    remaining: float
    hbm: bool
    rate: float = 0.0
    limit: float = EPS_BYTES  # done when remaining <= limit: EPS_BYTES * max(1, rate), set with the rate


@dataclass
class Timeline:
    """What happened: start/end of every instruction and transfer, in ns."""

    start: list[float]
    end: list[float]
    transfer_start: dict[int, float] = field(default_factory=dict)
    transfer_end: dict[int, float] = field(default_factory=dict)
    stalls: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    time_ns: float = 0.0
    # semaphore -> the increments in order: (instruction index, by its dma transfer?)
    increments: dict[int, list[tuple[int, bool]]] = field(default_factory=lambda: defaultdict(list))


def share_can_bind(target: Target) -> bool:
    """Whether the HBM fair share can slow a transfer below its queue's rate on ``target`` (with every queue busy)."""
    dma = target.data["dma"]
    return target.data["hbm"]["bytes_per_ns"] / dma["queues"] < dma["queue_bytes_per_ns"]


class Scheduler:
    def __init__(self, ops: list[Op], target: Target, observer: Observer | None = None,
                 progress: Callable[[int, int], None] | None = None, fair_share: bool = False):
        """``fair_share``: the fair-share DMA path even where the share cannot bind (tests compare the two)."""
        self.ops = ops
        by_engine: dict[str, list[Op]] = {e: [] for e in ENGINES}
        for op in ops:
            by_engine[op.engine].append(op)
        self.streams = {e: Stream(e, by_engine[e]) for e in ENGINES}
        n_sems = target.data["semaphores"]
        self.sems = [0] * n_sems
        self.sem_source = [""] * n_sems
        self.waiters: dict[int, list[Stream]] = defaultdict(list)
        dma = target.data["dma"]
        self.fixed_ns = dma["fixed_cost_ns"]
        self.queue_rate = dma["queue_bytes_per_ns"]
        self.hbm_rate = target.data["hbm"]["bytes_per_ns"]
        self.fifo: list[deque[Op]] = [deque() for _ in range(dma["queues"])]
        self.queue_busy = [False] * dma["queues"]
        self.active: list[Transfer] = []
        self.active_hbm = 0  # how many of the active transfers touch HBM
        self.dma_clock = 0.0
        self.dma_version = 0
        self.heap: list[tuple[float, int, int, int, object]] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.observer = observer
        self.progress = progress
        self.started = 0
        # the numerics in the order they ran: a later run of the same program replays them
        # (timing does not depend on data, so neither does this order)
        self.executed: list[Callable[[], None]] = []
        nan = float("nan")
        self.timeline = Timeline([nan] * len(ops), [nan] * len(ops))
        self.handlers = {START: self._start, DONE: self._done, DMA_READY: self._dma_ready,
                         DMA_DONE: self._dma_done}
        if not (fair_share or share_can_bind(target)):  # every transfer at the queue rate (module doc)
            self.handlers[DMA_READY], self.handlers[DMA_DONE] = self._ready_q, self._done_q
            self._arrive = self._arrive_q
        # queue-rate path (_arrive_q): when the last transfer given to each queue ends; the transfers that wait
        # behind one that has not arrived yet (by its index), and the last such list of each queue
        self.queue_end = [0.0] * dma["queues"]
        self.behind: dict[int, list[Op]] = {}
        self.held: list[list[Op] | None] = [None] * dma["queues"]
        self.sources = [f"dma.q{queue}" for queue in range(dma["queues"])]
        # straight-line code without an observer takes shortcuts that change no time or order (see _start)
        self.direct = observer is None and type(self)._next_position is Scheduler._next_position
        # and leaves the numerics to its caller: timing does not depend on data, so running ``executed`` in order
        # once the schedule is known gives the same results (isa.emulator.Emulator does); an observer and control
        # flow (registers read from SBUF) need each instruction's data when it starts
        self.defer = self.direct
        self.horizon = 0.0  # the latest end recorded without a DONE event

    def run(self) -> Timeline:
        for stream in self.streams.values():
            if not stream.ops and self.observer:
                self.observer.on_stream_end(stream.name)
            self._try_issue(stream, None)
        heap, handlers, pop = self.heap, self.handlers, heapq.heappop
        while heap:
            time, _, _, kind, payload = pop(heap)
            self.now = time
            handlers[kind](payload)
        self._check_finished()
        self.timeline.time_ns = self.now if self.now >= self.horizon else self.horizon
        return self.timeline

    def _push(self, time: float, kind: int, payload: object, order: int = -1) -> None:
        """Events fire in time order; at equal times in program order (``order``: instruction index)."""
        heapq.heappush(self.heap, (time, order, next(self.seq), kind, payload))

    # engine streams --------------------------------------------------------------------------

    def _try_issue(self, stream: Stream, cause: int | None) -> None:
        if stream.pending or stream.pos >= len(stream.ops):
            return
        op = stream.ops[stream.pos]
        if op.waits:
            sems = self.sems
            for sem, wanted in op.waits:
                if sems[sem] < wanted:
                    self.waiters[sem].append(stream)
                    return
        earliest = stream.last_start if op.is_load else stream.end  # max(that, stream.load_end)
        if stream.load_end > earliest:
            earliest = stream.load_end
        now = self.now
        if now > earliest:
            if cause is not None:
                self.timeline.stalls[stream.name][self.sem_source[cause]] += now - earliest
            earliest = now
        stream.pending = True
        heapq.heappush(self.heap, (earliest, op.index, next(self.seq), START, op))

    def _start(self, op: Op) -> None:
        stream = self.streams[op.engine]
        now = self.now
        stream.pending = False
        stream.pos = stream.pos + 1 if self.direct else self._next_position(stream, op)
        stream.last_start = now
        end = now + op.duration
        if op.is_load:
            stream.load_end = end
        else:
            stream.end = end
        self.timeline.start[op.index] = now
        if self.observer:
            self.observer.on_start(op)
            if stream.pos >= len(stream.ops):
                self.observer.on_stream_end(stream.name)
        self.started += 1
        if self.progress and not self.started & 1023:
            self.progress(self.started, len(self.ops))
        if op.queue < 0:  # dma moves its data when the transfer starts
            if not self.defer:
                op.run()
            self.executed.append(op.run)
            if self.direct and not op.signals:
                # nothing happens at its end but the record: no DONE event (its time still counts at the end)
                self.timeline.end[op.index] = end
                if end > self.horizon:
                    self.horizon = end
            else:
                heapq.heappush(self.heap, (end, op.index, next(self.seq), DONE, op))
        elif self.direct:
            # a DMA trigger's end only schedules the transfer's arrival at its queue: scheduled now, and the
            # triggers after it that wait on nothing start now too (see _triggers)
            self.timeline.end[op.index] = end
            self._triggers(stream, op, end + self.fixed_ns)
        else:
            heapq.heappush(self.heap, (end, op.index, next(self.seq), DONE, op))
        self._try_issue(stream, None)

    def _triggers(self, stream: Stream, first: Op, ready: float) -> None:
        """Give ``first``'s transfer (a DMA trigger started now) to its queue at ``ready``, then start the DMA
        triggers that follow on ``stream`` and wait on nothing, without their START events.

        A trigger runs no numerics (its transfer does, from its queue) and nothing else observes its start, so
        each one's START and DONE are known now: the start is where ``_try_issue`` would put it (after the
        previous one, as the stream is in order), and its transfer reaches the queue ``fixed_ns`` after its end.
        The events left in the heap keep their order: events of different instructions never tie on
        (time, instruction), and one instruction's own events are still pushed in time order. The stream's
        next instruction that waits is then issued now instead of at the last trigger's start, which gives the
        same start and stall: it cannot start before that trigger ends."""
        arriving, readies = [first], [ready]
        ops, start_of, end_of = stream.ops, self.timeline.start, self.timeline.end
        fixed, pos, n = self.fixed_ns, stream.pos, len(stream.ops)
        last, end, load_end = stream.last_start, stream.end, stream.load_end
        while pos < n:
            op = ops[pos]
            if op.queue < 0 or op.waits or op.is_load:
                break
            earliest = end if end >= load_end else load_end
            now = last if last >= earliest else earliest  # max(issue time, earliest)
            pos += 1
            last = now
            end = now + op.duration
            start_of[op.index] = now
            end_of[op.index] = end
            arriving.append(op)
            readies.append(end + fixed)
        stream.pos, stream.last_start, stream.end = pos, last, end
        if self.progress:
            for _ in range(len(arriving) - 1):
                self.started += 1
                if not self.started & 1023:
                    self.progress(self.started, len(self.ops))
        else:
            self.started += len(arriving) - 1
        self._arrive(arriving, readies)

    def _next_position(self, stream: Stream, op: Op) -> int:
        """Where the stream goes on once `op` starts (straight-line code: the next instruction)."""
        return stream.pos + 1

    def _done(self, op: Op) -> None:
        self.timeline.end[op.index] = self.now
        if op.queue >= 0:
            self._arrive([op], [self.now + self.fixed_ns])
        else:
            self._fire(op, op.engine, False)

    def _fire(self, op: Op, source: str, transfer: bool) -> None:
        sems, sem_source, increments, waiters = self.sems, self.sem_source, self.timeline.increments, self.waiters
        for sem in op.signals:
            sems[sem] += 1
            sem_source[sem] = source
            increments[sem].append((op.index, transfer))
            if self.observer:
                self.observer.on_signal(op, transfer, sem)
            if sem in waiters:
                for stream in waiters.pop(sem):
                    self._try_issue(stream, sem)

    # DMA queues ------------------------------------------------------------------------------

    def _arrive(self, ops: list[Op], readies: list[float]) -> None:
        """The transfers of ``ops`` (in trigger order) reach their queues at ``readies``: their triggers have been
        scheduled."""
        heap, seq = self.heap, self.seq
        for op, ready in zip(ops, readies):
            heapq.heappush(heap, (ready, op.index, next(seq), DMA_READY, op))

    def _arrive_q(self, ops: list[Op], readies: list[float]) -> None:
        """``_arrive`` at the queue rate. Transfers reach a queue in trigger order (SP is in order and the fixed
        cost is the same for all), and each ends at its start + transfer_bytes / rate, its start being its arrival
        or its predecessor's end if that is later: so each queue's timeline is known as its transfers are
        triggered. One that will find its queue busy needs no event: it joins the queue's fifo now, or, if a
        transfer before it on the queue has not arrived yet, when that one starts (``_ready_q``). Either way it is
        in the fifo when its predecessor ends, and the fifo holds nothing else then that its arrival would not
        have put there (a transfer that waits arrives before its predecessor's end)."""
        queue_end, held, fifo, rate = self.queue_end, self.held, self.fifo, self.queue_rate
        heap, seq = self.heap, self.seq
        for op, ready in zip(ops, readies):
            queue = op.queue
            start = queue_end[queue]
            if start > ready:
                waiting = held[queue]
                if waiting is None:
                    fifo[queue].append(op)
                else:
                    waiting.append(op)
            else:  # the queue is free when it arrives (a DMA_DONE at the same time fires first): it starts then
                heapq.heappush(heap, (ready, op.index, next(seq), DMA_READY, op))
                held[queue] = self.behind[op.index] = []
                start = ready
            queue_end[queue] = start + op.transfer_bytes / rate

    def _ready_q(self, op: Op) -> None:
        """``_dma_ready`` at the queue rate: the queue is free (``_arrive_q``); the transfers held behind this one
        join the fifo."""
        self._begin_q(op)
        held = self.behind.pop(op.index)
        if held:
            self.fifo[op.queue].extend(held)
        if self.held[op.queue] is held:
            self.held[op.queue] = None

    def _begin_q(self, op: Op) -> None:
        self._transfer_starts(op)
        heapq.heappush(self.heap, (self.now + op.transfer_bytes / self.queue_rate, -1, next(self.seq), DMA_DONE, op))

    def _transfer_starts(self, op: Op) -> None:
        """Record the start of ``op``'s transfer and move its data (now, or recorded for the caller: ``defer``)."""
        self.timeline.transfer_start[op.index] = self.now
        if self.observer:
            self.observer.on_transfer(op)
        if not self.defer:
            op.run()
        self.executed.append(op.run)

    def _done_q(self, op: Op) -> None:
        """``_dma_done`` at the queue rate: ``op``'s transfer ends now; the next one on its queue starts."""
        self.timeline.transfer_end[op.index] = self.now
        if op.signals:
            self._fire(op, self.sources[op.queue], True)
        fifo = self.fifo[op.queue]
        if fifo:
            self._begin_q(fifo.popleft())

    def _dma_ready(self, op: Op) -> None:
        self.fifo[op.queue].append(op)
        if not self.queue_busy[op.queue]:
            self._start_transfer(op.queue)
            self._reschedule(advance=True)

    def _start_transfer(self, queue: int) -> None:
        op = self.fifo[queue].popleft()
        self.queue_busy[queue] = True
        self._transfer_starts(op)
        hbm = bool(op.hbm_read or op.hbm_write)
        self.active.append(Transfer(op, op.transfer_bytes, hbm))
        self.active_hbm += hbm

    def _reschedule(self, advance: bool = False) -> None:
        """Fair-share rates for the active transfers and the event of the next completion; ``advance``: first
        move them on by the time elapsed since the last event, in the same pass (a transfer started since moves
        0.0 * elapsed bytes: none)."""
        self.dma_version += 1
        if advance:
            elapsed = self.now - self.dma_clock
            self.dma_clock = self.now
        if not self.active:
            return
        n_hbm, queue_rate = self.active_hbm, self.queue_rate
        share = self.hbm_rate / n_hbm if n_hbm else queue_rate
        hbm_rate = queue_rate if queue_rate < share else share  # min(queue_rate, share)
        soonest = math.inf
        hbm_limit = EPS_BYTES * (hbm_rate if hbm_rate > 1.0 else 1.0)
        queue_limit = EPS_BYTES * (queue_rate if queue_rate > 1.0 else 1.0)
        for transfer in self.active:
            if advance:
                transfer.remaining -= transfer.rate * elapsed
            if transfer.hbm:
                rate = transfer.rate = hbm_rate
                transfer.limit = hbm_limit
            else:
                rate = transfer.rate = queue_rate
                transfer.limit = queue_limit
            left = transfer.remaining / rate
            if left < soonest:
                soonest = left
        self._push(self.now + (soonest if soonest > 0.0 else 0.0), DMA_DONE, self.dma_version)

    def _dma_done(self, version: int) -> None:
        if version != self.dma_version:
            return
        now = self.now
        elapsed = now - self.dma_clock  # advance (as _reschedule does) and test for done in one pass
        self.dma_clock = now
        active = self.active
        finished = []
        soonest = math.inf  # the next completion among the others, at their rates now
        for t in active:  # done: within EPS_BYTES * max(1, rate) of its end (t.limit)
            rate = t.rate
            remaining = t.remaining = t.remaining - rate * elapsed
            if remaining <= t.limit:
                finished.append(t)
            else:
                left = remaining / rate
                if left < soonest:
                    soonest = left
        if not finished:  # the event of an earlier completion estimate: nothing changes but the next estimate
            self._next_done(soonest)
            return
        n_hbm = self.active_hbm
        for transfer in finished:
            active.remove(transfer)  # identity (eq=False); the others keep their order
            self.active_hbm -= transfer.hbm
        for transfer in finished:
            op = transfer.op
            self.timeline.transfer_end[op.index] = now
            self.queue_busy[op.queue] = False
            self._fire(op, self.sources[op.queue], True)
        started = len(active)
        for transfer in finished:
            queue = transfer.op.queue
            if self.fifo[queue] and not self.queue_busy[queue]:
                self._start_transfer(queue)
        if self.active_hbm != n_hbm:  # the fair share changed: every rate again
            self._reschedule()
            return
        # the same count of HBM transfers: the others keep their rates (and so the ``left`` found above); only
        # the transfers started now get theirs
        queue_rate = self.queue_rate
        share = self.hbm_rate / n_hbm if n_hbm else queue_rate
        hbm_rate = queue_rate if queue_rate < share else share
        for index in range(started, len(active)):
            transfer = active[index]
            rate = transfer.rate = hbm_rate if transfer.hbm else queue_rate
            transfer.limit = EPS_BYTES * (rate if rate > 1.0 else 1.0)
            left = transfer.remaining / rate
            if left < soonest:
                soonest = left
        self._next_done(soonest)

    def _next_done(self, soonest: float) -> None:
        """The DMA_DONE event of the next completion, ``soonest`` ns from now (``_reschedule``'s last step)."""
        self.dma_version += 1
        if self.active:
            self._push(self.now + (soonest if soonest > 0.0 else 0.0), DMA_DONE, self.dma_version)

    # end of run ------------------------------------------------------------------------------

    def _unmet(self, stream: Stream, op: Op) -> list[tuple[int, int, int]]:
        """The waits of `op` that do not hold: (semaphore, its value, the value waited for)."""
        return [(s, self.sems[s], v) for s, v in op.waits if self.sems[s] < v]

    def _check_finished(self) -> None:
        blocked = []
        for stream in self.streams.values():
            if stream.pos >= len(stream.ops):
                continue
            op = stream.ops[stream.pos]
            unmet = ", ".join(f"sem {s} is {have}, needs {need}" for s, have, need in self._unmet(stream, op))
            blocked.append(f"{op.label} waits on {unmet}")
        if blocked:
            raise DeadlockError("deadlock: no event can fire and engines are blocked:\n  "
                                + "\n  ".join(blocked))
