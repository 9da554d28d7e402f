"""Lowering of sort, argsort, msort and topk (torch's order: NaN above everything, -0 equal to +0, ties by
index as with ``stable=True``).

``sort`` is an HLO sort of (x, iota) along the dim with a stable comparator on x alone; for floats the
comparator first maps -0 to +0 and every NaN to +NaN, then compares with ``type=TOTALORDER`` (LT, or GT
when descending), as jax writes ``jnp.sort``: so NaNs sort last (first when descending) and equal values,
-0 and +0 included, keep their order. ``topk`` is the HLO ``topk`` (largest or smallest along the last
dim, ties by lower index) of the same canonical values, the dim moved last and back (its values are the
canonical ones: a -0 comes back as +0, a NaN as +NaN).
"""

from __future__ import annotations

from hlo.errors import LoweringError
from hlo.ir import Instruction, Shape

from .builder import HloBuilder
from .ops_common import is_float, norm_dim


def _canonical(b: HloBuilder, x: Instruction) -> Instruction:
    """x with -0 -> +0 and NaN -> +NaN (floats; other types unchanged)."""
    if not is_float(x.shape.dtype):
        return x
    dt = x.shape.dtype
    nan, zero = b.scalar(float("nan"), dt), b.scalar(0.0, dt)
    return b.select(b.compare(x, x, "NE"), nan, b.select(b.compare(x, zero, "EQ"), zero, x))


def _comparator(b: HloBuilder, dtypes: list[str], descending: bool):
    """to_apply of a sort of operands of `dtypes` keyed on operand 0."""
    params = [Shape.array(d, ()) for d in dtypes for _ in range(2)]

    def body(args: list[Instruction]) -> Instruction:
        x, y = args[0], args[1]
        direction = "GT" if descending else "LT"
        if is_float(dtypes[0]):
            return b.emit("compare", Shape.array("pred", ()), [_canonical(b, x), _canonical(b, y)],
                          direction=direction, type="TOTALORDER")
        return b.emit("compare", Shape.array("pred", ()), [x, y], direction=direction)

    return b.computation("compare", params, body)


def sort_with_indices(b: HloBuilder, x: Instruction, dim: int, descending: bool) -> tuple[Instruction, Instruction]:
    if x.shape.rank == 0:
        return x, b.scalar(0, "s64")
    d = norm_dim(dim, x.shape.rank)
    index = b.iota("s64", x.shape.dims, d)
    cmp = _comparator(b, [x.shape.dtype, "s64"], descending)
    out = b.emit("sort", Shape.tuple_of([x.shape, index.shape]), [x, index], dimensions=(d,), is_stable="true",
                 to_apply=cmp)
    return (b.emit("get-tuple-element", x.shape, [out], index=0),
            b.emit("get-tuple-element", index.shape, [out], index=1))


def sort(b: HloBuilder, x: Instruction, dim: int = -1, descending: bool = False) -> tuple[Instruction, Instruction]:
    return sort_with_indices(b, x, dim, descending)


def sort_stable(b: HloBuilder, x: Instruction, stable: bool | None = None, dim: int = -1,
                descending: bool = False) -> tuple[Instruction, Instruction]:
    return sort_with_indices(b, x, dim, descending)


def argsort(b: HloBuilder, x: Instruction, dim: int = -1, descending: bool = False) -> Instruction:
    return sort_with_indices(b, x, dim, descending)[1]


def argsort_stable(b: HloBuilder, x: Instruction, stable: bool = False, dim: int = -1,
                   descending: bool = False) -> Instruction:
    return sort_with_indices(b, x, dim, descending)[1]


def msort(b: HloBuilder, x: Instruction) -> Instruction:
    return sort_with_indices(b, x, 0, False)[0]


def topk(b: HloBuilder, x: Instruction, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
         ) -> tuple[Instruction, Instruction]:
    rank = x.shape.rank
    if rank == 0:
        if k not in (0, 1):
            raise LoweringError(f"topk: k={k} out of range for a 0-d tensor")
        return x, b.scalar(0, "s64")
    d = norm_dim(dim, rank)
    if not 0 <= k <= x.shape.dims[d]:
        raise LoweringError(f"topk: k={k} out of range for dim {d} of size {x.shape.dims[d]}")
    perm = [a for a in range(rank) if a != d] + [d]
    moved = b.transpose(x, perm) if d != rank - 1 else x
    top = b.emit_inferred("topk", [_canonical(b, moved)], k=int(k), largest="true" if largest else "false")
    shapes = top.shape.tuple_shapes
    values = b.emit("get-tuple-element", shapes[0], [top], index=0)
    idx = b.convert(b.emit("get-tuple-element", shapes[1], [top], index=1), "s64")
    if d != rank - 1:
        inverse = [perm.index(a) for a in range(rank)]
        values, idx = b.transpose(values, inverse), b.transpose(idx, inverse)
    return values, idx


RULES = {
    "aten.sort.default": sort,
    "aten.sort.stable": sort_stable,
    "aten.argsort.default": argsort,
    "aten.argsort.stable": argsort_stable,
    "aten.msort.default": msort,
    "aten.topk.default": topk,
}
