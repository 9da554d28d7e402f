"""Indexing with tensors: embedding, index_select, gather, advanced indexing (``x[idx]``), flip.

All of them are one HLO ``gather`` (attribute meanings in hlo/shape_inference.py):

- ``embedding(W, ids)`` / ``index_select(x, d, idx)``: slices of size 1 along the indexed dim,
  collapsed, the other dims kept whole (``offset_dims``), the index batch dims where the indexed dim was;
- ``gather(x, d, idx)``: a full coordinate per element (``idx`` along d, ``iota`` along the others);
- ``index.Tensor``: the indexed dims collapsed, the broadcast index shape where torch puts it (in
  place of adjacent indexed dims, else in front);
- ``flip``: an index_select with ``n - 1 - iota`` along each flipped dim.

Negative indices count from the end, as in torch (HLO gather would clamp them to 0).
"""

from __future__ import annotations

from collections.abc import Sequence

from hlo.ir import Instruction

from .builder import HloBuilder, broadcast_dims
from .ops_common import is_float, norm_dim, require

_INDEX = "s64"


def wrap_indices(b: HloBuilder, idx: Instruction, size: int) -> Instruction:
    """Integer indices as s64 with negative ones wrapped into [0, size)."""
    require(not is_float(idx.shape.dtype) and idx.shape.dtype != "pred",
            f"indices must be integers, got {idx.shape.dtype}")
    idx = b.convert(idx, _INDEX)
    wrapped = b.binary("add", idx, b.full(size, _INDEX, idx.shape.dims))
    return b.select(b.compare(idx, b.full(0, _INDEX, idx.shape.dims), "LT"), wrapped, idx)


def take(b: HloBuilder, x: Instruction, d: int, idx: Instruction) -> Instruction:
    """x with dim ``d`` replaced by the dims of ``idx`` (rows of x along d picked by idx).

    When dims of x both before and after ``d`` are longer than 1, x's rows along d are not runs of one stride:
    then every dim before d is indexed too (by its iota), so that the rows are the dims after d, whole (a
    gather of several indexed dims, which the backend moves row by row whatever the layout)."""
    r, k = x.shape.rank, idx.shape.rank
    dims = list(x.shape.dims)
    if any(n > 1 for n in dims[:d]) and any(n > 1 for n in dims[d + 1:]):
        batch = [*dims[:d], *idx.shape.dims]
        coords = [b.reshape(b.iota(_INDEX, batch, a), [*batch, 1]) for a in range(d)]
        coords.append(b.reshape(b.broadcast(b.convert(idx, _INDEX), batch, tuple(range(d, d + k))), [*batch, 1]))
        sizes = [1 if a <= d else n for a, n in enumerate(dims)]
        nb = len(batch)
        return b.gather(x, b.concatenate(coords, nb), offset_dims=tuple(range(nb, nb + r - d - 1)),
                        collapsed_slice_dims=tuple(range(d + 1)), start_index_map=tuple(range(d + 1)),
                        index_vector_dim=len(batch), slice_sizes=sizes)
    sizes = [1 if i == d else n for i, n in enumerate(x.shape.dims)]
    offsets = [i if i < d else i + k - 1 for i in range(r) if i != d]
    return b.gather(x, idx, offset_dims=offsets, collapsed_slice_dims=(d,), start_index_map=(d,),
                    index_vector_dim=k, slice_sizes=sizes)


