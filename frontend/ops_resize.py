"""Resizing (F.interpolate): nearest and (bi)linear upsampling of N, C, spatial... tensors.

Both are separable, so each spatial dim is resized on its own, with the source positions torch computes
(``area_pixel_compute_source_index``): nearest picks rows with a ``gather`` of constant indices;
linear contracts the dim with a constant (in, out) interpolation matrix in a ``dot`` (two taps per
column), which also keeps the work on the matrix engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import floor

import numpy as np

from hlo.ir import Instruction

from .builder import HloBuilder
from .ops_common import float_dtype, require
from .ops_index import take


def _sizes(x: Instruction, n: int, output_size: Sequence[int] | None,
           scale_factors: Sequence[float] | None) -> tuple[list[int], list[float | None]]:
    """Output sizes and the scale factors torch uses for the source positions (None: in / out)."""
    require(x.shape.rank == n + 2, f"a {n}-D resize takes an (N, C, {n} spatial dims) input, got {list(x.shape.dims)}")
    ins = list(x.shape.dims[2:])
    if output_size is not None:
        return [int(o) for o in output_size], [None] * n
    require(scale_factors is not None and len(scale_factors) == n, "resize needs output_size or scale_factors")
    return [floor(i * s) for i, s in zip(ins, scale_factors)], [float(s) for s in scale_factors]


def _scale(size_in: int, size_out: int, factor: float | None, align_corners: bool) -> float:
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / factor if factor else size_in / size_out


def _nearest(n: int):
    def rule(b: HloBuilder, x: Instruction, output_size: Sequence[int] | None = None,
             scale_factors: Sequence[float] | None = None) -> Instruction:
        outs, factors = _sizes(x, n, output_size, scale_factors)
        for i, (size_out, factor) in enumerate(zip(outs, factors)):
            size_in = x.shape.dims[2 + i]
            # torch's float arithmetic: scale = float(1 / factor) or float(in) / float(out)
            scale = np.float32(1.0 / factor) if factor else np.float32(size_in) / np.float32(size_out)
            src = np.minimum(np.floor(np.arange(size_out, dtype=np.float32) * scale), size_in - 1)
            x = take(b, x, 2 + i, b.constant(src.astype(np.int64)))
        return x

    rule.__name__ = f"upsample_nearest{n}d"
    return rule


def _linear_matrix(size_in: int, size_out: int, scale: float, align_corners: bool) -> np.ndarray:
    """(in, out): column o holds the two interpolation weights of output position o."""
    m = np.zeros((size_in, size_out), dtype=np.float32)
    for o in range(size_out):
        src = scale * o if align_corners else max(scale * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(src), size_in - 1)
        i1 = min(i0 + 1, size_in - 1)
        w1 = src - i0
        m[i0, o] += 1.0 - w1
        m[i1, o] += w1
    return m


def _linear(n: int):
    def rule(b: HloBuilder, x: Instruction, output_size: Sequence[int] | None, align_corners: bool,
             scale_factors: Sequence[float] | None = None) -> Instruction:
        outs, factors = _sizes(x, n, output_size, scale_factors)
        x = b.convert(x, float_dtype(x))
        for i, (size_out, factor) in enumerate(zip(outs, factors)):
            d, size_in = 2 + i, x.shape.dims[2 + i]
            m = _linear_matrix(size_in, size_out, _scale(size_in, size_out, factor, align_corners), align_corners)
            out = b.dot(x, b.convert(b.constant(m), x.shape.dtype), (d,), (0,))  # the resized dim comes last
            x = b.transpose(out, list(range(d)) + [out.shape.rank - 1] + list(range(d, out.shape.rank - 1)))
        return x

    rule.__name__ = "upsample_bilinear2d" if n == 2 else "upsample_linear1d"
    return rule


RULES = {
    "aten.upsample_nearest1d.vec": _nearest(1),
    "aten.upsample_nearest2d.vec": _nearest(2),
    "aten.upsample_linear1d.vec": _linear(1),
    "aten.upsample_bilinear2d.vec": _linear(2),
}
