"""The profile of one emulated run: time, utilization, traffic, counts, stalls and the timeline."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from isa.emulator.attribution import LayerRow, OpRow, Records, layer_rows, op_rows
from isa.emulator.decode import Op
from isa.emulator.report import write_html
from isa.emulator.rules import FP8_DTYPES
from isa.emulator.scheduler import Timeline
from isa.emulator.tables import layer_csv, layer_table, op_csv, op_table, top_stalls
from isa.emulator.trace import Flow, Span, chrome_trace
from isa.program import ENGINES, Origin, Program
from isa.target import Target

PE_ARRAY = 128 * 128  # MACs per PE cycle (machine-model.md "Tensor engine (PE)": utilization)


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass
class Profile:
    time_us: float
    cycles: float  # PE cycles elapsed
    mfu: float
    hbm_read_bytes: int
    hbm_write_bytes: int
    peak_sbuf_bytes: int
    instruction_counts: dict[str, int]  # by "engine.opcode"
    stalls: dict[str, dict[str, float]]  # engine -> releasing engine/queue -> us waited on semaphores
    target: str = ""
    useful_macs: int = 0
    queues: int = 16
    origins: dict[str, Origin] = field(default_factory=dict, repr=False)
    pe_flops_per_ns: float = 0.0  # bf16 PE peak (target file)
    hbm_bytes_per_ns: float = 0.0
    _rows: list[OpRow] | None = field(default=None, repr=False, compare=False)
    # what takes time to build is built when first asked for (busy fractions, by-op records, spans and flows),
    # from the run's program, ops and timeline: a run whose profile nobody reads does not pay for it
    _source: tuple[Program, Target, list[Op], Timeline] | None = field(default=None, repr=False, compare=False)
    _trace: tuple[list[Span], list[Flow]] | None = field(default=None, repr=False, compare=False)
    _records: Records | None = field(default=None, repr=False, compare=False)
    _busy: dict[str, float] | None = field(default=None, repr=False, compare=False)

    @property
    def records(self) -> Records | None:
        """The per-instruction arrays attribution works on (``isa.emulator.attribution.Records``)."""
        if self._records is None and self._source is not None:
            self._records = _records(*self._source)
        return self._records

    @records.setter
    def records(self, records: Records | None) -> None:
        self._records, self._busy = records, None

    @property
    def engine_busy(self) -> dict[str, float]:
        """Busy fraction of the run's time per engine and for "dma" (any transfer in flight)."""
        if self._busy is None:
            records = self.records
            self._busy = {} if records is None else _engine_busy(records)
        return self._busy

    @property
    def spans(self) -> list[Span]:
        """One span per instruction (its engine track) and per DMA transfer (its queue's track)."""
        return self._spans_and_flows()[0]

    @property
    def flows(self) -> list[Flow]:
        """Semaphore waits: from the span whose increment released the wait to the waiting instruction."""
        return self._spans_and_flows()[1]

    def _spans_and_flows(self) -> tuple[list[Span], list[Flow]]:
        if self._trace is None:
            self._trace = ([], []) if self._source is None else _spans_and_flows(*self._source[2:])
        return self._trace

    def by_op(self) -> list[OpRow]:
        """One row per HLO instruction or fusion that ran (its origin), largest attributed time first;
        the rows' ``time_us`` add up to ``time_us`` (rule: ``isa.emulator.attribution``)."""
        if self._rows is None:
            self._rows = [] if self.records is None else op_rows(
                self.records, self.origins, self.pe_flops_per_ns, self.hbm_bytes_per_ns)
        return self._rows

    def by_layer(self, depth: int | None = None) -> list[LayerRow]:
        """The by_op rows grouped by torch module path cut to ``depth`` components (None: the whole
        path); rows without a module path form the group ``(no module)``."""
        return layer_rows(self.by_op(), depth, self.time_us)

    def traced_fraction(self) -> float:
        """The share of the run's time attributed to rows that name a torch module path."""
        return sum(r.share for r in self.by_op() if r.modules)

    def table(self, by: str = "op", top: int | None = None, depth: int | None = None) -> str:
        """The by-op (``by="op"``) or by-layer table as text, then the top stalls."""
        if by not in ("op", "layer"):
            raise ValueError(f"by must be 'op' or 'layer', got {by!r}")
        text = (op_table(self.by_op(), self.time_us, top) if by == "op"
                else layer_table(self.by_layer(depth), self.time_us, top))
        stalls = top_stalls(self.by_op())
        return f"{text}\n\n{stalls}" if stalls else text

    def csv(self, by: str = "op", depth: int | None = None) -> str:
        """Every by-op or by-layer row as CSV (one header line)."""
        if by not in ("op", "layer"):
            raise ValueError(f"by must be 'op' or 'layer', got {by!r}")
        return op_csv(self.by_op()) if by == "op" else layer_csv(self.by_layer(depth))

    def save_html(self, path: str, *, depth: int | None = None, title: str = "neuronc profile") -> int:
        """Write the self-contained HTML report (timeline, roofline, tables, DMA histogram); returns
        its size in bytes."""
        return write_html(self, path, depth=depth, title=title)

    def summary(self) -> str:
        seconds = self.time_us * 1e-6
        bandwidth = (self.hbm_read_bytes + self.hbm_write_bytes) / seconds / 1e9 if seconds else 0.0
        lines = [
            f"target {self.target}: {self.time_us:.3f} us, {self.cycles:.0f} PE cycles, "
            f"MFU {100 * self.mfu:.2f}% ({self.useful_macs} useful MACs)",
            f"HBM read {_bytes(self.hbm_read_bytes)}, write {_bytes(self.hbm_write_bytes)}, "
            f"{bandwidth:.1f} GB/s; peak SBUF {_bytes(self.peak_sbuf_bytes)}",
            "",
            f"{'engine':<8}{'busy %':>8}{'stalled us':>12}",
        ]
        for engine, busy in self.engine_busy.items():
            stalled = sum(self.stalls.get(engine, {}).values())
            lines.append(f"{engine:<8}{100 * busy:>8.1f}{stalled:>12.3f}")
        lines += ["", f"{'instruction':<26}{'count':>8}"]
        for name, count in sorted(self.instruction_counts.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"{name:<26}{count:>8}")
        top = sorted(((us, engine, source) for engine, by in self.stalls.items() for source, us in by.items()),
                     reverse=True)[:5]
        if top:
            lines += ["", "top stalls (engine waiting on semaphores signalled by):"]
            lines += [f"  {engine:<6} <- {source:<8}{us:>12.3f} us" for us, engine, source in top]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "time_us": self.time_us, "cycles": self.cycles, "mfu": self.mfu,
            "useful_macs": self.useful_macs, "engine_busy": dict(self.engine_busy),
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "peak_sbuf_bytes": self.peak_sbuf_bytes, "instruction_counts": dict(self.instruction_counts),
            "stalls": {e: dict(by) for e, by in self.stalls.items()},
        }

    def save_trace(self, path: str) -> None:
        """Write a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing)."""
        trace = chrome_trace(self.spans, self.flows, self.queues, {"summary": self.to_dict()}, self.origins)
        with open(path, "w") as f:
            json.dump(trace, f)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n}"


