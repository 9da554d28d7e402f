"""Text form of instructions for trace events and messages, and the Chrome/Perfetto trace JSON.

Trace events carry each instruction as the assembler's printer writes it (the line of the .s
file) with its ``op`` (the HLO instruction or fusion it came from) and ``layer`` (torch module
paths) as args; semaphore waits are flow arrows from the instruction (or DMA transfer) whose
increment released the wait to the waiting instruction. A second process, "HLO ops", has the same
tracks with one slice per run of consecutive instructions of one op, named by the op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from isa.asm import print_instruction, print_pattern
from isa.errors import ProgramError
from isa.program import ENGINES, AccessPattern, Instruction, Origin


def format_ap(ap: AccessPattern) -> str:
    """An access pattern as the .s text writes it (a display form for what text cannot say)."""
    try:
        return print_pattern(ap)
    except ProgramError:
        pairs = "".join(f"[{s},{c}]" for s, c in ap.pattern)
        return f"{ap.memory}:{ap.tensor}[{ap.start_partition}+{ap.partitions}]@{ap.offset}{pairs}:{ap.dtype}"


def format_instruction(inst: Instruction) -> str:
    """The instruction's line of .s text (``print_instruction``); a plain display form if text cannot
    say it (a program built in Python with values the printer refuses)."""
    try:
        return print_instruction(inst)
    except ProgramError:
        parts = [f"{inst.engine}.{inst.opcode}"]
        parts += [f"{name}={format_ap(ap)}" for name, ap in inst.operands.items()]
        parts += [f"{name}={value!r}" for name, value in inst.attrs.items()]
        return " ".join(parts)


@dataclass(frozen=True)
class Span:
    """One box on the timeline: a track (engine or ``dma.qN``), times in ns, the instruction."""

    track: str
    name: str
    start_ns: float
    dur_ns: float
    index: int
    inst: Instruction


@dataclass(frozen=True)
class Flow:
    """A semaphore wait: ``source`` (a span) incremented ``sem`` to ``value``, releasing ``target``."""

    source: Span
    target: Span
    sem: int
    value: int


def track_names(queues: int) -> list[str]:
    return [*ENGINES, *(f"dma.q{q}" for q in range(queues))]


OPS_PID = 2  # the process of op slices


def chrome_trace(spans: list[Span], flows: list[Flow], queues: int, metadata: dict[str, Any],
                 origins: Mapping[str, Origin] | None = None) -> dict[str, Any]:
    """Chrome trace-event JSON (loads in Perfetto / chrome://tracing): one thread per track,
    a complete ("X") event per span, a flow ("s" -> "f") per semaphore wait; process 2 holds the
    op slices (``op_slices``)."""
    origins = origins or {}
    tids = {name: tid for tid, name in enumerate(track_names(queues), start=1)}
    events: list[dict[str, Any]] = []
    for pid, process in ((1, "NeuronCore"), (OPS_PID, "HLO ops")):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process}})
        for name, tid in tids.items():
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": tid}})
    texts: dict[int, str] = {}
    layers = {name: ", ".join(o.modules) for name, o in origins.items()}
    for span in spans:
        if span.index not in texts:
            texts[span.index] = format_instruction(span.inst)
        args: dict[str, Any] = {"instruction": texts[span.index], "index": span.index}
        if span.inst.origin:
            args["op"] = span.inst.origin
            args["layer"] = layers.get(span.inst.origin, "")
        events.append({
            "ph": "X", "pid": 1, "tid": tids[span.track], "name": span.name,
            "ts": span.start_ns / 1000.0, "dur": span.dur_ns / 1000.0, "args": args,
        })
    for track, op, start, end, count in op_slices(spans):
        origin = origins.get(op)
        events.append({
            "ph": "X", "pid": OPS_PID, "tid": tids[track], "name": op or "(untagged)", "cat": "op",
            "ts": start / 1000.0, "dur": (end - start) / 1000.0,
            "args": {"layer": layers.get(op, ""), "instructions": count,
                     "source": "; ".join(f"{s.module}: {s.op} {s.location}".strip() for s in origin.sources)
                     if origin else ""},
        })
    for number, flow in enumerate(flows):
        common = {"pid": 1, "name": f"s{flow.sem}>={flow.value}", "cat": "semaphore", "id": number}
        # a flow event binds to the slice enclosing its timestamp on its thread ("bp": "e" for the
        # end): the middle of each span, since back-to-back spans share their boundaries
        events.append({**common, "ph": "s", "tid": tids[flow.source.track], "ts": _middle_us(flow.source)})
        events.append({**common, "ph": "f", "bp": "e", "tid": tids[flow.target.track],
                       "ts": _middle_us(flow.target)})
    return {"traceEvents": events, "displayTimeUnit": "ns", "metadata": metadata}


def op_slices(spans: list[Span]) -> list[tuple[str, str, float, float, int]]:
    """(track, origin, start ns, end ns, instructions) per run of consecutive spans of one origin on a
    track (in start order); a run starts no earlier than the previous one ends, so slices never overlap."""
    out = []
    by_track: dict[str, list[Span]] = {}
    for span in spans:
        by_track.setdefault(span.track, []).append(span)
    for track, items in by_track.items():
        items.sort(key=lambda sp: sp.start_ns)
        previous_end = 0.0
        for origin, run in groupby(items, key=lambda sp: sp.inst.origin):
            run = list(run)
            start = max(run[0].start_ns, previous_end)
            end = max(start, max(sp.start_ns + sp.dur_ns for sp in run))
            out.append((track, origin, start, end, len(run)))
            previous_end = end
    return out


def _middle_us(span: Span) -> float:
    return (span.start_ns + span.dur_ns / 2) / 1000.0
