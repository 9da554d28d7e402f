"""The backend's entry point: an optimized HLO module in, an ISA program plus reports out."""

from __future__ import annotations

from dataclasses import dataclass

from backend.emit import ProgramBuilder
from backend.lower import Lowering
from backend.options import BackendOptions
from backend.schedule import schedule
from compiler.hlo.ir import Module
from isa.program import Program
from isa.target import Target, load_target


@dataclass
class BackendResult:
    program: Program
    memory_plan: str  # every SBUF/PSUM buffer: offset, size, live range; the peak
    schedule: str  # per-engine streams with their semaphore waits


def compile_module(module: Module, target: Target | str, *, options: BackendOptions | None = None) -> BackendResult:
    """Lower `module` (after the middle-end) to a program for `target`.

    Raises compiler.errors.CompilationError naming the HLO instruction for anything the backend cannot
    lower or fit.
    """
    if isinstance(target, str):
        target = load_target(target)
    options = options or BackendOptions()
    builder = ProgramBuilder(target, options)
    Lowering(module, builder).run()
    program = builder.program
    ops = builder.ops
    builder.alloc.finish(len(ops))
    untracked = {n for n, t in program.tensors.items() if t.kind in ("input", "const")}
    n_queues = min(options.dma_queues, target.data["dma"]["queues"])
    result = schedule(ops, builder.costs, untracked, n_queues, options.list_schedule)
    program.instructions = [ops[i] for i in result.order]
    program.meta["useful_macs"] = builder.useful_macs
    program.meta["peak_sbuf_bytes"] = builder.alloc.peak_sbuf_bytes() * target.partitions
    return BackendResult(program, builder.alloc.memory_plan(), result.text)