def _spans_and_flows(ops: list[Op], timeline: Timeline) -> tuple[list[Span], list[Flow]]:
    spans: list[Span] = []
    engine_span: dict[int, Span] = {}
    transfer_span: dict[int, Span] = {}
    for op in ops:
        start, end = timeline.start[op.index], timeline.end[op.index]
        engine_span[op.index] = Span(op.engine, f"{op.engine}.{op.opcode}", start, end - start, op.index, op.inst)
        spans.append(engine_span[op.index])
        if op.queue >= 0:
            t0, t1 = timeline.transfer_start[op.index], timeline.transfer_end[op.index]
            transfer_span[op.index] = Span(f"dma.q{op.queue}", "dma", t0, t1 - t0, op.index, op.inst)
            spans.append(transfer_span[op.index])
    flows = []
    for op in ops:
        for sem, value in op.waits:
            if 1 <= value <= len(timeline.increments.get(sem, ())):
                index, by_transfer = timeline.increments[sem][value - 1]  # the increment that released it
                source = (transfer_span if by_transfer else engine_span)[index]
                flows.append(Flow(source, engine_span[op.index], sem, value))
    return spans, flows


def _busy(starts: np.ndarray, ends: np.ndarray) -> float:
    """``busy_time`` of the intervals [starts[i], ends[i]), vectorized (the same sums in the same order)."""
    if not len(starts):
        return 0.0
    order = np.lexsort((ends, starts))
    return busy_time(list(zip(starts[order].tolist(), ends[order].tolist(), strict=True)))


def _engine_busy(records: Records) -> dict[str, float]:
    total_ns = records.total_ns
    busy = {e: _busy(records.start[records.engine == i], records.end[records.engine == i])
            for i, e in enumerate(ENGINES)}
    dma = records.queue >= 0
    busy["dma"] = _busy(records.transfer_start[dma], records.transfer_end[dma])
    return {e: (v / total_ns if total_ns else 0.0) for e, v in busy.items()}


