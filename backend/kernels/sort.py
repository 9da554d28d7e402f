"""Sort: a bitonic sorting network along the free axis, every operand carried along, stable.

Layout: the sorted dimension goes on the free axis of SBUF tiles, one row (one combination of the other
dimensions) per partition, 128 rows per tile. A row of n elements is padded to N = 2^m; the padding is
never compared with real elements by value (below).

The network: for every block size s = 2, 4, ..., N and distance j = s/2, ..., 1, the element at i is paired
with i + j (i & j == 0), in ascending blocks where i & s == 0 and descending ones elsewhere. The pairs of
one stage are two strided views (lower, upper) of each carried array: [blocks (stride 2s), runs (stride
2j), j elements]; the ascending and the descending blocks are one pass each. A pass evaluates, for all its
pairs at once, whether the pair must be exchanged (X before Y, X the upper element in ascending blocks and
the lower one in descending ones):

    before(X, Y) = less(X, Y) or (not less(Y, X) and index(X) < index(Y))

`less` is the comparator (sort_compare.py), `index` the element's original position, carried as an f32
array (exact below 2^24): ties keep their original order, so the result is the stable sort's, whatever
the comparator. Padding elements have index >= n: a pair with one of them is ordered by index alone, so
padding sinks to the end. The exchange writes every carried array into its other buffer (ping-pong) with
two `select`s per pass (exact moves of any dtype).

Cost: log2(N) (log2(N) + 1) / 2 stages; per stage the comparator twice and the stability terms on N/2
pairs, and two selects per carried array.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from backend.alloc import Pool, PoolSpec, Tile
from backend.emit import ProgramBuilder
from backend.fused import view_of
from backend.kernels import expr
from backend.kernels.evaluate import Temporaries, Tensor, TileEvaluator, dry_operand
from backend.kernels.expr import Node
from backend.kernels.integer import total_order_keys
from backend.kernels.sort_compare import Comparator
from backend.layout import View, isa_dtype_of, itemsize
from hlo.errors import CompilationError
from hlo.ir import Computation
from hlo.ir import Instruction as HloInstruction
from isa.program import AccessPattern

MAX_INDEX = 1 << 24  # indices are carried as f32
CHUNK = 1024  # elements (pairs) per evaluation: the temporaries are this wide, whatever the row length


@dataclass
class RowLayout:
    """Views with the rows (every axis but `axis`) in front, merged where the views allow it: loops over
    `loops`, the last row axis on partitions, the sorted axis last."""

    views: list[View]
    loops: tuple[int, ...]  # sizes of the looped row axes
    rows: int  # size of the partition axis
    n: int  # size of the sorted axis

    @staticmethod
    def of(views: list[View], axis: int) -> RowLayout:
        rank = views[0].rank
        perm = tuple(a for a in range(rank) if a != axis) + (axis,)
        moved = [v.transpose(perm) for v in views]
        moved = [v.insert_axis(0) for v in moved]  # at least one row axis
        nr = rank  # row axes: 0..nr-1, sorted axis nr
        for i in reversed(range(nr - 1)):
            merged = [v.merge_axes(i) for v in moved]
            if all(m is not None for m in merged):
                moved = [m for m in merged if m is not None]
                nr -= 1
        dims = moved[0].dims
        return RowLayout(moved, tuple(dims[:nr - 1]), dims[nr - 1], dims[nr])

    def tiles(self, parts: int):
        """(fixed loop indices, first row, rows) of every tile."""
        for index in itertools.product(*(range(d) for d in self.loops)):
            for p0 in range(0, self.rows, parts):
                yield dict(enumerate(index)), p0, min(parts, self.rows - p0)

    def load_ap(self, k: int, fixed: dict[int, int], p0: int, pw: int, start: int = 0,
                count: int | None = None) -> AccessPattern:
        nl = len(self.loops)
        count = self.n - start if count is None else count
        return self.views[k].hbm_ap(nl, p0, pw, [(nl + 1, start, count)], fixed)


def sort_stages(N: int) -> list[tuple[int, int]]:
    """The stages (s, j) of the bitonic network on N (a power of two) elements."""
    out = []
    s = 2
    while s <= N:
        j = s // 2
        while j >= 1:
            out.append((s, j))
            j //= 2
        s *= 2
    return out


def pass_pattern(N: int, s: int, j: int, descending: bool) -> tuple[int, list[tuple[int, int]], int]:
    """(first element, free pattern, pairs) of the lower elements of one pass."""
    blocks = N // (2 * s) if descending else max(1, N // (2 * s))
    dims = [(2 * s, blocks), (2 * j, s // (2 * j)), (1, j)]
    pattern = [(st, c) for st, c in dims if c > 1] or [(1, 1)]
    return (s if descending else 0), pattern, blocks * (s // 2)


class SortKernel:
    """One HLO sort: operands `xs` (views), outputs `outs`, along `axis` with comparator `cmp`."""

    def __init__(self, builder: ProgramBuilder, name: str, where: str, xs: list[View], outs: list[View],
                 axis: int, cmp: Comparator):
        self.b, self.name, self.where, self.cmp = builder, name, where, cmp
        self.layout = RowLayout.of(xs + outs, axis)
        self.k = len(xs)
        self.n = self.layout.n
        self.N = 1 << max(0, math.ceil(math.log2(max(self.n, 1))))
        if self.N > MAX_INDEX:
            raise CompilationError(f"{where}: a sort of {self.n} elements per row is not supported (indices are "
                                   f"carried as f32)")
        # carried arrays: operands, derived arrays (those that are not an operand itself), the index
        self.dtypes = [v.dtype for v in xs] + [d.dtype for d in cmp.derived] + ["f32"]
        self.derived_at = [self.k + i for i in range(len(cmp.derived))]
        for i, d in enumerate(cmp.derived):
            if d.node is None and not d.total_order:
                self.derived_at[i] = d.operand
        self.index = len(self.dtypes) - 1
        self.carried = sorted(set(range(self.k)) | set(self.derived_at) | {self.index})
        self.root = self._swap_expression()
        self.chunk = min(max(self.N // 2, 1), CHUNK)
        self.temps = Temporaries(f"{name}.t", self.chunk)

    def _swap_expression(self) -> Node:
        """Whether a pair (X, Y) is exchanged, over leaves X/Y of the carried arrays."""
        self.side_leaves: dict[tuple[int, str], Node] = {}
        cmp = self.cmp

        def leaf(array: int, side: str) -> Node:
            return self.side_leaves.setdefault((array, side), Node("leaf", self.dtypes[array]))

        def less(first: str, second: str) -> Node:
            sides = {0: first, 1: second}
            memo: dict[int, Node] = {}
            for (d, side), node in cmp.leaves.items():
                memo[id(node)] = leaf(self.derived_at[d], sides[side])
            return _substitute(cmp.root, memo)

        # the stability terms as 0.0/1.0 in f32 (exact): the vector engine computes them, GpSimd only the
        # comparator's integer compares
        ix, iy = leaf(self.index, "X"), leaf(self.index, "Y")
        lt_index = Node("is_lt", "f32", (ix, iy))
        not_yx = Node("is_equal", "f32", (less("Y", "X"), expr.scalar(0.0, "f32")))
        before = Node("max", "f32", (less("X", "Y"), Node("multiply", "f32", (not_yx, lt_index))))
        if self.n == self.N:
            return before
        both_real = Node("is_lt", "f32", (Node("max", "f32", (ix, iy)), expr.scalar(self.n, "f32")))
        return Node("select", "f32", (both_real, before, lt_index))

    # -- emission -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        b, N = self.b, self.N
        if self.n == 0 or self.layout.rows == 0 or any(d == 0 for d in self.layout.loops):
            return
        parts, chunk = min(b.target.partitions, self.layout.rows), self.chunk
        for d in self.cmp.derived:
            if d.node is not None:
                self.temps.measure(lambda bb, t, d=d: TileEvaluator(bb, t, parts, chunk,
                                                                    {id(d.source): dry_operand("T")},
                                                                    ).run(d.node, dry_operand("T").ap))
        self.temps.measure(lambda bb, t: TileEvaluator(bb, t, parts, chunk, {id(n): dry_operand("T") for n in
                                                                             self.side_leaves.values()}
                                                       ).run(self.root, dry_operand("T").ap))
        specs = [PoolSpec(f"a{i}", "sbuf", N * max(4, itemsize(self.dtypes[i])), 2) for i in self.carried]
        specs += [PoolSpec("swap", "sbuf", chunk * 4, 2)] + self.temps.specs()
        if not b.alloc.fits(specs):
            raise CompilationError(f"{self.where}: a sort of {self.n} elements per row ({len(self.carried)} arrays "
                                   f"carried) does not fit in SBUF")
        pools = b.alloc.begin_kernel(self.name, specs, self.where)
        self.temps.bind(pools)
        for fixed, p0, pw in self.layout.tiles(b.target.partitions):
            self._tile(pools, fixed, p0, pw)
        b.alloc.end_kernel()

    def _tile(self, pools: dict[str, Pool], fixed: dict[int, int], p0: int, pw: int) -> None:
        b, n, N = self.b, self.n, self.N
        label = f"{self.name} rows {p0}:{p0 + pw}"
        bufs: dict[int, list[Tile]] = {i: [pools[f"a{i}"].next(), pools[f"a{i}"].next()] for i in self.carried}
        for i in range(self.k):
            dst = bufs[i][0].flat(self.dtypes[i], pw, n)
            b.dma(dst, self.layout.load_ap(i, fixed, p0, pw), f"{label} load {i}")
            if N > n:
                b.memset(bufs[i][0].flat(self.dtypes[i], pw, N - n, n), 0.0, f"{label} pad {i}")
        b.iota(bufs[self.index][0].flat("f32", pw, N), 0, 0, f"{label} index")
        for d, at in zip(self.cmp.derived, self.derived_at, strict=True):
            if at < self.k:
                continue
            src = bufs[d.operand][0].flat(self.dtypes[d.operand], pw, N)
            value = bufs[at][1].flat(d.value_dtype, pw, N) if d.total_order else bufs[at][0].flat(d.dtype, pw, N)
            if d.node is not None:
                for c0 in range(0, N, self.chunk):  # elementwise: in chunks as wide as the temporaries
                    cw = min(self.chunk, N - c0)
                    part = (lambda ap, c0=c0, cw=cw: _flat_part(ap, c0, cw))
                    TileEvaluator(b, self.temps.store(), pw, cw, {id(d.source): Tensor(part(src))},
                                  label=f"{label} derived {c0}").run(d.node, part(value))
            else:
                value = src
            if d.total_order:
                total_order_keys(b, bufs[at][0].flat(d.dtype, pw, N), value, f"{label} keys")
        cur = 0
        for s, j in sort_stages(N):
            for descending in (False, True) if s < N else (False,):
                self._pass(pools, bufs, cur, pw, s, j, descending, label)
            cur = 1 - cur
        for i in range(self.k):
            out = self.layout.load_ap(self.k + i, fixed, p0, pw)
            b.dma(out, bufs[i][cur].flat(self.dtypes[i], pw, n), f"{label} store {i}")


    def _pass(self, pools: dict[str, Pool], bufs: dict[int, list[Tile]], cur: int, pw: int, s: int, j: int,
              descending: bool, label: str) -> None:
        """One pass of stage (s, j): the pairs of the ascending (or descending) blocks, from buffer `cur` into
        the other one."""
        b = self.b
        start, pattern, pairs = pass_pattern(self.N, s, j, descending)

        def view(i: int, buf: int, upper: bool) -> AccessPattern:
            return bufs[i][buf].ap(self.dtypes[i], pw, pattern, start + (j if upper else 0))

        x_upper = not descending  # ascending blocks: X is the upper element
        tag = f"{label} s{s} j{j}{' desc' if descending else ''}"
        for offset, piece in split_pattern(pattern, self.chunk):
            def part(ap: AccessPattern, piece=piece, offset=offset) -> AccessPattern:
                return replace(ap, offset=ap.offset + offset * ap.itemsize, pattern=tuple(piece))

            count = math.prod(c for _, c in piece)
            leaves = {id(node): Tensor(part(view(i, cur, (side == "X") == x_upper)))
                      for (i, side), node in self.side_leaves.items()}
            swap = pools["swap"].next().flat("f32", pw, count)
            where = f"{tag} @{offset}" if count < pairs else tag
            TileEvaluator(b, self.temps.store(), pw, count, leaves, label=where).run(self.root, swap)
            for i in self.carried:
                lo, hi = part(view(i, cur, False)), part(view(i, cur, True))
                b.select(part(view(i, 1 - cur, False)), swap, hi, lo, f"{where} lower {i}")
                b.select(part(view(i, 1 - cur, True)), swap, lo, hi, f"{where} upper {i}")


def split_pattern(pattern: list[tuple[int, int]], limit: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """`pattern` (free dims, outermost first) as pieces of at most `limit` elements: (element offset, pattern)."""
    total = math.prod(c for _, c in pattern)
    if total <= limit:
        return [(0, list(pattern))]
    (stride, count), inner = pattern[0], list(pattern[1:])
    inner_size = math.prod(c for _, c in inner) if inner else 1
    if inner_size <= limit:
        group = max(1, limit // inner_size)
        return [(k * stride, [(stride, min(group, count - k))] + inner) for k in range(0, count, group)]
    if not inner:  # one long run
        return [(k * stride, [(stride, min(limit, count - k))]) for k in range(0, count, limit)]
    return [(k * stride + off, piece) for k in range(count) for off, piece in split_pattern(inner, limit)]


def _flat_part(ap: AccessPattern, start: int, count: int) -> AccessPattern:
    return replace(ap, offset=ap.offset + start * ap.itemsize, pattern=((1, count),))


def _substitute(root: Node, memo: dict[int, Node]) -> Node:
    """A copy of `root` with the nodes in `memo` (by id) replaced."""
    for node in expr.walk(root):
        if id(node) not in memo:
            memo[id(node)] = Node(node.op, node.dtype, tuple(memo[id(i)] for i in node.inputs), node.view,
                                  node.value, node.inst) if node.inputs else node
    return memo[id(root)]


def operand_views(lw: Any, inst: HloInstruction, ops: list) -> list[View]:
    """The operands as views the kernel can DMA from: pending casts and constants materialized."""
    views = []
    for value, operand in zip(ops, inst.operands, strict=True):
        view = view_of(value, operand)
        if view.cast is not None or view.is_const:
            view = lw.b.place(lw.materialize(view, inst))
        views.append(view)
    return views


def result_views(lw: Any, inst: HloInstruction) -> list[View]:
    """Where the kernel writes its results: the instruction's destination, or fresh scratch tensors (tuples)."""
    if not inst.shape.is_tuple:
        return [lw.destination(inst)]
    return [lw.b.scratch(isa_dtype_of(inst, s.dtype), s.dims, label=f"{inst.name}.{i}")
            for i, s in enumerate(inst.shape.tuple_shapes)]


def lower_sort(lw: Any, inst: HloInstruction, ops: list) -> Any:
    """The backend handler of an HLO sort (lower.KERNELS)."""
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, Computation):
        raise CompilationError(f"{inst.where()}: sort without a comparator")
    (axis,) = tuple(inst.attrs["dimensions"])
    xs = operand_views(lw, inst, ops)
    outs = result_views(lw, inst)
    cmp = Comparator(comp, [x.dtype for x in xs], inst.where())
    SortKernel(lw.b, lw.name(inst), inst.where(), xs, outs, int(axis), cmp).run()
    return outs if inst.shape.is_tuple else outs[0]
