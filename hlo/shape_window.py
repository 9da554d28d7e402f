"""Shape rules of the windowed ops, ``convolution`` and ``reduce-window``, and their attribute readers.

``conv_dims`` reads XLA's ``dim_labels`` (``b01f_01io->b01f``) into :class:`ConvDims`; ``window_of`` reads
the ``window`` attribute (a :class:`hlo.ir.Window`, absent = no spatial dims); ``window_output_size``
is XLA's windowed output size. The interpreter uses the same readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hlo.ir import FLOAT_DTYPES, Shape, Window, WindowDim, numpy_dtype
from hlo.shape_util import (
    NUMERIC,
    Rule,
    arity,
    array,
    computation_attr,
    fail,
    fmt,
    int_attr,
    reduction_operands,
    types,
)


@dataclass(frozen=True)
class ConvDims:
    """Which dimension of lhs / rhs / result plays which role; spatial dims in window order."""

    lhs_batch: int
    lhs_feature: int
    lhs_spatial: tuple[int, ...]
    rhs_input: int
    rhs_output: int
    rhs_spatial: tuple[int, ...]
    out_batch: int
    out_feature: int
    out_spatial: tuple[int, ...]


def _labels(text: str, roles: str, what: str) -> tuple[int, int, tuple[int, ...]]:
    """Positions of the two role letters and of the spatial digits 0..n-1 in one side of dim_labels."""
    n = len(text) - 2
    want = set(roles) | {str(i) for i in range(n)}
    if len(text) < 2 or len(set(text)) != len(text) or set(text) != want or n > 10:
        raise fail(f"dim_labels {what} '{text}' must hold {roles[0]}, {roles[1]} and the digits 0..n-1 once each")
    return text.index(roles[0]), text.index(roles[1]), tuple(text.index(str(i)) for i in range(n))


def conv_dims(attrs: dict[str, Any]) -> ConvDims:
    """``dim_labels=b01f_01io->b01f`` as ConvDims (lhs: b f; rhs: i o; result: b f; digits: spatial)."""
    text = attrs.get("dim_labels")
    if not isinstance(text, str) or text.count("->") != 1 or text.split("->")[0].count("_") != 1:
        raise fail(f"dim_labels={text!r} is not of the form LHS_RHS->OUT such as b01f_01io->b01f")
    operands, out = text.split("->")
    lhs, rhs = operands.split("_")
    lb, lf, ls = _labels(lhs, "bf", "lhs")
    ri, ro, rs = _labels(rhs, "io", "rhs")
    ob, of, os_ = _labels(out, "bf", "result")
    if not len(ls) == len(rs) == len(os_):
        raise fail(f"dim_labels={text}: lhs, rhs and result have different numbers of spatial dimensions")
    return ConvDims(lb, lf, ls, ri, ro, rs, ob, of, os_)


def window_of(attrs: dict[str, Any], rank: int, what: str) -> Window:
    """The ``window`` attribute, checked to have ``rank`` sane dimensions (absent: the empty window)."""
    window = attrs.get("window", Window())
    if not isinstance(window, Window):
        raise fail(f"window= must be a Window (such as {{size=3x3 stride=2x2}}), got {window!r}")
    if len(window.dims) != rank:
        raise fail(f"window has {len(window.dims)} dimensions but {what} has {rank}")
    for i, d in enumerate(window.dims):
        if d.size < 1 or d.stride < 1 or d.lhs_dilate < 1 or d.rhs_dilate < 1:
            raise fail(f"window dimension {i}: size, stride and dilations must be >= 1 ({d})")
    return window


def window_output_size(n: int, d: WindowDim) -> int:
    """Positions of the (dilated) window in the dilated, padded input of size ``n``."""
    dilated = (n - 1) * d.lhs_dilate + 1 if n > 0 else 0
    padded = dilated + d.pad_low + d.pad_high
    span = (d.size - 1) * d.rhs_dilate + 1
    if padded < 0:
        raise fail(f"padding {d.pad_low}_{d.pad_high} removes more than the {dilated} input elements")
    return 0 if padded < span else (padded - span) // d.stride + 1


def result_type(lhs: str, rhs: str, declared: Shape | None, opcode: str) -> str:
    """dot/convolution: operands of one kind; the result the widest operand type or a wider declared one."""
    if (lhs in FLOAT_DTYPES) != (rhs in FLOAT_DTYPES):
        raise fail(f"{opcode} mixes {lhs} and {rhs}")
    widest = max(lhs, rhs, key=_width)
    dtype = widest if declared is None or declared.is_tuple else declared.dtype
    if (dtype in FLOAT_DTYPES) != (widest in FLOAT_DTYPES) or _width(dtype) < _width(widest):
        raise fail(f"{opcode} result type {dtype} is narrower than (or of another kind than) its operands "
                   f"{lhs} x {rhs}")
    return dtype


def _width(dtype: str) -> tuple[bool, int]:
    return dtype in FLOAT_DTYPES, numpy_dtype(dtype).itemsize


def _convolution(ops, attrs, declared):
    arity(ops, 2)
    lhs, rhs = ops
    types(lhs, NUMERIC, "lhs")
    types(rhs, NUMERIC, "rhs")
    d = conv_dims(attrs)
    n = len(d.lhs_spatial)
    for name, shape in (("lhs", lhs), ("rhs", rhs)):
        if shape.rank != n + 2:
            raise fail(f"{name} {fmt(shape)} must have rank {n + 2} for dim_labels={attrs['dim_labels']}")
    window = window_of(attrs, n, "the convolution's spatial dimensions")
    groups = int_attr(attrs, "feature_group_count", 1)
    batch_groups = int_attr(attrs, "batch_group_count", 1)
    batch, features = lhs.dims[d.lhs_batch], lhs.dims[d.lhs_feature]
    k_in, k_out = rhs.dims[d.rhs_input], rhs.dims[d.rhs_output]
    if groups < 1 or batch_groups < 1 or (groups > 1 and batch_groups > 1):
        raise fail(f"feature_group_count={groups} and batch_group_count={batch_groups} must be >= 1 and "
                   "not both > 1")
    if features % groups or features // groups != k_in:
        raise fail(f"lhs has {features} input features; with feature_group_count={groups} the kernel's input "
                   f"feature dimension must be {features // groups if features % groups == 0 else '?'}, "
                   f"it is {k_in}")
    if k_out % groups or k_out % batch_groups or batch % batch_groups:
        raise fail(f"the kernel's {k_out} output features (and the batch {batch}) must divide by the group "
                   f"counts (feature {groups}, batch {batch_groups})")
    if batch_groups > 1 and features != k_in:
        raise fail(f"with batch_group_count={batch_groups} lhs features ({features}) must equal the kernel's "
                   f"input features ({k_in})")
    dims = [0] * (n + 2)
    dims[d.out_batch], dims[d.out_feature] = batch // batch_groups, k_out
    for i, w in enumerate(window.dims):
        if w.size != rhs.dims[d.rhs_spatial[i]]:
            raise fail(f"window size {w.size} of spatial dimension {i} differs from the kernel's "
                       f"{rhs.dims[d.rhs_spatial[i]]}")
        dims[d.out_spatial[i]] = window_output_size(lhs.dims[d.lhs_spatial[i]], w)
    return array(result_type(lhs.dtype, rhs.dtype, declared, "convolution"), dims)


def _reduce_window(ops, attrs, declared):
    inputs, inits = reduction_operands(ops)
    window = window_of(attrs, inputs[0].rank, f"the operand {fmt(inputs[0])}")
    if any(d.reversal for d in window.dims):
        raise fail("reduce-window takes no rhs_reversal")
    computation_attr(attrs)
    dims = [window_output_size(size, w) for size, w in zip(inputs[0].dims, window.dims, strict=True)]
    results = [array(s.dtype, dims) for s in inputs]
    return results[0] if len(inputs) == 1 else Shape.tuple_of(results)


WINDOW_RULES: dict[str, Rule] = {"convolution": _convolution, "reduce-window": _reduce_window}
