"""Shape, layout, slicing and joining ops: views become ``reshape``/``transpose``/``broadcast``/``slice``;
cat/stack are ``concatenate``, roll swaps two slices, repeat is a broadcast then a reshape, pad is HLO
``pad`` (constant) or slices and concatenates (reflect, replicate, circular).

Memory-only ops (clone, alias, detach, contiguous) pass their input through: HLO values are
immutable and layouts are assigned later, so a copy has no meaning here.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from hlo.ir import Instruction

from .builder import HloBuilder
from .ops_common import norm_dim, require, result_dtype
from .ops_index import flip, index


def _infer_size(dims: Sequence[int], numel: int) -> list[int]:
    """A view size with at most one -1 resolved against ``numel``."""
    dims = [int(d) for d in dims]
    require(dims.count(-1) <= 1, f"size {dims} has more than one -1")
    if -1 in dims:
        known = prod(d for d in dims if d != -1)
        require(known != 0 and numel % known == 0, f"size {dims} is invalid for {numel} elements")
        dims[dims.index(-1)] = numel // known
    require(prod(dims) == numel, f"size {dims} is invalid for {numel} elements")
    return dims


def view(b: HloBuilder, x: Instruction, size: Sequence[int]) -> Instruction:
    return b.reshape(x, _infer_size(size, x.shape.size))


def permute(b: HloBuilder, x: Instruction, dims: Sequence[int]) -> Instruction:
    return b.transpose(x, [norm_dim(d, x.shape.rank) for d in dims])


def transpose(b: HloBuilder, x: Instruction, dim0: int, dim1: int) -> Instruction:
    perm = list(range(x.shape.rank))
    d0, d1 = norm_dim(dim0, x.shape.rank), norm_dim(dim1, x.shape.rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.transpose(x, perm)


def t(b: HloBuilder, x: Instruction) -> Instruction:
    return b.transpose(x, [1, 0]) if x.shape.rank == 2 else x


def expand(b: HloBuilder, x: Instruction, size: Sequence[int], implicit: bool = False) -> Instruction:
    offset = len(size) - x.shape.rank
    dims = [x.shape.dims[i - offset] if d == -1 else int(d) for i, d in enumerate(size)]
    return b.broadcast_to(x, dims)


def identity(b: HloBuilder, x: Instruction, *ignored: Any) -> Instruction:
    """clone / alias / detach / lift_fresh_copy: the value itself."""
    return x


def unsqueeze(b: HloBuilder, x: Instruction, dim: int) -> Instruction:
    d = norm_dim(dim, x.shape.rank + 1)
    dims = list(x.shape.dims)
    dims.insert(d, 1)
    return b.reshape(x, dims)


def squeeze(b: HloBuilder, x: Instruction, dims: int | Sequence[int] | None = None) -> Instruction:
    if dims is None:
        dims = range(x.shape.rank)
    elif isinstance(dims, int):
        dims = [dims]
    drop = {norm_dim(d, x.shape.rank) for d in dims}
    return b.reshape(x, [d for i, d in enumerate(x.shape.dims) if not (i in drop and d == 1)])


def flatten(b: HloBuilder, x: Instruction, start_dim: int = 0, end_dim: int = -1) -> Instruction:
    if x.shape.rank == 0:
        return b.reshape(x, [1])
    s, e = norm_dim(start_dim, x.shape.rank), norm_dim(end_dim, x.shape.rank)
    dims = x.shape.dims
    return b.reshape(x, [*dims[:s], prod(dims[s:e + 1]), *dims[e + 1:]])


def slice_(b: HloBuilder, x: Instruction, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    lo, hi, _ = slice(start, end, step).indices(x.shape.dims[d])
    require(step > 0, f"slice step {step} must be positive")
    ranges = [(0, n, 1) for n in x.shape.dims]
    ranges[d] = (lo, max(lo, hi), step)
    return b.slice(x, ranges)


def select(b: HloBuilder, x: Instruction, dim: int, index: int) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    n = x.shape.dims[d]
    require(-n <= index < n, f"index {index} out of range for size {n}")
    i = index % n
    sliced = slice_(b, x, d, i, i + 1)
    return b.reshape(sliced, [s for k, s in enumerate(x.shape.dims) if k != d])


def basic_index(b: HloBuilder, x: Instruction, index: Any) -> Instruction:
    """Python indexing ``x[index]`` (fx capture) with ints, slices, None and one Ellipsis, or with index
    tensors (advanced indexing: ints then count as index tensors too, as in torch)."""
    items = index if isinstance(index, tuple) else (index,)
    require(all(i is None or i is Ellipsis or isinstance(i, (int, slice, Instruction)) for i in items),
            "only ints, slices, None, ... and index tensors are supported as indices")
    n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
    require(n_real <= x.shape.rank, f"too many indices for a tensor of rank {x.shape.rank}")
    fill = (slice(None),) * (x.shape.rank - n_real)
    k = next((n for n, i in enumerate(items) if i is Ellipsis), len(items))
    items = items[:k] + fill + items[k + 1:]
    if any(isinstance(i, Instruction) for i in items):
        return _advanced_index(b, x, items)
    out, dim = x, 0
    for item in items:
        if item is None:
            out, dim = unsqueeze(b, out, dim), dim + 1
        elif isinstance(item, int):
            out = select(b, out, dim, item)
        else:
            out, dim = slice_(b, out, dim, item.start, item.stop, item.step or 1), dim + 1
    return out


def _advanced_index(b: HloBuilder, x: Instruction, items: tuple[Any, ...]) -> Instruction:
    """``x[..., idx, 1:3, 0]``: slices first (dims stay in place), then ``index.Tensor`` with ints as
    0-d index tensors."""
    require(None not in items, "None (a new axis) together with index tensors is not supported")
    out, indices = x, []
    for d, item in enumerate(items):
        if isinstance(item, slice):
            out = slice_(b, out, d, item.start, item.stop, item.step or 1)
            indices.append(None)
        else:
            indices.append(item if isinstance(item, Instruction) else b.scalar(item, "s64"))
    while indices and indices[-1] is None:
        indices.pop()
    return index(b, out, indices)


def split_with_sizes(b: HloBuilder, x: Instruction, sizes: Sequence[int], dim: int = 0) -> list[Instruction]:
    d = norm_dim(dim, x.shape.rank)
    require(sum(sizes) == x.shape.dims[d], f"split sizes {list(sizes)} do not add up to {x.shape.dims[d]}")
    out, start = [], 0
    for size in sizes:
        out.append(slice_(b, x, d, start, start + size))
        start += size
    return out


def split(b: HloBuilder, x: Instruction, split_size: int | Sequence[int], dim: int = 0) -> list[Instruction]:
    """Chunks of ``split_size`` (the last one shorter), or of the given sizes when it is a list."""
    if not isinstance(split_size, int):
        return split_with_sizes(b, x, split_size, dim)
    n = x.shape.dims[norm_dim(dim, x.shape.rank)]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    return split_with_sizes(b, x, sizes, dim)


def cat(b: HloBuilder, tensors: Sequence[Instruction], dim: int = 0) -> Instruction:
    tensors = [x for x in tensors if x.shape.dims != (0,)]  # torch skips legacy empty 1-D tensors
    require(len(tensors) > 0, "cat of no tensors")
    dtype = tensors[0].shape.dtype
    for x in tensors[1:]:
        dtype = result_dtype(b.convert(tensors[0], dtype), x)
    return b.concatenate([b.convert(x, dtype) for x in tensors], norm_dim(dim, tensors[0].shape.rank))


def stack(b: HloBuilder, tensors: Sequence[Instruction], dim: int = 0) -> Instruction:
    require(len(tensors) > 0, "stack of no tensors")
    d = norm_dim(dim, tensors[0].shape.rank + 1)
    return cat(b, [unsqueeze(b, x, d) for x in tensors], d)


def chunk(b: HloBuilder, x: Instruction, chunks: int, dim: int = 0) -> list[Instruction]:
    """torch.chunk: pieces of ceil(n / chunks) (fewer pieces when that covers n sooner)."""
    require(chunks > 0, f"chunk needs a positive number of chunks, got {chunks}")
    n = x.shape.dims[norm_dim(dim, x.shape.rank)]
    return split(b, x, max(-(-n // chunks), 1), dim)


def unbind(b: HloBuilder, x: Instruction, dim: int = 0) -> list[Instruction]:
    d = norm_dim(dim, x.shape.rank)
    return [select(b, x, d, i) for i in range(x.shape.dims[d])]


def narrow(b: HloBuilder, x: Instruction, dim: int, start: int, length: int) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    start = start + x.shape.dims[d] if start < 0 else start
    require(0 <= start and start + length <= x.shape.dims[d],
            f"narrow [{start}, {start + length}) is outside dim {d} of size {x.shape.dims[d]}")
    return slice_(b, x, d, start, start + length)


def unflatten(b: HloBuilder, x: Instruction, dim: int, sizes: Sequence[int]) -> Instruction:
    d = norm_dim(dim, x.shape.rank)
    dims = list(x.shape.dims)
    return b.reshape(x, dims[:d] + _infer_size(sizes, dims[d]) + dims[d + 1:])


def view_as(b: HloBuilder, x: Instruction, other: Instruction) -> Instruction:
    return b.reshape(x, other.shape.dims)


def expand_as(b: HloBuilder, x: Instruction, other: Instruction) -> Instruction:
    return b.broadcast_to(x, other.shape.dims)


def movedim(b: HloBuilder, x: Instruction, source: int, destination: int) -> Instruction:
    perm = list(range(x.shape.rank))
    s = perm.pop(norm_dim(source, x.shape.rank))
    perm.insert(norm_dim(destination, x.shape.rank), s)
    return b.transpose(x, perm)


def roll(b: HloBuilder, x: Instruction, shifts: Sequence[int], dims: Sequence[int] = ()) -> Instruction:
    """Two slices swapped by a concatenate per rolled dim (no dims: roll the flattened tensor)."""
    if not dims:
        require(len(shifts) == 1, "roll without dims takes one shift")
        return b.reshape(roll(b, b.reshape(x, [x.shape.size]), shifts, [0]), x.shape.dims)
    require(len(shifts) == len(dims), f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = x
    for shift, dim in zip(shifts, dims):
        d = norm_dim(dim, x.shape.rank)
        n = x.shape.dims[d]
        k = shift % n if n else 0
        if k:
            out = b.concatenate([slice_(b, out, d, n - k, n), slice_(b, out, d, 0, n - k)], d)
    return out


def repeat(b: HloBuilder, x: Instruction, repeats: Sequence[int]) -> Instruction:
    """Tile: each dim d becomes (repeats[d], size[d]) by a broadcast, then the pairs are merged."""
    reps = [int(r) for r in repeats]
    require(len(reps) >= x.shape.rank, f"repeat needs at least {x.shape.rank} counts, got {reps}")
    dims = [1] * (len(reps) - x.shape.rank) + list(x.shape.dims)
    x = b.reshape(x, dims)
    tiled = [v for r, n in zip(reps, dims) for v in (r, n)]
    out = b.broadcast(x, tiled, [2 * i + 1 for i in range(len(dims))])
    return b.reshape(out, [r * n for r, n in zip(reps, dims)])


def diff(b: HloBuilder, x: Instruction, n: int = 1, dim: int = -1, prepend: Instruction | None = None,
         append: Instruction | None = None) -> Instruction:
    """``x[1:] - x[:-1]`` along ``dim``, ``n`` times, after joining prepend / x / append."""
    d = norm_dim(dim, x.shape.rank)
    out = cat(b, [t for t in (prepend, x, append) if t is not None], d)
    for _ in range(n):
        size = out.shape.dims[d]
        later, earlier = slice_(b, out, d, 1, size), slice_(b, out, d, 0, max(size - 1, 0))
        out = b.binary("xor" if out.shape.dtype == "pred" else "subtract", later, earlier)
    return out


def pad(b: HloBuilder, x: Instruction, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Instruction:
    """F.pad: constant (HLO pad), or reflect / replicate / circular from slices and concatenates."""
    if mode == "constant":
        return constant_pad_nd(b, x, pad, 0 if value is None else value)
    require(mode in ("reflect", "replicate", "circular"), f"pad mode={mode!r} is not supported")
    require(len(pad) % 2 == 0 and len(pad) // 2 <= x.shape.rank, f"invalid padding {list(pad)}")
    out = x
    for i in range(len(pad) // 2):
        d = x.shape.rank - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        n = out.shape.dims[d]
        if mode == "replicate" and (lo < 0 or hi < 0):
            out = _replicate_negative(b, out, d, lo, hi)
            continue
        require(lo >= 0 and hi >= 0, f"pad mode={mode!r} takes no negative padding")
        require(mode != "reflect" or (lo < n and hi < n), f"reflect padding must be smaller than the dim ({n})")
        require(mode != "circular" or (lo <= n and hi <= n), f"circular padding must not exceed the dim ({n})")
        pieces = []
        if lo:
            pieces.append(_pad_piece(b, out, d, n, lo, mode, front=True))
        pieces.append(out)
        if hi:
            pieces.append(_pad_piece(b, out, d, n, hi, mode, front=False))
        out = b.concatenate(pieces, d)
    return out


def _replicate_negative(b: HloBuilder, x: Instruction, d: int, lo: int, hi: int) -> Instruction:
    """Replicate padding with a negative side, as torch computes it: out[i] = x[clamp(i - lo, 0, n - 1)] for
    i < n + lo + hi, built from runs of consecutive indices (slices) and of one repeated index (broadcasts)."""
    n = x.shape.dims[d]
    size = n + lo + hi
    require(size > 0, f"replicate padding {lo}, {hi} leaves nothing of a dim of {n}")
    index = [min(max(i - lo, 0), n - 1) for i in range(size)]
    pieces, start = [], 0
    while start < size:
        end = start + 1
        if end < size and index[end] == index[start]:
            while end < size and index[end] == index[start]:
                end += 1
            dims = list(x.shape.dims)
            dims[d] = end - start
            pieces.append(b.broadcast_to(slice_(b, x, d, index[start], index[start] + 1), dims))
        else:
            while end < size and index[end] == index[end - 1] + 1 and (end + 1 >= size or index[end + 1] != index[end]):
                end += 1
            pieces.append(slice_(b, x, d, index[start], index[end - 1] + 1))
        start = end
    return pieces[0] if len(pieces) == 1 else b.concatenate(pieces, d)


def _pad_piece(b: HloBuilder, x: Instruction, d: int, n: int, k: int, mode: str, front: bool) -> Instruction:
    if mode == "circular":
        return slice_(b, x, d, n - k, n) if front else slice_(b, x, d, 0, k)
    if mode == "replicate":
        edge = slice_(b, x, d, 0, 1) if front else slice_(b, x, d, n - 1, n)
        dims = list(x.shape.dims)
        dims[d] = k
        return b.broadcast_to(edge, dims)
    mirrored = slice_(b, x, d, 1, k + 1) if front else slice_(b, x, d, n - 1 - k, n - 1)
    return flip(b, mirrored, [d])


def constant_pad_nd(b: HloBuilder, x: Instruction, pad: Sequence[int], value: Any = 0) -> Instruction:
    """torch pads (left, right) pairs from the last dim backwards; HLO ``pad`` takes (low, high) per dim."""
    require(len(pad) % 2 == 0 and len(pad) // 2 <= x.shape.rank, f"invalid padding {list(pad)}")
    config = [(0, 0)] * x.shape.rank
    for i in range(len(pad) // 2):
        config[x.shape.rank - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return b.pad(x, b.scalar(value, x.shape.dtype), config)


RULES = {
    "aten.view.default": view,
    "aten._unsafe_view.default": view,
    "aten.reshape.default": view,
    "aten.permute.default": permute,
    "aten.transpose.int": transpose,
    "aten.t.default": t,
    "aten.expand.default": expand,
    "aten.clone.default": identity,
    "aten.alias.default": identity,
    "aten.detach.default": identity,
    "aten.lift_fresh_copy.default": identity,
    "aten.contiguous.default": identity,
    "aten.unsqueeze.default": unsqueeze,
    "aten.squeeze.default": squeeze,
    "aten.squeeze.dim": squeeze,
    "aten.squeeze.dims": squeeze,
    "aten.flatten.using_ints": flatten,
    "aten.slice.Tensor": slice_,
    "aten.select.int": select,
    "aten.split.Tensor": split,
    "aten.split_with_sizes.default": split_with_sizes,
    "aten.cat.default": cat,
    "aten.stack.default": stack,
    "aten.chunk.default": chunk,
    "aten.unbind.int": unbind,
    "aten.narrow.default": narrow,
    "aten.unflatten.int": unflatten,
    "aten.view_as.default": view_as,
    "aten.reshape_as.default": view_as,
    "aten.expand_as.default": expand_as,
    "aten.movedim.int": movedim,
    "aten.roll.default": roll,
    "aten.repeat.default": repeat,
    "aten.pad.default": pad,
    "aten.diff.default": diff,
    "aten.constant_pad_nd.default": constant_pad_nd,
}
