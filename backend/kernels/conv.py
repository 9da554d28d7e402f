"""Convolution kernels: PE matmuls accumulated over kernel taps in PSUM, with no im2col in HBM.

Feature maps are channel-major: input channels on partitions, the pixels of a band of input rows along
the free dim (conv_geometry.py). For one output block (<= 512 pixels, one PSUM bank) and one output-
channel tile, every (input-channel tile, tap) pair is one matmul: the stationary is the weight slice
[C_in tile, C_out tile] of that tap (arranged at compile time, conv_weights.py), the moving operand is
the input tile read with a strided access pattern (stride and dilation are pattern strides, the tap an
offset), and all pairs accumulate into the block's PSUM tile [C_out, pixels]. Rows of padding are zero
rows of the input tile; columns of padding are not stored, each tap's columns are clipped instead (a
tap may write a sub-rectangle of the block; the first write of every block covers it whole, or the
bank is zeroed first). The epilogue (bias per output channel = per partition, activation, residual) is
the same expression evaluation as a dot's, on the way out of PSUM.

Small channel counts fold taps into the contraction: shifted copies of the input stacked on the
partitions (kernel rows, then kernel columns, stored with zero columns), as many as an estimate of PE
time against DMA time favours. Groups are packed block-diagonally into 128-channel tiles, so depthwise
convolutions run on PE too: a diagonal stationary wastes the array, but PE time does not depend on K or
M, and one matmul tap over N pixels costs N PE cycles at 2.8 GHz (4N in fp32), where DVE would need a
multiply and an add (~3N cycles at 1.12 GHz) per tap: PE is ~7x faster in bf16, ~2x in fp32. PE alone
is then the bound while the other engines idle, so some taps of a depthwise kernel are computed by ACT,
DVE and GpSimd instead and join the accumulation by one identity matmul (depthwise.py). A depthwise tile of
<= 64 channels leaves partitions idle: it holds its input for several ranges of output rows side by side on
the partitions instead (conv_weights.spread_tiles; one block-diagonal stationary per tap serves them all,
ranges land by DMA and their results are stored from their own partitions).
Loop nest: super-group x band (input tiles loaded once, in block order, double-buffered) x output-
channel tile x groups of blocks sharing every load_stationary x (input-channel tile, tap chunk).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels.conv_epilogue import Epilogue, view_leaves, with_views
from backend.kernels.conv_geometry import DMA_PIECE, Axis, Band, Block, band_pieces, plan_bands, simplified, simplify
from backend.kernels.conv_weights import DIAGONAL_DTYPES, ConvWeights, SuperGroup, Unit, spread_tiles, super_groups
from backend.kernels.depthwise import OffPE, Part, TapSplit, plan_split
from backend.kernels.dot_plan import compute_dtype
from backend.kernels.expr import Node
from backend.layout import View, itemsize
from backend.registry import KernelShape
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from hlo.ir import WindowDim
from hlo.shape_util import ShapeInferenceError
from hlo.shape_window import conv_dims, window_of, window_output_size
from isa.program import AccessPattern

X_BUDGET = 96 * 1024  # bytes per partition for the input band tiles (all buffers)
W_BUDGET = 64 * 1024  # bytes per partition under which all weights stay resident
STEM_CHANNELS = 16  # input channels up to which a pending cast is applied once, before the folded loads


@dataclass
class ConvPlan:
    """A convolution normalized to x (B, C, H, W), w (O, I, KH, KW) -> out (B, O, Ho * Wo).

    1-D convolutions have W = 1 (their spatial axis on rows); `epilogue` is an expression over the
    accumulator ("acc" node) and leaves with out's dims.
    """

    name: str
    where: str
    x: View
    w: View
    out: View
    epilogue: Node
    rows: Axis
    cols: Axis
    groups: int
    flip: tuple[bool, bool]
    compute: str

    @property
    def macs(self) -> int:
        o, i, kh, kw = self.w.dims
        return self.x.dims[0] * o * self.rows.out * self.cols.out * i * kh * kw


def plan_conv(inst: HloInstruction, name: str, lhs: View, rhs: View, out: View, epilogue: Node,
              materialize: Callable[[View], View] | None = None) -> ConvPlan:
    """Normalize an HLO convolution (any dim_labels) and the views of its epilogue. An image of a few
    channels (a stem) still to be converted is converted once by `materialize` (copied dense): its taps are
    folded into shifted copies, each one more load, which then move the narrow type and need no cast each."""
    where = inst.where()
    try:
        d = conv_dims(inst.attrs)
        window = window_of(inst.attrs, len(d.lhs_spatial), "the convolution's spatial dimensions")
    except ShapeInferenceError as e:
        raise CompilationError(f"{where}: {e}") from None
    n = len(d.lhs_spatial)
    if n > 2:
        raise CompilationError(f"{where}: a {n}-D convolution is not supported by the backend (1-D and 2-D are)")
    if int(inst.attrs.get("batch_group_count", 1)) != 1:
        raise CompilationError(f"{where}: batch_group_count > 1 (a weight-gradient convolution) is not "
                               "supported by the backend")
    if any(w.lhs_dilate != 1 for w in window.dims):
        raise CompilationError(f"{where}: base dilation (lhs_dilate, a transposed convolution) is not "
                               "supported by the backend")
    leaves = view_leaves(epilogue, where)
    # (windows that overlap: a patch embedding, stride = size, reads each input element once anyway)
    stem = lhs.dims[d.lhs_feature] <= STEM_CHANNELS and any(w.stride < w.size for w in window.dims)
    if materialize is not None and stem and lhs.cast is not None and not lhs.is_const:
        lhs = materialize(lhs)
    x = lhs.transpose((d.lhs_batch, d.lhs_feature, *d.lhs_spatial))
    w = rhs.transpose((d.rhs_output, d.rhs_input, *d.rhs_spatial))
    perm = (d.out_batch, d.out_feature, *d.out_spatial)
    outs = [v.transpose(perm) for v in [out] + [node.view for node in leaves]]
    wdims = list(window.dims)
    while len(wdims) < 2:  # 1-D: spatial axis on rows, W = 1 (0-D: a 1x1 image)
        x, w = x.insert_axis(x.rank), w.insert_axis(w.rank)
        outs = [v.insert_axis(v.rank) for v in outs]
        wdims.append(WindowDim(1))
    merged = [v.merge_axes(2) for v in outs]
    if any(m is None for m in merged):
        raise CompilationError(f"{where}: the convolution's output (or an operand of its epilogue) does not "
                               "store its spatial dimensions row-major")
    axes = [Axis(x.dims[2 + i], outs[0].dims[2 + i], wd.size, wd.stride, wd.rhs_dilate, wd.pad_low)
            for i, wd in enumerate(wdims)]
    if any(a.out != window_output_size(a.size, wd) for a, wd in zip(axes, wdims, strict=True)):
        raise CompilationError(f"{where}: the declared result shape does not match the window")
    epilogue = with_views(epilogue, leaves, merged[1:])
    groups = int(inst.attrs.get("feature_group_count", 1))
    return ConvPlan(name, where, x, w, merged[0], epilogue, axes[0], axes[1], groups,
                    (wdims[0].reversal, wdims[1].reversal), compute_dtype(lhs, rhs, where))


def conv_kernel(builder: ProgramBuilder, plan: ConvPlan) -> None:
    """The kernel of `plan`, tiled with the options the tile policy chooses for its shape."""
    o, i, kh, kw = plan.w.dims
    b, c, h, w = plan.x.dims
    with builder.kernel_options(KernelShape("conv", (b, c, h, w, o, kh, kw), plan.compute)):
        _ConvKernel(builder, plan).run()


@dataclass(frozen=True)
class _Cols:
    """How a super-group's input tile stores columns: tile column u holds virtual column u0 + u.
    Unfolded columns (fw = 1) store the input's W columns and clip each tap's columns; folded ones
    store the padded span, zero outside the input, so every tap covers every block whole."""

    u0: int
    width: int
    clip: bool


@dataclass(frozen=True)
class _ImageTile:
    """An input band read in place from an on-chip image: `Tile.ap` over the image's access."""

    at: AccessPattern

    def ap(self, dtype: str, partitions: int, pattern: tuple[tuple[int, int], ...], elem_offset: int = 0
           ) -> AccessPattern:
        return replace(self.at, offset=self.at.offset + elem_offset * itemsize(dtype), pattern=tuple(pattern),
                       partitions=partitions)


