"""Writes into a tensor: ``x[idx] = v`` and the functional ops torch.export turns such writes into.

HLO values are immutable, so a write is a new value: ``slice_scatter``/``select_scatter`` (a region of
unit-step slices) are a ``dynamic-update-slice`` at constant starts; a strided region is a ``select``
between x and the source gathered to x's positions; ``index_put`` (integer index tensors) is a
``scatter`` whose combiner replaces (or adds, with ``accumulate=True``). fx capture records
``x[...] = v`` as ``operator.setitem``, and fx_trace rebinds ``x`` to the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlo.ir import Instruction, Shape, Window

from .builder import HloBuilder, broadcast_dims
from .ops_common import Value, norm_dim, operand, require
from .ops_index import element_coordinates, index, index_tensor, take

_INDEX = "s64"


def _update_at(b: HloBuilder, x: Instruction, src: Instruction, starts: Sequence[int]) -> Instruction:
    """``x`` with ``src`` written at ``starts`` (one start per dim)."""
    src = b.convert(src, x.shape.dtype)
    if src.shape.dims == x.shape.dims:
        return src
    return b.emit_inferred("dynamic-update-slice", [x, src, *[b.scalar(s, _INDEX) for s in starts]])


def copy(b: HloBuilder, x: Instruction, src: Instruction, non_blocking: bool = False) -> Instruction:
    """``copy(x, src)``: src broadcast to x's shape in x's dtype."""
    return b.convert(b.broadcast_to(src, x.shape.dims), x.shape.dtype)


def slice_scatter(b: HloBuilder, x: Instruction, src: Instruction, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    n = x.shape.dims[d]
    lo, hi, _ = slice(start, end, step).indices(n)
    require(step > 0, f"slice step {step} must be positive")
    count = len(range(lo, hi, step))
    require(src.shape.dims[d] == count, f"slice_scatter source {list(src.shape.dims)} does not fit {count} positions")
    if step == 1:
        return _update_at(b, x, src, [lo if i == d else 0 for i in range(x.shape.rank)])
    pos = b.iota(_INDEX, [n], 0)  # position p takes src[(p - lo) / step] where (p - lo) % step == 0
    rel = b.binary("subtract", pos, b.full(lo, _INDEX, [n]))
    hit = b.binary("and", b.compare(b.binary("remainder", rel, b.full(step, _INDEX, [n])), b.full(0, _INDEX, [n]),
                                    "EQ"),
                   b.binary("and", b.compare(pos, b.full(lo, _INDEX, [n]), "GE"),
                            b.compare(pos, b.full(hi, _INDEX, [n]), "LT")))
    which = b.binary("divide", b.binary("maximum", rel, b.full(0, _INDEX, [n])), b.full(step, _INDEX, [n]))
    which = b.binary("minimum", which, b.full(max(count - 1, 0), _INDEX, [n]))
    spread = take(b, b.convert(src, x.shape.dtype), d, which)
    return b.select(b.broadcast(hit, x.shape.dims, (d,)), spread, x)


def select_scatter(b: HloBuilder, x: Instruction, src: Instruction, dim: int, index_: int) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    i = index_ % x.shape.dims[d]
    dims = list(src.shape.dims)
    dims.insert(d, 1)
    return _update_at(b, x, b.reshape(src, dims), [i if k == d else 0 for k in range(x.shape.rank)])


def index_put(b: HloBuilder, x: Instruction, indices: Sequence[Instruction | None], values: Instruction,
              accumulate: bool = False) -> Instruction:
    """``x[i0, :, i2] = values`` (or ``+=`` with accumulate): a scatter of the broadcast values."""
    if any(i is not None and i.shape.dtype == "pred" for i in indices):
        return _masked_put(b, x, indices, values, accumulate)
    starts, picked, batch = index_tensor(b, x, indices)
    template = index(b, x, indices)  # the shape x[indices] has, which values broadcast to
    updates = b.convert(b.broadcast_to(values, template.shape.dims), x.shape.dtype)
    kept = [d for d in range(x.shape.rank) if d not in picked]
    adjacent = picked == list(range(picked[0], picked[-1] + 1))
    first = picked[0] if adjacent else 0
    window = [p if p < first else p + len(batch) for p in range(len(kept))]
    scalar = Shape.array(x.shape.dtype, ())
    combine = b.computation("add_update" if accumulate else "replace", [scalar, scalar],
                            lambda p: b.binary("add", p[0], p[1]) if accumulate else p[1])
    return b.emit_inferred("scatter", [x, starts, updates], update_window_dims=tuple(window),
                           inserted_window_dims=tuple(picked), scatter_dims_to_operand_dims=tuple(picked),
                           index_vector_dim=len(batch), to_apply=combine)


def _masked_put(b: HloBuilder, x: Instruction, indices: Sequence[Instruction | None], values: Instruction,
                accumulate: bool) -> Instruction:
    """``x[:, mask] = values`` (or ``+=``): one bool mask over dims p..p+m-1 of x, the other indices None.

    torch broadcasts values to [*x.shape[:p], nnz, *x.shape[p+m:]] (nnz: the mask's True count). When values
    have no nnz dim (or one of size 1), every masked position takes the same broadcast value: a select. Else
    the k-th True position (row-major) takes values' k-th slice along that dim, picked by a gather at
    cumsum(mask) - 1 (the count must equal nnz at run time, as torch requires)."""
    picked = [(d, i) for d, i in enumerate(indices) if i is not None]
    p, mask = picked[0]
    require(len(picked) == 1, "index_put with a bool mask and other index tensors is not supported")
    m = mask.shape.rank
    require(m >= 1 and mask.shape.dims == x.shape.dims[p:p + m],
            f"bool mask {list(mask.shape.dims)} does not match the indexed dims {list(x.shape.dims[p:p + m])}")
    lead, rest = list(x.shape.dims[:p]), list(x.shape.dims[p + m:])
    target = len(lead) + 1 + len(rest)
    require(values.shape.rank <= target, f"values {list(values.shape.dims)} do not broadcast to the masked positions")
    vals = b.convert(b.reshape(values, [1] * (target - values.shape.rank) + list(values.shape.dims)), x.shape.dtype)
    count = vals.shape.dims[p]
    if count == 1:
        spread = b.broadcast_to(b.reshape(vals, [*vals.shape.dims[:p], *[1] * m, *vals.shape.dims[p + 1:]]),
                                x.shape.dims)
    else:
        size = mask.shape.size
        flat = b.convert(b.reshape(mask, [size]), _INDEX)
        rank = b.reduce_window(flat, Window.make([size], pad=[(size - 1, 0)]), "add")  # inclusive cumsum
        which = b.binary("minimum", b.binary("maximum", b.binary("subtract", rank, b.full(1, _INDEX, [size])),
                                             b.full(0, _INDEX, [size])), b.full(count - 1, _INDEX, [size]))
        picked_rows = take(b, vals, p, which)  # gathered before broadcasting: the table stays dense
        dims = list(vals.shape.dims)
        spread = b.broadcast_to(b.reshape(picked_rows, [*dims[:p], *mask.shape.dims, *dims[p + 1:]]), x.shape.dims)
    hit = b.broadcast(mask, x.shape.dims, tuple(range(p, p + m)))
    if not accumulate:
        return b.select(hit, spread, x)
    combined = b.binary("or" if x.shape.dtype == "pred" else "add", x, spread)
    return b.select(hit, combined, x)


def _scatter_elements(b: HloBuilder, x: Instruction, dim: int, index: Instruction, src: Instruction,
                      add: bool) -> Instruction:
    """``out[..., index[i, j, ...], ...] = src[i, j, ...]`` along ``dim`` (torch.scatter / scatter_add): one
    full coordinate per element of ``index`` (the index along ``dim``, ``iota`` along the others), a scatter of
    single elements whose combiner replaces or adds."""
    r = x.shape.rank
    dims = index.shape.dims
    coords = element_coordinates(b, x, dim, index, "scatter")
    updates = b.convert(b.slice(src, [(0, n, 1) for n in dims]), x.shape.dtype)
    scalar = Shape.array(x.shape.dtype, ())
    combine = b.computation("add_update" if add else "replace", [scalar, scalar],
                            lambda p: b.binary("add", p[0], p[1]) if add else p[1])
    return b.emit_inferred("scatter", [x, coords, updates], update_window_dims=(),
                           inserted_window_dims=tuple(range(r)), scatter_dims_to_operand_dims=tuple(range(r)),
                           index_vector_dim=r, to_apply=combine)


def scatter_src(b: HloBuilder, x: Instruction, dim: int, index: Instruction, src: Instruction) -> Instruction:
    return _scatter_elements(b, x, dim, index, src, add=False)


def scatter_value(b: HloBuilder, x: Instruction, dim: int, index: Instruction, value: Value) -> Instruction:
    return _scatter_elements(b, x, dim, index, b.broadcast_to(operand(b, value, x.shape.dtype), index.shape.dims),
                             add=False)


def scatter_add(b: HloBuilder, x: Instruction, dim: int, index: Instruction, src: Instruction) -> Instruction:
    return _scatter_elements(b, x, dim, index, src, add=True)


def setitem(b: HloBuilder, x: Instruction, key: Any, value: Value) -> Instruction:
    """fx capture: ``x[key] = value``, as the updated x."""
    items = key if isinstance(key, tuple) else (key,)
    require(None not in items, "x[...] = v with None (a new axis) in the index is not supported")
    real = sum(1 for i in items if i is not Ellipsis)
    k = next((n for n, i in enumerate(items) if i is Ellipsis), len(items))
    items = items[:k] + (slice(None),) * (x.shape.rank - real) + items[k + 1:]
    require(len(items) == x.shape.rank, f"too many indices for a tensor of rank {x.shape.rank}")
    value = operand(b, value, x.shape.dtype)
    if any(isinstance(i, Instruction) for i in items):  # ints count as index tensors then, as in torch
        require(all(isinstance(i, Instruction | int) or i == slice(None) for i in items),
                "x[...] = v mixing index tensors with partial slices is not supported")
        indices = [i if isinstance(i, Instruction) else b.scalar(i, _INDEX) if isinstance(i, int) else None
                   for i in items]
        while indices[-1] is None:
            indices.pop()
        return index_put(b, x, indices, value)
    starts, region, steps = [], [], []
    for d, item in enumerate(items):
        n = x.shape.dims[d]
        if isinstance(item, int):
            require(-n <= item < n, f"index {item} out of range for size {n}")
            starts.append(item % n)
            region.append(1)
            steps.append(1)
        else:
            lo, hi, step = item.indices(n)
            require(step > 0, f"slice step {step} must be positive")
            starts.append(lo)
            region.append(len(range(lo, hi, step)))
            steps.append(step)
    shown = [r for r, item in zip(region, items) if not isinstance(item, int)]  # x[key]'s own shape
    broadcast_dims(value.shape.dims, shown)  # (raises when value does not fit)
    src = b.reshape(b.broadcast_to(value, shown), region)
    if all(s == 1 for s in steps):
        return _update_at(b, x, src, starts)
    strided = [d for d, s in enumerate(steps) if s != 1]
    require(len(strided) == 1, "x[...] = v with strided slices in several dims is not supported")
    d = strided[0]
    inner = [(starts[i], starts[i] + region[i], 1) if i != d else (0, x.shape.dims[d], 1) for i in range(x.shape.rank)]
    band = b.slice(x, inner)  # the unit-step dims narrowed, the strided dim whole
    band = slice_scatter(b, band, src, d, starts[d], starts[d] + (region[d] - 1) * steps[d] + 1, steps[d])
    return _update_at(b, x, band, [s if i != d else 0 for i, s in enumerate(starts)])


RULES = {
    "aten.copy.default": copy,
    "aten.slice_scatter.default": slice_scatter,
    "aten.select_scatter.default": select_scatter,
    "aten.index_put.default": index_put,
    "aten.scatter.src": scatter_src,
    "aten.scatter.value": scatter_value,
    "aten.scatter_add.default": scatter_add,
}
