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
from dataclasses import replace
from math import prod

from backend.alloc import Pool, PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.conv_epilogue import SMALL_OUT_BUFS, SMALL_OUT_BYTES
from backend.kernels.dot_plan import DotPlan
from backend.kernels.dot_store import flush, staged
from backend.kernels.evaluate import Coords, Temporaries, TileEvaluator, dry_operand
from backend.kernels.leaves import LeafLoader
from backend.kernels.operands import KOperand, Loaded, TiledConst
from backend.layout import View, itemsize
from backend.registry import KernelShape
from hlo.errors import CompilationError
from isa.program import AccessPattern

MERGED_STORE_BYTES = 8192  # per partition: a result row shorter than this is stored a whole group of tiles at a time


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
    # a single row times a constant weight (a classifier on pooled features): the weight as stationary blocks,
    # so PE works through it block by block as it streams in instead of waiting for all of it as one moving
    # operand (the result, one element per partition, is small)
    single_row = plan.out.dims[m_axis] == 1 and plan.rhs.is_const and plan.out.dims[n_axis] > 1
    feature_major = (s_n != 1 and s_m == 1 or single_row) and plan.out.dims[n_axis] > 1
    # operand roles as [K, C] views (C = the operand's free axis)
    lhs_t = plan.lhs.transpose(tuple(range(nb)) + (nb + 1, nb))  # (batch..., K, M)
    stat_full, mov_full = (plan.rhs, lhs_t) if feature_major else (lhs_t, plan.rhs)
    p_axis, f_axis = (n_axis, m_axis) if feature_major else (m_axis, n_axis)
    K = plan.lhs.dims[-1]
    P, F = plan.out.dims[p_axis], plan.out.dims[f_axis]
    opts, parts = builder.options, builder.target.partitions
    mt = min(opts.moving_tile, builder.target.data["pe"]["max_n"], F)
    # feature-major with the tokens moving: token tiles of one partition block each, so the kernel's
    # first results need only the first row block of its producer (row pipelining across kernels)
    tokens_outer = feature_major and not mov_full.is_const and F >= 2 * parts
    if tokens_outer:
        mt = min(mt, parts)
    # the program's first PE work: its constant moving operand streams in while PE has nothing else to do,
    # so PE follows the stream (every stationary block against each moving tile as it lands)
    moving_outer = tokens_outer or (mov_full.is_const and builder.useful_macs == 0)
    pmax = min(parts, P, builder.target.data["pe"]["max_m"])
    # constants are stored as the kernel reads them: stationary in blocks of pmax columns, moving in
    # blocks of one moving tile, each block one contiguous DMA (operands.TiledConst)
    nk = -(-K // parts)
    f_tiles = [(f0, min(mt, F - f0)) for f0 in range(0, F, mt)]
    csz = itemsize(plan.compute)
    n_p = -(-P // pmax)
    # short blocks (small K) are stored and loaded `group` at a time: one longer DMA run per partition
    stat_group = max(1, -(-opts.const_group_bytes // (nk * pmax * csz)))
    mov_group = max(1, -(-opts.const_group_bytes // (nk * mt * csz)))
    stat_tiled = TiledConst.build(builder, stat_full, plan.compute, pmax, stat_group) if stat_full.is_const else None
    mov_tiled = TiledConst.build(builder, mov_full, plan.compute, mt, mov_group) if mov_full.is_const else None
    stat_group = stat_tiled.group if stat_tiled is not None else 1
    if stat_tiled is not None:
        stat_full = stat_full.with_cast(plan.compute)
    if mov_tiled is not None:
        mov_full = mov_full.with_cast(plan.compute)
    stat_bytes = pmax * itemsize(plan.compute if stat_tiled else stat_full.stored_dtype)
    mov_bytes = mt * itemsize(plan.compute if mov_tiled else mov_full.stored_dtype)

    index0 = (0,) * nb
    batches = list(itertools.product(*(range(d) for d in plan.batch_dims)))
    stat_image = KOperand.all_in_place(builder, [_index(stat_full, i) for i in batches], plan.compute)
    mov_image = KOperand.all_in_place(builder, [_index(mov_full, i) for i in batches], plan.compute)
    stat0 = KOperand(builder, _index(stat_full, index0), plan.compute, "stat", allow_image=stat_image,
                     tiled=_batch(stat_tiled, index0, plan.batch_dims))
    mov0 = KOperand(builder, _index(mov_full, index0), plan.compute, "mov", allow_image=mov_image,
                    tiled=_batch(mov_tiled, index0, plan.batch_dims))
    loader = LeafLoader(builder, plan.epilogue, p_axis, (f_axis,), plan.name)
    temps = Temporaries("temps", mt)
    dry_leaves = {key: dry_operand(kind) for key, kind in loader.kinds().items()}
    dry_acc = AccessPattern("psum", "f32", 0, ((1, mt),), partitions=pmax)
    temps.measure(lambda bb, store: TileEvaluator(bb, store, pmax, mt, dry_leaves, acc=dry_acc, coords=Coords(
        p_axis, 0, ((f_axis, 0, mt),))).run(plan.epilogue, dry_acc))

    def pool_specs(resident: bool, caps: tuple[int, int], kt: int = nk, stat0: KOperand = stat0,
                   mov0: KOperand = mov0, deep: bool = False,
                   stage: bool = True) -> tuple[list[PoolSpec], int, int, int]:
        # a resident moving operand is read from HBM once: only stationary bytes count for the blocking;
        # a streamed one over the whole K accumulates block by block (_Loop), a K-chunked one (_ChunkedLoop)
        # keeps every block's accumulators and stationary buffers of the earlier plan
        blockwise = not resident and kt == nk
        blocks, group = _blocking(n_p, len(f_tiles), opts, stat_bytes, 0 if resident else mov_bytes, caps,
                                  blockwise=blockwise)
        first = _first_blocks(n_p, len(f_tiles), opts) if resident else blocks
        most = max(blocks, first)
        # results of a whole accumulation group in flight, so no PSUM evacuation waits on a store; a result
        # stored to HBM is staged a whole group of moving tiles per buffer and stored in one DMA (longer runs)
        least = max(opts.output_buffers, (1 if blockwise else most) * min(len(f_tiles), opts.psum_acc_banks) + 2)

        def out_pool(staged: int) -> tuple[int, int]:  # (tiles per buffer, buffers)
            tiles = min(len(f_tiles), max(group, opts.psum_acc_banks // first if resident else staged)) * merge_out or 1
            bufs = -(-least // tiles) + 1 if tiles > 1 else least
            if single_row and tiles * mt * itemsize(plan.out.dtype) <= SMALL_OUT_BYTES:  # all in flight
                bufs = max(bufs, min(SMALL_OUT_BUFS, n_p * len(f_tiles)))
            return tiles, bufs
        staging = blockwise and n_p == 1 and stage
        out_tiles, out_bufs = out_pool(max(1, MERGED_STORE_BYTES // (mt * itemsize(plan.out.dtype))) if staging else 1)
        # the staged stores are a luxury: the residency plan may take their SBUF (the kernel then stages less)
        spare = max(0, out_tiles * out_bufs - prod(out_pool(1))) * mt * itemsize(plan.out.dtype) if staging else 0
        stat_n = grouped(stat_bufs(most, deep) if resident else most + 2 if blockwise
                         else opts.stationary_buffers * most, most, kt)
        # a classifier's whole constant stationary (every block its own buffer) is placed apart, loaded kernels
        # ahead (alloc.py); not other kernels' (GPT-2 block s512: 124.6 -> 140.5 us when they were)
        whole = stat_tiled is not None and kt == nk and stat_n * stat_group >= n_p
        if whole:
            stat_n = -(-n_p // stat_group)  # no buffer is reused: more would only take SBUF
        specs = temps.specs() + [PoolSpec("acc", "psum", 0, opts.psum_acc_banks),
                 PoolSpec("out", "sbuf", out_tiles * mt * itemsize(plan.out.dtype), out_bufs, spare=spare),
                 PoolSpec("stat", "sbuf", 0 if stat0.in_sbuf else kt * pmax * csz * (stat_group if kt == nk else 1),
                          stat_n, source=stat0.stages, prefetch=whole and single_row and not stat0.in_sbuf)]
        specs += stat0.specs(pmax, most) + loader.specs(pmax, mt, len(f_tiles), 32 * 1024)
        if stat0.needs_transpose_psum or mov0.needs_transpose_psum:
            specs.append(PoolSpec("tpsum", "psum", 0, opts.psum_transpose_banks))
        cols = F if resident else min(F, group * mt)
        specs += [PoolSpec("mov", "sbuf", 0 if mov0.in_sbuf else kt * cols * csz,
                           1 if resident else opts.moving_buffers, source=mov0.stages)]
        return specs + mov0.specs(cols), blocks, group, first

    opts = builder.options = _psum_budget(builder, opts, stat0.needs_transpose_psum or mov0.needs_transpose_psum)
    # a result that goes to HBM (not kept on chip) in rows shorter than a long DMA run: stored group by group
    merge_out = (len(f_tiles) > 1 and mt * itemsize(plan.out.dtype) < MERGED_STORE_BYTES and builder.resident(
        plan.out.hbm_ap(p_axis, 0, pmax, [(f_axis, 0, mt)], dict.fromkeys(range(nb), 0))) is None)
    # following a constant moving stream tile by tile stores each tile alone: short HBM rows are stored a
    # group of tiles at a time instead (the stream order pays only for the program's first PE work)
    moving_outer = tokens_outer or (moving_outer and not merge_out)
    caps = (opts.max_stationary_blocks, opts.group_banks)
    def grouped(bufs: int, most: int, kt: int) -> int:
        # buffers of `group` stationary blocks: the blocks loaded and not yet used span at most two super-blocks
        # (the current one and the prefetched next), so a buffer is refilled only once its blocks are done
        if stat_group == 1 or kt != nk:
            return bufs
        return max(-(-bufs // stat_group), -(-2 * most // stat_group) + 2)

    def stat_bufs(most: int, deep: bool) -> int:
        # with the moving operand resident, PE work only waits on stationary blocks: up to
        # stationary_prefetch_bytes of them are in flight, so their DMAs fill the queues from the
        # kernel's start instead of following PE block by block
        bufs = opts.stationary_buffers * most
        if deep:
            bufs = max(bufs, min(n_p, opts.stationary_prefetch_bytes // max(1, nk * pmax * csz)))
        return bufs

    specs, blocks, group, first = pool_specs(True, caps, deep=True)
    if not builder.alloc.fits(specs):
        specs, blocks, group, first = pool_specs(True, caps)
    resident = nk * F * csz <= opts.moving_resident_bytes and builder.alloc.fits(specs)
    while not resident:  # streamed: fewer moving tiles, then fewer stationary blocks, until the pools fit
        specs, blocks, group, first = pool_specs(False, caps)
        if not builder.alloc.fits(specs):  # without the staged stores first (their SBUF is spare, above)
            specs, blocks, group, first = pool_specs(False, caps, stage=False)
        if builder.alloc.fits(specs) or caps == (1, 1):
            break
        caps = (caps[0], caps[1] - 1) if caps[1] > 1 else (caps[0] - 1, 1)
    kc = nk  # K-tiles per chunk: fewer when even one block and one moving tile of the whole K do not fit
    while not resident and kc > 1 and not builder.alloc.fits(specs):
        kc = -(-kc // 2)
        s0, m0 = (KOperand(builder, _k_slice(op.view, 0, kc * parts), plan.compute, op.role, allow_image=img)
                  for op, img in ((stat0, stat_image), (mov0, mov_image)))
        for caps in _caps_descending((opts.max_stationary_blocks, opts.group_banks)):
            specs, blocks, group, first = pool_specs(False, caps, kc, s0, m0)
            if builder.alloc.fits(specs):
                break
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
    if kc < nk:
        k_chunks = [(k0, min(kc * parts, K - k0)) for k0 in range(0, K, kc * parts)]
        for index in batches:
            tag = f"{plan.name}{list(index) if index else ''}"
            chunks = []
            for k0, kn in k_chunks:
                ops = [KOperand(builder, _k_slice(_index(full, index), k0, kn), plan.compute, role,
                                f"{tag} k{k0}", allow_image=img)
                       for full, role, img in ((stat_full, "stat", stat_image), (mov_full, "mov", mov_image))]
                for op in ops:
                    op.bind(pools)
                chunks.append(ops)
            loop = _ChunkedLoop(builder, plan, pools, loader, temps, chunks[0][0], chunks[0][1],
                                dict(enumerate(index)), tag, p_axis, f_axis, pmax, nk)
            loop.run_chunks(chunks, [p_blocks[i:i + blocks] for i in range(0, len(p_blocks), blocks)], groups)
        builder.alloc.end_kernel()
        return
    for index in batches:
        tag = f"{plan.name}{list(index) if index else ''}"
        stat = KOperand(builder, _index(stat_full, index), plan.compute, "stat", tag, allow_image=stat_image,
                        tiled=_batch(stat_tiled, index, plan.batch_dims))
        mov = KOperand(builder, _index(mov_full, index), plan.compute, "mov", tag, allow_image=mov_image,
                       tiled=_batch(mov_tiled, index, plan.batch_dims))
        stat.bind(pools)
        mov.bind(pools)
        loop = _Loop(builder, plan, pools, loader, temps, stat, mov, dict(enumerate(index)), tag, p_axis, f_axis,
                     pmax, nk)
        loop.merged_cols = pools["out"].buf_bytes // itemsize(plan.out.dtype)
        loop.run(supers, f_tiles, groups, resident, F, moving_outer)
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
        self.groups: dict[int, Loaded] = {}  # first column -> a loaded group of stationary blocks
        self.merged_cols = 0  # columns of an output buffer: moving tiles of a group staged side by side
        self.staging: dict = {}  # dot_store.staged: p0 -> (buffer, first column, columns, rows)

    def load_stationary_blocks(self, sb: list[tuple[int, int]]) -> list[Loaded]:
        if self.stat.in_sbuf:
            return [self.stat.load(None, p0, pw, self.pmax) for p0, pw in sb]
        tiled = self.stat.tiled
        if tiled is None or tiled.group == 1:
            return [self.stat.load(self.pools["stat"].next(), p0, pw, self.pmax) for p0, pw in sb]
        # grouped constant blocks: a block's whole group is loaded (one DMA) when the first of them is asked for
        out = []
        for p0, _ in sb:
            g0 = p0 - p0 % tiled.span
            if g0 not in self.groups:
                self.groups[g0] = self.stat.load(self.pools["stat"].next(), g0, min(tiled.span, tiled.C - g0),
                                                 self.pmax)
            out.append(self.groups[g0])
        return out

    def run(self, supers, f_tiles, groups, resident: bool, F: int, moving_outer: bool = False) -> None:
        opts = self.b.options
        if resident and moving_outer and len(f_tiles) > 1:
            self.run_moving_outer(supers, f_tiles, F)
            return
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
                last = si == len(supers) - 1 and gi == len(sb_groups) - 1
                split = opts.dma_split_bytes // 4 if last else None
                if resident:
                    self.epilogues(sb, grp, self.accumulate(sb, loaded[si], grp, mov), split)
                else:
                    # streamed moving operand: block by block, so only G accumulators are live and R (the
                    # reuse of each streamed moving byte) is bounded by SBUF rather than by PSUM; in the
                    # last group, block j's buffer is refilled with the next super-block's block j as soon
                    # as it is done (R + 2 rotating stationary buffers)
                    refill = gi == len(sb_groups) - 1 and si + 1 < len(supers)
                    if refill:
                        loaded.append([])
                    for j, (blk, block) in enumerate(zip(sb, loaded[si], strict=True)):
                        accs = self.accumulate([blk], [block], grp, mov)
                        if split is not None or len(supers) > 1 or len(sb) > 1 or not staged(self, blk, grp, accs):
                            flush(self, blk[0])
                            self.epilogues([blk], grp, accs, split)
                        if refill and j < len(supers[si + 1]):
                            loaded[si + 1] += self.load_stationary_blocks([supers[si + 1][j]])
                    continue
                # software pipelining: the next blocks' loads (and PE transposes: PE runs in program
                # order) after this block's first group, so their PSUM evacuations overlap the rest
                prefetch_at = len(sb_groups) - 1 if si == 0 else 0
                if gi >= prefetch_at and len(loaded) == si + 1 and si + 1 < len(supers):
                    loaded.append(self.load_stationary_blocks(supers[si + 1]))

        for p0 in list(self.staging):
            flush(self, p0)

    def run_moving_outer(self, supers, f_tiles, F: int) -> None:
        """Moving tiles outer, every stationary block against each: PE follows the moving operand as it
        arrives, and when the moving tiles are token blocks the results of the first token block are
        complete first, so a kernel that consumes them by token block starts early."""
        mov_tile = None if self.mov.in_sbuf else self.pools["mov"].next()
        mov = None
        for f0, fw in f_tiles:  # loaded in the order it is used, each tile from its own producer rows
            mov = self.mov.load(mov_tile, f0, fw, F, at=f0)
        loaded = [self.load_stationary_blocks(supers[0])]
        for ti, grp in enumerate(f_tiles):
            for si, sb in enumerate(supers):
                if ti == 0 and si + 1 < len(supers):  # software pipelining of the stationary loads
                    loaded.append(self.load_stationary_blocks(supers[si + 1]))
                self.epilogues(sb, [grp], self.accumulate(sb, loaded[si], [grp], mov), None)

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
        g0 = grp[0][0]
        gcols = grp[-1][0] + grp[-1][1] - g0
        merge = split is None and len(grp) > 1 and gcols <= self.merged_cols
        for p0, pw in sb:
            merged = self.pools["out"].next() if merge else None
            for f0, fw in grp:
                label = f"{self.tag} p{p0} f{f0}"
                free = [(self.f_axis, f0, fw)]
                operands = self.loader.load(self.fixed, p0, pw, free)
                out = plan.out.hbm_ap(self.p_axis, p0, pw, [(self.f_axis, f0, fw)], self.fixed)
                on_chip = self.b.resident(out)  # a result kept on chip is written in place where engines may
                if merged is not None:
                    assert on_chip is None
                    dst = merged.flat(plan.out.dtype, pw, fw, f0 - g0)
                else:
                    dst = on_chip or self.pools["out"].next().flat(plan.out.dtype, pw, fw)
                acc = accs[p0, f0].flat("f32", pw, fw)
                coords = Coords(self.p_axis, p0, ((self.f_axis, f0, fw),), tuple(self.fixed.items()))
                TileEvaluator(self.b, self.temps.store(), pw, fw, operands, acc=acc, label=label,
                              coords=coords).run(plan.epilogue, dst)
                if on_chip is None and merged is None:
                    self.b.dma(out, dst, f"{label} store", split, min_run=512 if split else 8192)
            if merged is not None:
                out = plan.out.hbm_ap(self.p_axis, p0, pw, [(self.f_axis, g0, gcols)], self.fixed)
                self.b.dma(out, merged.flat(plan.out.dtype, pw, gcols), f"{self.tag} p{p0} f{g0} store")


class _ChunkedLoop(_Loop):
    """The loop nest when K does not fit SBUF whole: per (stationary blocks, moving tiles) group, the K chunks
    one after the other, each loaded and multiplied into the same PSUM accumulators (acc=0 only on the first
    K-tile of the first chunk), then one epilogue."""

    def run_chunks(self, chunks: list[list[KOperand]], supers: list[list[tuple[int, int]]], groups) -> None:
        b = self.b
        for sb in supers:
            for grp in groups:
                accs = {(p0, f0): self.pools["acc"].next() for p0, _ in sb for f0, _ in grp}
                g0 = grp[0][0]
                gcols = grp[-1][0] + grp[-1][1] - g0
                for ci, (stat, mov) in enumerate(chunks):
                    blocks = [stat.load(None if stat.in_sbuf else self.pools["stat"].next(), p0, pw, self.pmax)
                              for p0, pw in sb]
                    moving = mov.load(None if mov.in_sbuf else self.pools["mov"].next(), g0, gcols, gcols)
                    for kt in range(stat.nk):
                        for (p0, pw), block in zip(sb, blocks, strict=True):
                            b.load_stationary(block.ap(kt, p0, pw), f"{self.tag} p{p0} c{ci} k{kt}")
                            for f0, fw in grp:
                                b.multiply_moving(accs[p0, f0].flat("f32", pw, fw), moving.ap(kt, f0, fw),
                                                  acc=ci > 0 or kt > 0,
                                                  comment=f"{self.tag} p{p0} f{f0} c{ci} k{kt}")
                self.epilogues(sb, grp, accs, None)


def _k_slice(view: View, k0: int, kn: int) -> View:
    """Rows [k0, k0 + kn) of a [K, C] operand view."""
    return view.slice(((k0, k0 + kn, 1), (0, view.dims[1], 1)))


def _caps_descending(caps: tuple[int, int]):
    """(R, G) caps from the largest down to (1, 1): fewer moving tiles first, then fewer blocks."""
    while True:
        yield caps
        if caps == (1, 1):
            return
        caps = (caps[0], caps[1] - 1) if caps[1] > 1 else (caps[0] - 1, 1)


def _psum_budget(builder: ProgramBuilder, opts, transposes: bool):
    """The options with fewer PSUM banks when the kernel's accumulators (and transpose banks) would not
    leave the previous kernel's banks free (Allocator.psum_budget; at least half the banks)."""
    banks = builder.alloc.banks
    acc, tps = opts.psum_acc_banks, opts.psum_transpose_banks if transposes else 0
    budget = builder.alloc.psum_budget(banks // 2)
    if acc + tps <= budget:
        return opts
    if not transposes:
        return replace(opts, psum_acc_banks=max(2, budget))
    return replace(opts, psum_acc_banks=max(2, budget // 2), psum_transpose_banks=max(2, budget - budget // 2))


def _first_blocks(n_p: int, n_f: int, opts) -> int:
    """Stationary blocks of the first super-block when the moving operand is resident: enough for
    two moving tiles per block over all accumulator banks (see _Loop.run)."""
    return max(1, min(n_p, opts.max_stationary_blocks, opts.psum_acc_banks // max(1, min(n_f, 2))))


def _blocking(n_p: int, n_f: int, opts, stat_bytes: int, mov_bytes: int, caps: tuple[int, int],
              blockwise: bool = False) -> tuple[int, int]:
    """(R, G): R stationary blocks x G moving tiles accumulate together (R*G PSUM banks, half the
    accumulator pool so the next group never waits for an epilogue; R and G at most `caps`). Minimizes
    the operand bytes that must arrive per unit of PE work, (R * stat_bytes + G * mov_bytes) / (R * G),
    which sets how long PE waits for its first results; ties go to larger G (fewer stationary loads)."""
    budget = max(1, opts.psum_acc_banks // 2)
    best: tuple[tuple[float, int], int, int] | None = None
    for r in range(1, min(n_p, caps[0]) + 1):
        for g in range(1, min(n_f, caps[1]) + 1):
            if (g if blockwise else r * g) > budget:
                continue
            key = ((r * stat_bytes + g * mov_bytes) / (r * g), -g)
            if best is None or key < best[0]:
                best = (key, r, g)
    assert best is not None
    return best[1], best[2]


def _batch(tiled: TiledConst | None, index: tuple[int, ...], dims: tuple[int, ...]) -> TiledConst | None:
    return None if tiled is None else tiled.batch(index, dims)


def _index(view: View, index: tuple[int, ...]) -> View:
    for i in index:
        view = view.index(0, i)
    return view
