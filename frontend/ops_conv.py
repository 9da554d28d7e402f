"""Convolution and pooling: HLO ``convolution`` and ``reduce-window`` over NC(H)W tensors.

``aten.convolution`` (conv1d/conv2d with stride, padding, dilation and groups, depthwise included)
is one ``convolution`` with ``dim_labels=bf01_oi01->bf01`` (``bf0_oi0->bf0`` in 1-D) and
``feature_group_count=groups``; the bias is added by a broadcast along the channel dim. A transposed
convolution is a convolution of the stride-dilated input with the reversed kernel (``_transposed``).

Pooling is a ``reduce-window`` (max: identity -inf, avg: a sum divided by the number of elements
torch counts for each window, a constant computed from the shapes). ``ceil_mode`` adds high padding
so that the last, partial window exists. Adaptive average pooling is a plain average pool when the
input divides into the output size, else a product with constant averaging matrices, one per
spatial dim (the windows then overlap or differ in size).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil, floor
from typing import Any

import numpy as np

from hlo.ir import Instruction, Window, WindowDim

from .builder import HloBuilder
from .ops_common import float_dtype, require

_SPATIAL = "012"


def _ints(v: Any, n: int, what: str) -> list[int]:
    """An int or a list of 1 or n ints as n ints (torch's int[2] arguments)."""
    values = [int(v)] * n if isinstance(v, int) else [int(x) for x in v]
    if len(values) == 1:
        values = values * n
    require(len(values) == n, f"{what} must have {n} values, got {values}")
    return values


# ---- convolution --------------------------------------------------------------------------------
def convolution(b: HloBuilder, x: Instruction, weight: Instruction, bias: Instruction | None,
                stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                output_padding: Sequence[int], groups: int) -> Instruction:
    n = x.shape.rank - 2
    require(n in (1, 2), f"only 1-D and 2-D convolutions are supported, got a {n}-D one")
    require(weight.shape.rank == n + 2, f"weight {list(weight.shape.dims)} does not fit a {n}-D convolution")
    require(x.shape.dtype == weight.shape.dtype, f"convolution of {x.shape.dtype} and {weight.shape.dtype}")
    spatial = _SPATIAL[:n]
    strides, pads, dils = _ints(stride, n, "stride"), _ints(padding, n, "padding"), _ints(dilation, n, "dilation")
    if not transposed and _is_patchify(x, weight, strides, pads, dils, int(groups)):
        out = _patchify(b, x, weight, strides)
    elif transposed:
        out = _transposed(b, x, weight, strides, pads, dils, _ints(output_padding, n, "output_padding"), int(groups))
    else:
        window = Window.make(weight.shape.dims[2:], stride=strides, pad=[(p, p) for p in pads], rhs_dilate=dils)
        out = b.emit_inferred("convolution", [x, weight], window=window,
                              dim_labels=f"bf{spatial}_oi{spatial}->bf{spatial}", feature_group_count=int(groups))
    if bias is not None:
        out = b.binary("add", out, b.broadcast(b.convert(bias, out.shape.dtype), out.shape.dims, (1,)))
    return out


PATCHIFY_ROW_BYTES = 96 * 1024  # per channel: the input rows of one row of windows the conv kernel holds


def _is_patchify(x: Instruction, weight: Instruction, strides: list[int], pads: list[int], dils: list[int],
                 groups: int) -> bool:
    """A patch embedding whose windows tile the input without overlap and whose input rows for one row
    of windows (kernel rows x width, fp32) are too many for the convolution kernel's SBUF tile. Smaller
    ones (ViT's 16x16 on 224 columns, ConvNeXt's 4x4 stem and 2x2 downsampling) stay convolutions: the
    kernel reads whole input rows, where the dot reads the patches with runs of one window row."""
    kernel = list(weight.shape.dims[2:])
    rows = kernel[0] * (x.shape.dims[3] if len(kernel) > 1 else 1) * 4
    return (groups == 1 and not any(pads) and all(d == 1 for d in dils) and strides == kernel
            and any(k > 1 for k in kernel) and rows > PATCHIFY_ROW_BYTES)


def _patchify(b: HloBuilder, x: Instruction, weight: Instruction, strides: list[int]) -> Instruction:
    """A convolution whose windows tile the input as one dot: the input reshaped into patches
    [B, C, o0, k0, o1, k1] (the rows and columns past the last whole window dropped), contracted over
    (C, k0, k1) with the weight [O, C, k0, k1]; then [B, o0, o1, O] back to [B, O, o0, o1]. A matmul tiles
    any patch size, where a windowed convolution must hold the input rows of a whole window in SBUF."""
    n = len(strides)
    outs = [size // k for size, k in zip(x.shape.dims[2:], strides, strict=True)]
    x = b.slice(x, [(0, x.shape.dims[0], 1), (0, x.shape.dims[1], 1)]
                + [(0, o * k, 1) for o, k in zip(outs, strides, strict=True)])
    dims = list(x.shape.dims[:2])
    for o, k in zip(outs, strides, strict=True):
        dims += [o, k]
    patches = b.reshape(x, dims)
    out = b.dot(patches, weight, [1] + [3 + 2 * i for i in range(n)], list(range(1, n + 2)))
    # out: [B, o0, (o1,) O]
    return b.transpose(out, [0, n + 1, *range(1, n + 1)])


def _transposed(b: HloBuilder, x: Instruction, weight: Instruction, strides: list[int], pads: list[int],
                dils: list[int], output_padding: list[int], groups: int) -> Instruction:
    """ConvTranspose as a convolution of the input dilated by the stride (``lhs_dilate``) with the
    spatially reversed kernel, padded by ``dilation * (k - 1) - padding`` (plus output_padding at the
    end). The weight is (in, out / groups, k...): per group its in and out roles swap."""
    n = len(strides)
    spatial = _SPATIAL[:n]
    c_in, c_out_g, *ks = weight.shape.dims
    require(c_in % groups == 0, f"{c_in} input channels do not split into {groups} groups")
    for p, k, d, op, s in zip(pads, ks, dils, output_padding, strides):
        require(op < max(s, d), f"output_padding {op} must be smaller than the stride or the dilation")
        require(d * (k - 1) - p >= 0, f"padding {p} is larger than the dilated kernel ({d * (k - 1) + 1})")
    if groups > 1:  # (g, in/g, out/g, k...) -> (in/g, g * out/g, k...): output features grouped
        w = b.reshape(weight, [groups, c_in // groups, c_out_g, *ks])
        w = b.transpose(w, [1, 0, 2, *range(3, 3 + n)])
        weight = b.reshape(w, [c_in // groups, groups * c_out_g, *ks])
    dims = tuple(WindowDim(k, 1, d * (k - 1) - p, d * (k - 1) - p + op, s, d, True)
                 for k, s, p, d, op in zip(ks, strides, pads, dils, output_padding))
    return b.emit_inferred("convolution", [x, weight], window=Window(dims),
                           dim_labels=f"bf{spatial}_io{spatial}->bf{spatial}", feature_group_count=groups)


# ---- pooling ------------------------------------------------------------------------------------
def _pool_window(x: Instruction, n: int, kernel: Sequence[int], stride: Sequence[int], padding: Any,
                 dilation: Any, ceil_mode: bool) -> tuple[Window, list[list[int]]]:
    """The reduce-window window over (N, C, spatial...) or (C, spatial...), and per spatial dim the
    (start, end) of each output window in unpadded input coordinates."""
    lead = x.shape.rank - n
    require(lead in (1, 2), f"a {n}-D pool takes a {n + 1}-D or {n + 2}-D input, got {list(x.shape.dims)}")
    kernel = _ints(kernel, n, "kernel_size")
    stride = _ints(stride, n, "stride") if stride else list(kernel)
    pad = _ints(padding, n, "padding")
    dil = _ints(dilation, n, "dilation")
    sizes, strides, pads, dilations, spans = [1] * lead, [1] * lead, [(0, 0)] * lead, [1] * lead, []
    for i in range(n):
        size, k, s, p, d = x.shape.dims[lead + i], kernel[i], stride[i], pad[i], dil[i]
        require(p <= k // 2, f"padding {p} must be at most half the kernel size {k}")
        span = d * (k - 1) + 1
        count = (size + 2 * p - span) / s + 1
        out = ceil(count) if ceil_mode else floor(count)
        if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the input
            out -= 1
        require(out >= 1, f"pooling window {k} is larger than the padded input {size + 2 * p}")
        high = max((out - 1) * s + span - size - p, p)
        sizes.append(k)
        strides.append(s)
        pads.append((p, high))
        dilations.append(d)
        spans.append([(j * s - p, j * s - p + span) for j in range(out)])
    window = Window.make(sizes, stride=strides, pad=pads, rhs_dilate=dilations)
    return window, spans


def _max_pool(n: int):
    def rule(b: HloBuilder, x: Instruction, kernel_size: Sequence[int], stride: Sequence[int] = (),
             padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Instruction:
        window, _ = _pool_window(x, n, kernel_size, stride, padding, dilation, ceil_mode)
        return b.reduce_window(x, window, "max")

    rule.__name__ = f"max_pool{n}d"
    return rule


def _avg_divisor(windows: list[tuple[int, int]], size: int, pad: int, count_include_pad: bool) -> np.ndarray:
    """torch's element count of each window along one dim: padding counts (if asked) but the part of a
    ceil_mode window past the padding does not."""
    counts = []
    for start, end in windows:
        end = min(end, size + pad)
        if not count_include_pad:
            start, end = max(start, 0), min(end, size)
        counts.append(end - start)
    return np.array(counts, dtype=np.float64)


def _avg_pool(n: int):
    def rule(b: HloBuilder, x: Instruction, kernel_size: Sequence[int], stride: Sequence[int] = (),
             padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override: int | None = None) -> Instruction:
        x = b.convert(x, float_dtype(x))
        window, spans = _pool_window(x, n, kernel_size, stride, padding, 1, ceil_mode)
        total = b.reduce_window(x, window, "add")
        if divisor_override is not None:
            return b.binary("divide", total, b.scalar(divisor_override, x.shape.dtype))
        lead = x.shape.rank - n
        pads = _ints(padding, n, "padding")
        divisor = np.ones((), dtype=np.float64)
        for i in range(n):
            counts = _avg_divisor(spans[i], x.shape.dims[lead + i], pads[i], count_include_pad)
            divisor = np.multiply.outer(divisor, counts)
        if np.all(divisor == divisor.flat[0]):
            return b.binary("divide", total, b.scalar(divisor.flat[0], x.shape.dtype))
        const = b.convert(b.constant(divisor.astype(np.float32)), x.shape.dtype)
        return b.binary("divide", total, b.broadcast(const, total.shape.dims, tuple(range(lead, lead + n))))

    rule.__name__ = f"avg_pool{n}d"
    return rule


def _averaging_matrix(size: int, out: int) -> np.ndarray:
    """(size, out): column j averages input [floor(j*size/out), ceil((j+1)*size/out))."""
    m = np.zeros((size, out), dtype=np.float32)
    for j in range(out):
        lo, hi = (j * size) // out, -(-((j + 1) * size) // out)
        m[lo:hi, j] = 1.0 / (hi - lo)
    return m


def _adaptive_avg_pool(n: int):
    def rule(b: HloBuilder, x: Instruction, output_size: Sequence[int]) -> Instruction:
        x = b.convert(x, float_dtype(x))
        lead = x.shape.rank - n
        require(lead in (1, 2), f"a {n}-D pool takes a {n + 1}-D or {n + 2}-D input, got {list(x.shape.dims)}")
        sizes = list(x.shape.dims[lead:])
        outs = [s if o is None else int(o) for s, o in zip(sizes, _ints_or_none(output_size, n))]
        if all(s % o == 0 for s, o in zip(sizes, outs)):
            kernel = [s // o for s, o in zip(sizes, outs)]
            return _avg_pool(n)(b, x, kernel, kernel)
        out = x
        for i, (s, o) in enumerate(zip(sizes, outs)):  # contract each spatial dim with its matrix
            d = lead + i
            m = b.convert(b.constant(_averaging_matrix(s, o)), x.shape.dtype)
            prod = b.dot(out, m, (d,), (0,))  # the pooled dim comes out last
            perm = list(range(d)) + [out.shape.rank - 1] + list(range(d, out.shape.rank - 1))
            out = b.transpose(prod, perm)
        return out

    rule.__name__ = f"adaptive_avg_pool{n}d"
    return rule


def _ints_or_none(v: Any, n: int) -> list[int | None]:
    values = [v] * n if isinstance(v, int) or v is None else list(v)
    require(len(values) == n, f"output_size must have {n} values, got {values}")
    return values


RULES = {
    "aten.convolution.default": convolution,
    "aten.max_pool1d.default": _max_pool(1),
    "aten.max_pool2d.default": _max_pool(2),
    "aten.avg_pool1d.default": _avg_pool(1),
    "aten.avg_pool2d.default": _avg_pool(2),
    "aten.adaptive_avg_pool1d.default": _adaptive_avg_pool(1),
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool(2),
    "aten._adaptive_avg_pool2d.default": _adaptive_avg_pool(2),
}
