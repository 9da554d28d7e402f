"""Factories: full, zeros, ones, *_like, new_*, scalar_tensor, arange, tril/triu masks.

A filled tensor is a scalar constant broadcast to the size; ``arange`` is ``start + step * iota`` (torch
decides the length and the dtype). Layout, device and pin_memory arguments do not matter to a compiled
graph. torch's default dtype rules apply: a float fill gives the default float dtype, an int fill int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hlo.ir import Instruction

from .builder import HloBuilder, hlo_dtype
from .ops_common import require


def _sizes(size: Sequence[int]) -> list[int]:
    dims = [int(d) for d in size]
    require(all(d >= 0 for d in dims), f"negative size {dims}")
    return dims


def full(b: HloBuilder, size: Sequence[int], fill_value: Any, dtype: Any = None, layout: Any = None,
         device: Any = None, pin_memory: Any = None) -> Instruction:
    torch_dtype = dtype if dtype is not None else torch.full((), fill_value).dtype
    return b.full(fill_value, hlo_dtype(torch_dtype), _sizes(size))


def _filled(value: int):
    """zeros / ones (size, dtype=default float)."""
    def rule(b: HloBuilder, size: Sequence[int], dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: Any = None) -> Instruction:
        return b.full(value, hlo_dtype(dtype or torch.get_default_dtype()), _sizes(size))

    rule.__name__ = "ones" if value else "zeros"
    return rule


def full_like(b: HloBuilder, x: Instruction, fill_value: Any, dtype: Any = None, layout: Any = None,
              device: Any = None, pin_memory: Any = None, memory_format: Any = None) -> Instruction:
    out_dtype = hlo_dtype(dtype) if dtype is not None else x.shape.dtype
    return b.full(fill_value, out_dtype, x.shape.dims)


def _filled_like(value: int):
    """zeros_like / ones_like."""
    def rule(b: HloBuilder, x: Instruction, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: Any = None, memory_format: Any = None) -> Instruction:
        return full_like(b, x, value, dtype)

    rule.__name__ = "ones_like" if value else "zeros_like"
    return rule


def fill(b: HloBuilder, x: Instruction, value: Any) -> Instruction:
    """``fill.Scalar``: x's shape and dtype, every element ``value``."""
    return full_like(b, x, value)


def new_full(b: HloBuilder, x: Instruction, size: Sequence[int], fill_value: Any, dtype: Any = None,
             layout: Any = None, device: Any = None, pin_memory: Any = None) -> Instruction:
    """``x.new_full(size, v)``: x's dtype unless one is given."""
    return b.full(fill_value, hlo_dtype(dtype) if dtype is not None else x.shape.dtype, _sizes(size))


def _new_filled(value: int):
    """new_zeros / new_ones."""
    def rule(b: HloBuilder, x: Instruction, size: Sequence[int], dtype: Any = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None) -> Instruction:
        return new_full(b, x, size, value, dtype)

    rule.__name__ = "new_ones" if value else "new_zeros"
    return rule


def scalar_tensor(b: HloBuilder, value: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Instruction:
    return b.scalar(value, hlo_dtype(dtype if dtype is not None else torch.get_default_dtype()))


def arange_start_step(b: HloBuilder, start: Any, end: Any, step: Any = 1, dtype: Any = None, layout: Any = None,
                      device: Any = None, pin_memory: Any = None) -> Instruction:
    """``start + step * iota``."""
    values = torch.arange(start, end, step, dtype=dtype)  # torch decides the length and dtype
    out_dtype = hlo_dtype(values.dtype)
    iota = b.iota(out_dtype, [values.numel()], 0)
    scaled = iota if step == 1 else b.binary("multiply", iota, b.scalar(step, out_dtype))
    return scaled if start == 0 else b.binary("add", scaled, b.scalar(start, out_dtype))


def arange_start(b: HloBuilder, start: Any, end: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                 pin_memory: Any = None) -> Instruction:
    return arange_start_step(b, start, end, 1, dtype)


def arange(b: HloBuilder, end: Any, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None) -> Instruction:
    return arange_start_step(b, 0, end, 1, dtype)


def _triangle(lower: bool):
    """tril / triu: keep the elements on the kept side of ``diagonal`` of the last two dims, zero the rest
    (a mask of ``col - row`` against ``diagonal`` from two iotas)."""
    def rule(b: HloBuilder, x: Instruction, diagonal: int = 0) -> Instruction:
        require(x.shape.rank >= 2, f"{'tril' if lower else 'triu'} needs a matrix, got {list(x.shape.dims)}")
        r = x.shape.rank
        dims = x.shape.dims
        offset = b.binary("subtract", b.iota("s64", dims, r - 1), b.iota("s64", dims, r - 2))
        keep = b.compare(offset, b.full(diagonal, "s64", dims), "LE" if lower else "GE")
        return b.select(keep, x, b.full(0, x.shape.dtype, dims))

    rule.__name__ = "tril" if lower else "triu"
    return rule


RULES = {
    "aten.full.default": full,
    "aten.zeros.default": _filled(0),
    "aten.ones.default": _filled(1),
    "aten.full_like.default": full_like,
    "aten.zeros_like.default": _filled_like(0),
    "aten.ones_like.default": _filled_like(1),
    "aten.fill.Scalar": fill,
    "aten.new_full.default": new_full,
    "aten.new_zeros.default": _new_filled(0),
    "aten.new_ones.default": _new_filled(1),
    "aten.scalar_tensor.default": scalar_tensor,
    "aten.arange.default": arange,
    "aten.arange.start": arange_start,
    "aten.arange.start_step": arange_start_step,
    "aten.tril.default": _triangle(True),
    "aten.triu.default": _triangle(False),
}
