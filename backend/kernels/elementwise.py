"""Elementwise kernels (kLoop fusions, lone elementwise ops, copies that materialize a view).

The output's axes are put in its storage order and merged wherever every operand allows it; the minor
axis becomes the free dim of a tile, the next one the partition dim, and any others are looped over.
Each tile: load the leaves, evaluate the expression (expr.TileEvaluator), store.
"""

from __future__ import annotations

import itertools

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.expr import Node, TileEvaluator, leaf, substitute_leaves, temps_needed, unary, walk
from backend.kernels.leaves import LeafLoader
from backend.layout import View, itemsize, normalize_axes
from compiler.errors import CompilationError


def storage_order(view: View) -> list[int]:
    """Logical axes of `view` from major to minor storage (stride descending; ties keep axis order)."""
    return sorted(range(view.rank), key=lambda a: (-view.strides[a], a))


def elementwise_kernel(builder: ProgramBuilder, root: Node, out: View, name: str, where: str) -> None:
    """Emit a kernel computing `root` (an expression over views with out's logical dims) into `out`."""
    leaves = [n for n in walk(root) if n.op == "leaf"]
    if any(n.op == "acc" for n in walk(root)):
        raise CompilationError(f"{where}: an accumulator outside a dot kernel")
    views = [out] + [n.view for n in leaves if n.view is not None]
    if out.rank == 0:
        views = [v.insert_axis(0) for v in views]
    order = storage_order(views[0])
    views, order = normalize_axes(views, order)
    if len(order) == 1 and views[0].dims[0] >= 256 and views[0].dims[0] % 128 == 0:
        views = [v.split_axis(0, views[0].dims[0] // 128) for v in views]
        order = [0, 1]
    out_v = views[0]
    root = substitute_leaves(root, {id(n): v for n, v in zip(leaves, views[1:], strict=True)})
    f_axis = order[-1]
    p_axis = order[-2] if len(order) >= 2 else None
    loop_axes = order[:-2]
    parts = builder.target.partitions
    P = out_v.dims[p_axis] if p_axis is not None else 1
    F = out_v.dims[f_axis]
    pmax = min(parts, P)

    n_temps = temps_needed(root)
    fw_max = min(builder.options.elementwise_free, F)
    budget = builder.options.elementwise_budget_bytes
    while True:
        loader = LeafLoader(builder, root, p_axis, f_axis, name)
        f_tiles = -(-F // fw_max)
        specs = [PoolSpec("temps", "sbuf", fw_max * 4, 2 * n_temps),
                 PoolSpec("out", "sbuf", fw_max * itemsize(out_v.dtype), builder.options.output_buffers)]
        specs += loader.specs(pmax, fw_max, f_tiles, budget // 4)
        if builder.alloc.sbuf_need(specs) <= min(budget, builder.alloc.sbuf_capacity()) or fw_max <= 64:
            break
        fw_max = max(64, fw_max // 2)
    pools = builder.alloc.begin_kernel(name, specs, where)
    loader.bind(pools)
    for idx in itertools.product(*(range(out_v.dims[a]) for a in loop_axes)):
        fixed = dict(zip(loop_axes, idx, strict=True))
        for p0 in range(0, P, parts):
            pw = min(parts, P - p0)
            for f0 in range(0, F, fw_max):
                fw = min(fw_max, F - f0)
                label = f"{name}[{','.join(map(str, idx))}{',' if idx else ''}{p0},{f0}]"
                operands = loader.load(fixed, p0, pw, f0, fw)
                dst = pools["out"].next().flat(out_v.dtype, pw, fw)
                TileEvaluator(builder, pools["temps"], pw, fw, operands, label=label).run(root, dst)
                builder.dma(out_v.hbm_ap(p_axis, p0, pw, [(f_axis, f0, fw)], fixed), dst, f"{label} store")
    builder.alloc.end_kernel()


def copy_kernel(builder: ProgramBuilder, src: View, out: View, name: str, where: str) -> None:
    """Materialize `src` into `out` (same logical dims): HBM-to-HBM DMA when no cast is pending,
    else through SBUF with a converting copy."""
    if src.cast is not None or src.dtype != out.dtype:
        elementwise_kernel(builder, unary("convert", leaf(src), out.dtype), out, name, where)
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
    for idx in itertools.product(*(range(out_v.dims[a]) for a in order[:-2])):
        fixed = dict(zip(order[:-2], idx, strict=True))
        for p0 in range(0, P, parts):
            pw = min(parts, P - p0)
            builder.dma(out_v.hbm_ap(p_axis, p0, pw, [(f_axis, 0, F)], fixed),
                        src_v.hbm_ap(p_axis, p0, pw, [(f_axis, 0, F)], fixed), f"{name} copy")
