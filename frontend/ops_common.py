"""Helpers shared by the lowering rules: type promotion, scalar operands, dimension arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hlo.errors import LoweringError
from hlo.ir import FLOAT_DTYPES, Instruction

from .builder import HLO_TO_TORCH, HloBuilder, hlo_dtype

Value = Instruction | int | float | bool


def _dummy(v: Value) -> Any:
    if isinstance(v, Instruction):
        return torch.empty((1,) * v.shape.rank, dtype=HLO_TO_TORCH[v.shape.dtype])
    return v


def result_dtype(a: Value, b: Value) -> str:
    """torch's type promotion of two operands (tensors of any rank or Python scalars)."""
    return hlo_dtype(torch.result_type(_dummy(a), _dummy(b)))


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def float_dtype(x: Instruction) -> str:
    """The dtype a floating-point op computes ``x`` in (integers and bools promote to f32)."""
    return x.shape.dtype if is_float(x.shape.dtype) else "f32"


def operand(b: HloBuilder, v: Value, dtype: str) -> Instruction:
    """``v`` as an HLO value of ``dtype``: tensors are converted, Python scalars become constants."""
    if isinstance(v, Instruction):
        return b.convert(v, dtype)
    if isinstance(v, (bool, int, float)):
        return b.scalar(v, dtype)
    raise LoweringError(f"expected a tensor or a number, got {type(v).__name__}")


def norm_dim(dim: int, rank: int) -> int:
    """A dim argument in [0, rank) (negative dims count from the end; rank-0 takes 0 and -1)."""
    size = max(rank, 1)
    if not -size <= dim < size:
        raise LoweringError(f"dim {dim} out of range for rank {rank}")
    return dim % size


def norm_dims(dims: int | Sequence[int] | None, rank: int) -> list[int]:
    """A dim-list argument; None or [] means every dim (torch's reduction convention). A 0-d tensor has no dim
    to reduce: torch takes dim 0 or -1 there and returns the value itself (an empty list here)."""
    if rank == 0:
        for d in [dims] if isinstance(dims, int) else list(dims or []):
            norm_dim(d, rank)  # range check only
        return []
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({norm_dim(d, rank) for d in dims})


def keep_dims(b: HloBuilder, x: Instruction, reduced: Sequence[int], full_dims: Sequence[int]) -> Instruction:
    """Reshape a reduction result so the reduced dims are back as size 1 (``keepdim=True``)."""
    return b.reshape(x, [1 if i in reduced else d for i, d in enumerate(full_dims)])


def require(condition: bool, message: str) -> None:
    """Raise a LoweringError with ``message`` unless ``condition``."""
    if not condition:
        raise LoweringError(message)
