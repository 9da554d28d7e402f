"""Static cost of each instruction, from the target file (figures: machine-model.md).

Each opcode's ``cost`` class in ``isa.instructions.OPCODES`` selects a rule of ``COSTS``; a rule
returns the time in ns the instruction occupies its engine (for ``dma``: the SP trigger only; the
transfer's cost is ``dma_effective_bytes`` / the queue rate, see ``isa.emulator.scheduler``).
``dependent_extra`` adds the larger DVE access overhead of an instruction that depends on the one
just before it on its engine, or that works on few elements.
"""

from __future__ import annotations

from collections.abc import Callable

from isa.dtypes import DTYPES
from isa.emulator.rules import FP8_DTYPES, byte_bounds, free_size
from isa.instructions import OPCODES
from isa.program import AccessPattern, Instruction
from isa.target import Target

STREAM_CLASSES = ("stream1", "stream2", "stream3")


def _pe_cycles(target: Target, free: int, dtype: str) -> float:
    """machine-model.md "Tensor engine (PE)": initiation interval max(N, 64) PE cycles for
    bf16/fp16/fp8, 4x that for fp32; fp8 streams pe.fp8_rate times faster (trn2: 2x the bf16
    peak; the model's "contraction 256 per instruction" cannot be written as an operand has at
    most 128 partitions, so the doubled rate is modelled as half the interval)."""
    pe = target.data["pe"]
    cycles = max(free, pe["min_interval"])
    if dtype == "f32":
        return cycles * pe["fp32_factor"]
    return cycles / pe["fp8_rate"] if dtype in FP8_DTYPES else cycles


def pe_matmul(target: Target, inst: Instruction) -> float:
    src = inst.operands["src"]
    return _pe_cycles(target, free_size(src), src.dtype) / target.clock_ghz("pe")


def pe_load(target: Target, inst: Instruction) -> float:
    """machine-model.md "Tensor engine (PE)": LoadStationary costs about a quarter (load_fraction)
    of a MultiplyMoving of the same free size (M)."""
    src = inst.operands["src"]
    fraction = target.data["pe"]["load_fraction"]
    return fraction * _pe_cycles(target, free_size(src), src.dtype) / target.clock_ghz("pe")


def pe_transpose(target: Target, inst: Instruction) -> float:
    """machine-model.md "Tensor engine (PE)": the transpose of a [P, F] tile. Mode ``matmul``
    (trn1): one MultiplyMoving of an identity [P, P] through the tile, max(P, 64) cycles, 4x for
    fp32. Mode ``native`` (trn2): max(P, min_interval) cycles with the target's own fp32 factor."""
    src = inst.operands["src"]
    spec = target.data["pe"]["transpose"]
    if spec["mode"] == "matmul":
        return _pe_cycles(target, src.partitions, src.dtype) / target.clock_ghz("pe")
    factor = spec["fp32_factor"] if src.dtype == "f32" else 1
    return max(src.partitions, spec["min_interval"]) * factor / target.clock_ghz("pe")


def _first_input(inst: Instruction) -> AccessPattern:
    ops = inst.operands
    return ops.get("src") or ops.get("a") or ops["dst"]


def _stream(target: Target, inst: Instruction, inputs: int) -> float:
    """machine-model.md "Vector (DVE), Scalar (ACT), GpSimd (POOL)": ~N cycles per input tile
    (N = free elements per partition) plus a static ~60-cycle access overhead; trn2 DVE has a
    faster bf16 rate (stream.bf16_rate); reading ACT's accumulator registers out (an activation
    with an ``acc`` operand, ActReadAccumulator) adds act.read_accumulator_cycles."""
    stream = target.data["stream"]
    n = free_size(_first_input(inst)) * inputs
    rate = stream.get("bf16_rate", {}).get(inst.engine, 1)
    if rate != 1 and all(ap.dtype == "bf16" for ap in inst.operands.values()):
        n /= rate
    cycles = n + stream["overhead_cycles"]
    if "acc" in inst.operands and inst.opcode == "activation":
        cycles += target.data["act"]["read_accumulator_cycles"]
    return cycles / target.clock_ghz(inst.engine)