def build_profile(program: Program, target: Target, ops: list[Op], timeline: Timeline) -> Profile:
    total_ns = timeline.time_ns
    macs = program.meta.get("useful_macs")
    useful = int(macs) if isinstance(macs, int | float) else sum(op.macs for op in ops)
    cycles = total_ns * target.clock_ghz("pe")
    peak = program.meta.get("peak_sbuf_bytes", 0)
    return Profile(
        time_us=total_ns / 1000.0,
        cycles=cycles,
        mfu=useful / (PE_ARRAY * cycles) if cycles else 0.0,
        hbm_read_bytes=sum(op.hbm_read for op in ops),
        hbm_write_bytes=sum(op.hbm_write for op in ops),
        peak_sbuf_bytes=int(peak) if isinstance(peak, int | float) else 0,
        instruction_counts=dict(Counter(f"{op.engine}.{op.opcode}" for op in ops)),
        stalls={e: {s: ns / 1000.0 for s, ns in by.items()} for e, by in timeline.stalls.items()},
        target=target.name,
        useful_macs=useful,
        queues=target.data["dma"]["queues"],
        origins=dict(program.origins),
        pe_flops_per_ns=target.pe_peak_flops_bf16 / 1e9,
        hbm_bytes_per_ns=target.data["hbm"]["bytes_per_ns"],
        _source=(program, target, ops, timeline),
    )


def _records(program: Program, target: Target, ops: list[Op], timeline: Timeline) -> Records:
    """The arrays attribution works on (see ``isa.emulator.attribution.Records``)."""
    names: dict[str, int] = {}
    n = len(ops)
    origin = np.fromiter((names.setdefault(op.inst.origin, len(names)) for op in ops), np.int32, n)
    engine_index = {e: i for i, e in enumerate(ENGINES)}
    engine = np.fromiter((engine_index[op.engine] for op in ops), np.int8, n)
    queue = np.fromiter((op.queue for op in ops), np.int16, n)
    hbm = np.fromiter((op.hbm_read + op.hbm_write for op in ops), np.int64, n)
    start, end = np.array(timeline.start, np.float64), np.array(timeline.end, np.float64)
    dma = np.flatnonzero(queue >= 0)
    t_start, t_end = np.zeros(n), np.zeros(n)
    t_start[dma] = [timeline.transfer_start[i] for i in dma]
    t_end[dma] = [timeline.transfer_end[i] for i in dma]
    nbytes = np.zeros(n, np.int64)
    nbytes[dma] = [ops[i].inst.operands["src"].nbytes for i in dma]
    pe = target.data["pe"]
    rate = {"f32": 1.0 / pe["fp32_factor"], **{d: float(pe["fp8_rate"]) for d in FP8_DTYPES}}
    pe_rate = np.ones(len(names))
    for op in ops:
        if op.opcode == "multiply_moving":
            i = names[op.inst.origin]
            pe_rate[i] = min(pe_rate[i], rate.get(op.inst.operands["src"].dtype, 1.0))
    return Records(list(names), origin, engine, start, end, _stalls(engine, start, end, ops), queue, t_start,
                   t_end, nbytes, hbm, pe_rate, timeline.time_ns)


def _stalls(engine: np.ndarray, start: np.ndarray, end: np.ndarray, ops: list[Op]) -> np.ndarray:
    """ns each instruction's engine waited on semaphores before it: its start minus the earliest
    start its engine allowed (the scheduler's rule: after the previous instruction, and on PE after
    the last load_stationary; a load may start once the previous PE instruction has started)."""
    stall = np.zeros(len(ops))
    is_load = np.fromiter((op.is_load for op in ops), bool, len(ops))
    for e in range(len(ENGINES)):
        idx = np.flatnonzero(engine == e)
        if not len(idx):
            continue
        load, s, t = is_load[idx], start[idx], end[idx]

        def before(values: np.ndarray) -> np.ndarray:
            return np.concatenate([[0.0], np.maximum.accumulate(values)[:-1]])

        prev_end, prev_load = before(np.where(load, 0.0, t)), before(np.where(load, t, 0.0))
        prev_start = np.concatenate([[0.0], s[:-1]])
        earliest = np.where(load, np.maximum(prev_start, prev_load), np.maximum(prev_end, prev_load))
        stall[idx] = np.maximum(0.0, s - earliest)
    return stall
