"""Semaphores of a placed schedule: which completion stream each instruction signals and which counts it
waits for (backend/schedule.py places the instructions; this fills their ``waits``, ``signals`` and DMA
``queue``). Every engine, PE's LoadStationary and every DMA queue completes in order, so one counting
semaphore per stream says how far it got."""

from __future__ import annotations

from itertools import chain

import numpy as np

from isa.instructions import DMA_OPCODES
from isa.program import Instruction

ENGINE_SEMS = {"pe": 0, "act": 1, "dve": 2, "pool": 3}
PE_LOAD_SEM = 4  # PE's LoadStationary completes out of order with the matmul it overlaps
QUEUE_SEM_BASE = 5


def _stream(inst: Instruction, queue: int | None) -> str:
    """The in-order completion stream of an instruction (its semaphore)."""
    if inst.opcode in DMA_OPCODES:
        return f"q{queue}"
    if inst.opcode == "load_stationary":
        return "pe.load"
    return inst.engine


def _sem(stream: str) -> int:
    if stream.startswith("q"):
        return QUEUE_SEM_BASE + int(stream[1:])
    return PE_LOAD_SEM if stream == "pe.load" else ENGINE_SEMS[stream]


def sem_name(sem: int) -> str:
    names = {v: k for k, v in ENGINE_SEMS.items()} | {PE_LOAD_SEM: "pe.load"}
    return names.get(sem, f"q{sem - QUEUE_SEM_BASE}")


def _needed_waits(ops: list[Instruction], preds: list[list[int]], stream_of: list[int], ordinal: list[int],
                  n_streams: int) -> tuple[list[int], list[int], list[int]]:
    """Per instruction, the latest ordinal it needs of each other stream: (first entry per op, streams,
    ordinals), entries sorted by op then stream. Edges within one stream, and between two PE instructions
    (PE issues in order: see Timeline), need no wait. One numpy pass over all edges instead of a Python
    loop per edge (Llama: 3.5 million)."""
    n = len(ops)
    index = np.int32 if n * n_streams < 2 ** 31 else np.int64  # (Llama: 3.5 million edges, 4 bytes each)
    lengths = np.fromiter(map(len, preds), dtype=np.int64, count=n)
    src = np.fromiter(chain.from_iterable(preds), dtype=index, count=int(lengths.sum()))
    dst = np.repeat(np.arange(n, dtype=index), lengths)
    streams = np.asarray(stream_of, dtype=index)
    on_pe = np.fromiter((op.engine == "pe" for op in ops), dtype=bool, count=n)
    keep = streams[src] != streams[dst]
    keep &= ~(on_pe[src] & on_pe[dst])
    src, dst = src[keep], dst[keep]
    del keep
    cells = np.zeros(n * n_streams, dtype=index)
    np.maximum.at(cells, dst * n_streams + streams[src], np.asarray(ordinal, dtype=index)[src])
    del src, dst
    flat = np.flatnonzero(cells)
    first = np.searchsorted(flat, np.arange(n + 1, dtype=np.int64) * n_streams).tolist()
    return first, (flat % n_streams).tolist(), cells[flat].tolist()


def add_semaphores(ops: list[Instruction], preds: list[list[int]], order: list[int],
                   queues: dict[int, int]) -> None:
    """Fill `waits`, `signals` and the DMA `queue` attribute of every instruction (in place).

    Knowledge is a vector over the streams (indexed by semaphore id): how many of the stream's
    instructions are known to have completed."""
    n_streams = QUEUE_SEM_BASE + max(queues.values(), default=0) + 1
    none = [0] * n_streams
    stream_of = [0] * len(ops)
    ordinal = [0] * len(ops)  # completion number within its stream, from 1
    at: dict[tuple[int, int], int] = {}  # (stream, ordinal) -> op
    counts = [0] * n_streams
    issuer: list[str | None] = [None] * n_streams  # the engine issuing all of a stream's instructions ("": several)
    for i in order:  # streams and ordinals depend on the order alone
        stream = _sem(_stream(ops[i], queues.get(i)))
        stream_of[i] = stream
        counts[stream] += 1
        ordinal[i] = counts[stream]
        at[(stream, ordinal[i])] = i
        if issuer[stream] != ops[i].engine:
            issuer[stream] = ops[i].engine if issuer[stream] is None else ""
    pe, pe_load = ENGINE_SEMS["pe"], PE_LOAD_SEM
    # A stream issued by one engine knew, at each earlier completion, at most what that engine knows now
    # (an engine's knowledge only grows), but for its own count and, for PE's matmuls, the LoadStationary
    # count: its knowledge after a completion is then the issuer's, those entries aside (no merge of the
    # two vectors).
    single = [bool(e) for e in issuer]
    single[pe] = single[pe] and issuer[pe_load] in (None, issuer[pe])
    first, need_stream, need_value = _needed_waits(ops, preds, stream_of, ordinal, n_streams)
    known_after: list[list[int]] = [none] * len(ops)  # what is known to have completed once op i completed
    issue_known: dict[str, list[int]] = {}  # per issuing engine: what it knows now
    stream_known = [none] * n_streams  # per stream: knowledge of its last completion
    waits_of: dict[int, list[tuple[int, int]]] = {}
    for i in order:
        inst = ops[i]
        stream = stream_of[i]
        know = issue_known.get(inst.engine, none)
        lo, hi = first[i], first[i + 1]
        waits = []
        if hi - lo == 1:
            ps, value = need_stream[lo], need_value[lo]
            if know[ps] < value:
                waits.append((ps, value))
        elif hi > lo:
            # drop waits the stream knows already or that another wait brings along
            needed = list(zip(need_stream[lo:hi], need_value[lo:hi]))  # sorted by stream
            implied = [known_after[at[(ps, value)]] for ps, value in needed]
            for k, (ps, value) in enumerate(needed):
                if know[ps] >= value:
                    continue
                if any(other[ps] >= value for j, other in enumerate(implied) if j != k):
                    continue
                waits.append((ps, value))
        for ps, value in waits:
            know = list(map(max, know, known_after[at[(ps, value)]]))
            know[ps] = max(know[ps], value)
        waits_of[i] = waits
        issue_known[inst.engine] = know
        if single[stream]:
            after = list(know)
            if stream == pe:
                after[pe_load] = max(know[pe_load], stream_known[pe][pe_load], stream_known[pe_load][pe_load])
        else:
            after = list(map(max, know, stream_known[stream]))  # the stream completes in order
            if stream == pe:  # a matmul starts once the last LoadStationary completed (not vice versa)
                after = list(map(max, after, stream_known[pe_load]))
        after[stream] = ordinal[i]
        stream_known[stream] = after
        known_after[i] = after
    # only producers something waits on signal; a wait counts the signalling producers of its stream
    signalling = {at[w] for ws in waits_of.values() for w in ws}
    rank: dict[int, int] = {}
    signalled = [0] * n_streams
    for i in order:
        inst = ops[i]
        if i in signalling:
            signalled[stream_of[i]] += 1
            rank[i] = signalled[stream_of[i]]
            inst.signals = [stream_of[i]]
        else:
            inst.signals = []
        inst.waits = [(ps, rank[at[(ps, value)]]) for ps, value in waits_of[i]]
        if inst.opcode in DMA_OPCODES:
            inst.attrs["queue"] = queues[i]


# -- report ------------------------------------------------------------------------------------------------------
