"""Gather kernels (embedding lookup, index_select): rows by indirect DMA (``_RowGather``), or a one-hot
matmul on PE, exact in fp32 and bf16, for an epilogue on an integer table.

The indices are runtime data, so no DMA address can be computed at compile time. Instead, per tile of
at most 128 indices, the indices are broadcast to every partition, clamped into [0, V) as XLA clamps
gather starts, and per 128-row tile of the table [V, D] a one-hot matrix onehot[v, b] = (ids[b] == v)
is built by one DVE/POOL instruction against a partition iota. PE then accumulates
out[b, :] = sum_v onehot[v, b] * table[v, :] over the V tiles in PSUM: exactly one product is nonzero
and it is a multiplication by 1.0, so the result is the table row bit for bit. The cost is V / 128
matmuls per 128 indices and 512 columns, so this suits small vocabularies; an indirect DMA (one
descriptor per index, the address taken from SBUF) would make the cost independent of V.

Supported: one indexed operand dimension (start_index_map of size 1) with whole slices of every other
dimension, as embedding and index_select produce, any index batch shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.conv_epilogue import Epilogue, view_leaves, with_views
from backend.kernels.conv_geometry import simplified
from backend.kernels.expr import Node
from backend.kernels.indirect import Offsets, Term, direct_ap, indirect_ap, move_rows
from backend.layout import View, itemsize
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from hlo.shape_indexing import gather_dims
from hlo.shape_util import ShapeInferenceError
from isa.dtypes import dtype as lookup_dtype
from isa.program import AccessPattern

TABLE_RESIDENT = 64 * 1024  # bytes per partition under which the whole table stays in SBUF
EXACT_INDEX = 1 << 24  # fp32 represents every integer up to this


@dataclass
class GatherPlan:
    """out[b, :] = table[clamp(ids[b]), :] with table (V, D), ids (B,), out (B, D)."""

    name: str
    where: str
    table: View
    ids: View
    out: View
    epilogue: Node
    compute: str


def _merge(view: View, start: int, count: int) -> View | None:
    """Merge axes [start, start + count) into one (count 0: insert a size-1 axis)."""
    if count == 0:
        return view.insert_axis(start)
    for _ in range(count - 1):
        merged = view.merge_axes(start)
        if merged is None:
            return None
        view = merged
    return view


def plan_gather(inst: HloInstruction, name: str, operand: View, indices: View, out: View,
                epilogue: Node) -> GatherPlan:
    where = inst.where()
    try:
        g = gather_dims(inst.attrs)
    except ShapeInferenceError as e:
        raise CompilationError(f"{where}: {e}") from None
    rank = operand.rank
    if len(g.start_index_map) != 1 or g.operand_batching_dims:
        raise CompilationError(f"{where}: gather with {len(g.start_index_map)} indexed dimensions (or batching "
                               "dimensions) is not supported by the backend; one indexed dimension is")
    a = g.start_index_map[0]
    partial = [d for d in range(rank) if d != a and g.slice_sizes[d] != operand.dims[d]]
    if partial or g.slice_sizes[a] != 1:
        raise CompilationError(f"{where}: gather of partial slices (slice_sizes={list(g.slice_sizes)}) is not "
                               "supported by the backend; whole rows along the non-indexed dimensions are")
    try:
        compute = _compute_dtype(operand, where)
    except CompilationError:
        compute = ""  # only the indirect-DMA kernel can take it (gather_kernel decides)
    window = [d for d in range(rank) if d not in g.collapsed_slice_dims]
    out_of = dict(zip(window, g.offset_dims, strict=True))  # operand dim -> out dim
    rest = [d for d in range(rank) if d != a]
    batch = [o for o in range(out.rank) if o not in g.offset_dims]
    perm = tuple(batch + [out_of[d] for d in rest] + ([out_of[a]] if a in out_of else []))
    leaves = view_leaves(epilogue, where)
    outs = []
    for v in [out] + [node.view for node in leaves]:
        v = v.transpose(perm)
        if a in out_of:
            v = v.index(v.rank - 1, 0)
        outs.append(v)
    if g.index_vector_dim < indices.rank:
        indices = indices.index(g.index_vector_dim, 0)
    merged = [_merge(v, 0, len(batch)) for v in outs]
    merged = [None if v is None else _merge(v, 1, len(rest)) for v in merged]
    ids = _merge(indices, 0, indices.rank)
    table = _merge(operand.transpose(tuple([a] + rest)), 1, len(rest))
    if any(v is None for v in merged) or ids is None or table is None:
        raise CompilationError(f"{where}: the gather's index batch or row dimensions cannot be merged into one "
                               "by strides (store them row-major)")
    epilogue = with_views(epilogue, leaves, merged[1:])
    return GatherPlan(name, where, table, ids, merged[0], epilogue, compute)


def _compute_dtype(operand: View, where: str) -> str:
    """The dtype of the one-hot matmul: the table's own for floats; fp32 for an integer or pred table whose
    values fp32 holds exactly (i8 always; i32 when the table is a constant below 2^24 in magnitude)."""
    if operand.dtype in ("f32", "bf16", "f16"):
        return operand.dtype
    if operand.dtype in ("i8", "u8", "pred"):  # 8-bit values: exact in fp32
        return "f32"
    if operand.dtype == "i32" and operand.is_const:
        values = operand.const_array()
        if values.size == 0 or int(np.max(np.abs(values.astype(np.int64)))) < EXACT_INDEX:
            return "f32"
    raise CompilationError(f"{where}: gather from a {operand.dtype} operand is not supported by the backend "
                           f"(floats, pred/s8, and constant s32 tables below 2^24 are: the rows are picked by "
                           f"an fp32 matmul)")


def gather_kernel(builder: ProgramBuilder, plan: GatherPlan) -> None:
    """Rows by indirect DMA (reads only the rows the indices pick); the one-hot matmul for the cases it
    cannot take (an epilogue on an integer table)."""
    if not _RowGather.takes(plan):
        if not plan.compute:
            _compute_dtype(plan.table, plan.where)  # raises the reason
        _GatherKernel(builder, plan).run()
        return
    _RowGather(builder, plan).run()


def _trivial_epilogue(plan: GatherPlan) -> bool:
    """The epilogue only stores the rows in the table's own type (no arithmetic, no conversion)."""
    root = plan.epilogue
    if root.op == "convert" and root.inputs[0].op == "acc":
        root = root.inputs[0] if root.dtype == plan.table.stored_dtype else root
    return root.op == "acc" and plan.table.cast is None and plan.out.dtype == plan.table.stored_dtype


