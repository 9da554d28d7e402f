"""Pooling kernels (reduce-window with max/min/add/multiply): window taps as strided views, reduced on
DVE or POOL.

The axes the window does not touch go on partitions (merged: N and C of an NCHW map give N * C
partitions) or are looped over; the (at most two) windowed axes are the rows and columns of an SBUF
band tile (conv_geometry.py). Rows outside the input are filled with the reducer's identity (-inf for
max), columns are clipped per tap, so padding and holes never change a result, as in XLA's evaluator.
Per block of output pixels: the first tap covering the block whole is copied into an fp32 accumulator
(or it is set to the identity), every other tap is one tensor_tensor of the accumulator with the
tap's strided view of the band, then the init value is combined (a constant when it is not the identity;
a runtime init, e.g. a parameter, from a per-partition vector broadcast from HBM once per kernel) and the
epilogue expression (e.g. avg pooling's divide, when fused) evaluated on the way to the store. One
block's chain runs on one engine (no semaphore between its steps); blocks alternate between DVE and
POOL by estimated load.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels import integer
from backend.kernels.conv_epilogue import Epilogue, is_bare, view_leaves, with_views
from backend.kernels.conv_geometry import DMA_PIECE, Axis, Band, Block, band_pieces, plan_bands, simplified, simplify
from backend.kernels.expr import Node
from backend.layout import View, itemsize
from hlo.errors import CompilationError
from hlo.ir import Computation, WindowDim
from hlo.ir import Instruction as HloInstruction
from hlo.shape_util import ShapeInferenceError
from hlo.shape_window import window_of, window_output_size
from isa.dtypes import dtype as isa_dtype
from isa.instructions import start_partition_allowed
from isa.program import AccessPattern

# reducer computation root opcode -> (ISA op, identity)
REDUCERS: dict[str, tuple[str, float]] = {
    "maximum": ("max", float("-inf")), "minimum": ("min", float("inf")), "add": ("add", 0.0),
    "multiply": ("multiply", 1.0),
}
REDUCE_OPS = ("add", "max", "min")  # tensor_reduce's ops
BLOCK = 2048  # max output pixels per accumulator tile
MIN_BLOCK, PIPELINE = 256, 8  # smaller blocks than BLOCK so that loads, reductions and stores overlap
X_BUDGET = 96 * 1024  # bytes per partition for the band tiles


@dataclass
class PoolPlan:
    """x (loops..., P, H, W) -> out (loops..., P, Ho * Wo); `op` reduces, starting from `init`."""

    name: str
    where: str
    x: View
    out: View
    epilogue: Node
    rows: Axis
    cols: Axis
    op: str
    identity: float
    init: float
    init_view: View | None = None  # a runtime init value (rank 0): combined from a per-partition vector


def _reducer(comp: object, where: str) -> tuple[str, float]:
    if isinstance(comp, Computation) and comp.root is not None and len(comp.parameters) == 2:
        root = comp.root
        if root.opcode in REDUCERS and {o.uid for o in root.operands} == {p.uid for p in comp.parameters}:
            return REDUCERS[root.opcode]
    raise CompilationError(f"{where}: reduce-window supports to_apply computations that are one of "
                           f"{', '.join(REDUCERS)} of their two parameters")


def reducer_identity(op: str, dtype: str) -> float:
    """The reducer's identity in `dtype` (integers: the type's range for max/min)."""
    if integer.is_integer(dtype) and op in ("max", "min"):
        np_dtype = isa_dtype(dtype).numpy
        lo, hi = (0, 1) if np_dtype.kind == "b" else (int(np.iinfo(np_dtype).min), int(np.iinfo(np_dtype).max))
        return float(lo if op == "max" else hi)
    return {"add": 0.0, "multiply": 1.0, "max": float("-inf"), "min": float("inf")}[op]


def _trivial(w: WindowDim) -> bool:
    return w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1


def plan_pool(inst: HloInstruction, name: str, x: View, init: View, out: View, epilogue: Node) -> PoolPlan:
    where = inst.where()
    try:
        window = window_of(inst.attrs, x.rank, "the operand")
    except ShapeInferenceError as e:
        raise CompilationError(f"{where}: {e}") from None
    op, identity = _reducer(inst.attrs.get("to_apply"), where)
    init_value = init.scalar_value()
    if x.dtype not in ("f32", "bf16", "f16") and not integer.is_integer(x.dtype):
        raise CompilationError(f"{where}: reduce-window over {x.dtype} is not supported by the backend")
    identity = reducer_identity(op, x.dtype)  # integers: exact on GpSimd (integer mode), in the operand's type
    if any(w.lhs_dilate != 1 for w in window.dims):
        raise CompilationError(f"{where}: base dilation (lhs_dilate) is not supported by the backend")
    windowed = [a for a, w in enumerate(window.dims) if not _trivial(w)]
    if len(windowed) > 2:
        raise CompilationError(f"{where}: a window over {len(windowed)} dimensions (at most 2 are supported)")
    trivial = [a for a in range(x.rank) if a not in windowed]
    perm = tuple(trivial + windowed)
    leaves = view_leaves(epilogue, where)
    views = [v.transpose(perm) for v in [x, out] + [node.view for node in leaves]]
    wdims = [window.dims[a] for a in windowed]
    nt = len(trivial)
    if nt == 0:
        views, nt = [v.insert_axis(0) for v in views], 1
    while len(wdims) < 2:  # one windowed axis: it goes on columns
        views = [v.insert_axis(nt) for v in views]
        wdims.insert(0, WindowDim(1))
    for i in reversed(range(nt - 1)):  # merge the partition/loop axes wherever every view allows it
        merged = [v.merge_axes(i) for v in views]
        if all(m is not None for m in merged):
            views = [m for m in merged if m is not None]
            nt -= 1
    flat = [v.merge_axes(nt) for v in views[1:]]
    if any(m is None for m in flat):
        raise CompilationError(f"{where}: the reduce-window's output (or an operand of its epilogue) does not "
                               "store its windowed dimensions row-major")
    xv = views[0]
    axes = [Axis(xv.dims[nt + i], views[1].dims[nt + i], wd.size, wd.stride, wd.rhs_dilate, wd.pad_low)
            for i, wd in enumerate(wdims)]
    if any(a.out != window_output_size(a.size, wd) for a, wd in zip(axes, wdims, strict=True)):
        raise CompilationError(f"{where}: the declared result shape does not match the window")
    epilogue = with_views(epilogue, leaves, flat[1:])
    if init_value is None:
        return PoolPlan(name, where, xv, flat[0], epilogue, axes[0], axes[1], op, identity, identity, init)
    return PoolPlan(name, where, xv, flat[0], epilogue, axes[0], axes[1], op, identity, init_value)


def pool_kernel(builder: ProgramBuilder, plan: PoolPlan) -> None:
    _PoolKernel(builder, plan).run()


class _PoolKernel:
    def __init__(self, builder: ProgramBuilder, plan: PoolPlan):
        self.b, self.plan = builder, plan
        self.parts = builder.target.partitions
        x = plan.x
        if x.is_const:
            x = builder.new_const(x.const_array(), x.dtype)
        self.x = x
        self.nt = x.rank - 2
        self.P, self.H, self.W = x.dims[self.nt - 1:]
        self.casting = x.cast is not None
        self.exact = integer.is_integer(x.dtype)  # integers: every step on GpSimd in integer mode
        self.direct = is_bare(plan.epilogue)  # nothing to evaluate: accumulate straight into the output tile
        # few channels: groups of output rows side by side on the partitions (group k on partitions
        # [k * P, (k + 1) * P), its virtual input rows `shift` further down); results stored per group
        self.groups, self.rows = 1, plan.rows
        if self.direct and 2 * self.P <= self.parts and plan.rows.out > 1:
            per = -(-plan.rows.out // min(self.parts // self.P, plan.rows.out))
            self.groups, self.rows = -(-plan.rows.out // per), replace(plan.rows, out=per)
        self.shift = self.rows.out * self.rows.stride
        pixels = self.rows.out * plan.cols.out  # per partition; at least PIPELINE blocks when large
        self.block = min(BLOCK, pixels, max(MIN_BLOCK, -(-pixels // PIPELINE)))
        self.epilogue = Epilogue(builder, plan.epilogue, plan.out, self.nt - 1, self.nt, plan.name,
                                 min(self.parts, self.P * self.groups), self.block, builder.options.output_buffers)
        self.pools: dict[str, Pool] = {}
        self.init_vec: AccessPattern | None = None

    def _load_init(self) -> None:
        """A runtime init value on every partition the blocks use, in the accumulator's type."""
        b, init = self.b, self.plan.init_view
        assert init is not None
        parts = min(self.parts, self.P * self.groups)
        b.place(init)
        raw = self.pools["init"].next().flat(init.stored_dtype, parts, 1)
        b.dma(raw, init.hbm_ap(None, 0, parts, []), f"{self.plan.name} init load")
        dtype = self.x.dtype if self.exact else "f32"
        if raw.dtype != dtype:
            vec = self.pools["init"].next().flat(dtype, parts, 1)
            b.copy(vec, raw, f"{self.plan.name} init convert")
            raw = vec
        self.init_vec = raw

    def run(self) -> None:
        plan, b = self.plan, self.b
        block = self.block
        specs = self.epilogue.specs() + ([] if self.direct else [PoolSpec("acc", "sbuf", block * 4, 3)])
        if plan.init_view is not None:
            specs.append(PoolSpec("init", "sbuf", 8, 2))
        room = min(X_BUDGET, b.alloc.sbuf_capacity() - b.alloc.sbuf_need(specs))
        xsz, ssz = itemsize(self.x.dtype), itemsize(self.x.stored_dtype)

        def tile_bytes(nv: int) -> int:
            per = nv * self.W + 16
            return 2 * per * xsz + (2 * per * ssz if self.casting else 0)

        bands = plan_bands(1, self.rows, plan.cols, block, lambda nb, nv: tile_bytes(nv) <= room)
        nv = max(bd.nv for bd in bands)
        if tile_bytes(nv) > room:
            raise CompilationError(f"{plan.where}: the {nv} input rows of {self.W} elements one output block "
                                   f"needs do not fit in SBUF ({tile_bytes(nv)} bytes per partition)")
        specs.append(PoolSpec("x", "sbuf", nv * self.W * xsz, 2))
        if self.casting:
            specs.append(PoolSpec("x_stage", "sbuf", nv * self.W * ssz, 2))
        self.pools = b.alloc.begin_kernel(plan.name, specs, plan.where)
        self.epilogue.bind(self.pools)
        if plan.init_view is not None:
            self._load_init()
        loops = self.x.dims[:self.nt - 1]
        for index in itertools.product(*(range(d) for d in loops)):
            fixed = dict(enumerate(index))
            for p0 in range(0, self.P, self.parts):
                pw = min(self.parts, self.P - p0)
                for band in bands:
                    tile = self._load_band(fixed, p0, pw, band)
                    for blk in band.blocks:
                        self._block(fixed, p0, pw, band, tile, blk)
        b.alloc.end_kernel()

    def _load_band(self, fixed: dict[int, int], p0: int, pw: int, band: Band) -> Tile:
        """Virtual input rows [v0, v0 + nv) of partitions [p0, p0 + pw) (row group k: shifted by k * shift,
        on partitions k * pw...), rows outside the input set to the reducer's identity."""
        b, plan, x, W, nv = self.b, self.plan, self.x, self.W, band.nv
        nt, parts = self.nt, self.groups * pw
        tile = self.pools["x"].next()
        landing, ldt = (self.pools["x_stage"].next(), x.stored_dtype) if self.casting else (tile, x.dtype)
        label = f"{plan.name} p{p0} v{band.v0}"
        # rows outside the input: per group where its partitions may start an instruction (so the fill
        # does not order the other groups' loads behind it), else for all partitions at once
        per_group = all(start_partition_allowed(k * pw, pw) for k in range(self.groups))
        for k, first, count in ([(k, k * pw, pw) for k in range(self.groups)] if per_group else [(None, 0, parts)]):
            shifts = [k * self.shift] if k is not None else [0, (self.groups - 1) * self.shift]
            top = min(max(-band.v0 - shifts[0], 0), nv)
            bottom = min(max(self.H - band.v0 - shifts[-1], top), nv)
            for r0, r1 in ((0, top), (bottom, nv)):
                if r1 > r0:
                    dst = replace(landing.flat(ldt, count, (r1 - r0) * W, r0 * W), start_partition=first)
                    b.emit("dve", "memset", f"{label} fill rows", {"value": plan.identity}, dst=dst)
        for r0, r1 in band_pieces(band, self.rows):  # in block order, so the first blocks start early
            for k in range(self.groups):
                v0 = band.v0 + k * self.shift
                t0, t1 = max(min(max(-v0, 0), nv), r0), min(min(max(self.H - v0, 0), nv), r1)
                if t1 > t0:
                    src = simplified(x.hbm_ap(nt - 1, p0, pw, [(nt, v0 + t0, t1 - t0), (nt + 1, 0, W)], fixed))
                    dst = replace(landing.flat(ldt, pw, (t1 - t0) * W, t0 * W), start_partition=k * pw)
                    moved = b.resident(src)
                    if moved is not None and moved.start_partition == dst.start_partition:
                        # kept on chip on these very partitions: the engines copy it lane to lane (no DMA)
                        b.copy(dst, moved, f"{label} rows {t0}:{t1} +{k * self.shift} from chip",
                               engines=("act", "dve", "pool"))
                    else:
                        b.dma(dst, src, f"{label} rows {t0}:{t1} +{k * self.shift} load", split=DMA_PIECE,
                              min_run=512)
            if self.casting:
                n = (r1 - r0) * W
                b.copy(tile.flat(x.dtype, parts, n, r0 * W), landing.flat(ldt, parts, n, r0 * W),
                       f"{label} cast rows {r0}:{r1}", engines=("act", "dve", "pool"))
        return tile

    def _reduce_taps(self, tile: Tile, band: Band, blk: Block, whole: AccessPattern, label: str) -> None:
        """Every tap of every output of `blk` inside the input: one DVE tensor_reduce over the strided
        [rows, columns, kernel rows, kernel columns] view of the band."""
        rows, cols, W = self.rows, self.plan.cols, self.W
        dims = [(rows.stride * W, blk.nr, False), (cols.stride, blk.nc, False),
                (rows.dilation * W, rows.taps, True), (cols.dilation, cols.taps, True)]
        dims = [d for d in dims if d[1] > 1] or [(1, 1, True)]
        reduced = [i for i, d in enumerate(dims) if d[2]]
        axes = "all" if len(reduced) == len(dims) else ",".join(map(str, reduced))
        base = band.row(blk.r0 * rows.stride + rows.offset(0)) * W + blk.c0 * cols.stride + cols.offset(0)
        src = tile.ap(self.x.dtype, whole.partitions, [(s, c) for s, c, _ in dims], base)
        if not reduced:  # a 1x1 window (strided subsampling)
            self.b.emit("dve", "tensor_copy", f"{label} tap", dst=whole, src=src)
            return
        attrs = {"op": self.plan.op} | ({} if axes == "all" else {"axes": axes})
        self.b.emit("dve", "tensor_reduce", f"{label} taps", attrs, dst=whole, src=src)

    def _block(self, fixed: dict[int, int], p0: int, pw_in: int, band: Band, tile: Tile, blk: Block) -> None:
        b, plan = self.b, self.plan
        rows, cols, W = self.rows, plan.cols, self.W
        pw = pw_in * self.groups
        f0, fw = blk.r0 * cols.out + blk.c0, blk.nr * blk.nc
        label = f"{plan.name} p{p0} f{f0}"
        acc_dtype = plan.out.dtype if self.direct else self.x.dtype if self.exact else "f32"
        acc_tile = self.epilogue.out_buffer() if self.direct else self.pools["acc"].next()
        engine = "pool" if self.exact else b.pick_engine(("dve", "pool"))
        math = {"math": "int"} if self.exact else {}
        taps = [(kh, kw) for kh in range(rows.taps) for kw in range(cols.taps)]
        full = next(((kh, kw) for kh, kw in taps if cols.valid(kw, blk.c0, blk.nc) == (blk.c0, blk.c0 + blk.nc)),
                    None)

        def views(kh: int, kw: int):
            lo, hi = cols.valid(kw, blk.c0, blk.nc)
            if lo >= hi:
                return None
            v = blk.r0 * rows.stride + rows.offset(kh)
            base = band.row(v) * W + lo * cols.stride + cols.offset(kw)
            src = tile.ap(self.x.dtype, pw, simplify([(rows.stride * W, blk.nr), (cols.stride, hi - lo)]), base)
            dst = acc_tile.ap(acc_dtype, pw, simplify([(blk.nc, blk.nr), (1, hi - lo)]), lo - blk.c0)
            return dst, src

        whole = acc_tile.flat(acc_dtype, pw, fw)
        every = all(cols.valid(kw, blk.c0, blk.nc) == (blk.c0, blk.c0 + blk.nc) for kw in range(cols.taps))
        if every and plan.op in REDUCE_OPS and fw * len(taps) <= b.target.data["stream"]["max_free_sbuf"] \
                and not self.exact:
            self._reduce_taps(tile, band, blk, whole, label)
            engine = "dve"
        elif full is None:
            b.emit(engine, "memset", f"{label} identity", {"value": plan.identity}, dst=whole)
        else:
            dst, src = views(*full)
            b.emit(engine, "tensor_copy", f"{label} tap{full}", dst=dst, src=src)
        for kh, kw in taps if not every or plan.op not in REDUCE_OPS or self.exact else ():
            pair = views(kh, kw) if (kh, kw) != full else None
            if pair is not None:
                b.emit(engine, "tensor_tensor", f"{label} tap({kh}, {kw})", {"op": plan.op, **math},
                       dst=pair[0], a=pair[0], b=pair[1])
        if self.init_vec is not None:
            vec = replace(self.init_vec, partitions=pw)
            b.emit(engine, "tensor_scalar", f"{label} init", {"op": plan.op, "scalar": 0.0, **math}, dst=whole,
                   src=whole, scalar_vec=vec)
        elif plan.init != plan.identity:
            b.emit(engine, "tensor_scalar", f"{label} init", {"op": plan.op, "scalar": plan.init, **math}, dst=whole,
                   src=whole)
        if self.direct:
            for k in range(self.groups):  # each row group's outputs that exist
                r0 = k * rows.out + blk.r0
                nr = min(blk.nr, plan.rows.out - r0)
                if nr > 0:
                    part = replace(acc_tile.flat(acc_dtype, pw_in, nr * blk.nc), start_partition=k * pw_in)
                    self.epilogue.store(fixed, p0, pw_in, r0 * cols.out + blk.c0, nr * blk.nc, part, label)
        else:
            self.epilogue.run(fixed, p0, pw, f0, fw, whole, label)
