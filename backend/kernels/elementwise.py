"""Elementwise and row kernels: kLoop/kInput fusions, lone elementwise ops and free-axis reductions.

The kernel's logical dims are those of its expression. Axes are put in storage order and merged
wherever every operand allows it, keeping the reduced axes apart from the others:
- without reductions, the minor axis becomes the free dim of a tile (chunked), the next one the
  partition dim, and any others are looped over;
- with reductions (softmax, layer/RMS norm, a reduce), the reduced axes are the free dims and the
  innermost kept axis goes on the partitions: a whole row sits in one tile, reductions are DVE
  tensor_reduce / ACT accumulate into [P, 1] vectors, and their broadcast back is a per-partition
  operand. A row too long for one tile is reduced chunk by chunk when nothing full-size depends on a
  reduction (a reduce with an elementwise prologue); otherwise the kernel is refused.
Each tile: load the leaves, evaluate the expression (evaluate.TileEvaluator), store.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels import integer
from backend.kernels.evaluate import Coords, PVec, Temporaries, TempStore, TileEvaluator, dry_operand, iota_form
from backend.kernels.expr import Node, leaf, substitute_views, unary, varies, view_nodes, walk
from backend.kernels.leaves import LeafLoader
from backend.kernels.transpose import can_transpose, transpose_kernel
from backend.layout import View, itemsize, normalize_axes
from hlo.errors import CompilationError

SHORT_OUTER = 8  # an unmerged axis this short next to the minor one is a free axis, not the partition axis
MINOR_KEPT = 32  # an elementwise kernel keeps a minor axis this long as its free dim (rows on partitions)
FEATURE_MAP_CHANNELS = 64  # [.., C, H, W] with at least this many C: C on partitions, H * W the free dim


def storage_order(view: View) -> list[int]:
    """Logical axes of `view` from major to minor storage (stride descending; ties keep axis order)."""
    return sorted(range(view.rank), key=lambda a: (-view.strides[a], a))


def merge_groups(views: list[View], groups: list[list[int]]) -> tuple[list[View], list[list[int]]]:
    """Merge adjacent axes (in each group's order, major to minor) wherever every view allows it;
    never across groups. Returns the views and the groups renumbered."""
    for g in range(len(groups)):
        pos = 0
        while pos + 1 < len(groups[g]):
            a, b = groups[g][pos], groups[g][pos + 1]
            merged = [v.merge_axes(a) for v in views] if b == a + 1 else [None]
            if any(m is None for m in merged):
                pos += 1
                continue
            views = [m for m in merged if m is not None]
            groups = [[x if x < b else x - 1 for x in grp if x != b] for grp in groups]
    return views, groups


def _feature_map(views: list[View], kept: list[int]) -> bool:
    """[.., C, H, W] with C >= FEATURE_MAP_CHANNELS and the pixels (H, W) contiguous in every view."""
    if len(kept) < 3 or kept[-1] != kept[-2] + 1 or views[0].dims[kept[-3]] < FEATURE_MAP_CHANNELS:
        return False
    return all(v.merge_axes(kept[-2]) is not None for v in views)


class _Plan:
    """Axis roles of one kernel: partition axis, free axes (full rows when reducing), loop axes."""

    def __init__(self, builder: ProgramBuilder, root: Node, out: View, reduce_axes: tuple[int, ...]):
        nodes = view_nodes(root)
        views = [out] + [n.view for n in nodes if n.view is not None]
        if out.rank == 0:
            views = [v.insert_axis(0) for v in views]
        for a in reversed(range(views[0].rank)):  # size-1 kept axes carry nothing and keep others apart
            if views[0].dims[a] == 1 and views[0].rank > 1 and a not in reduce_axes:
                views = [v.index(a, 0) for v in views]
                reduce_axes = tuple(r if r < a else r - 1 for r in reduce_axes if r != a)
        kept = [a for a in storage_order(views[0]) if a not in reduce_axes]
        main = max(views[1:], key=lambda v: sum(1 for a in reduce_axes if v.strides[a]), default=views[0])
        red = sorted(reduce_axes, key=lambda a: (-main.strides[a], a))
        minor: list[int] = []
        if not red and _feature_map(views, kept):
            # a channel-major feature map [.., C, H, W]: channels on the partitions, pixels along the free dim,
            # as the convolution that produced it stores them
            kept, minor = kept[:-2], kept[-2:]
        elif not red and len(kept) > 1 and views[0].dims[kept[-1]] >= MINOR_KEPT:
            # rows on the partitions as their producer tiled them (a long minor axis stays the free dim)
            kept, minor = kept[:-1], kept[-1:]
        views, (kept, red, minor) = merge_groups(views, [kept, red, minor])
        kept += minor
        if not red and len(kept) == 1 and views[0].dims[kept[0]] >= 256 and views[0].dims[kept[0]] % 128 == 0:
            views = [v.split_axis(kept[0], views[0].dims[kept[0]] // 128) for v in views]
            kept = [kept[0], kept[0] + 1]
        self.out = views[0]
        self.root = substitute_views(root, {id(n): v for n, v in zip(nodes, views[1:], strict=True)})
        self.reducing = bool(red)
        self.free = tuple(red) if red else (kept[-1],)
        rest = kept if red else kept[:-1]
        dims = views[0].dims
        if not red and len(kept) >= 3 and dims[kept[-2]] <= SHORT_OUTER < dims[kept[-3]]:
            # a short axis that did not merge with the minor one (RoPE's two halves, read broadcast) is a
            # free axis too: the partitions get the longer axis before it, not 2 of 128
            self.free, rest = (kept[-2], kept[-1]), kept[:-2]
        self.root = _iotas_as_constants(builder, self.root, self.out, self.free)
        self.p_axis = rest[-1] if rest else None
        self.loops = rest[:-1]
        self.P = self.out.dims[self.p_axis] if self.p_axis is not None else 1
        self.pmax = min(builder.target.partitions, self.P)
        self.F = prod(self.out.dims[a] for a in self.free)


def _iotas_as_constants(builder: ProgramBuilder, root: Node, out: View, free: tuple[int, ...]) -> Node:
    """An iota that no POOL ramp computes on a tile (evaluate.iota_form "table") is read as a constant
    holding its values over the axes it varies along (broadcast along the others)."""
    replace: dict[int, View] = {}
    for node in walk(root):
        view = node.view
        if node.op != "iota" or view is None or iota_form(view, [(a, out.dims[a]) for a in free]) != "table":
            continue
        axes = [a for a in range(view.rank) if view.strides[a] and view.dims[a] > 1]
        grids = np.meshgrid(*(np.arange(view.dims[a]) for a in axes), indexing="ij")
        values = view.offset + sum(view.strides[a] * g for a, g in zip(axes, grids, strict=True))
        const = builder.const_view(np.asarray(values, dtype=np.float32), "f32")
        strides = [0] * view.rank
        for a, stride in zip(axes, const.strides, strict=True):
            strides[a] = stride
        replace[id(node)] = View(const.buffer, view.dims, tuple(strides))
    if not replace:
        return root
    memo: dict[int, Node] = {}
    for node in walk(root):
        if id(node) in replace:
            memo[id(node)] = unary("convert", leaf(replace[id(node)]), node.dtype)
        elif node.inputs:
            memo[id(node)] = Node(node.op, node.dtype, tuple(memo[id(i)] for i in node.inputs), node.view,
                                  node.value, node.inst)
        else:
            memo[id(node)] = node
    return memo[id(root)]


def fused_kernel(builder: ProgramBuilder, root: Node, out: View, name: str, where: str,
                 reduce_axes: tuple[int, ...] = ()) -> None:
    """Emit a kernel computing `root` (an expression in out's logical dims, reducing over `reduce_axes`)
    into `out`; a root constant along reduce_axes is stored from a [P, 1] vector (out has stride 0
    along them)."""
    if any(n.op == "acc" for n in walk(root)):
        raise CompilationError(f"{where}: an accumulator outside a dot kernel")
    if out.size == 0:
        return  # nothing to compute
    plan = _Plan(builder, root, out, reduce_axes)
    if plan.reducing:
        _RowKernel(builder, plan, name, where).emit()
    else:
        _LoopKernel(builder, plan, name, where).emit()


class _Kernel:
    def __init__(self, builder: ProgramBuilder, plan: _Plan, name: str, where: str):
        self.b, self.plan, self.name, self.where = builder, plan, name, where
        self.loader = LeafLoader(builder, plan.root, plan.p_axis, plan.free, name)
        # the output varies along the free axes (else it is stored from a [P, 1] vector)
        self.full_root = any(plan.out.strides[a] != 0 and plan.out.dims[a] > 1 for a in plan.free)

    def tiles(self, fw_max: int):
        """(label, fixed, p0, pw, free) of every tile, free chunked along the outermost free axis."""
        plan, parts = self.plan, self.b.target.partitions
        outer, inner = plan.free[0], plan.free[1:]
        inner_ext = [(a, 0, plan.out.dims[a]) for a in inner]
        step = max(1, fw_max // max(1, prod(plan.out.dims[a] for a in inner)))
        for idx in itertools.product(*(range(plan.out.dims[a]) for a in plan.loops)):
            fixed = dict(zip(plan.loops, idx, strict=True))
            for p0 in range(0, plan.P, parts):
                pw = min(parts, plan.P - p0)
                chunks = [[(outer, f0, min(step, plan.out.dims[outer] - f0))] + inner_ext
                          for f0 in range(0, plan.out.dims[outer], step)]
                yield f"{self.name}[{','.join(map(str, idx))}{',' if idx else ''}{p0}]", fixed, p0, pw, chunks

    def first_coords(self, fw: int) -> Coords:
        """Coordinates of a first tile of `fw` free elements (dry runs): the outer free axis chunked,
        the inner ones whole."""
        plan = self.plan
        inner = prod(plan.out.dims[a] for a in plan.free[1:])
        outer = min(plan.out.dims[plan.free[0]], max(1, fw // max(1, inner)))
        return Coords(plan.p_axis, 0, ((plan.free[0], 0, outer),) + tuple((a, 0, plan.out.dims[a])
                                                                            for a in plan.free[1:]))

    def dry_leaves(self) -> dict[int, object]:
        return {key: dry_operand(kind) for key, kind in self.loader.kinds().items()}

    def out_ap(self, fixed, p0, pw, free):
        plan = self.plan
        stored = free if self.full_root else [(a, 0, 1) for a, _, _ in free]
        return plan.out.hbm_ap(plan.p_axis, p0, pw, stored, fixed)

    def out_spec(self, fmax: int, bufs: int) -> PoolSpec:
        return PoolSpec("out", "sbuf", (fmax if self.full_root else 1) * itemsize(self.plan.out.dtype), bufs)

    def destination(self, tile, fixed, p0, pw, free, fw):
        """Where a tile's result goes: the output's SBUF image when it is kept on chip and engines may
        write there, else `tile` (stored afterwards)."""
        return self.b.resident(self.out_ap(fixed, p0, pw, free)) or self._dst(tile, pw, fw)

    def store(self, dst, fixed, p0, pw, free, label: str) -> None:
        if self.b.resident(self.out_ap(fixed, p0, pw, free)) == dst:
            return  # written in place on chip
        self.b.dma(self.out_ap(fixed, p0, pw, free), dst, f"{label} store")


class _LoopKernel(_Kernel):
    """No reductions: tiles of [128, fw] along the minor axis."""

    def emit(self) -> None:
        b, plan = self.b, self.plan
        fw_max = min(b.options.elementwise_free, plan.F)
        budget = b.options.elementwise_budget_bytes
        while True:
            temps = Temporaries("temps", fw_max)
            temps.measure(lambda bb, store, f=fw_max: self.evaluate(bb, store, self.dry_leaves(), plan.pmax, f,
                                                                    None, self._dst(None, plan.pmax, f)))
            f_tiles = -(-plan.F // fw_max)
            specs = temps.specs() + [self.out_spec(fw_max, b.options.output_buffers)]
            specs += self.loader.specs(plan.pmax, fw_max, f_tiles, budget // 4)
            if b.alloc.sbuf_need(specs) <= min(budget, b.alloc.sbuf_capacity()) or fw_max <= 64:
                break
            fw_max = max(64, fw_max // 2)
        pools = b.alloc.begin_kernel(self.name, specs, self.where)
        self.loader.bind(pools)
        temps.bind(pools)
        for label, fixed, p0, pw, chunks in self.tiles(fw_max):
            for free in chunks:
                fw = prod(n for _, _, n in free)
                tlabel = f"{label},{free[0][1]}"
                operands = self.loader.load(fixed, p0, pw, free)
                dst = self.destination(pools["out"].next(), fixed, p0, pw, free, fw)
                coords = Coords(plan.p_axis, p0, tuple(tuple(f) for f in free), tuple(fixed.items()))
                self.evaluate(b, temps.store(), operands, pw, fw, coords, dst, tlabel)
                self.store(dst, fixed, p0, pw, free, tlabel)
        b.alloc.end_kernel()

    def _dst(self, tile, pw: int, fw: int):
        from isa.program import AccessPattern

        dtype = self.plan.out.dtype
        if tile is None:
            return AccessPattern("sbuf", dtype, 0, ((1, fw if self.full_root else 1),), partitions=pw)
        return tile.flat(dtype, pw, fw if self.full_root else 1)

    def evaluate(self, b, temps: TempStore, operands, pw, fw, coords, dst, label: str = "") -> None:
        coords = coords or self.first_coords(fw)
        TileEvaluator(b, temps, pw, fw, operands, label=label, coords=coords).run(self.plan.root, dst)


class _RowKernel(_LoopKernel):
    """Reductions over the free axes: whole rows per tile, or chunked reductions."""

    def emit(self) -> None:
        b, plan = self.b, self.plan
        budget = min(b.options.elementwise_budget_bytes, b.alloc.sbuf_capacity())
        reduces = [n for n in walk(plan.root) if n.is_reduce]
        fw_max, chunked = plan.F, False
        temps, specs = self._measure(fw_max, False, reduces)
        if b.alloc.sbuf_need(specs) > budget:
            if self._depends_on_reduce():
                raise CompilationError(f"{self.where}: a row of {plan.F} elements is too long for one tile "
                                       f"({b.alloc.sbuf_need(specs)} bytes per partition) and its reductions "
                                       f"feed full-size values, so it cannot be reduced chunk by chunk")
            chunked = True
            inner = prod(plan.out.dims[a] for a in plan.free[1:])  # a chunk holds whole inner free axes
            while True:
                fw_max = max(1, fw_max // inner) * inner
                temps, specs = self._measure(fw_max, True, reduces)
                if b.alloc.sbuf_need(specs) <= budget or fw_max <= max(64, inner):
                    break
                fw_max = max(64, fw_max // 2)
        pools = b.alloc.begin_kernel(self.name, specs, self.where)
        self.loader.bind(pools)
        temps.bind(pools)
        for label, fixed, p0, pw, chunks in self.tiles(fw_max):
            coords = [Coords(plan.p_axis, p0, tuple(tuple(f) for f in free), tuple(fixed.items())) for free in chunks]
            if not chunked:
                operands = self.loader.load(fixed, p0, pw, chunks[0])
                dst = self.destination(pools["out"].next(), fixed, p0, pw, chunks[0], plan.F)
                self.evaluate(b, temps.store(), operands, pw, plan.F, coords[0], dst, label)
                self.store(dst, fixed, p0, pw, chunks[0], label)
                continue
            accs = {id(r): pools["racc"].next().flat(r.dtype if integer.needs_exact_reduce(r) else "f32", pw, 1)
                    for r in reduces}
            for i, free in enumerate(chunks):
                fw = prod(n for _, _, n in free)
                operands = self.loader.load(fixed, p0, pw, free)
                self._chunk(b, temps.store(), operands, pw, fw, coords[i], reduces, accs, i, f"{label},{free[0][1]}")
            dst = self.destination(pools["out"].next(), fixed, p0, pw, chunks[0], 1)
            preset = {key: PVec(ap) for key, ap in accs.items()}
            TileEvaluator(b, temps.store(), pw, 1, operands, label=label, coords=coords[-1],
                          preset=preset).run(plan.root, dst)
            self.store(dst, fixed, p0, pw, chunks[0], label)
        b.alloc.end_kernel()

    def _measure(self, fw: int, chunked: bool, reduces: list[Node]) -> tuple[Temporaries, list[PoolSpec]]:
        """The temporaries (by a dry run) and all pools of tiles with `fw` free elements."""
        plan = self.plan
        temps = Temporaries("temps", fw)
        leaves = self.dry_leaves()
        if not chunked:
            temps.measure(lambda bb, store: self.evaluate(bb, store, leaves, plan.pmax, fw, None,
                                                          self._dst(None, plan.pmax, fw)))
            return temps, self._specs(temps, fw, 1)

        def dry(bb, store) -> None:
            self._chunk(bb, store, leaves, plan.pmax, fw, None, reduces, None)
            preset = {id(r): dry_operand("V") for r in reduces}
            coords = Coords(plan.p_axis, 0, tuple((a, 0, 1) for a in plan.free))
            TileEvaluator(bb, store, plan.pmax, 1, leaves, preset=preset, coords=coords).run(
                plan.root, self._dst(None, plan.pmax, 1))

        temps.measure(dry)
        racc = max([4] + [itemsize(r.dtype) for r in reduces])  # 8 for 64-bit integer accumulators
        return temps, self._specs(temps, fw, -(-plan.F // fw)) + [PoolSpec("racc", "sbuf", racc, 2 * len(reduces))]

    def _specs(self, temps: Temporaries, fmax: int, f_tiles: int) -> list[PoolSpec]:
        plan = self.plan
        specs = temps.specs() + [self.out_spec(fmax, 2)]
        return specs + self.loader.specs(plan.pmax, fmax, f_tiles, 0)

    def _depends_on_reduce(self) -> bool:
        """Does a full-size value (varying along the free axes) depend on a reduction?"""
        full = varies(self.plan.root, self.plan.free)
        after: dict[int, bool] = {}
        for node in walk(self.plan.root):
            after[id(node)] = node.is_reduce or any(after[id(i)] for i in node.inputs)
            if full[id(node)] and any(after[id(i)] for i in node.inputs):
                return True
        return False

    def _chunk(self, b, temps: TempStore, operands, pw, fw, coords, reduces, accs, index: int = 0,
               label: str = "") -> None:
        """Reduce one chunk of the row into the running accumulators."""
        coords = coords or self.first_coords(fw)
        partial = TileEvaluator(b, temps, pw, fw, operands, label=label, coords=coords).values(reduces)
        if accs is None:
            return
        for node, value in zip(reduces, partial, strict=True):
            acc, op = accs[id(node)], node.op[len("reduce_"):]
            if index == 0:
                if isinstance(value, PVec):
                    b.copy(acc, value.ap, f"{label} {node.op}")
                else:
                    b.memset(acc, value.value, f"{label} {node.op}")  # type: ignore[union-attr]
            elif integer.needs_exact_reduce(node):  # exact integers: combine on GpSimd (math=int)
                if isinstance(value, PVec):
                    b.emit("pool", "tensor_tensor", f"{label} {node.op} combine", {"op": op, "math": "int"},
                           dst=acc, a=acc, b=value.ap)
                else:
                    b.emit("pool", "tensor_scalar", f"{label} {node.op} combine",
                           {"op": op, **integer.immediate_attrs(value.value), "math": "int"},  # type: ignore[union-attr]
                           dst=acc, src=acc)
            elif isinstance(value, PVec):
                b.tensor_tensor(acc, acc, value.ap, op, f"{label} {node.op} combine")
            else:
                b.tensor_scalar(acc, acc, op, value.value, f"{label} {node.op} combine")  # type: ignore[union-attr]


def elementwise_kernel(builder: ProgramBuilder, root: Node, out: View, name: str, where: str) -> None:
    """A kernel computing the elementwise expression `root` into `out`."""
    fused_kernel(builder, root, out, name, where)


def copy_kernel(builder: ProgramBuilder, src: View, out: View, name: str, where: str) -> None:
    """Materialize `src` into `out` (same logical dims): HBM-to-HBM DMA when no cast is pending,
    else through SBUF with a converting copy."""
    if out.size == 0:
        return
    if src.cast is not None or src.dtype != out.dtype:
        stored = src.with_cast(src.stored_dtype)
        if not stored.is_dense_row_major() and not src.is_const:
            # a rearrangement and a cast (a patch embedding's image as im2col rows in bf16): the
            # rearrangement as DMAs into a dense tensor of the stored type, then the cast over
            # whole rows (cast tile by tile, the tiles were the rearrangement's: [16 x 16] for 16x16
            # patches, 588 kernels' worth of DMA latency for one 224x224 image)
            dense = builder.scratch(stored.dtype, out.dims, label=f"{name} rearranged")
            copy_kernel(builder, stored, dense, f"{name}.rearrange", where)
            src = dense.with_cast(out.dtype)
        fused_kernel(builder, unary("convert", leaf(src), out.dtype), out, name, where)
        return
    views, _ = normalize_axes([out, src], storage_order(out))
    if views[0].size > builder.options.strided_dma_max_elements and can_transpose(views[1], views[0]):
        builder.layout_notes.append(f"{name}: transposed on PE ({list(src.dims)})")
        transpose_kernel(builder, views[1], views[0], name, where)
        return
    builder.place(src)
    views = [out, src]
    if out.rank == 0:
        views = [v.insert_axis(0) for v in views]
    views, order = normalize_axes(views, storage_order(views[0]))
    out_v, src_v = views
    f_axis = order[-1]
    p_axis = order[-2] if len(order) >= 2 else None
    parts = builder.target.partitions
    P = out_v.dims[p_axis] if p_axis is not None else 1
    F = out_v.dims[f_axis]
    builder.alloc.begin_kernel(name, [], where)
    for idx in itertools.product(*(range(out_v.dims[a]) for a in order[:-2])):
        fixed = dict(zip(order[:-2], idx, strict=True))
        for p0 in range(0, P, parts):
            pw = min(parts, P - p0)
            builder.dma(out_v.hbm_ap(p_axis, p0, pw, [(f_axis, 0, F)], fixed),
                        src_v.hbm_ap(p_axis, p0, pw, [(f_axis, 0, F)], fixed), f"{name} copy")
    builder.alloc.end_kernel()
