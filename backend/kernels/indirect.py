"""Runtime-indexed data movement through the indirect DMA (``dma_indirect``): row gathers (embeddings,
index_select), dynamic-slice, dynamic-update-slice and row scatters (index_put, index_add, KV-cache writes).

Every kernel here moves only the rows the indices pick. Per tile of at most 128 rows the offsets are
computed on chip, exactly, in GpSimd's integer mode (``math=int``), into an i32 index tile [rows, 1]:

- gather / dynamic-slice (XLA clamps): each index is clamped into its legal range (``0..n - size``), so
  every row is in bounds and the DMA runs with ``oob=error`` (a compiler bug stops the program instead of
  moving a wrong row);
- scatter (XLA drops an update whose window leaves the operand): each index is checked against
  ``0..n - 1``; an invalid row gets a negative offset and the DMA runs with ``oob=skip``.

The offsets are element offsets into the stored tensor (strides applied on chip) unless the kernel can use
the index as a row number directly (the gather's row stride is the DMA's scale). ``rmw=add`` is the
DMA's read-modify-write (NKI's dst_rmw_op): scatter-add applies the rows in order, so repeated indices
accumulate as XLA's sequential scatter does.

``lowers_directly(inst)`` is the pass pipeline's question: the select expanders
(compiler/passes/expand) leave alone what these kernels take.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from backend.alloc import Pool, PoolSpec
from backend.emit import ProgramBuilder
from backend.layout import HLO_TO_ISA, View, itemsize, simplify_pattern
from hlo.errors import CompilationError
from hlo.ir import Computation, Instruction
from hlo.shape_indexing import gather_dims, scatter_dims
from hlo.shape_util import ShapeInferenceError
from isa.program import AccessPattern

MAX_FREE_DIMS = 4  # free pairs of an access pattern
INVALID = 1 << 30  # subtracted from the offset of a scatter row whose index is out of range (oob=skip)
INDEX_BYTES = 4  # i32 offsets


# -- which instructions the kernels take (asked by the expanders) ----------------------------------------------

def _machine_type(inst: Instruction) -> bool:
    return all(o.shape.dtype in HLO_TO_ISA for o in [inst, *inst.operands])


def scatter_combiner(inst: Instruction) -> str | None:
    """``replace`` or ``add`` when the scatter's combiner is one the DMA applies, else None."""
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, Computation) or comp.root is None or len(comp.parameters) != 2:
        return None
    root, (p0, p1) = comp.root, sorted(comp.parameters, key=lambda p: p.parameter_number or 0)
    if root is p1:
        return "replace"
    if root.opcode == "add" and sorted(o.uid for o in root.operands) == sorted((p0.uid, p1.uid)):
        return "add" if inst.shape.dtype != "pred" else None
    return None


def _scatter_form(inst: Instruction) -> bool:
    if len(inst.operands) != 3 or inst.shape.is_tuple or scatter_combiner(inst) is None:
        return False
    x, _, updates = inst.operands
    try:
        s = scatter_dims(inst.attrs)
    except ShapeInferenceError:  # a malformed scatter: the verifier's to report
        return False
    if s.input_batching_dims or s.scatter_indices_batching_dims:
        return False
    rank = x.shape.rank
    window = [d for d in range(rank) if d not in s.inserted_window_dims]
    sizes = dict(zip(window, (updates.shape.dims[u] for u in s.update_window_dims), strict=True))
    for d in range(rank):
        size = 1 if d in s.inserted_window_dims else sizes[d]
        if size != (1 if d in s.scatter_dims_to_operand_dims else x.shape.dims[d]):
            return False
    return len([d for d in range(rank) if d not in s.scatter_dims_to_operand_dims]) <= MAX_FREE_DIMS


def general_gather_form(inst: Instruction) -> bool:
    """A gather of several indexed dims (slice size 1, collapsed), the other dims whole, no batching dims: rows
    at the sum of the clamped indices times the strides (one indexed dim is the gather kernel's)."""
    if len(inst.operands) != 2 or not _machine_type(inst):
        return False
    x = inst.operands[0]
    try:
        g = gather_dims(inst.attrs)
    except ShapeInferenceError:  # a malformed gather: the verifier's to report
        return False
    indexed = set(g.start_index_map)
    if g.operand_batching_dims or len(indexed) < 2 or set(g.collapsed_slice_dims) != indexed:
        return False
    if any(g.slice_sizes[d] != (1 if d in indexed else x.shape.dims[d]) for d in range(x.shape.rank)):
        return False
    return x.shape.rank - len(indexed) <= MAX_FREE_DIMS and inst.shape.size > 0


