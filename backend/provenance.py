"""The program's origin table: for every HLO instruction of the entry computation that emitted
instructions (``Instruction.origin``), its torch origins, its matmul FLOPs and its compulsory HBM bytes.

Figures follow benchmarks/run.py's roofline so the per-op bounds add up to the model's:
- ``flops``: 2 x the MACs of the dots and convolutions it computes (a fusion: those of its fused
  computation), the work the PE peak applies to;
- ``hbm_bytes``: compulsory bytes, the model inputs and constants (weights, in their compiled dtype)
  it reads, each once, and the model output it writes; intermediates could stay on chip.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

from hlo.ir import Computation, Instruction, Module
from hlo.provenance import all_provenances
from hlo.shape_window import conv_dims
from isa.program import Origin, Source

# ops that only re-view their operand (no data of their own): walked through to find the producer
VIEW_OPS = ("reshape", "bitcast", "transpose", "broadcast", "slice", "convert", "copy", "get-tuple-element")


def dot_macs(inst: Instruction) -> int:
    contracting = inst.attrs.get("lhs_contracting_dims", ())
    lhs = inst.operands[0].shape.dims
    return inst.shape.size * prod(lhs[d] for d in contracting)


def conv_macs(inst: Instruction) -> int:
    rhs = inst.operands[1].shape.dims
    out_features = rhs[conv_dims(inst.attrs).rhs_output]
    return inst.shape.size * prod(rhs) // max(out_features, 1)


MACS = {"dot": dot_macs, "convolution": conv_macs}


def matmul_flops(inst: Instruction) -> int:
    """2 x the MACs of ``inst`` and of every instruction of the computations it calls."""
    total = 2 * MACS[inst.opcode](inst) if inst.opcode in MACS else 0
    seen: set[int] = set()
    stack: list[Computation] = list(inst.called_computations())
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for sub in comp.instructions:
            if sub.opcode in MACS:
                total += 2 * MACS[sub.opcode](sub)
            stack.extend(sub.called_computations())
    return total


def _source(value: Instruction) -> Instruction:
    while value.opcode in VIEW_OPS and value.operands:
        value = value.operands[0]
    return value


def _outputs(entry: Computation) -> set[int]:
    """uids of the instructions whose values are model outputs (through tuples and views)."""
    found: set[int] = set()
    stack = [entry.root] if entry.root is not None else []
    while stack:
        value = stack.pop()
        if value.uid in found:
            continue
        found.add(value.uid)
        if value.opcode == "tuple" or value.opcode in VIEW_OPS:
            stack.extend(value.operands)
    return found


def compulsory_bytes(inst: Instruction, outputs: set[int]) -> int:
    """Model inputs and constants it reads (each once) and the model output it writes."""
    read = {s.uid: s.shape.nbytes for s in map(_source, inst.operands) if s.opcode in ("parameter", "constant")}
    written = inst.shape.nbytes if inst.uid in outputs and not inst.shape.is_tuple else 0
    return sum(read.values()) + written


def origin_table(module: Module, names: Iterable[str]) -> dict[str, Origin]:
    """The ``Program.origins`` entry of every name in ``names`` (instructions of ``module``'s entry)."""
    entry = module.entry
    if entry is None:
        return {}
    by_name = {inst.name: inst for inst in entry.instructions}
    outputs = _outputs(entry)
    table = {}
    for name in sorted(set(names)):
        inst = by_name.get(name)
        if inst is None:
            continue
        sources = tuple(Source(p.module, p.op, p.location) for p in all_provenances(inst))
        table[name] = Origin(sources, matmul_flops(inst), compulsory_bytes(inst, outputs))
    return table
