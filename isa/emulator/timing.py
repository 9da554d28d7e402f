"""Static cost of each instruction, from the target file (figures: machine-model.md).

Each opcode's ``cost`` class in ``isa.instructions.OPCODES`` selects a rule of ``COSTS``; a rule
returns the time in ns the instruction occupies its engine (for ``dma``: the SP trigger only; the
transfer's cost is ``dma_effective_bytes`` / the queue rate, see ``isa.emulator.scheduler``).
"""

from __future__ import annotations

from collections.abc import Callable

from isa.dtypes import DTYPES
from isa.emulator.rules import free_size
from isa.program import AccessPattern, Instruction
from isa.target import Target


def _pe_cycles(target: Target, free: int, dtype: str) -> float:
    """machine-model.md "Tensor engine (PE)": initiation interval max(N, 64) PE cycles for
    bf16/fp16/fp8, 4x that for fp32."""
    pe = target.data["pe"]
    cycles = max(free, pe["min_interval"])
    return cycles * (pe["fp32_factor"] if dtype in ("f32", "i32") else 1)


def pe_matmul(target: Target, inst: Instruction) -> float:
    src = inst.operands["src"]
    return _pe_cycles(target, free_size(src), src.dtype) / target.clock_ghz("pe")


def pe_load(target: Target, inst: Instruction) -> float:
    """machine-model.md "Tensor engine (PE)": LoadStationary costs about a quarter (load_fraction)
    of a MultiplyMoving of the same free size (M)."""
    src = inst.operands["src"]
    fraction = target.data["pe"]["load_fraction"]
    return fraction * _pe_cycles(target, free_size(src), src.dtype) / target.clock_ghz("pe")


def _first_input(inst: Instruction) -> AccessPattern:
    ops = inst.operands
    return ops.get("src") or ops.get("a") or ops["dst"]


def _stream(target: Target, inst: Instruction, inputs: int) -> float:
    """machine-model.md "Vector (DVE), Scalar (ACT), GpSimd (POOL)": ~N cycles per input tile
    (N = free elements per partition) plus a static ~60-cycle access overhead; trn2 DVE has a
    faster bf16 rate (stream.bf16_rate)."""
    stream = target.data["stream"]
    n = free_size(_first_input(inst)) * inputs
    rate = stream.get("bf16_rate", {}).get(inst.engine, 1)
    if rate != 1 and all(ap.dtype == "bf16" for ap in inst.operands.values()):
        n /= rate
    return (n + stream["overhead_cycles"]) / target.clock_ghz(inst.engine)


def stream1(target: Target, inst: Instruction) -> float:
    return _stream(target, inst, 1)


def stream2(target: Target, inst: Instruction) -> float:
    return _stream(target, inst, 2)


def dma_trigger(target: Target, inst: Instruction) -> float:
    """SP time to issue one DMA trigger (trigger_cycles at the SP clock)."""
    return target.data["dma"]["trigger_cycles"] / target.clock_ghz("sp")


def sync(target: Target, inst: Instruction) -> float:
    """A nop: sync_cycles at the engine's clock."""
    return target.data["sync_cycles"] / target.clock_ghz(inst.engine)


COSTS: dict[str, Callable[[Target, Instruction], float]] = {
    "pe_matmul": pe_matmul,
    "pe_load": pe_load,
    "stream1": stream1,
    "stream2": stream2,
    "dma": dma_trigger,
    "sync": sync,
}


def contiguous_runs(ap: AccessPattern) -> int:
    """Number of maximal contiguous byte runs of an access (each on-chip partition is its own run)."""
    dims = list(ap.pattern)
    if ap.memory == "hbm":
        dims.insert(0, (ap.partition_stride, ap.partitions))
    run = 1  # elements
    total = free_size(ap) * ap.partitions
    for stride, count in reversed(dims):
        if count == 1:
            continue
        if stride != run:
            break
        run *= count
    runs = total // run if ap.memory == "hbm" else ap.partitions * max(1, free_size(ap) // run)
    return max(1, runs)


def dma_effective_bytes(target: Target, dst: AccessPattern, src: AccessPattern) -> float:
    """machine-model.md "DMA": small contiguous runs run below peak. Modelled as a fixed
    descriptor_overhead_bytes per contiguous run of the worse side."""
    overhead = target.data["dma"]["descriptor_overhead_bytes"]
    nbytes = src.partitions * free_size(src) * DTYPES[src.dtype].itemsize
    return nbytes + overhead * max(contiguous_runs(src), contiguous_runs(dst))
