"""Data types the machine stores, with their numpy equivalents (ml_dtypes for bf16/fp8)."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    numpy: np.dtype
    code: int  # stable id used by the binary encoding

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self.numpy.kind == "f" or self.name.startswith(("bf16", "fp8"))

    @property
    def is_integer(self) -> bool:
        """Integers and pred (stored as 0/1 bytes): GpSimd computes on these exactly (docs/isa.md)."""
        return self.numpy.kind in "iub"


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("f32", np.dtype(np.float32), 0),
        DType("bf16", np.dtype(ml_dtypes.bfloat16), 1),
        DType("f16", np.dtype(np.float16), 2),
        DType("fp8e4", np.dtype(ml_dtypes.float8_e4m3fn), 3),
        DType("fp8e5", np.dtype(ml_dtypes.float8_e5m2), 4),
        DType("i32", np.dtype(np.int32), 5),
        DType("i8", np.dtype(np.int8), 6),
        DType("u8", np.dtype(np.uint8), 7),
        DType("i16", np.dtype(np.int16), 8),
        DType("u16", np.dtype(np.uint16), 9),
        DType("u32", np.dtype(np.uint32), 10),
        DType("pred", np.dtype(np.bool_), 11),
        # 8-byte integers (ints): exact on GpSimd's integer mode only, moved as bytes by DMA
        # (docs/integer-semantics.md, "64-bit integers")
        DType("i64", np.dtype(np.int64), 12),
        DType("u64", np.dtype(np.uint64), 13),
    )
}
DTYPE_BY_CODE = {d.code: d for d in DTYPES.values()}
# 8-byte integers: GpSimd's integer mode computes on them, DMA moves them; the fp32 engines never touch them
WIDE_INTEGERS = frozenset({"i64", "u64"})
EXACT_F64 = 1 << 53  # integers of at most this magnitude are exact in an fp64 immediate


def immediate(value: int | float, name: str) -> dict[str, int | float]:
    """The attributes of an immediate ``name`` (tensor_scalar's scalar/scalar1, memset's value): an integer
    beyond fp64's 2^53 is carried exactly in the integer attribute beside it (``i<name>``, or ``ivalue``)."""
    if isinstance(value, float) or abs(value) <= EXACT_F64:
        return {name: float(value)}
    value = int(value) & ((1 << 64) - 1)
    wrapped = value - (1 << 64) if value >= 1 << 63 else value
    return {name: 0.0, ("ivalue" if name == "value" else f"i{name}"): wrapped}


def dtype(name: str) -> DType:
    """Look a dtype up by its ISA name (f32, bf16, f16, fp8e4, fp8e5, i32, i8, u8, i16, u16, u32, pred,
    i64, u64)."""
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(f"unknown ISA dtype {name!r}; known: {', '.join(DTYPES)}") from None
