"""Activation functions.

relu is ``maximum(x, broadcast(0))``; sigmoid is HLO ``logistic``; the others are written out in
elementwise ops (softplus, hardswish, hardsigmoid, mish, glu...); gelu has no HLO primitive and is a
``custom-call`` with target ``gelu`` (erf form) or ``gelu_tanh`` (tanh approximation), as fixed in
docs/contracts.md, so that the backend can map it onto one activation-engine function.
"""

from __future__ import annotations

from typing import Any

from hlo.ir import Instruction

from .builder import HloBuilder
from .ops_common import float_dtype, norm_dim, require

_GELU_TARGETS = {"none": "gelu", "tanh": "gelu_tanh"}


def _float(b: HloBuilder, x: Instruction) -> Instruction:
    return b.convert(x, float_dtype(x))


def relu(b: HloBuilder, x: Instruction) -> Instruction:
    return b.binary("maximum", x, b.scalar(0, x.shape.dtype))


def gelu(b: HloBuilder, x: Instruction, approximate: str = "none") -> Instruction:
    require(approximate in _GELU_TARGETS, f"approximate={approximate!r} is not supported")
    x = _float(b, x)
    return b.custom_call(_GELU_TARGETS[approximate], [x], x.shape)


def sigmoid(b: HloBuilder, x: Instruction) -> Instruction:
    return b.unary("logistic", _float(b, x))


def tanh(b: HloBuilder, x: Instruction) -> Instruction:
    return b.unary("tanh", _float(b, x))


def silu(b: HloBuilder, x: Instruction) -> Instruction:
    """``x * logistic(x)``."""
    x = _float(b, x)
    return b.binary("multiply", x, b.unary("logistic", x))


def hardtanh(b: HloBuilder, x: Instruction, lo: Any = -1.0, hi: Any = 1.0) -> Instruction:
    """``min(max(x, lo), hi)`` (also ReLU6)."""
    dtype = x.shape.dtype
    return b.binary("minimum", b.binary("maximum", x, b.scalar(lo, dtype)), b.scalar(hi, dtype))


def leaky_relu(b: HloBuilder, x: Instruction, negative_slope: Any = 0.01) -> Instruction:
    """``select(x > 0, x, slope * x)``."""
    dtype = x.shape.dtype
    scaled = b.binary("multiply", x, b.scalar(negative_slope, dtype))
    return b.select(b.compare(x, b.scalar(0, dtype), "GT"), x, scaled)


def elu(b: HloBuilder, x: Instruction, alpha: Any = 1.0, scale: Any = 1.0,
        input_scale: Any = 1.0) -> Instruction:
    """``scale * select(x > 0, x, alpha * (exp(input_scale * x) - 1))``."""
    x = _float(b, x)
    dtype = x.shape.dtype
    inner = b.binary("multiply", x, b.scalar(input_scale, dtype)) if input_scale != 1 else x
    neg = b.binary("subtract", b.unary("exponential", inner), b.scalar(1, dtype))
    neg = b.binary("multiply", neg, b.scalar(alpha, dtype)) if alpha != 1 else neg
    out = b.select(b.compare(x, b.scalar(0, dtype), "GT"), x, neg)
    return b.binary("multiply", out, b.scalar(scale, dtype)) if scale != 1 else out


def relu6(b: HloBuilder, x: Instruction) -> Instruction:
    return hardtanh(b, x, 0, 6)


def softplus(b: HloBuilder, x: Instruction, beta: Any = 1, threshold: Any = 20) -> Instruction:
    """``log(1 + exp(beta * x)) / beta``, and x itself where ``beta * x > threshold`` (as torch)."""
    x = _float(b, x)
    dtype = x.shape.dtype
    bx = b.binary("multiply", x, b.scalar(beta, dtype)) if beta != 1 else x
    soft = b.unary("log", b.binary("add", b.unary("exponential", bx), b.scalar(1, dtype)))
    soft = b.binary("divide", soft, b.scalar(beta, dtype)) if beta != 1 else soft
    return b.select(b.compare(bx, b.scalar(threshold, dtype), "GT"), x, soft)