class _RowGather:
    """out[b, :] = table[clamp(ids[b], 0, V - 1), :] by dma_indirect: per tile of 128 indices, the clamped
    indices (GpSimd, exact integer mode) address one table row per partition. Without an epilogue the rows
    go HBM to HBM; with one they land in SBUF and the epilogue runs on them (the table's stored values as
    the accumulator)."""

    def __init__(self, builder: ProgramBuilder, plan: GatherPlan):
        self.b, self.plan = builder, plan
        self.parts = builder.target.partitions
        self.table = builder.place(plan.table) if plan.table.is_const else plan.table
        self.V, self.D = self.table.dims
        self.B = plan.ids.dims[0]
        self.direct = _trivial_epilogue(plan)
        self.cols = min(self.D, 512)
        self.epilogue = None if self.direct else Epilogue(
            builder, plan.epilogue, plan.out, 0, 1, plan.name, min(self.parts, self.B), self.cols,
            builder.options.output_buffers)

    @staticmethod
    def takes(plan: GatherPlan) -> bool:
        ids_ok = lookup_dtype(plan.ids.stored_dtype).is_integer and plan.ids.stored_dtype != "pred"
        floats = plan.table.stored_dtype in ("f32", "bf16", "f16", "fp8e4", "fp8e5")
        return ids_ok and (floats or _trivial_epilogue(plan))

    def run(self) -> None:
        b, plan = self.b, self.plan
        if plan.out.size == 0:
            return
        specs = Offsets.specs()
        if self.epilogue is not None:
            specs += [PoolSpec("rows", "sbuf", self.cols * itemsize(self.table.stored_dtype), 3)]
            specs += self.epilogue.specs()
        pools = b.alloc.begin_kernel(plan.name, specs, plan.where)
        if self.epilogue is not None:
            self.epilogue.bind(pools)
        offsets = Offsets(b, pools, plan.name)
        row_stride = self.table.strides[0]
        for b0 in range(0, self.B, self.parts):
            bw = min(self.parts, self.B - b0)
            idx = offsets.build([Term(plan.ids, 0, self.V - 1, 1)], b0, bw, clamp=True)
            if self.epilogue is None:
                move_rows(b, direct_ap(plan.out, 0, b0, bw, [1]), indirect_ap(self.table, [1], bw, row_stride),
                          idx, "src", f"{plan.name} b{b0}")
                continue
            for c0 in range(0, self.D, self.cols):
                cw = min(self.cols, self.D - c0)
                tile = pools["rows"].next().flat(self.table.stored_dtype, bw, cw)
                part = self.table.slice(((0, self.V, 1), (c0, c0 + cw, 1)))
                move_rows(b, tile, indirect_ap(part, [1], bw, row_stride), idx, "src", f"{plan.name} b{b0} c{c0}")
                self.epilogue.run({}, b0, bw, c0, cw, tile, f"{plan.name} b{b0} c{c0}")
        b.alloc.end_kernel()


