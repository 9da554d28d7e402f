"""Strided views of HBM tensors: how a logical HLO array sits in memory.

Every array value the backend handles is a `View`: a base HBM buffer (a program tensor, or constant data
not yet placed in the program) seen through per-dimension element strides and an element offset. The
layout operators of HLO (transpose, reshape, broadcast, slice) become new views without moving data;
a `convert` becomes a pending cast that the consuming kernel applies on chip after loading.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from math import prod

import numpy as np

from hlo.errors import CompilationError
from hlo.ir import Instruction
from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern

# HLO element type -> ISA dtype. pred is the machine's pred type (one byte, 0/1); s64/u64 are 8-byte integers
# computed on GpSimd's integer mode only (docs/integer-semantics.md).
HLO_TO_ISA: dict[str, str] = {"f32": "f32", "bf16": "bf16", "f16": "f16", "s32": "i32", "pred": "pred", "s64": "i64",
                              "u64": "u64", "s8": "i8", "u8": "u8", "s16": "i16", "u16": "u16", "u32": "u32",
                              "f8e4m3fn": "fp8e4", "f8e5m2": "fp8e5"}


def isa_dtype_of(inst: Instruction, hlo_dtype: str | None = None) -> str:
    """The ISA dtype of an HLO element type, or a CompilationError naming `inst`."""
    name = hlo_dtype or inst.shape.dtype
    try:
        return HLO_TO_ISA[name]
    except KeyError:
        raise CompilationError(f"{inst.where()}: element type {name} is not supported by the backend "
                               f"(supported: {', '.join(HLO_TO_ISA)})") from None


def itemsize(dtype: str) -> int:
    return isa_dtype(dtype).itemsize


def row_major_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


class Buffer:
    """A flat HBM allocation: a program tensor (`name` set) or constant `data` not yet placed."""

    def __init__(self, dtype: str, size: int, name: str | None = None, data: np.ndarray | None = None):
        self.dtype = dtype
        self.size = size  # elements
        self.name = name
        self.data = data  # constants: the flat array, in `dtype`

    def __repr__(self) -> str:
        return f"<Buffer {self.name or 'const'} {self.dtype}[{self.size}]>"


@dataclass(frozen=True)
class View:
    """A logical array `dims` read from `buffer` at element `offset + sum(i_d * strides[d])`.

    `cast` is the logical dtype when it differs from the stored dtype (a convert not yet applied).
    """

    buffer: Buffer
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    cast: str | None = None

    @staticmethod
    def of(buffer: Buffer, dims: tuple[int, ...], order: tuple[int, ...] | None = None) -> View:
        """A dense view of `buffer`; `order` lists the logical axes from major to minor (default row-major)."""
        order = tuple(range(len(dims))) if order is None else order
        physical = tuple(dims[a] for a in order)
        pstrides = row_major_strides(physical)
        strides = [0] * len(dims)
        for pos, axis in enumerate(order):
            strides[axis] = pstrides[pos]
        return View(buffer, tuple(dims), tuple(strides))

    # -- properties ---------------------------------------------------------------------------------------
    @property
    def stored_dtype(self) -> str:
        return self.buffer.dtype

    @property
    def dtype(self) -> str:
        """The logical dtype (after the pending cast)."""
        return self.cast or self.buffer.dtype

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return prod(self.dims)

    @property
    def is_const(self) -> bool:
        return self.buffer.data is not None

    def is_dense_row_major(self) -> bool:
        """True if the view is exactly its whole buffer in row-major order, with no cast."""
        return (self.cast is None and self.offset == 0 and self.size == self.buffer.size
                and all(s == r for s, r, d in zip(self.strides, row_major_strides(self.dims), self.dims)
                        if d > 1))

    # -- layout operators ---------------------------------------------------------------------------------
    def transpose(self, perm: tuple[int, ...]) -> View:
        return replace(self, dims=tuple(self.dims[p] for p in perm), strides=tuple(self.strides[p] for p in perm))

    def broadcast(self, out_dims: tuple[int, ...], dimensions: tuple[int, ...]) -> View:
        """HLO broadcast: operand axis i becomes output axis dimensions[i]; new axes get stride 0."""
        strides = [0] * len(out_dims)
        for i, axis in enumerate(dimensions):
            strides[axis] = self.strides[i] if self.dims[i] == out_dims[axis] else 0
        return replace(self, dims=tuple(out_dims), strides=tuple(strides))

    def slice(self, ranges: tuple[tuple[int, int, int], ...]) -> View:
        offset = self.offset + sum(start * s for (start, _, _), s in zip(ranges, self.strides))
        dims = tuple(max(0, -(-(limit - start) // step)) for start, limit, step in ranges)
        strides = tuple(s * step for (_, _, step), s in zip(ranges, self.strides))
        return replace(self, dims=dims, strides=strides, offset=offset)

    def index(self, axis: int, i: int) -> View:
        """Drop `axis`, fixing it at index `i`."""
        return replace(self, dims=self.dims[:axis] + self.dims[axis + 1:],
                       strides=self.strides[:axis] + self.strides[axis + 1:],
                       offset=self.offset + i * self.strides[axis])

    def insert_axis(self, axis: int) -> View:
        """Add a size-1 axis at position `axis`."""
        return replace(self, dims=self.dims[:axis] + (1,) + self.dims[axis:],
                       strides=self.strides[:axis] + (0,) + self.strides[axis:])

    def with_cast(self, dtype: str) -> View:
        return replace(self, cast=None if dtype == self.buffer.dtype else dtype)

    def reshape(self, new_dims: tuple[int, ...]) -> View | None:
        """The same elements in row-major order as `new_dims`, or None when no strided view can do it."""
        new_dims = tuple(new_dims)
        if prod(new_dims) != self.size:
            return None
        old = [(d, s) for d, s in zip(self.dims, self.strides) if d != 1]
        new_strides = [0] * len(new_dims)
        targets = [i for i, d in enumerate(new_dims) if d != 1]
        oi = ni = 0
        while oi < len(old) and ni < len(targets):
            # grow a group of old axes and a group of new axes until their products match
            o_end, n_end = oi + 1, ni + 1
            o_prod, n_prod = old[oi][0], new_dims[targets[ni]]
            while o_prod != n_prod:
                if o_prod < n_prod:
                    o_prod *= old[o_end][0]
                    o_end += 1
                else:
                    n_prod *= new_dims[targets[n_end]]
                    n_end += 1
            group = old[oi:o_end]
            for (_, s0), (d1, s1) in zip(group, group[1:]):
                if s0 != s1 * d1:
                    return None
            stride = group[-1][1]
            for j in reversed(range(ni, n_end)):
                new_strides[targets[j]] = stride
                stride *= new_dims[targets[j]]
            oi, ni = o_end, n_end
        return replace(self, dims=new_dims, strides=tuple(new_strides))

    def merge_axes(self, axis: int) -> View | None:
        """Merge `axis` and `axis + 1` into one axis, or None if their strides do not allow it."""
        d0, d1 = self.dims[axis], self.dims[axis + 1]
        s0, s1 = self.strides[axis], self.strides[axis + 1]
        if d0 == 1:
            stride = s1
        elif d1 == 1:
            stride = s0
        elif s0 == s1 * d1:
            stride = s1
        else:
            return None
        return replace(self, dims=self.dims[:axis] + (d0 * d1,) + self.dims[axis + 2:],
                       strides=self.strides[:axis] + (stride,) + self.strides[axis + 2:])

    def split_axis(self, axis: int, inner: int) -> View:
        """Split `axis` of size n into (n // inner, inner)."""
        d, s = self.dims[axis], self.strides[axis]
        return replace(self, dims=self.dims[:axis] + (d // inner, inner) + self.dims[axis + 1:],
                       strides=self.strides[:axis] + (s * inner, s) + self.strides[axis + 1:])

    # -- compile-time data ----------------------------------------------------------------------------------
    def const_array(self) -> np.ndarray:
        """The logical array of a constant view (in the logical dtype)."""
        assert self.buffer.data is not None
        # offset and strides count elements of the flat buffer, whatever shape the constant was given
        base = np.ascontiguousarray(self.buffer.data).reshape(-1)
        item = base.itemsize
        raw = base.view(f"u{item}")  # as_strided loses the ml_dtypes types (bf16, fp8): stride the bits
        arr = np.lib.stride_tricks.as_strided(raw[self.offset:], shape=self.dims,
                                              strides=tuple(s * item for s in self.strides)).view(base.dtype)
        return arr.astype(isa_dtype(self.dtype).numpy) if self.cast else arr

    def scalar_value(self) -> float | int | None:
        """The value if this is a constant whose elements are all equal, else None (an int for integer
        constants: exact beyond 2^53)."""
        if not self.is_const:
            return None
        arr = self.const_array()
        if arr.size == 0:
            return None
        first = arr.flat[0]
        if not np.all(arr == first):
            return None
        return int(first) if arr.dtype.kind in "iu" else float(first)

    # -- access patterns ----------------------------------------------------------------------------------
    def hbm_ap(self, p_axis: int | None, p0: int, pn: int, free: list[tuple[int, int, int]],
               fixed: dict[int, int] | None = None) -> AccessPattern:
        """Access pattern of a [pn partitions x free...] tile of the stored data.

        `p_axis` is the logical axis on partitions (None: one partition), `free` lists (axis, start,
        count) for the free dims, outermost first, and `fixed` pins other axes to an index.
        """
        assert self.buffer.name is not None, "constant buffer not placed in the program"
        offset = self.offset + sum(i * self.strides[a] for a, i in (fixed or {}).items())
        pstride = 0
        if p_axis is not None:
            offset += p0 * self.strides[p_axis]
            pstride = self.strides[p_axis] if pn > 1 else 0
        pattern = []
        for axis, start, count in free:
            offset += start * self.strides[axis]
            pattern.append((self.strides[axis] if count > 1 else 1, count))
        if not pattern:
            pattern = [(1, 1)]
        return AccessPattern("hbm", self.stored_dtype, offset * itemsize(self.stored_dtype), tuple(pattern),
                             partitions=pn, tensor=self.buffer.name, partition_stride=pstride)


def normalize_axes(views: list[View], order: list[int]) -> tuple[list[View], list[int]]:
    """Merge adjacent axes (in `order`, major to minor) wherever every view allows it.

    Returns the views with merged axes and the new order (a permutation of the reduced rank).
    """
    views = list(views)
    order = list(order)
    pos = 0
    while pos + 1 < len(order):
        a, b = order[pos], order[pos + 1]
        if b != a + 1:
            pos += 1
            continue
        merged = [v.merge_axes(a) for v in views]
        if any(m is None for m in merged):
            pos += 1
            continue
        views = [m for m in merged if m is not None]
        order = [o if o < b else o - 1 for o in order if o != b]
    return views, order


def simplify_pattern(pairs: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """A free access pattern without count-1 pairs and with mergeable neighbours merged."""
    out: list[tuple[int, int]] = []
    for stride, count in pairs:
        if count == 1:
            continue
        if out and out[-1][0] == stride * count:
            out[-1] = (stride, out[-1][1] * count)
        else:
            out.append((stride, count))
    return tuple(out) or ((1, 1),)
