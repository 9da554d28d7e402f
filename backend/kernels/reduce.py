"""Reductions: along the free axes (rows) or across partitions (columns).

Which axis goes on the partitions follows the operand's storage: when a reduced axis is the operand's
minor (contiguous) axis, rows go on the partitions and the reduction runs along the free dim in the
row kernel (elementwise.fused_kernel: DVE tensor_reduce, ACT accumulate). Otherwise the reduced axis
goes on the partitions, loaded in contiguous rows of a kept axis, and is reduced across partitions:
- add: PE multiplies by a ones vector, psum[1, F] = ones[K, 1]^T @ x[K, F], accumulating every block
  of 128 reduced rows in PSUM;
- max/min: POOL partition_reduce of each block, combined on DVE.
Partition reductions compute in fp32: integer reductions that fp32 would not compute exactly
(integer.needs_exact_reduce) and products instead load the reduced axis along the free dim (a strided
load) and go through the row kernel, which reduces integers exactly on GpSimd (math=int).
"""

from __future__ import annotations

import itertools

from backend.alloc import PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.kernels import integer
from backend.kernels.elementwise import fused_kernel, merge_groups
from backend.kernels.expr import REDUCE_IDENTITY, Node, walk
from backend.layout import View, itemsize

PE_DTYPES = ("f32", "bf16", "f16")


def reduce_kernel(builder: ProgramBuilder, root: Node, out: View, reduce_axes: tuple[int, ...], name: str,
                  where: str) -> None:
    """A kernel for a lone reduce: `root` over the operand's dims, `out` broadcast along reduce_axes."""
    column = _column_operand(root)
    if column is None or _reduces_minor_axis(column[0], reduce_axes) or len(reduce_axes) == column[0].rank \
            or any(n.is_reduce and (integer.needs_exact_reduce(n) or n.op == "reduce_multiply") for n in walk(root)):
        # integers that fp32 would not reduce exactly, and products: the reduced axis goes on the free dim
        # (a strided load) and the row kernel reduces it exactly on GpSimd (math=int)
        fused_kernel(builder, root, out, name, where, reduce_axes)
        return
    _ColumnReduce(builder, *column, out, reduce_axes, name, where).emit()


def _column_operand(root: Node) -> tuple[View, str, float | None] | None:
    """(operand view, kind, init or None) when root is reduce(leaf) (init: a scalar combined after)."""
    init = None
    if not root.is_reduce and len(root.inputs) == 2 and root.inputs[0].is_reduce and root.inputs[1].op == "scalar":
        root, init = root.inputs[0], root.inputs[1].value
    if not root.is_reduce:
        return None
    x = root.inputs[0]
    while x.op == "convert" and x.inputs[0].op == "leaf":
        x = x.inputs[0]
    if x.op != "leaf" or x.view is None:
        return None
    kind = root.op[len("reduce_"):]
    if kind == "add" and x.view.stored_dtype not in PE_DTYPES:
        return None
    return x.view, kind, init


def _reduces_minor_axis(view: View, reduce_axes: tuple[int, ...]) -> bool:
    strided = [a for a in range(view.rank) if view.dims[a] > 1 and view.strides[a] != 0]
    if not strided:
        return True
    return min(strided, key=lambda a: abs(view.strides[a])) in reduce_axes


class _ColumnReduce:
    def __init__(self, builder: ProgramBuilder, x: View, kind: str, init: float | None, out: View,
                 reduce_axes: tuple[int, ...], name: str, where: str):
        kept = sorted((a for a in range(x.rank) if a not in reduce_axes), key=lambda a: (-x.strides[a], a))
        red = sorted(reduce_axes, key=lambda a: (-x.strides[a], a))
        (self.x, self.out), (kept, red) = merge_groups([x, out], [kept, red])
        self.b, self.kind, self.init, self.name, self.where = builder, kind, init, name, where
        self.c_axis, self.kept_loops = kept[-1], kept[:-1]
        self.p_axis, self.red_loops = red[-1], red[:-1]
        self.F = self.x.dims[self.c_axis]
        self.fw_max = min(self.F, builder.target.data["pe"]["max_n"] if kind == "add" else 2048)

    def emit(self) -> None:
        b, x = self.b, self.x
        stored = x.stored_dtype
        parts = b.target.partitions
        specs = [PoolSpec("in", "sbuf", self.fw_max * itemsize(stored), 3),
                 PoolSpec("out", "sbuf", self.fw_max * itemsize(self.out.dtype), 2),
                 PoolSpec("acc", "psum", 0, 2) if self.kind == "add" else
                 PoolSpec("acc", "sbuf", self.fw_max * 4, 2)]
        if self.kind != "add":
            specs.append(PoolSpec("part", "sbuf", self.fw_max * 4, 2))
        pools = b.alloc.begin_kernel(self.name, specs, self.where)
        b.place(x)
        ones = b.ones(stored) if self.kind == "add" else None
        P = x.dims[self.p_axis]
        blocks = [(fixed_r, p0, min(parts, P - p0))
                  for fixed_r in itertools.product(*(range(x.dims[a]) for a in self.red_loops))
                  for p0 in range(0, P, parts)]
        for idx in itertools.product(*(range(x.dims[a]) for a in self.kept_loops)):
            fixed = dict(zip(self.kept_loops, idx, strict=True))
            for f0 in range(0, self.F, self.fw_max):
                fw = min(self.fw_max, self.F - f0)
                label = f"{self.name}[{','.join(map(str, idx))}{',' if idx else ''}{f0}]"
                acc = pools["acc"].next()
                for i, (fixed_r, p0, pw) in enumerate(blocks):
                    where = {**fixed, **dict(zip(self.red_loops, fixed_r, strict=True))}
                    tile = pools["in"].next().flat(stored, pw, fw)
                    b.dma(tile, x.hbm_ap(self.p_axis, p0, pw, [(self.c_axis, f0, fw)], where), f"{label} load")
                    self._accumulate(acc, tile, ones, pools, i, fw, label)
                result = pools["out"].next().flat(self.out.dtype, 1, fw)
                acc_ap = acc.flat("f32", 1, fw)
                if self.init is not None and self.init != REDUCE_IDENTITY[self.kind]:
                    b.tensor_scalar(result, acc_ap, self.kind, self.init, f"{label} init")
                else:
                    b.copy(result, acc_ap, f"{label} result")
                b.dma(self.out.hbm_ap(None, 0, 1, [(self.c_axis, f0, fw)], fixed), result, f"{label} store")
        b.alloc.end_kernel()

    def _accumulate(self, acc: Tile, tile, ones: Tile | None, pools, i: int, fw: int, label: str) -> None:
        b = self.b
        pw = tile.partitions
        if ones is not None:
            b.load_stationary(ones.flat(tile.dtype, pw, 1), f"{label} ones")
            b.multiply_moving(acc.flat("f32", 1, fw), tile, acc=i > 0, comment=f"{label} sum")
            return
        target = acc.flat("f32", 1, fw) if i == 0 else pools["part"].next().flat("f32", 1, fw)
        b.emit("pool", "partition_reduce", f"{label} {self.kind}", {"op": self.kind}, dst=target, src=tile)
        if i > 0:
            b.tensor_tensor(acc.flat("f32", 1, fw), acc.flat("f32", 1, fw), target, self.kind,
                            f"{label} combine")
