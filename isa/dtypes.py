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
    )
}
DTYPE_BY_CODE = {d.code: d for d in DTYPES.values()}


def dtype(name: str) -> DType:
    """Look a dtype up by its ISA name (f32, bf16, f16, fp8e4, fp8e5, i32, i8, u8, i16, u16, u32, pred)."""
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(f"unknown ISA dtype {name!r}; known: {', '.join(DTYPES)}") from None