def stream1(target: Target, inst: Instruction) -> float:
    return _stream(target, inst, 1)


def stream2(target: Target, inst: Instruction) -> float:
    return _stream(target, inst, 2)


def stream3(target: Target, inst: Instruction) -> float:
    return _stream(target, inst, 3)


def dma_trigger(target: Target, inst: Instruction) -> float:
    """SP time to issue one DMA trigger (trigger_cycles at the SP clock)."""
    return target.data["dma"]["trigger_cycles"] / target.clock_ghz("sp")


def sync(target: Target, inst: Instruction) -> float:
    """A nop: sync_cycles at the engine's clock."""
    return target.data["sync_cycles"] / target.clock_ghz(inst.engine)


def control(target: Target, inst: Instruction) -> float:
    """A register instruction (reg_set, reg_op): control.register_cycles at the engine's clock."""
    return target.data["control"]["register_cycles"] / target.clock_ghz(inst.engine)


def reg_load(target: Target, inst: Instruction) -> float:
    """Reading one SBUF element into a register: control.reg_load_cycles at the engine's clock."""
    return target.data["control"]["reg_load_cycles"] / target.clock_ghz(inst.engine)


def branch(target: Target, inst: Instruction) -> float:
    """branch, jump, loop: control.branch_cycles (the fetch of the next instruction restarts)."""
    return target.data["control"]["branch_cycles"] / target.clock_ghz(inst.engine)


COSTS: dict[str, Callable[[Target, Instruction], float]] = {
    "control": control,
    "reg_load": reg_load,
    "branch": branch,
    "pe_matmul": pe_matmul,
    "pe_load": pe_load,
    "pe_transpose": pe_transpose,
    "stream1": stream1,
    "stream2": stream2,
    "stream3": stream3,
    "dma": dma_trigger,
    "sync": sync,
}


def _overlaps(a: AccessPattern, b: AccessPattern) -> bool:
    if a.memory != b.memory or a.tensor != b.tensor:
        return False
    if a.memory != "hbm" and not (a.start_partition < b.start_partition + b.partitions
                                  and b.start_partition < a.start_partition + a.partitions):
        return False
    (lo_a, hi_a), (lo_b, hi_b) = byte_bounds(a), byte_bounds(b)
    return lo_a < hi_b and lo_b < hi_a


def depends_on(inst: Instruction, previous: Instruction) -> bool:
    """Whether ``inst`` reads bytes ``previous`` writes (boxes of partitions x bytes overlap)."""
    spec, prev_spec = OPCODES[inst.opcode], OPCODES[previous.opcode]
    writes = [ap for name, ap in previous.operands.items() if prev_spec.operand(name).access == "w"]
    reads = [ap for name, ap in inst.operands.items() if spec.operand(name).access == "r"]
    return any(_overlaps(r, w) for r in reads for w in writes)


def dependent_extra(target: Target, inst: Instruction, previous: Instruction | None) -> float:
    """machine-model.md "Vector (DVE)...": the access overhead is ~100 cycles instead of ~60 when
    the instruction depends on the one just before it on its engine (back to back) or works on few
    elements (N < stream.small_free_elements, "N << 128"), on the engines the target names in
    stream.dependent_overhead_engines. Returns the extra ns (0 when neither holds)."""
    stream = target.data["stream"]
    if inst.engine not in stream["dependent_overhead_engines"] or OPCODES[inst.opcode].cost not in STREAM_CLASSES:
        return 0.0
    small = free_size(_first_input(inst)) < stream["small_free_elements"]
    if small or (previous is not None and depends_on(inst, previous)):
        return (stream["dependent_overhead_cycles"] - stream["overhead_cycles"]) / target.clock_ghz(inst.engine)
    return 0.0


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