def _relu6_of_shifted(b: HloBuilder, x: Instruction) -> Instruction:
    """``min(max(x + 3, 0), 6) / 6``: hardsigmoid, the gate of hardswish."""
    dtype = x.shape.dtype
    shifted = b.binary("add", x, b.scalar(3, dtype))
    return b.binary("divide", hardtanh(b, shifted, 0, 6), b.scalar(6, dtype))


def hardsigmoid(b: HloBuilder, x: Instruction) -> Instruction:
    return _relu6_of_shifted(b, _float(b, x))


def hardswish(b: HloBuilder, x: Instruction) -> Instruction:
    x = _float(b, x)
    return b.binary("multiply", x, _relu6_of_shifted(b, x))


def mish(b: HloBuilder, x: Instruction) -> Instruction:
    """``x * tanh(softplus(x))``."""
    x = _float(b, x)
    return b.binary("multiply", x, b.unary("tanh", softplus(b, x)))


def glu(b: HloBuilder, x: Instruction, dim: int = -1) -> Instruction:
    """``a * sigmoid(g)`` for the two halves a, g of ``x`` along ``dim``."""
    d = norm_dim(dim, x.shape.rank)
    n = x.shape.dims[d]
    require(n % 2 == 0, f"glu halves dim {d} of size {n}, which is odd")
    ranges = [(0, s, 1) for s in x.shape.dims]
    first, second = list(ranges), list(ranges)
    first[d], second[d] = (0, n // 2, 1), (n // 2, n, 1)
    return b.binary("multiply", b.slice(x, first), b.unary("logistic", b.slice(x, second)))


def selu(b: HloBuilder, x: Instruction) -> Instruction:
    return elu(b, x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946)


def celu(b: HloBuilder, x: Instruction, alpha: Any = 1.0) -> Instruction:
    return elu(b, x, alpha, 1.0, 1.0 / alpha)


def log_sigmoid(b: HloBuilder, x: Instruction) -> Instruction:
    """``-softplus(-x)``, i.e. ``min(x, 0) - log(1 + exp(-|x|))`` (stable for large |x|)."""
    x = _float(b, x)
    dtype = x.shape.dtype
    tail = b.unary("log", b.binary("add", b.unary("exponential", b.unary("negate", b.unary("abs", x))),
                                   b.scalar(1, dtype)))
    return b.binary("subtract", b.binary("minimum", x, b.scalar(0, dtype)), tail)


def prelu(b: HloBuilder, x: Instruction, weight: Instruction) -> Instruction:
    """``x`` where positive, else ``weight * x`` with one weight per channel (dim 1) or one for all."""
    w = b.convert(weight, x.shape.dtype)
    if w.shape.size == 1 or x.shape.rank < 2:
        w = b.broadcast_to(b.reshape(w, [1] * x.shape.rank) if x.shape.rank else b.reshape(w, []), x.shape.dims)
    else:
        w = b.broadcast(b.reshape(w, [w.shape.size]), x.shape.dims, (1,))
    return b.select(b.compare(x, b.scalar(0, x.shape.dtype), "GT"), x, b.binary("multiply", x, w))


RULES = {
    "aten.relu.default": relu,
    "aten.gelu.default": gelu,
    "aten.sigmoid.default": sigmoid,
    "aten.tanh.default": tanh,
    "aten.silu.default": silu,
    "aten.hardtanh.default": hardtanh,
    "aten.leaky_relu.default": leaky_relu,
    "aten.elu.default": elu,
    "aten.relu6.default": relu6,
    "aten.softplus.default": softplus,
    "aten.hardsigmoid.default": hardsigmoid,
    "aten.hardswish.default": hardswish,
    "aten.mish.default": mish,
    "aten.glu.default": glu,
    "aten.selu.default": selu,
    "aten.celu.default": celu,
    "aten.log_sigmoid.default": log_sigmoid,
    "aten.prelu.default": prelu,
    "aten._prelu_kernel.default": prelu,
}