class _GatherKernel:
    def __init__(self, builder: ProgramBuilder, plan: GatherPlan):
        self.b, self.plan = builder, plan
        self.parts = builder.target.partitions
        table = plan.table
        if table.is_const:
            table = builder.new_const(table.const_array(), plan.compute)
        self.table = table
        self.ids = builder.new_const(plan.ids.const_array(), "i32") if plan.ids.is_const else plan.ids
        self.casting = table.stored_dtype != plan.compute
        self.V, self.D = table.dims
        self.B = self.ids.dims[0]
        self.cols = min(builder.options.moving_tile, builder.target.data["pe"]["max_n"], self.D)
        self.group = max(1, builder.options.psum_acc_banks // 2) * self.cols  # columns per accumulation group
        self.v_tiles = [(v0, min(self.parts, self.V - v0)) for v0 in range(0, self.V, self.parts)]
        self.epilogue = Epilogue(builder, plan.epilogue, plan.out, 0, 1, plan.name, min(self.parts, self.B),
                                 self.cols, builder.options.output_buffers)
        self.pools: dict[str, Pool] = {}

    def run(self) -> None:
        b, plan, opts = self.b, self.plan, self.b.options
        if self.ids.dtype not in ("i32", "i64"):
            raise CompilationError(f"{plan.where}: gather indices of type {self.ids.dtype} are not supported "
                                   "by the backend (s32 and s64 are)")
        if self.V > EXACT_INDEX:
            raise CompilationError(f"{plan.where}: a gather from {self.V} rows: indices are compared in fp32, "
                                   f"exact up to {EXACT_INDEX} rows")
        bmax, csz = min(self.parts, self.B), itemsize(plan.compute)
        rows = min(self.parts, self.V)
        gcols = min(self.group, self.D)
        self.resident = len(self.v_tiles) * self.D * csz <= TABLE_RESIDENT
        specs = [PoolSpec("acc", "psum", 0, opts.psum_acc_banks),
                 PoolSpec("ids", "sbuf", bmax * itemsize(self.ids.dtype), 2), PoolSpec("idf", "sbuf", bmax * 4, 2),
                 PoolSpec("iota", "sbuf", 4, 1), PoolSpec("onehot", "sbuf", bmax * csz, 3),
                 PoolSpec("table", "sbuf", (len(self.v_tiles) * self.D if self.resident else gcols) * csz,
                          1 if self.resident else 3)]
        if self.casting:
            specs.append(PoolSpec("stage", "sbuf", gcols * itemsize(self.table.stored_dtype), 2))
        specs += self.epilogue.specs()
        self.pools = b.alloc.begin_kernel(plan.name, specs, plan.where)
        self.epilogue.bind(self.pools)
        iota = self.pools["iota"].next().flat("f32", rows, 1)
        b.emit("pool", "iota", f"{plan.name} partition index", {"base": 0, "channel_multiplier": 1}, dst=iota)
        resident = None
        if self.resident:
            resident = self.pools["table"].next()
            for vt, (v0, vw) in enumerate(self.v_tiles):
                self._load_table(resident, vt * self.D, v0, vw, 0, self.D)
        for b0 in range(0, self.B, self.parts):
            bw = min(self.parts, self.B - b0)
            ids = self._load_ids(b0, bw, rows)
            for c0 in range(0, self.D, self.group):
                cw = min(self.group, self.D - c0)
                accs = self._accumulate(ids, iota, b0, bw, c0, cw, resident)
                self._epilogues(accs, b0, bw)
        b.alloc.end_kernel()

    def _load_ids(self, b0: int, bw: int, rows: int) -> Tile:
        """The indices [b0, b0 + bw) on every partition, clamped into [0, V) as fp32 (exact below 2^24)."""
        b, plan = self.b, self.plan
        raw = self.pools["ids"].next()
        b.dma(raw.flat(self.ids.dtype, rows, bw), simplified(self.ids.hbm_ap(None, 0, rows, [(0, b0, bw)])),
              f"{plan.name} ids {b0} load")
        ids = self.pools["idf"].next()
        if self.ids.dtype == "i64":  # ints: clamp the 64-bit ids exactly on GpSimd into i32, in place of idf
            b.emit("pool", "tensor_scalar", f"{plan.name} ids {b0} clamp s64",
                   {"op": "max", "scalar": 0.0, "op1": "min", "scalar1": float(self.V - 1), "math": "int"},
                   dst=ids.flat("i32", rows, bw), src=raw.flat("i64", rows, bw))
            raw = ids
        b.emit(b.pick_engine(("dve", "pool")), "tensor_scalar", f"{plan.name} ids {b0} clamp",
               {"op": "max", "scalar": 0.0, "op1": "min", "scalar1": float(self.V - 1)},
               dst=ids.flat("f32", rows, bw), src=raw.flat("i32", rows, bw))
        return ids

    def _load_table(self, tile: Tile, at: int, v0: int, vw: int, c0: int, cn: int) -> None:
        b, plan = self.b, self.plan
        label = f"{plan.name} table v{v0} c{c0}"
        if not self.casting:
            src = simplified(self.table.hbm_ap(0, v0, vw, [(1, c0, cn)]))
            b.dma(tile.flat(plan.compute, vw, cn, at), src, f"{label} load")
            return
        stored = self.table.stored_dtype
        for s in range(0, cn, self.group):
            n = min(self.group, cn - s)
            stage = self.pools["stage"].next().flat(stored, vw, n)
            b.dma(stage, simplified(self.table.hbm_ap(0, v0, vw, [(1, c0 + s, n)])), f"{label} load")
            b.copy(tile.flat(plan.compute, vw, n, at + s), stage, f"{label} cast", engines=("act", "dve", "pool"))

    def _accumulate(self, ids: Tile, iota: AccessPattern, b0: int, bw: int, c0: int, cw: int,
                    resident: Tile | None) -> list:
        b, plan = self.b, self.plan
        chunks = [(s, min(self.cols, c0 + cw - s)) for s in range(c0, c0 + cw, self.cols)]
        accs = [self.pools["acc"].next() for _ in chunks]
        for vt, (v0, vw) in enumerate(self.v_tiles):
            onehot = self.pools["onehot"].next().flat(plan.compute, vw, bw)
            b.emit(b.pick_engine(("dve", "pool")), "tensor_scalar", f"{plan.name} onehot b{b0} v{v0}",
                   {"op": "subtract", "scalar": float(v0), "op1": "is_equal", "scalar1": 0.0},
                   dst=onehot, src=ids.flat("f32", vw, bw), scalar1_vec=replace(iota, partitions=vw))
            if resident is not None:
                tile, base = resident, vt * self.D
            else:
                tile, base = self.pools["table"].next(), -c0
                self._load_table(tile, 0, v0, vw, c0, cw)
            b.load_stationary(onehot, f"{plan.name} onehot b{b0} v{v0}")
            for acc, (s, n) in zip(accs, chunks, strict=True):
                b.multiply_moving(acc.flat("f32", bw, n), tile.flat(plan.compute, vw, n, base + s),
                                  acc=vt > 0, comment=f"{plan.name} b{b0} c{s} v{v0}")
        return list(zip(accs, chunks, strict=True))

    def _epilogues(self, accs: list, b0: int, bw: int) -> None:
        for acc, (s, n) in accs:
            self.epilogue.run({}, b0, bw, s, n, acc.flat("f32", bw, n), f"{self.plan.name} b{b0} c{s}")