def embedding(b: HloBuilder, weight: Instruction, indices: Instruction, padding_idx: int = -1,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Instruction:
    """Rows of ``weight`` (padding_idx, scale_grad_by_freq and sparse only matter for gradients)."""
    require(weight.shape.rank == 2, f"embedding weight must be 2-D, got {list(weight.shape.dims)}")
    return take(b, weight, 0, wrap_indices(b, indices, weight.shape.dims[0]))


def index_select(b: HloBuilder, x: Instruction, dim: int, index: Instruction) -> Instruction:
    require(index.shape.rank <= 1, f"index_select takes a 1-D index, got {list(index.shape.dims)}")
    d = norm_dim(dim, x.shape.rank)
    idx = b.reshape(index, [index.shape.size])
    if x.shape.rank == 0:  # torch: the one element (index 0 or -1), still 0-d
        require(index.shape.size == 1, f"index_select of a 0-d tensor with {index.shape.size} indices")
        return b.reshape(take(b, b.reshape(x, [1]), 0, wrap_indices(b, idx, 1)), [])
    return take(b, x, d, wrap_indices(b, idx, x.shape.dims[d]))


def gather(b: HloBuilder, x: Instruction, dim: int, index: Instruction, sparse_grad: bool = False) -> Instruction:
    """``out[i][j][k] = x[i][index[i][j][k]][k]`` (for dim=1): one full coordinate per output element."""
    r = x.shape.rank
    coords = element_coordinates(b, x, dim, index, "gather")
    return b.gather(x, coords, offset_dims=(), collapsed_slice_dims=tuple(range(r)),
                    start_index_map=tuple(range(r)), index_vector_dim=r, slice_sizes=(1,) * r)


def element_coordinates(b: HloBuilder, x: Instruction, dim: int, index: Instruction, what: str) -> Instruction:
    """The full coordinate into ``x`` of each element of ``index`` (torch.gather / scatter along ``dim``): the
    index (wrapped) along ``dim``, its own position along the others, as [*index.dims, rank]."""
    r = x.shape.rank
    require(index.shape.rank == r, f"{what} index {list(index.shape.dims)} must have the rank of {list(x.shape.dims)}")
    d = norm_dim(dim, r)
    dims = index.shape.dims
    coords = []
    for a in range(r):
        c = wrap_indices(b, index, x.shape.dims[d]) if a == d else b.iota(_INDEX, dims, a)
        coords.append(b.reshape(c, [*dims, 1]))
    return b.concatenate(coords, r)


def index_tensor(b: HloBuilder, x: Instruction,
                 indices: Sequence[Instruction | None]) -> tuple[Instruction, list[int], tuple[int, ...]]:
    """Advanced indexing ``x[i0, :, i2]``: (the start coordinates, shape batch + [len(dims)]; the indexed
    dims; the batch shape, i.e. the index tensors broadcast together)."""
    require(len(indices) <= x.shape.rank, f"too many indices ({len(indices)}) for rank {x.shape.rank}")
    picked = [(d, i) for d, i in enumerate(indices) if i is not None]
    require(len(picked) > 0, "indexing without an index tensor")
    for _, i in picked:
        require(i.shape.dtype != "pred", "indexing with a boolean mask has a data-dependent shape; "
                                         "use torch.where or masked_fill instead")
    batch: tuple[int, ...] = ()
    for _, i in picked:
        batch = broadcast_dims(batch, i.shape.dims)
    coords = [b.reshape(b.broadcast_to(wrap_indices(b, i, x.shape.dims[d]), batch), [*batch, 1]) for d, i in picked]
    return b.concatenate(coords, len(batch)), [d for d, _ in picked], batch


def index(b: HloBuilder, x: Instruction, indices: Sequence[Instruction | None]) -> Instruction:
    """``x[i0, :, i2]``-style advanced indexing with integer index tensors (broadcast together)."""
    present = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(present) == 1 and present[0][1].shape.dtype != "pred":
        d, i = present[0]
        return take(b, x, d, wrap_indices(b, i, x.shape.dims[d]))
    return _linearized(b, x, present)


def _linearized(b: HloBuilder, x: Instruction, present: list[tuple[int, Instruction]]) -> Instruction:
    """``x[i0, :, i2]`` with several index tensors as one single-dimension gather: the indexed dims moved to
    the front and merged into one (row-major), the indices combined into one row number
    (``i0 * n2 + i2``). The index dims go where torch puts them: in place of the indexed dims when those are
    adjacent, else in front."""
    for _, i in present:
        require(i.shape.dtype != "pred", "indexing with a boolean mask has a data-dependent shape; "
                                         "use torch.where or masked_fill instead")
    dims = [d for d, _ in present]
    batch: tuple[int, ...] = ()
    for _, i in present:
        batch = broadcast_dims(batch, i.shape.dims)
    kept = [d for d in range(x.shape.rank) if d not in dims]
    sizes = [x.shape.dims[d] for d in dims]
    rows = 1
    for n in sizes:
        rows *= n
    linear = None
    stride = rows
    for (_, i), n in zip(present, sizes, strict=True):
        stride //= n
        term = b.broadcast_to(wrap_indices(b, i, n), batch)
        if stride != 1:
            term = b.binary("multiply", term, b.full(stride, _INDEX, batch))
        linear = term if linear is None else b.binary("add", linear, term)
    table = b.reshape(b.transpose(x, dims + kept), [rows, *(x.shape.dims[d] for d in kept)])
    out = take(b, table, 0, linear)  # batch..., kept...
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    if not adjacent:
        return out
    nb, before = len(batch), len([d for d in kept if d < dims[0]])
    perm = [nb + k for k in range(before)] + list(range(nb)) + [nb + k for k in range(before, len(kept))]
    return out if perm == list(range(len(perm))) else b.transpose(out, perm)


def flip(b: HloBuilder, x: Instruction, dims: Sequence[int]) -> Instruction:
    out = x
    for d in sorted({norm_dim(d, x.shape.rank) for d in dims}):
        n = x.shape.dims[d]
        reversed_ = b.binary("subtract", b.full(n - 1, _INDEX, [n]), b.iota(_INDEX, [n], 0))
        out = take(b, out, d, reversed_)
    return out


RULES = {
    "aten.embedding.default": embedding,
    "aten.index_select.default": index_select,
    "aten.gather.default": gather,
    "aten.index.Tensor": index,
    "aten._unsafe_index.Tensor": index,
    "aten.flip.default": flip,
}