def _row_runs(r0: int, r1: int, stride: int, keep: set[int] | None) -> list[tuple[int, int, int]]:
    """Tile rows [r0, r1) to load as (first, count, step): all of them, or those whose residue modulo
    `stride` is in `keep`."""
    if keep is None:
        return [(r0, r1 - r0, 1)] if r1 > r0 else []
    runs = []
    for rho in sorted(keep):
        first = r0 + (rho - r0) % stride
        if first < r1:
            runs.append((first, -(-(r1 - first) // stride), stride))
    return runs


class _ConvKernel:
    def __init__(self, builder: ProgramBuilder, plan: ConvPlan):
        self.b, self.plan = builder, plan
        self.parts = builder.target.partitions
        x = plan.x
        if x.is_const:  # arranged densely in the compute dtype at compile time
            x = builder.new_const(x.const_array(), plan.compute)
        self.x = x
        self.B, self.C, self.H, self.W = x.dims
        kernel = plan.w.dims[2], plan.w.dims[3]
        self.limit = min(builder.options.moving_tile, builder.target.data["pe"]["max_n"])
        self.casting = x.stored_dtype != plan.compute
        self.group = max(1, builder.options.psum_acc_banks // 2)
        self.epilogue = Epilogue(builder, plan.epilogue, plan.out, 1, 2, plan.name, min(self.parts, plan.out.dims[1]),
                                 self.limit, builder.options.output_buffers + self.group, DMA_PIECE)
        self.plain: list[SuperGroup] = super_groups(self.C, plan.w.dims[0], plan.groups, kernel, self.parts,
                                                    self._fold_cost)
        self._setup(spread_tiles(self.plain, plan.rows.out, self.parts) if self._spreadable() else self.plain)
        self.pools: dict[str, Pool] = {}

    def _setup(self, sgs: list[SuperGroup]) -> None:
        """The channel tiles `sgs`: their column layouts, weights and the taps computed off PE."""
        plan, builder = self.plan, self.b
        self.sgs = sgs
        lo, hi = plan.cols.span(0, plan.cols.out)
        self.layout = [_Cols(0, self.W, True) if sg.fw == 1 else _Cols(lo, hi - lo, False) for sg in self.sgs]
        self.weights = ConvWeights(builder, plan.w, plan.groups, self.sgs, plan.compute, plan.flip, plan.name)
        if not self.weights.diagonal and sgs is not self.plain:  # spread tiles need the diagonal stationaries
            self._setup(self.plain)
            return
        self.off_pe: OffPE | None = None
        split = self._tap_split() if self.weights.diagonal else None
        if split is not None:
            self.weights.pe_taps = split.pe
            block = min(self.limit, self.B * plan.rows.out * plan.cols.out)
            self.off_pe = OffPE(builder, split, plan.compute, block, self.group, plan.name)

    # -- planning ---------------------------------------------------------------------------------------------
    def _spreadable(self) -> bool:
        """Depthwise tiles may spread row ranges over idle partitions (conv_weights.spread_tiles): one image,
        stride 1, and an epilogue that is the accumulator or its conversion (evaluated on any partitions:
        a range's results are stored from its own partitions by DMA)."""
        plan, root = self.plan, self.plan.epilogue
        o, i = plan.w.dims[:2]
        lane_free = root.op == "acc" or (root.op == "convert" and root.inputs[0].op == "acc")
        return (plan.groups > 1 and i == 1 and o == plan.groups == self.C and plan.w.is_const and self.B == 1
                and plan.compute in DIAGONAL_DTYPES and plan.rows.stride == 1 and lane_free)

    def _rows(self, spread: int) -> Axis:
        """The output rows one range of a tile spread `spread` times covers."""
        return replace(self.plan.rows, out=self.plan.rows.out // spread)

    def _fold_cost(self, fh: int, fw: int, cn: int, co_tiles: int) -> float:
        """Estimated ns of a super-group's PE work or of its transfers, whichever is longer: every copy
        of the input is one more load of it (column copies in runs of one row), every chunk one more
        matmul per output block (machine-model.md: PE interval max(N, 64), DMA queue bandwidth and
        descriptor overhead; the stores of the result are the same for every fold)."""
        plan, data = self.plan, self.b.target.data
        rows, cols = plan.rows, plan.cols
        kh, kw = plan.w.dims[2], plan.w.dims[3]
        pixels = self.B * rows.out * cols.out
        blocks = -(-pixels // self.limit)
        factor = data["pe"]["fp32_factor"] if plan.compute == "f32" else 1
        chunks = -(-kh // fh) * -(-kw // fw)
        pe = blocks * chunks * co_tiles * max(min(self.limit, pixels), data["pe"]["min_interval"]) * factor
        pe_ns = pe / self.b.target.clock_ghz("pe")
        dma = data["dma"]
        overhead = dma.get("descriptor_overhead_bytes", 0)
        run = self.W * itemsize(self.x.stored_dtype) * (1 if fw > 1 or rows.stride > 1 else self.H)
        read = len({(jh * fh * rows.dilation) % rows.stride for jh in range(-(-kh // fh))}) / rows.stride
        nbytes = self.B * cn * self.H * self.W * itemsize(self.x.stored_dtype) * fh * fw * read * (1 + overhead / run)
        out = plan.out.dtype
        stores = pixels * min(co_tiles * self.parts, plan.w.dims[0]) * itemsize(out)  # the channels there are
        nbytes += stores * (1 + overhead / (self.limit * itemsize(out)))
        dma_ns = nbytes / min(dma["queues"] * dma["queue_bytes_per_ns"], data["hbm"]["bytes_per_ns"])
        return max(pe_ns, dma_ns)

    def _tap_split(self) -> TapSplit | None:
        """Depthwise: the taps to compute off PE (depthwise.py), from the size of a typical output block.
        Rows of padding are stored, so a tap covers a block whole when its columns are not clipped."""
        plan = self.plan
        kh, kw = plan.w.dims[2], plan.w.dims[3]
        cols = plan.cols
        pixels = self.B * self._rows(self.sgs[0].spread).out * cols.out
        blocks = -(-pixels // self.limit)
        reach = {jw: cols.valid(jw, 0, cols.out) for jw in range(kw)}
        if any(hi <= lo for lo, hi in reach.values()):
            return None  # a tap that reaches no output column: keep the plain kernel
        centre = (kw - 1) / 2
        full = sorted((t for t in range(kh * kw) if reach[t % kw] == (0, cols.out)),
                      key=lambda t: (abs(t % kw - centre), abs(t // kw - (kh - 1) / 2)))
        clipped = sorted((t for t in range(kh * kw) if reach[t % kw] != (0, cols.out)),
                         key=lambda t: (reach[t % kw][1] - reach[t % kw][0], t))
        return plan_split(self.b.target, kh * kw, full, clipped, -(-pixels // blocks), blocks,
                          min(self.parts, self.C), plan.compute)

    def _specs(self) -> tuple[list[PoolSpec], dict[int, list[Band]]]:
        plan, opts, alloc = self.plan, self.b.options, self.b.alloc
        # per-channel constants (batch norm's scale and shift) loaded ahead with the weights (alloc.py): each is a
        # 2 us transfer of 128 runs, off the DMA queues' busiest time (ResNet-50 328.6 -> 316.5 us)
        specs = [PoolSpec("acc", "psum", 0, opts.psum_acc_banks)] + [
            replace(s, prefetch=True) if s.name.endswith("_pconst") else s for s in self.epilogue.specs()]
        nt = max(len(sg.ci) for sg in self.sgs)
        specs += self.weights.specs(min(W_BUDGET, alloc.sbuf_capacity() // 3), 2)
        if self.off_pe is not None:
            specs += self.off_pe.specs()
        room = min(X_BUDGET, alloc.sbuf_capacity() - alloc.sbuf_need(specs))
        csz, ssz = itemsize(plan.compute), itemsize(self.x.stored_dtype)
        width = max(cols.width for cols in self.layout)

        def tile_bytes(nb: int, nv: int) -> int:
            per = nb * nv * width + 64
            return 2 * nt * per * csz + (2 * per * ssz if self.casting else 0)

        bands = {s: plan_bands(self.B, self._rows(s), plan.cols, self.limit, lambda nb, nv: tile_bytes(nb, nv) <= room)
                 for s in sorted({sg.spread for sg in self.sgs})}
        worst = max((bd for bs in bands.values() for bd in bs), key=lambda bd: bd.nb * bd.nv)
        if tile_bytes(worst.nb, worst.nv) > room:
            raise CompilationError(f"{plan.where}: the {worst.nv} input rows of {width} pixels one output block "
                                   f"needs do not fit in SBUF ({tile_bytes(worst.nb, worst.nv)} bytes per "
                                   f"partition, {room} available)")
        size = worst.nb * worst.nv * width
        specs.append(PoolSpec("x", "sbuf", size * csz, 2 * nt))
        if self.casting:
            specs.append(PoolSpec("x_stage", "sbuf", size * ssz, 2))
        return specs, bands

    def _fitting_specs(self) -> tuple[list[PoolSpec], dict[int, list[Band]]]:
        """The pools and bands, giving up what costs SBUF until the input tiles fit beside the tensors kept
        on chip: spread tiles (wider diagonal banks), then the off-PE taps' buffers (all taps on PE)."""
        while True:
            try:
                return self._specs()
            except CompilationError:
                if self.sgs is not self.plain:
                    self._setup(self.plain)
                elif self.off_pe is not None:
                    self.off_pe, self.weights.pe_taps = None, None
                else:
                    raise

    def run(self) -> None:
        specs, bands = self._fitting_specs()
        plan = self.plan
        self.pools = self.b.alloc.begin_kernel(plan.name, specs, plan.where)
        self.epilogue.bind(self.pools)
        self.weights.bind(self.pools)
        if self.off_pe is not None:
            self.off_pe.bind(self.pools)
        self.b.useful_macs += plan.macs
        units = self.weights.units
        self.weights.prefetch()
        for s, sg in enumerate(self.sgs):
            for bi, band in enumerate(bands[sg.spread]):
                tiles = [self._load_band(sg, self.layout[s], c0, cn, band) for c0, cn in sg.ci]
                for o0, _ in sg.co:
                    tile_units = [u for u in units if u.sg == s and u.o0 == o0]
                    self.weights.fetch(tile_units)
                    blocks = list(band.blocks)
                    groups = [blocks[g:g + self.group] for g in range(0, len(blocks), self.group)]
                    last = s == len(self.sgs) - 1 and bi == len(bands[sg.spread]) - 1 and o0 == sg.co[-1][0]
                    if last:  # the kernel's tail: one block at a time, its epilogue overlapping the next
                        groups = groups[:-1] + [[blk] for blk in groups[-1]]
                    chains = self._chains(tile_units, self.layout[s], tiles, band, groups[0])
                    for gi, grp in enumerate(groups):
                        accs = self._accumulate(tile_units, self.layout[s], tiles, band, grp, chains)
                        if gi + 1 < len(groups):  # the next group's off-PE taps run during these matmuls
                            chains = self._chains(tile_units, self.layout[s], tiles, band, groups[gi + 1])
                        self._epilogues(tile_units[0], grp, accs)
        self.b.alloc.end_kernel()

    # -- input ------------------------------------------------------------------------------------------------
    def _in_place(self, sg: SuperGroup, cols: _Cols, c0: int, cn: int, band: Band) -> _ImageTile | None:
        """The band read where it already is when the input is kept on chip (residency.py) in the compute
        dtype and the tile would be a plain copy of it: no copies stacked, no padding rows, one image."""
        if (sg.fh, sg.fw, sg.spread, band.nb) != (1, 1, 1, 1) or self.casting or self.x.is_const or not cols.clip:
            return None
        if band.v0 < 0 or band.v0 + band.nv > self.H:
            return None
        src = self.x.hbm_ap(1, c0, cn, [(0, band.b0, 1), (2, band.v0, band.nv), (3, 0, self.W)])
        moved = self.b.resident(simplified(src))
        if moved is None or moved.pattern != ((1, band.nv * self.W),):
            return None
        return _ImageTile(moved)

    def _copy_band(self, sg: SuperGroup, cols: _Cols, c0: int, cn: int, band: Band) -> Tile | None:
        """The band copied (and converted) by the compute engines from an on-chip image, where the tile
        is not the image itself (padding rows or columns, another dtype): lane to lane, no DMA. Only
        unfolded tiles (their one copy sits on the image's partitions)."""
        if (sg.fh, sg.fw, sg.spread, band.nb) != (1, 1, 1, 1) or self.x.is_const:
            return None
        b, plan, nv, Wt = self.b, self.plan, band.nv, cols.width
        t0, t1 = max(0, -band.v0), min(nv, self.H - band.v0)
        w0, w1 = max(0, -cols.u0), min(Wt, self.W - cols.u0)
        if t1 <= t0 or w1 <= w0:
            return None

        def source(r0: int, r1: int) -> AccessPattern | None:
            src = self.x.hbm_ap(1, c0, cn, [(0, band.b0, 1), (2, band.v0 + r0, r1 - r0), (3, cols.u0 + w0, w1 - w0)])
            return b.resident(simplified(src))

        if source(t0, t1) is None:
            return None
        tile, cdt = self.pools["x"].next(), plan.compute
        label = f"{plan.name} x c{c0} b{band.b0} v{band.v0}"
        for r0, r1 in ((0, t0), (t1, nv)):  # padding rows
            if r1 > r0:
                b.emit("dve", "memset", f"{label} zero rows", {"value": 0.0},
                       dst=tile.ap(cdt, cn, ((1, (r1 - r0) * Wt),), r0 * Wt))
        for u0, u1 in ((0, w0), (w1, Wt)):  # padding columns
            if u1 > u0:
                b.emit("dve", "memset", f"{label} zero columns", {"value": 0.0},
                       dst=tile.ap(cdt, cn, simplify([(Wt, nv), (1, u1 - u0)]), u0))
        for r0, r1 in band_pieces(band, plan.rows):  # in block order, so the first matmuls start early
            r0, r1 = max(r0, t0), min(r1, t1)
            if r1 > r0:
                src = source(r0, r1)
                assert src is not None  # a piece of an image is in the image
                dst = tile.ap(cdt, cn, simplify([(Wt, r1 - r0), (1, w1 - w0)]), r0 * Wt + w0)
                b.copy(dst, src, f"{label} rows {r0}:{r1} from chip", engines=("act", "dve", "pool"))
        return tile

    def _load_band(self, sg: SuperGroup, cols: _Cols, c0: int, cn: int, band: Band) -> Tile | _ImageTile:
        """The input tile of channels [c0, c0 + cn) for `band`: copy (a, c) on partitions
        [(a * fw + c) * cn, ... + cn) holds, at tile row r and column u, the input at virtual row
        v0 + r + a * row dilation (a spread tile: a * the rows of one range) and virtual column
        u0 + u + c * column dilation (zero outside)."""
        in_place = self._in_place(sg, cols, c0, cn, band)
        if in_place is not None:
            return in_place
        copied = self._copy_band(sg, cols, c0, cn, band)
        if copied is not None:
            return copied
        b, plan, x = self.b, self.plan, self.x
        nv, nb, parts = band.nv, band.nb, sg.fh * sg.fw * cn * sg.spread
        fh, dh = (sg.spread, self._rows(sg.spread).out) if sg.spread > 1 else (sg.fh, plan.rows.dilation)
        dw, Wt = plan.cols.dilation, cols.width
        tile = self.pools["x"].next()
        landing, ldt = (self.pools["x_stage"].next(), x.stored_dtype) if self.casting else (tile, plan.compute)
        label = f"{plan.name} x c{c0} b{band.b0} v{band.v0}"
        top = min(max(-band.v0, 0), nv)
        bottom = min(max(self.H - band.v0 - (fh - 1) * dh, top), nv)
        for r0, r1 in ((0, top), (bottom, nv)):  # rows outside the input for some copy
            if r1 > r0:
                zero = landing.ap(ldt, parts, simplify([(nv * Wt, nb), (1, (r1 - r0) * Wt)]), r0 * Wt)
                b.emit("dve", "memset", f"{label} zero rows", {"value": 0.0}, dst=zero)
        left = min(max(-cols.u0, 0), Wt)
        right = min(max(self.W - cols.u0 - (sg.fw - 1) * dw, left), Wt)
        for u0, u1 in ((0, left), (right, Wt)):  # columns outside the input for some copy
            if u1 > u0:
                zero = landing.ap(ldt, parts, simplify([(nv * Wt, nb), (Wt, nv), (1, u1 - u0)]), u0)
                b.emit("dve", "memset", f"{label} zero columns", {"value": 0.0}, dst=zero)
        keep = self._residues(sg, band)
        for r0, r1 in band_pieces(band, plan.rows):  # in block order, so the first matmuls start early
            runs = _row_runs(r0, r1, plan.rows.stride, keep)
            for a, c in itertools.product(range(fh), range(sg.fw)):
                lo, hi = -band.v0 - a * dh, self.H - band.v0 - a * dh
                w0, w1 = max(0, -cols.u0 - c * dw), min(Wt, self.W - cols.u0 - c * dw)
                for first, count, step in runs:
                    k0 = max(0, -(-(lo - first) // step))
                    k1 = min(count, max(0, -(-(hi - first) // step)))
                    if k1 <= k0 or w1 <= w0:
                        continue
                    t0, n = first + k0 * step, k1 - k0
                    src = x.hbm_ap(1, c0, cn, [(0, band.b0, nb), (2, band.v0 + t0 + a * dh, n),
                                               (3, cols.u0 + w0 + c * dw, w1 - w0)])
                    if n > 1:  # every step-th row
                        src = replace(src, pattern=(src.pattern[0], (x.strides[2] * step, n), src.pattern[2]))
                    dst = landing.ap(ldt, cn, simplify([(nv * Wt, nb), (step * Wt, n), (1, w1 - w0)]),
                                     t0 * Wt + w0)
                    b.dma(replace(dst, start_partition=(a * sg.fw + c) * cn), simplified(src),
                          f"{label} copy ({a}, {c}) rows {t0}:{t0 + (n - 1) * step + 1}:{step}", split=DMA_PIECE,
                          min_run=512)
            if self.casting:
                for first, count, step in runs:
                    pattern = simplify([(nv * Wt, nb), (step * Wt, count), (1, Wt)])
                    b.copy(tile.ap(plan.compute, parts, pattern, first * Wt),
                           landing.ap(ldt, parts, pattern, first * Wt),
                           f"{label} cast rows {first}:{r1}:{step}", engines=("act", "dve", "pool"))
        return tile

    def _residues(self, sg: SuperGroup, band: Band) -> set[int] | None:
        """Tile rows modulo the row stride that some matmul reads (None: all of them). A strided
        convolution with folded rows (a patch embedding) reads one row in `stride` of each copy."""
        rows = self.plan.rows
        if rows.stride == 1:
            return None
        nh = -(-self.plan.w.dims[2] // sg.fh)
        keep = {band.row(blk.r0 * rows.stride + rows.offset(jh * sg.fh)) % rows.stride
                for blk in band.blocks for jh in range(nh)}
        return None if len(keep) == rows.stride else keep

    # -- matmuls ----------------------------------------------------------------------------------------------
    def _valid(self, cols: _Cols, unit: Unit, jw: int, blk: Block) -> tuple[int, int]:
        """Output columns of `blk` that column chunk `jw` reaches inside the input (all when folded)."""
        return self.plan.cols.valid(jw, blk.c0, blk.nc) if cols.clip else (blk.c0, blk.c0 + blk.nc)

    def _chunks(self, units: list[Unit], cols: _Cols, grp: list[Block]) -> list[tuple[int, int, int]]:
        """(input tile, row chunk, column chunk) in matmul order; a column chunk covering every block
        whole goes first so that its matmuls start the accumulations."""
        on_pe = self.weights.pe_taps
        order = [(t, jh, jw) for t, u in enumerate(units) for jh, jw in itertools.product(
            *(range(n) for n in self.weights.chunks(u))) if on_pe is None or jh * self.plan.w.dims[3] + jw in on_pe]
        for t, jh, jw in order:
            if all(self._valid(cols, units[t], jw, blk) == (blk.c0, blk.c0 + blk.nc) for blk in grp):
                order.remove((t, jh, jw))
                return [(t, jh, jw)] + order
        return order

    def _window(self, cols: _Cols, unit: Unit, tile: Tile | _ImageTile, band: Band, blk: Block, jh: int, jw: int,
                k: int) -> tuple[AccessPattern, tuple[tuple[int, int], ...], int] | None:
        """Chunk (jh, jw) of `blk`: the moving operand ([k, valid pixels] of `tile`) and the pattern and
        element offset in the block's accumulator it adds to (None: no output column in reach)."""
        plan = self.plan
        rows, sw = plan.rows, plan.cols.stride
        lo, hi = self._valid(cols, unit, jw, blk)
        if lo >= hi:
            return None
        Wt, nv = cols.width, band.nv
        v = blk.r0 * rows.stride + rows.offset(jh * unit.fh)
        u = lo * sw + plan.cols.offset(jw * unit.fw) - cols.u0
        base = ((blk.b0 - band.b0) * nv + band.row(v)) * Wt + u
        src = tile.ap(plan.compute, k, simplify([(nv * Wt, blk.nb), (rows.stride * Wt, blk.nr), (sw, hi - lo)]), base)
        return src, simplify([(blk.nr * blk.nc, blk.nb), (blk.nc, blk.nr), (1, hi - lo)]), lo - blk.c0

    def _chains(self, units: list[Unit], cols: _Cols, tiles: list[Tile | _ImageTile], band: Band,
                grp: list[Block]) -> dict[Block, list[Part]]:
        """Depthwise taps off PE (depthwise.py) for the blocks of `grp`: their sums per block."""
        if self.off_pe is None:
            return {}
        (unit,) = units
        kw = self.plan.w.dims[3]
        result = {}
        for blk in grp:
            def window(t: int, blk: Block = blk) -> tuple[AccessPattern, tuple[tuple[int, int], ...], int] | None:
                return self._window(cols, unit, tiles[0], band, blk, t // kw, t % kw, unit.lanes)
            result[blk] = self.off_pe.emit(unit.lanes, blk.size, window, lambda t: self.weights.tap_scale(unit, t),
                                           f"{self.plan.name} o{unit.o0} b{blk.b0} r{blk.r0}")
        return result

    def _accumulate(self, units: list[Unit], cols: _Cols, tiles: list[Tile | _ImageTile], band: Band,
                    grp: list[Block], chains: dict[Block, list[Part]]) -> dict[Block, Tile]:
        b, plan = self.b, self.plan
        accs = {blk: self.pools["acc"].next() for blk in grp}
        order = self._chunks(units, cols, grp)
        started: dict[Block, bool] = {}
        for blk in grp:  # a block whose first matmul does not cover it whole starts from zero
            reach = (self._valid(cols, units[t], jw, blk) for t, _, jw in order)
            first = next((c for c in reach if c[1] > c[0]), None)
            started[blk] = first != (blk.c0, blk.c0 + blk.nc)
            if first is None and chains:  # every tap off PE: the first sum joining covers the block whole
                started[blk] = chains[blk][0][1] != ((1, blk.size),)
            if started[blk]:
                b.emit("dve", "memset", f"{plan.name} zero acc", {"value": 0.0},
                       dst=accs[blk].flat("f32", units[0].outs, blk.size))
        for t, jh, jw in order:
            unit = units[t]
            wtile, woff, k = self.weights.stationary(unit, jh, jw)
            loaded = False
            for blk in grp:
                found = self._window(cols, unit, tiles[t], band, blk, jh, jw, k)
                if found is None:
                    continue
                if not loaded:
                    b.load_stationary(wtile.flat(plan.compute, k, unit.outs, woff),
                                      f"{plan.name} o{unit.o0} c{unit.c0} chunk ({jh}, {jw})")
                    loaded = True
                src, pattern, offset = found
                b.multiply_moving(accs[blk].ap("f32", unit.outs, pattern, offset), src, acc=started[blk],
                                  comment=f"{plan.name} o{unit.o0} b{blk.b0} r{blk.r0} c{unit.c0} ({jh}, {jw})")
                started[blk] = True
        if chains:  # the sums of the taps computed off PE join by the identity
            on = units[0].lanes
            b.load_stationary(b.identity(plan.compute).flat(plan.compute, on, on), f"{plan.name} identity")
            for blk in grp:
                for part, pattern, offset in chains[blk]:
                    b.multiply_moving(accs[blk].ap("f32", on, pattern, offset),
                                      part.ap(plan.compute, on, pattern, offset), acc=started[blk],
                                      comment=f"{plan.name} o{units[0].o0} b{blk.b0} r{blk.r0} off-PE taps")
                    started[blk] = True
        return accs

    # -- epilogue ---------------------------------------------------------------------------------------------
    def _epilogues(self, unit: Unit, grp: list[Block], accs: dict[Block, Tile]) -> None:
        """Each block's results; a spread unit's ranges (range a: rows shifted by a * the rows of one range)
        evaluated at once and stored from their own partitions."""
        o0, on, cols = unit.o0, unit.on, self.plan.cols.out
        rows = self._rows(unit.spread).out
        for blk in grp:
            fw = blk.nr * blk.nc
            for i in range(blk.nb):
                image, f0 = blk.b0 + i, blk.r0 * cols + blk.c0
                label = f"{self.plan.name} o{o0} b{image} p{f0}"
                if unit.spread == 1:
                    self.epilogue.run({0: image}, o0, on, f0, fw, accs[blk].flat("f32", on, fw, i * fw), label)
                    continue
                f0s = [f0 + a * rows * cols for a in range(unit.spread)]
                self.epilogue.run_ranges({0: image}, o0, on, f0s, fw, accs[blk].flat("f32", unit.outs, fw), label)
