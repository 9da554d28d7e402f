"""Shape, layout and creation ops: views become ``reshape``/``transpose``/``broadcast``/``slice``.

Memory-only ops (clone, alias, detach, contiguous) pass their input through: HLO values are
immutable and layouts are assigned later, so a copy has no meaning here.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import torch

from compiler.hlo.ir import Instruction

from .builder import HloBuilder, hlo_dtype
from .ops_common import norm_dim, require, result_dtype


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
    """Python indexing ``x[index]`` with ints, slices, None and one Ellipsis (fx capture)."""
    items = index if isinstance(index, tuple) else (index,)
    require(all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items),
            "only basic indexing (ints, slices, None, ...) is supported")
    n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
    require(n_real <= x.shape.rank, f"too many indices for a tensor of rank {x.shape.rank}")
    fill = (slice(None),) * (x.shape.rank - n_real)
    k = next((n for n, i in enumerate(items) if i is Ellipsis), len(items))
    items = items[:k] + fill + items[k + 1:]
    out, dim = x, 0
    for item in items:
        if item is None:
            out, dim = unsqueeze(b, out, dim), dim + 1
        elif isinstance(item, int):
            out = select(b, out, dim, item)
        else:
            out, dim = slice_(b, out, dim, item.start, item.stop, item.step or 1), dim + 1
    return out


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


def full(b: HloBuilder, size: Sequence[int], fill_value: Any, dtype: Any = None, layout: Any = None,
         device: Any = None, pin_memory: Any = None) -> Instruction:
    torch_dtype = dtype if dtype is not None else torch.full((), fill_value).dtype
    return b.full(fill_value, hlo_dtype(torch_dtype), [int(d) for d in size])


def scalar_tensor(b: HloBuilder, value: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Instruction:
    return b.scalar(value, hlo_dtype(dtype if dtype is not None else torch.get_default_dtype()))


def full_like(b: HloBuilder, x: Instruction, fill_value: Any, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None, memory_format: Any = None) -> Instruction:
    out_dtype = hlo_dtype(dtype) if dtype is not None else x.shape.dtype
    return b.full(fill_value, out_dtype, x.shape.dims)


def arange(b: HloBuilder, start: Any, end: Any = None, step: Any = 1, dtype: Any = None, layout: Any = None,
           device: Any = None, pin_memory: Any = None) -> Instruction:
    """``start + step * iota`` (arange.default passes only ``end``, as ``start``)."""
    if end is None:
        start, end = 0, start
    values = torch.arange(start, end, step, dtype=dtype)  # torch decides the length and dtype
    out_dtype = hlo_dtype(values.dtype)
    iota = b.iota(out_dtype, [values.numel()], 0)
    scaled = iota if step == 1 else b.binary("multiply", iota, b.scalar(step, out_dtype))
    return scaled if start == 0 else b.binary("add", scaled, b.scalar(start, out_dtype))


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
    "aten.full.default": full,
    "aten.scalar_tensor.default": scalar_tensor,
    "aten.full_like.default": full_like,
    "aten.arange.default": arange,
    "aten.arange.start": arange,
    "aten.arange.start_step": arange,
    "aten.constant_pad_nd.default": constant_pad_nd,
}
