"""Dot kernels: a (batched) matmul on PE with an elementwise epilogue fused on the way out of PSUM.

PE computes psum[P, F] = stationary[K, P]^T @ moving[K, F]. For out[M, N] = lhs[M, K] @ rhs[K, N]:
- orientation B (row-major output): stationary = lhs^T tiles [K, M<=128], moving = rhs [K, N<=512],
  psum = out tile [M, N]; a bias along N lies along the free dim (DVE add of a broadcast row).
- orientation A (feature-major output, out^T in HBM): stationary = rhs [K, N<=128], moving = lhs^T
  [K, M<=512], psum = out^T tile [N, M]; a bias along N is per partition, so bias + activation is a
  single ACT instruction from PSUM.
The orientation follows the output view: the free dim of psum is the output axis with unit stride, so
every store is contiguous. Loop nest per batch: P-blocks of 128 (stationary: all K-tiles of the block
in SBUF) x groups of `group_banks` moving tiles (one PSUM bank each) x K-tiles: each load_stationary is
reused by every moving tile of the group; K accumulates in PSUM (acc=0 on the first K-tile). The
moving operand stays resident in SBUF for the whole kernel when it fits, else it is streamed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from backend.alloc import Pool, PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.evaluate import Coords, Temporaries, TileEvaluator, dry_operand
from backend.kernels.expr import Node, has_reduce, substitute_views, view_nodes
from backend.kernels.leaves import LeafLoader
from backend.kernels.operands import KOperand, Loaded
from backend.layout import View, itemsize
from backend.registry import KernelShape
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from isa.program import AccessPattern


@dataclass
class DotPlan:
    """A dot after normalization: lhs (batch..., M, K), rhs (batch..., K, N), out (batch..., M, N).

    `epilogue` is an expression over the accumulator ("acc" node) and leaves with out's dims.
    """

    name: str
    where: str
    lhs: View
    rhs: View
    out: View
    epilogue: Node
    compute: str

    @property
    def batch_dims(self) -> tuple[int, ...]:
        return self.out.dims[:-2]

    @property
    def macs(self) -> int:
        m, k = self.lhs.dims[-2:]
        n = self.rhs.dims[-1]
        batches = 1
        for d in self.batch_dims:
            batches *= d
        return m * n * k * batches


def _merge_groups(views: list[View], groups: list[tuple[int, int]]) -> list[View] | None:
    """Merge, in every view, each (start, count) group of consecutive axes into one axis (count 0: a new
    size-1 axis). Groups are given left to right in the coordinates before any merge."""
    shift = 0
    for start, count in groups:
        start -= shift
        if count == 0:
            views = [v.insert_axis(start) for v in views]
            shift -= 1
            continue
        for _ in range(count - 1):
            merged = [v.merge_axes(start) for v in views]
            if any(m is None for m in merged):
                return None
            views = [m for m in merged if m is not None]
        shift += count - 1
    return views


def compute_dtype(lhs: View, rhs: View, where: str) -> str:
    """PE input dtype: bf16/f16 when both operands are (auto-cast), else f32."""
    kinds = {lhs.dtype, rhs.dtype}
    if kinds - {"f32", "bf16", "f16"}:
        raise CompilationError(f"{where}: dot of {'/'.join(sorted(kinds))} operands is not supported")
    return kinds.pop() if len(kinds) == 1 else "f32"


def plan_dot(inst: HloInstruction, name: str, lhs: View, rhs: View, out: View, epilogue: Node,
             materialize: Callable[[View], View] | None = None) -> DotPlan:
    """Normalize an HLO dot to (batch..., M, K) x (batch..., K, N) -> (batch..., M, N).

    Several free or contracting dims are merged into one when the strides allow it; `out` and the
    epilogue's leaves (views with the dot's output dims) are merged the same way. An operand or leaf
    whose dims cannot be merged is first copied dense (in its normalized order) by `materialize`.
    """
    where = inst.where()
    attrs = inst.attrs
    lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
    lc, rc = tuple(attrs.get("lhs_contracting_dims", ())), tuple(attrs.get("rhs_contracting_dims", ()))
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise CompilationError(f"{where}: dot with mismatched batch/contracting dimensions")
    lf = tuple(d for d in range(lhs.rank) if d not in lb + lc)
    rf = tuple(d for d in range(rhs.rank) if d not in rb + rc)
    nb = len(lb)
    if has_reduce(epilogue):
        raise CompilationError(f"{where}: a reduction in a dot's epilogue is not supported")

    def merged(view: View, groups: list[tuple[int, int]], what: str) -> View:
        result = _merge_groups([view], groups)
        if result is None and materialize is not None:
            result = _merge_groups([materialize(view)], groups)
        if result is None:
            raise CompilationError(f"{where}: dot whose {what} dimensions cannot be merged into one "
                                   f"(lhs {lhs.dims}, rhs {rhs.dims})")
        return result[0]

    lhs_n = merged(lhs.transpose(lb + lf + lc), [(nb, len(lf)), (nb + len(lf), len(lc))], "lhs")
    rhs_n = merged(rhs.transpose(rb + rc + rf), [(nb, len(rc)), (nb + len(rc), len(rf))], "rhs")
    out_groups = [(nb, len(lf)), (nb + len(lf), len(rf))]
    out_n = _merge_groups([out], out_groups)
    if out_n is None:
        raise CompilationError(f"{where}: dot whose output view {out.dims} cannot be merged into a matrix")
    leaves = view_nodes(epilogue)
    views = {id(n): merged(n.view, out_groups, "epilogue operand") for n in leaves if n.view is not None}
    epilogue = substitute_views(epilogue, views)
    return DotPlan(name, where, lhs_n, rhs_n, out_n[0], epilogue, compute_dtype(lhs, rhs, where))


def arrange_const(builder: ProgramBuilder, view: View, compute: str) -> View:
    """Store a constant operand (batch..., K, C) densely in that order and in the compute dtype."""
    arr = view.const_array()
    return builder.new_const(arr, compute)


def dot_kernel(builder: ProgramBuilder, plan: DotPlan) -> None:
    """The kernel of `plan`, tiled with the options the tile policy chooses for its shape."""
    m, k = plan.lhs.dims[-2:]
    batches = 1
    for d in plan.batch_dims:
        batches *= d
    with builder.kernel_options(KernelShape("dot", (batches, m, k, plan.rhs.dims[-1]), plan.compute)):
        _dot_kernel(builder, plan)


def _dot_kernel(builder: ProgramBuilder, plan: DotPlan) -> None:
    nb = len(plan.batch_dims)
    m_axis, n_axis = nb, nb + 1
    s_m, s_n = plan.out.strides[m_axis], plan.out.strides[n_axis]
    feature_major = s_n != 1 and s_m == 1 and plan.out.dims[n_axis] > 1
    # operand roles as [K, C] views (C = the operand's free axis)
    lhs_t = plan.lhs.transpose(tuple(range(nb)) + (nb + 1, nb))  # (batch..., K, M)
    stat_full, mov_full = (plan.rhs, lhs_t) if feature_major else (lhs_t, plan.rhs)
    if stat_full.is_const:
        stat_full = arrange_const(builder, stat_full, plan.compute)
    if mov_full.is_const:
        mov_full = arrange_const(builder, mov_full, plan.compute)
    p_axis, f_axis = (n_axis, m_axis) if feature_major else (m_axis, n_axis)
    K = plan.lhs.dims[-1]
    P, F = plan.out.dims[p_axis], plan.out.dims[f_axis]
    opts, parts = builder.options, builder.target.partitions
    mt = min(opts.moving_tile, builder.target.data["pe"]["max_n"], F)
    pmax = min(parts, P, builder.target.data["pe"]["max_m"])
    nk = -(-K // parts)
    f_tiles = [(f0, min(mt, F - f0)) for f0 in range(0, F, mt)]
    csz = itemsize(plan.compute)
    n_p = -(-P // pmax)
    stat_bytes, mov_bytes = pmax * itemsize(stat_full.stored_dtype), mt * itemsize(mov_full.stored_dtype)

    index0 = (0,) * nb
    batches = list(itertools.product(*(range(d) for d in plan.batch_dims)))
    stat_image = KOperand.all_in_place(builder, [_index(stat_full, i) for i in batches], plan.compute)
    mov_image = KOperand.all_in_place(builder, [_index(mov_full, i) for i in batches], plan.compute)
    stat0 = KOperand(builder, _index(stat_full, index0), plan.compute, "stat", allow_image=stat_image)
    mov0 = KOperand(builder, _index(mov_full, index0), plan.compute, "mov", allow_image=mov_image)
    loader = LeafLoader(builder, plan.epilogue, p_axis, (f_axis,), plan.name)
    temps = Temporaries("temps", mt)
    dry_leaves = {key: dry_operand(kind) for key, kind in loader.kinds().items()}
    dry_acc = AccessPattern("psum", "f32", 0, ((1, mt),), partitions=pmax)
    temps.measure(lambda bb, store: TileEvaluator(bb, store, pmax, mt, dry_leaves, acc=dry_acc, coords=Coords(
        p_axis, 0, ((f_axis, 0, mt),))).run(plan.epilogue, dry_acc))

    def pool_specs(resident: bool, caps: tuple[int, int]) -> tuple[list[PoolSpec], int, int, int]:
        # a resident moving operand is read from HBM once: only stationary bytes count for the blocking
        blocks, group = _blocking(n_p, len(f_tiles), opts, stat_bytes, 0 if resident else mov_bytes, caps)
        first = _first_blocks(n_p, len(f_tiles), opts) if resident else blocks
        most = max(blocks, first)
        specs = temps.specs() + [PoolSpec("acc", "psum", 0, opts.psum_acc_banks),
                 # results of a whole accumulation group in flight, so no PSUM evacuation waits on a store
                 PoolSpec("out", "sbuf", mt * itemsize(plan.out.dtype),
                          max(opts.output_buffers, most * min(len(f_tiles), opts.psum_acc_banks) + 2)),
                 PoolSpec("stat", "sbuf", 0 if stat0.in_sbuf else nk * pmax * csz, opts.stationary_buffers * most,
                          source=stat0.stages)]
        specs += stat0.specs(pmax, most) + loader.specs(pmax, mt, len(f_tiles), 32 * 1024)
        if stat0.needs_transpose_psum or mov0.needs_transpose_psum:
            specs.append(PoolSpec("tpsum", "psum", 0, opts.psum_transpose_banks))
        cols = F if resident else min(F, group * mt)
        specs += [PoolSpec("mov", "sbuf", 0 if mov0.in_sbuf else nk * cols * csz,
                           1 if resident else opts.moving_buffers, source=mov0.stages)]
        return specs + mov0.specs(cols), blocks, group, first

    caps = (opts.max_stationary_blocks, opts.group_banks)
    specs, blocks, group, first = pool_specs(True, caps)
    resident = nk * F * csz <= opts.moving_resident_bytes and builder.alloc.fits(specs)
    while not resident:  # streamed: fewer moving tiles, then fewer stationary blocks, until the pools fit
        specs, blocks, group, first = pool_specs(False, caps)
        if builder.alloc.fits(specs) or caps == (1, 1):
            break
        caps = (caps[0], caps[1] - 1) if caps[1] > 1 else (caps[0] - 1, 1)
    groups = [f_tiles[i:i + group] for i in range(0, len(f_tiles), group)]
    psum_banks = sum(s.bufs for s in specs if s.memory == "psum")
    if psum_banks > builder.alloc.banks:
        raise CompilationError(f"{plan.where}: needs {psum_banks} PSUM banks; lower psum_acc_banks")
    pools = builder.alloc.begin_kernel(plan.name, specs, plan.where)
    loader.bind(pools)
    temps.bind(pools)
    builder.useful_macs += plan.macs
    for operand in (stat0, mov0):
        operand.note_layout(plan.name, len(batches))

    p_blocks = [(p0, min(pmax, P - p0)) for p0 in range(0, P, pmax)]
    supers = [p_blocks[:first]] + [p_blocks[i:i + blocks] for i in range(first, len(p_blocks), blocks)]
    for index in batches:
        tag = f"{plan.name}{list(index) if index else ''}"
        stat = KOperand(builder, _index(stat_full, index), plan.compute, "stat", tag, allow_image=stat_image)
        mov = KOperand(builder, _index(mov_full, index), plan.compute, "mov", tag, allow_image=mov_image)
        stat.bind(pools)
        mov.bind(pools)
        loop = _Loop(builder, plan, pools, loader, temps, stat, mov, dict(enumerate(index)), tag, p_axis, f_axis,
                     pmax, nk)
        loop.run(supers, f_tiles, groups, resident, F)
    builder.alloc.end_kernel()


class _Loop:
    """The loop nest of one batch: super-blocks of R stationary blocks x groups of G moving tiles x
    K-tiles, with software-pipelined stationary loads and fused epilogues."""

    def __init__(self, builder: ProgramBuilder, plan: DotPlan, pools: dict[str, Pool], loader: LeafLoader,
                 temps: Temporaries, stat: KOperand, mov: KOperand, fixed: dict[int, int], tag: str,
                 p_axis: int, f_axis: int, pmax: int, nk: int):
        self.b, self.plan, self.pools, self.loader, self.temps = builder, plan, pools, loader, temps
        self.stat, self.mov, self.fixed, self.tag = stat, mov, fixed, tag
        self.p_axis, self.f_axis, self.pmax, self.nk = p_axis, f_axis, pmax, nk

    def load_stationary_blocks(self, sb: list[tuple[int, int]]) -> list[Loaded]:
        if self.stat.in_sbuf:
            return [self.stat.load(None, p0, pw, self.pmax) for p0, pw in sb]
        return [self.stat.load(self.pools["stat"].next(), p0, pw, self.pmax) for p0, pw in sb]

    def run(self, supers, f_tiles, groups, resident: bool, F: int) -> None:
        opts = self.b.options
        mov_tile = self.pools["mov"].next() if resident and not self.mov.in_sbuf else None
        # first super-block of a resident moving operand: R x G fills every accumulator bank (nothing to
        # overlap yet), so PE gets the most work per moving byte while the operand streams in
        wide = max(1, opts.psum_acc_banks // len(supers[0]))
        first_groups = [f_tiles[i:i + wide] for i in range(0, len(f_tiles), wide)] if resident else groups
        loaded = [self.load_stationary_blocks(supers[0])]
        mov_all: Loaded | None = None
        if resident:
            # PE idles until the moving operand is in: load (and transpose) the next blocks first, then
            # the moving operand column group by column group, in the order the first groups use it
            if len(supers) > 1:
                loaded.append(self.load_stationary_blocks(supers[1]))
            for grp in first_groups:
                g0 = grp[0][0]
                mov_all = self.mov.load(mov_tile, g0, grp[-1][0] + grp[-1][1] - g0, F, at=g0)
        for si, sb in enumerate(supers):
            sb_groups = first_groups if si == 0 else groups
            if si == len(supers) - 1 and len(sb_groups[-1]) > 1:
                # the kernel's last group is its tail latency: one moving tile at a time
                sb_groups = sb_groups[:-1] + [[t] for t in sb_groups[-1]]
            for gi, grp in enumerate(sb_groups):
                if mov_all is not None:
                    mov = mov_all
                else:
                    g0 = grp[0][0]
                    gcols = grp[-1][0] + grp[-1][1] - g0
                    mov = self.mov.load(None if self.mov.in_sbuf else self.pools["mov"].next(), g0, gcols, gcols)
                accs = self.accumulate(sb, loaded[si], grp, mov)
                last = si == len(supers) - 1 and gi == len(sb_groups) - 1
                self.epilogues(sb, grp, accs, opts.dma_split_bytes // 4 if last else None)
                # software pipelining: the next blocks' loads (and PE transposes: PE runs in program
                # order) after this block's first group, so their PSUM evacuations overlap the rest
                prefetch_at = len(sb_groups) - 1 if si == 0 else 0
                if gi >= prefetch_at and len(loaded) == si + 1 and si + 1 < len(supers):
                    loaded.append(self.load_stationary_blocks(supers[si + 1]))

    def accumulate(self, sb, stat: list[Loaded], grp, mov: Loaded) -> dict:
        """K-accumulation of R blocks x G moving tiles: each load_stationary serves G matmuls."""
        b = self.b
        accs = {(p0, f0): self.pools["acc"].next() for p0, _ in sb for f0, _ in grp}
        for kt in range(self.nk):
            for (p0, pw), block in zip(sb, stat, strict=True):
                b.load_stationary(block.ap(kt, p0, pw), f"{self.tag} p{p0} k{kt}")
                for f0, fw in grp:
                    b.multiply_moving(accs[p0, f0].flat("f32", pw, fw), mov.ap(kt, f0, fw),
                                      acc=kt > 0, comment=f"{self.tag} p{p0} f{f0} k{kt}")
        return accs

    def epilogues(self, sb, grp, accs: dict, split: int | None) -> None:
        """PSUM -> epilogue expression -> SBUF -> HBM for every tile of the group."""
        plan = self.plan
        for p0, pw in sb:
            for f0, fw in grp:
                label = f"{self.tag} p{p0} f{f0}"
                free = [(self.f_axis, f0, fw)]
                operands = self.loader.load(self.fixed, p0, pw, free)
                out = plan.out.hbm_ap(self.p_axis, p0, pw, [(self.f_axis, f0, fw)], self.fixed)
                on_chip = self.b.resident(out)  # a result kept on chip is written in place where engines may
                dst = on_chip or self.pools["out"].next().flat(plan.out.dtype, pw, fw)
                acc = accs[p0, f0].flat("f32", pw, fw)
                coords = Coords(self.p_axis, p0, ((self.f_axis, f0, fw),), tuple(self.fixed.items()))
                TileEvaluator(self.b, self.temps.store(), pw, fw, operands, acc=acc, label=label,
                              coords=coords).run(plan.epilogue, dst)
                if on_chip is None:
                    self.b.dma(out, dst, f"{label} store", split, min_run=512 if split else 2048)


def _first_blocks(n_p: int, n_f: int, opts) -> int:
    """Stationary blocks of the first super-block when the moving operand is resident: enough for
    two moving tiles per block over all accumulator banks (see _Loop.run)."""
    return max(1, min(n_p, opts.max_stationary_blocks, opts.psum_acc_banks // max(1, min(n_f, 2))))


def _blocking(n_p: int, n_f: int, opts, stat_bytes: int, mov_bytes: int, caps: tuple[int, int]) -> tuple[int, int]:
    """(R, G): R stationary blocks x G moving tiles accumulate together (R*G PSUM banks, half the
    accumulator pool so the next group never waits for an epilogue; R and G at most `caps`). Minimizes
    the operand bytes that must arrive per unit of PE work, (R * stat_bytes + G * mov_bytes) / (R * G),
    which sets how long PE waits for its first results; ties go to larger G (fewer stationary loads)."""
    budget = max(1, opts.psum_acc_banks // 2)
    best: tuple[tuple[float, int], int, int] | None = None
    for r in range(1, min(n_p, caps[0]) + 1):
        for g in range(1, min(n_f, caps[1]) + 1):
            if r * g > budget:
                continue
            key = ((r * stat_bytes + g * mov_bytes) / (r * g), -g)
            if best is None or key < best[0]:
                best = (key, r, g)
    assert best is not None
    return best[1], best[2]


def _index(view: View, index: tuple[int, ...]) -> View:
    for i in index:
        view = view.index(0, i)
    return view