def lowers_directly(inst: Instruction) -> bool:
    """Whether this module's kernels lower `inst` (then the select expanders leave it alone)."""
    if not _machine_type(inst):
        return False
    if inst.opcode in ("dynamic-slice", "dynamic-update-slice"):
        x = inst.operands[0]
        return 1 <= x.shape.rank <= MAX_FREE_DIMS + 1 and x.shape.size > 0
    if inst.opcode == "scatter":
        return _scatter_form(inst)
    if inst.opcode == "gather":
        return general_gather_form(inst)
    return False


# -- offsets on chip --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    """One index contributing ``f(index) * stride`` to a row's offset: ``view`` holds one index per row
    ([rows]) or one for all rows (a scalar, dims ()); f clamps into [lo, hi] (clamp) or checks it (skip)."""

    view: View
    lo: int
    hi: int
    stride: int


class Offsets:
    """Builds the i32 index tile of a row tile on GpSimd (exact integer mode)."""

    def __init__(self, b: ProgramBuilder, pools: dict[str, Pool], label: str):
        self.b, self.pools, self.label = b, pools, label

    @staticmethod
    def specs() -> list[PoolSpec]:
        """The index tiles' pools (a few bytes per partition each)."""
        return [PoolSpec("idx_raw", "sbuf", 8, 4), PoolSpec("idx_term", "sbuf", INDEX_BYTES, 4),
                PoolSpec("idx_ok", "sbuf", INDEX_BYTES, 3), PoolSpec("idx", "sbuf", INDEX_BYTES, 3)]

    def _load(self, term: Term, r0: int, rn: int) -> AccessPattern:
        b, v = self.b, term.view
        if v.is_const:
            v = b.place(v)
        ap = v.hbm_ap(0 if v.rank else None, r0 if v.rank else 0, rn if v.rank else 1, [])
        if not v.rank:  # one index for every row: read it onto every partition (partition stride 0)
            ap = replace(ap, partitions=rn, partition_stride=0)
        raw = self.pools["idx_raw"].next().flat(v.stored_dtype, rn, 1)
        b.dma(raw, ap, f"{self.label} index load")
        return raw

    def _int(self, opcode: str, dst: AccessPattern, comment: str, attrs: dict, **operands: AccessPattern) -> None:
        self.b.emit("pool", opcode, f"{self.label} {comment}", {**attrs, "math": "int"}, dst=dst, **operands)

    def build(self, terms: list[Term], r0: int, rn: int, clamp: bool, base: int = 0,
              row_stride: int = 0) -> AccessPattern:
        """The tile [rn, 1] of i32 offsets of rows r0..r0+rn: base + row_stride * row + sum of the terms."""
        acc = self.pools["idx"].next().flat("i32", rn, 1)
        ok = None
        if row_stride or not terms:
            self.b.iota(acc, base + r0 * row_stride, row_stride, f"{self.label} row offsets")
            started = True
        else:
            started = False
        for term in terms:
            raw = self._load(term, r0, rn)
            t = self.pools["idx_term"].next().flat("i32", rn, 1)
            if clamp:
                self._int("tensor_scalar", t, "clamp", {"op": "max", "scalar": float(term.lo), "op1": "min",
                                                       "scalar1": float(term.hi)}, src=raw)
            else:
                self._int("tensor_copy", t, "index to i32", {}, src=raw)
                lo = self.pools["idx_term"].next().flat("i32", rn, 1)
                self._int("tensor_scalar", lo, "index >= lo", {"op": "is_ge", "scalar": float(term.lo)}, src=t)
                hi = self.pools["idx_term"].next().flat("i32", rn, 1)
                self._int("tensor_scalar", hi, "index <= hi", {"op": "is_le", "scalar": float(term.hi)}, src=t)
                both = self.pools["idx_ok"].next().flat("i32", rn, 1)
                self._int("tensor_tensor", both, "in range", {"op": "multiply"}, a=lo, b=hi)
                if ok is not None:
                    self._int("tensor_tensor", both, "all in range", {"op": "multiply"}, a=both, b=ok)
                ok = both
            if not started:
                self._int("tensor_scalar", acc, "scale", {"op": "multiply", "scalar": float(term.stride), "op1": "add",
                                                          "scalar1": float(base)}, src=t)
                started = True
            else:
                self._int("tensor_scalar", t, "scale", {"op": "multiply", "scalar": float(term.stride)}, src=t)
                self._int("tensor_tensor", acc, "sum", {"op": "add"}, a=acc, b=t)
        if ok is not None:  # out of range: a negative offset, which the DMA skips
            self._int("tensor_scalar", ok, "invalid rows", {"op": "subtract", "scalar": 1.0, "op1": "multiply",
                                                            "scalar1": float(INVALID)}, src=ok)
            self._int("tensor_tensor", acc, "drop invalid rows", {"op": "add"}, a=acc, b=ok)
        return acc


