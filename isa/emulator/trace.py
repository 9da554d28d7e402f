"""Text form of instructions for trace events and messages, and the Chrome/Perfetto trace JSON.

The format follows the access-pattern syntax of ``isa/program.py``'s docstring; it is a display
form only (the assembler's printer lives elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from isa.program import ENGINES, AccessPattern, Instruction


def format_ap(ap: AccessPattern) -> str:
    pairs = "".join(f"[{s},{c}]" for s, c in ap.pattern)
    if ap.memory == "hbm":
        return f"hbm:{ap.tensor}@{ap.offset}[{ap.partition_stride},{ap.partitions}]{pairs}:{ap.dtype}"
    end = ap.start_partition + ap.partitions
    return f"{ap.memory}[{ap.start_partition}:{end}]@{ap.offset}{pairs}:{ap.dtype}"


def format_instruction(inst: Instruction) -> str:
    """``pe.multiply_moving dst=psum[0:128]@0[1,512]:f32 src=... acc=1 wait=3>=1 signal=4``."""
    parts = [f"{inst.engine}.{inst.opcode}"]
    parts += [f"{name}={format_ap(ap)}" for name, ap in inst.operands.items()]
    parts += [f"{name}={value}" for name, value in inst.attrs.items()]
    if inst.waits:
        parts.append("wait=" + ",".join(f"{s}>={v}" for s, v in inst.waits))
    if inst.signals:
        parts.append("signal=" + ",".join(str(s) for s in inst.signals))
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


def track_names(queues: int) -> list[str]:
    return [*ENGINES, *(f"dma.q{q}" for q in range(queues))]


def chrome_trace(spans: list[Span], queues: int, metadata: dict[str, Any]) -> dict[str, Any]:
    """Chrome trace-event JSON (loads in Perfetto / chrome://tracing): one thread per track."""
    tids = {name: tid for tid, name in enumerate(track_names(queues), start=1)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "NeuronCore"}},
    ]
    for name, tid in tids.items():
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": name}})
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    for span in spans:
        events.append({
            "ph": "X", "pid": 1, "tid": tids[span.track], "name": span.name,
            "ts": span.start_ns / 1000.0, "dur": span.dur_ns / 1000.0,
            "args": {"instruction": format_instruction(span.inst), "index": span.index},
        })
    return {"traceEvents": events, "displayTimeUnit": "ns", "metadata": metadata}
