"""Cumulative reduce-windows (cumsum, cumprod, cummax, cummin): a log-step scan along the free axis.

XLA writes `jnp.cumsum(x, axis)` (and torch's cumsum through the frontend) as a reduce-window whose window
spans the whole axis, padded by n - 1 identities in front (pad_low = n - 1; a reverse scan pads behind).
The pooling kernel would reduce n taps per output (n^2 work); here the axis goes on the free axis, the
other dims on partitions (RowLayout), and the scan takes ceil(log2 n) steps (Hillis-Steele): step s combines
every element with the one s before it, ping-ponging between two tiles:

    y[i] = y[i] op y[i - s]   (i >= s),   y[i] unchanged (i < s)

Integers are exact on GpSimd in integer mode (two's-complement wrap: the adds are associative, so the order
does not matter; docs/integer-semantics.md); floats accumulate in fp32 (a different summation order than a
sequential one: the usual fp32 rounding). The init value is combined at the end, then the epilogue (the
conversion to the output type and whatever was fused after the reduce-window) on the way to the store.
Every other reduce-window goes to the pooling kernel (pool.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels import integer
from backend.kernels.conv_epilogue import Epilogue, view_leaves, with_views
from backend.kernels.expr import Node
from backend.kernels.pool import REDUCERS, PoolPlan, plan_pool, pool_kernel, reducer_identity
from backend.kernels.sort import RowLayout
from backend.layout import View, itemsize
from hlo.errors import CompilationError
from hlo.ir import Computation
from hlo.ir import Instruction as HloInstruction
from hlo.shape_util import ShapeInferenceError
from hlo.shape_window import window_of


@dataclass
class ScanPlan:
    name: str
    where: str
    layout: RowLayout  # views: x, out, then the epilogue's leaves
    epilogue: Node
    op: str
    identity: float
    init: float
    reverse: bool


def _cumulative_axis(inst: HloInstruction, x: View) -> tuple[int, bool] | None:
    """(axis, reverse) when the window is a cumulative one along one axis, else None."""
    try:
        window = window_of(inst.attrs, x.rank, "the operand")
    except ShapeInferenceError:
        return None
    found = None
    for a, w in enumerate(window.dims):
        n = x.dims[a]
        if w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1:
            continue
        if found is not None or n < 2 or w.size != n or w.stride != 1 or w.lhs_dilate != 1 or w.rhs_dilate != 1:
            return None
        if (w.pad_low, w.pad_high) == (n - 1, 0):
            found = (a, False)
        elif (w.pad_low, w.pad_high) == (0, n - 1):
            found = (a, True)
        else:
            return None
    return found


def _reducer(comp: object) -> str | None:
    if isinstance(comp, Computation) and comp.root is not None and len(comp.parameters) == 2:
        root = comp.root
        if root.opcode in REDUCERS and {o.uid for o in root.operands} == {p.uid for p in comp.parameters}:
            return REDUCERS[root.opcode][0]
    return None


def plan_window(inst: HloInstruction, name: str, x: View, init: View, out: View, epilogue: Node
                ) -> ScanPlan | PoolPlan:
    """A reduce-window's plan: a scan for cumulative windows, else the pooling kernel's."""
    found = _cumulative_axis(inst, x)
    op = _reducer(inst.attrs.get("to_apply"))
    init_value = init.scalar_value()
    if found is None or op is None or init_value is None:
        return plan_pool(inst, name, x, init, out, epilogue)
    axis, reverse = found
    where = inst.where()
    leaves = view_leaves(epilogue, where)
    layout = RowLayout.of([x, out] + [n.view for n in leaves], axis)
    epilogue = with_views(epilogue, leaves, layout.views[2:])
    return ScanPlan(name, where, layout, epilogue, op, reducer_identity(op, x.dtype), init_value, reverse)


def window_kernel(builder: ProgramBuilder, plan: ScanPlan | PoolPlan) -> None:
    if isinstance(plan, PoolPlan):
        pool_kernel(builder, plan)
    else:
        scan_kernel(builder, plan)


def scan_kernel(builder: ProgramBuilder, plan: ScanPlan) -> None:
    b, layout = builder, plan.layout
    x, out = layout.views[0], layout.views[1]
    n = layout.n
    if n == 0 or layout.rows == 0 or any(d == 0 for d in layout.loops):
        return
    exact = integer.is_integer(x.dtype)
    acc_dtype = x.dtype if exact else "f32"
    parts = min(b.target.partitions, layout.rows)
    nl = len(layout.loops)
    epilogue = Epilogue(b, plan.epilogue, out, nl, nl + 1, plan.name, parts, n, 2)
    width = max(4, itemsize(acc_dtype), itemsize(x.dtype))  # 8-byte elements for i64/u64 (torch's cumsum of ints)
    specs = epilogue.specs() + [PoolSpec("scan", "sbuf", n * width, 4), PoolSpec("stage", "sbuf", n * width, 2)]
    if not b.alloc.fits(specs):
        raise CompilationError(f"{plan.where}: a cumulative reduce-window over {n} elements per row does not fit "
                               "in SBUF")
    pools = b.alloc.begin_kernel(plan.name, specs, plan.where)
    epilogue.bind(pools)
    math = {"math": "int"} if exact else {}
    for fixed, p0, pw in layout.tiles(b.target.partitions):
        label = f"{plan.name} rows {p0}:{p0 + pw}"
        cur, nxt = (pools["scan"].next().flat(acc_dtype, pw, n) for _ in range(2))
        src = layout.load_ap(0, fixed, p0, pw)
        if src.dtype == acc_dtype:
            b.dma(cur, src, f"{label} load")
        else:  # a pending convert, or a float type accumulated in fp32
            stage = pools["stage"].next().flat(src.dtype, pw, n)
            b.dma(stage, src, f"{label} load")
            b.copy(cur, stage, f"{label} cast", engines=("dve", "pool"))
        size = itemsize(acc_dtype)
        s = 1
        while s < n:
            engine = "pool" if exact else b.pick_engine(("dve", "pool"))
            moved, kept = (s, 0) if not plan.reverse else (0, n - s)  # the combined run starts at `moved`
            a = _part(cur, moved, n - s, size)
            other = _part(cur, s - moved, n - s, size)  # s before (or after, reversed)
            b.emit(engine, "tensor_tensor", f"{label} step {s}", {"op": plan.op, **math},
                   dst=_part(nxt, moved, n - s, size), a=a, b=other)
            b.emit(engine, "tensor_copy", f"{label} step {s} keep", dst=_part(nxt, kept, s, size),
                   src=_part(cur, kept, s, size))
            cur, nxt = nxt, cur
            s *= 2
        if plan.init != plan.identity:
            b.emit("pool" if exact else "dve", "tensor_scalar", f"{label} init",
                   {"op": plan.op, "scalar": plan.init, **math}, dst=cur, src=cur)
        epilogue.run(fixed, p0, pw, 0, n, cur, label)
    b.alloc.end_kernel()


def _part(ap, start: int, count: int, size: int):
    """Elements [start, start + count) of a [P, n] tile."""
    return type(ap)(ap.memory, ap.dtype, ap.offset + start * size, ((1, count),), ap.start_partition, ap.partitions)