# -- access patterns ----------------------------------------------------------------------------------------------

def indirect_ap(view: View, axes: list[int], rows: int, scale: int) -> AccessPattern:
    """The indirectly addressed side over `view`'s stored tensor: rows of the free `axes` (whole), row p at
    element view.offset + index[p] * scale."""
    pattern = simplify_pattern([(view.strides[a], view.dims[a]) for a in axes])
    if len(pattern) > MAX_FREE_DIMS:
        raise CompilationError(f"a row of {len(pattern)} strided dimensions is more than an access pattern holds")
    return AccessPattern("hbm", view.stored_dtype, view.offset * itemsize(view.stored_dtype), pattern,
                         partitions=rows, tensor=view.buffer.name, partition_stride=max(1, scale))


def direct_ap(view: View, p_axis: int | None, p0: int, pn: int, axes: list[int]) -> AccessPattern:
    """The plain side: rows p0..p0+pn of `p_axis` (None: one row), the free `axes` whole, merged."""
    ap = view.hbm_ap(p_axis, p0, pn, [(a, 0, view.dims[a]) for a in axes])
    pattern = simplify_pattern(list(ap.pattern))
    if len(pattern) > MAX_FREE_DIMS:
        raise CompilationError(f"a row of {len(pattern)} strided dimensions is more than an access pattern holds")
    return replace(ap, pattern=pattern)


def sub_rows(ap: AccessPattern, q0: int, qn: int) -> AccessPattern:
    """Rows q0..q0+qn of an access (HBM: the partition pair; on chip: partitions)."""
    if ap.memory == "hbm":
        return replace(ap, offset=ap.offset + q0 * ap.partition_stride * ap.itemsize, partitions=qn)
    return replace(ap, start_partition=ap.start_partition + q0, partitions=qn)


def move_rows(b: ProgramBuilder, dst: AccessPattern, src: AccessPattern, index: AccessPattern, side: str,
              label: str, oob: str = "error", rmw: str = "none") -> None:
    """dma_indirect of the rows of `index`, split into transfers of about the DMA split size (several
    queues) when the rows are large; every row is its own descriptor either way."""
    rows = index.partitions
    row_bytes = max(1, src.free_size * src.itemsize)
    # a scatter writes the whole tensor as far as dependencies know: one transfer per tile (split ones would
    # run one after the other anyway); a gather's pieces run on several queues at once
    step = rows if side == "dst" else max(1, min(rows, b.options.dma_split_bytes // row_bytes))
    for q0 in range(0, rows, step):
        qn = min(step, rows - q0)
        attrs = {"side": side, "oob": oob, "rmw": rmw}
        # the indirect side's rows are where the index tile says: only their count changes
        d = replace(dst, partitions=qn) if side == "dst" else sub_rows(dst, q0, qn)
        s = replace(src, partitions=qn) if side == "src" else sub_rows(src, q0, qn)
        b.emit("sp", "dma_indirect", f"{label} rows {q0}..{q0 + qn - 1}", attrs, dst=d, src=s,
               index=sub_rows(index, q0, qn))
