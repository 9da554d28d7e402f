"""The backend's entry point: an optimized HLO module in, an ISA program plus reports out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backend.control_schedule import schedule_structured
from backend.emit import ProgramBuilder
from backend.lower import INTERNAL_ERRORS, Lowering
from backend.options import BackendOptions
from backend.provenance import origin_table
from backend.registry import plan_memory
from backend.report import memory_plan
from backend.residency import Image, ResidencyMismatch, Survey
from backend.schedule import schedule
from backend.weight_plan import Reservation, plan_top, plan_weights, queue_bound
from hlo.errors import CompilationError
from hlo.ir import Module
from isa.program import Program
from isa.target import Target, load_target


class PhaseTimer(Protocol):
    """What times the backend's phases (the compiler's CompileStats): ``phase(name)`` wraps one."""

    def phase(self, name: str) -> AbstractContextManager[None]: ...


class _Untimed:
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield


@dataclass
class BackendResult:
    program: Program
    memory_plan: str  # every SBUF/PSUM buffer: offset, size, live range; the peak
    schedule: str  # per-engine streams with their semaphore waits
    tiling: str = ""  # per dot/conv kernel: its shape and the tile policy's choice


def compile_module(module: Module, target: Target | str, *, options: BackendOptions | None = None,
                   timer: PhaseTimer | None = None) -> BackendResult:
    """`_compile_module`, with an internal error (a broken invariant: assert, bad index or key) outside any one
    instruction's lowering (allocation, scheduling) reported as a CompilationError naming the module."""
    try:
        return _compile_module(module, target, options=options, timer=timer)
    except INTERNAL_ERRORS as e:
        raise CompilationError(f"{module.name}: internal compiler error in the backend ({type(e).__name__}: {e}); "
                               f"please report it with this model") from e


def _compile_module(module: Module, target: Target | str, *, options: BackendOptions | None = None,
                    timer: PhaseTimer | None = None) -> BackendResult:
    """Lower `module` (after the middle-end) to a program for `target`.

    Two lowering passes: the first writes every tensor between kernels to HBM and records how kernels
    access them (residency.Survey); the second keeps the ones the residency plan chose in SBUF.

    Raises hlo.errors.CompilationError naming the HLO instruction for anything the backend cannot
    lower or fit. ``timer`` times the phases: lowering (instruction selection, SBUF/PSUM allocation
    and emission of the instructions happen together as each kernel is lowered), residency
    planning, allocation (closing the live ranges), scheduling and emission (program and reports).
    """
    if isinstance(target, str):
        target = load_target(target)
    options = options or BackendOptions()
    timer = timer or _Untimed()
    n_queues = min(options.dma_queues, target.data["dma"]["queues"])
    memo: dict = {}  # what both lowerings derive from the same constants
    if options.keep_on_chip:
        survey = Survey()
        with timer.phase("lowering (survey)"):
            first = _lower(module, target, options, survey=survey, const_memo=memo)
        survey.needs = [k.need - k.spare for k in first.alloc.kernels]
        survey.staged = first.alloc.staged
        survey.persistent_bytes = first.alloc.sbuf_bytes - first.alloc.persistent_top
        tensors = {n: (t.dtype, int(np.prod(t.shape, dtype=np.int64))) for n, t in first.program.tensors.items()
                   if t.kind == "scratch"}
        excluded: frozenset[str] = frozenset()
        while True:
            with timer.phase("residency planning"):
                images = plan_memory(options.memory_planner, survey, tensors, first.alloc.sbuf_bytes,
                                     target.partitions, excluded)
                weights = _plan_weights(first, survey, images, target, n_queues)
            try:
                with timer.phase("lowering"):
                    builder = _lower(module, target, options, images=images, const_memo=memo, weights=weights)
                break
            except ResidencyMismatch as mismatch:
                excluded |= {mismatch.tensor}
    else:
        with timer.phase("lowering"):
            builder = _lower(module, target, options)
    program = builder.program
    for name in [n for n, t in program.tensors.items() if t.kind == "scratch" and n in builder.images]:
        del program.tensors[name]  # kept on chip: no HBM allocation
    ops = builder.ops
    with timer.phase("allocation"):
        builder.alloc.finish(len(ops))
    untracked = {n for n, t in program.tensors.items() if t.kind in ("input", "const")}
    with timer.phase("scheduling"):
        control = getattr(builder, "control", None)
        if control is not None and control.structured:  # while/conditional on the ISA's control flow
            result = schedule_structured(control, ops, target, builder.costs, untracked, n_queues,
                                         options.list_schedule)
        else:
            result = schedule(ops, builder.costs, untracked, n_queues, options.list_schedule)
    with timer.phase("emission"):
        program.instructions = [ops[i] for i in result.order]
        program.origins = origin_table(module, (inst.origin for inst in program.instructions))
        program.meta["useful_macs"] = builder.useful_macs
        program.meta["peak_sbuf_bytes"] = builder.alloc.peak_sbuf_bytes() * target.partitions
        plan = memory_plan(builder)
    tiling = "# tiling: per dot/conv kernel, its shape (kind:dims:dtype) and the options it was tiled with\n"
    return BackendResult(program, plan, result.text, tiling + "".join(f"{t}\n" for t in builder.tiling))


def _plan_weights(first: ProgramBuilder, survey: Survey, images: list[Image], target: Target,
                  n_queues: int) -> list[Reservation]:
    """weight_plan's plan from the survey, unless its estimates say the DMA queues hold the weights back
    (queue_bound: per kernel, its busiest engine and its DMAs' queue time less the transfers of the tensors
    the images keep on chip; a weight byte per partition moves on every partition)."""
    alloc = first.alloc
    dma_ns = list(alloc.dma_ns)
    for image in images:
        for access in survey.accesses.get(image.tensor, ()):
            dma_ns[access.kernel] -= access.ap.nbytes / first.costs.queue_rate
    if queue_bound(alloc.shapes, alloc.compute_ns, dma_ns, n_queues, target.partitions / first.costs.queue_rate):
        return []
    return plan_weights(alloc.shapes, images, plan_top(alloc.sbuf_bytes, alloc.persistent_top))


def _lower(module: Module, target: Target, options: BackendOptions, images: list[Image] | None = None,
           survey: Survey | None = None, const_memo: dict | None = None,
           weights: list[Reservation] | None = None) -> ProgramBuilder:
    builder = ProgramBuilder(target, options, images=images, survey=survey)
    if weights:
        builder.alloc.reserve(weights)
    if const_memo is not None:
        builder.const_memo = const_memo
    Lowering(module, builder).run()
    return builder
