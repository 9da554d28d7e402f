"""Reductions and the normalizations built on them: sum, mean, amax/amin, var, softmax, layer_norm.

A reduction is an HLO ``reduce`` with a scalar ``to_apply`` computation; results are brought back to
the operand's shape with a ``broadcast`` over the kept dims. Softmax subtracts the row max before
``exponential`` (the numerically stable form). Half-precision inputs of softmax and layer_norm are
computed in f32 and converted back, as torch does on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from compiler.hlo.ir import Instruction

from .builder import HloBuilder, hlo_dtype
from .ops_common import float_dtype, is_float, keep_dims, norm_dim, norm_dims, require

_UPCAST = ("f16", "bf16")


def _expand_back(b: HloBuilder, r: Instruction, dims: Sequence[int], reduced: Sequence[int]) -> Instruction:
    """Broadcast a reduction result (reduced dims removed) back to ``dims``."""
    return b.broadcast(r, dims, [i for i in range(len(dims)) if i not in reduced])


def _finish(b: HloBuilder, r: Instruction, x: Instruction, reduced: Sequence[int], keepdim: bool) -> Instruction:
    return keep_dims(b, r, reduced, x.shape.dims) if keepdim else r


def _count(x: Instruction, dims: Sequence[int]) -> int:
    return prod(x.shape.dims[d] for d in dims)


def _accumulation_dtype(x: Instruction, dtype: Any) -> str:
    if dtype is not None:
        return hlo_dtype(dtype)
    return x.shape.dtype if is_float(x.shape.dtype) else "s64"  # torch sums integers in int64


def sum_(b: HloBuilder, x: Instruction, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Instruction:
    dims = norm_dims(dim, x.shape.rank)
    x = b.convert(x, _accumulation_dtype(x, dtype))
    return _finish(b, b.reduce(x, dims, "add"), x, dims, keepdim)


def sum_all(b: HloBuilder, x: Instruction, dtype: Any = None) -> Instruction:
    return sum_(b, x, None, False, dtype)


def _mean(b: HloBuilder, x: Instruction, dims: list[int], keepdim: bool = False) -> Instruction:
    total = b.reduce(x, dims, "add")
    mean = b.binary("multiply", total, b.scalar(1.0 / max(_count(x, dims), 1), x.shape.dtype))
    return _finish(b, mean, x, dims, keepdim)


def mean(b: HloBuilder, x: Instruction, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Instruction:
    require(dtype is not None or is_float(x.shape.dtype), "mean of an integer tensor needs a dtype")
    x = b.convert(x, hlo_dtype(dtype) if dtype is not None else x.shape.dtype)
    return _mean(b, x, norm_dims(dim, x.shape.rank), keepdim)


def mean_all(b: HloBuilder, x: Instruction, dtype: Any = None) -> Instruction:
    return mean(b, x, None, False, dtype)


def _extremum(kind: str):
    """amax / amin: a max/min ``reduce`` (an empty dim list reduces everything)."""
    def rule(b: HloBuilder, x: Instruction, dim: Sequence[int] = (), keepdim: bool = False) -> Instruction:
        dims = norm_dims(dim, x.shape.rank)
        return _finish(b, b.reduce(x, dims, kind), x, dims, keepdim)

    rule.__name__ = f"a{kind}"
    return rule


def var(b: HloBuilder, x: Instruction, dim: Any = None, correction: Any = None,
        keepdim: bool = False) -> Instruction:
    """``sum((x - mean)^2) / (N - correction)`` (correction defaults to 1)."""
    x = b.convert(x, float_dtype(x))
    dims = norm_dims(dim, x.shape.rank)
    centered = b.binary("subtract", x, _expand_back(b, _mean(b, x, dims), x.shape.dims, dims))
    squares = b.reduce(b.binary("multiply", centered, centered), dims, "add")
    denom = max(_count(x, dims) - (1 if correction is None else correction), 0)
    out = b.binary("divide", squares, b.scalar(denom, x.shape.dtype))
    return _finish(b, out, x, dims, keepdim)


# ---- softmax ------------------------------------------------------------------------------------
def _shifted(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``x - max(x, d)``."""
    return b.binary("subtract", x, _expand_back(b, b.reduce(x, [d], "max"), x.shape.dims, [d]))


def softmax_along(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``exp(x - max) / sum(exp(x - max))`` along dim ``d``."""
    e = b.unary("exponential", _shifted(b, x, d))
    return b.binary("divide", e, _expand_back(b, b.reduce(e, [d], "add"), x.shape.dims, [d]))


def log_softmax_along(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``(x - max) - log(sum(exp(x - max)))`` along dim ``d``."""
    s = _shifted(b, x, d)
    lse = b.unary("log", b.reduce(b.unary("exponential", s), [d], "add"))
    return b.binary("subtract", s, _expand_back(b, lse, x.shape.dims, [d]))


def _softmax_rule(along):
    def rule(b: HloBuilder, x: Instruction, dim: int, dtype_or_half_to_float: Any = None) -> Instruction:
        """softmax.int(x, dim, dtype) and _softmax(x, dim, half_to_float) alike."""
        arg = dtype_or_half_to_float
        out_dtype = float_dtype(x)
        if arg is True:
            out_dtype = "f32"
        elif arg not in (None, False):
            out_dtype = hlo_dtype(arg)
        compute = "f32" if out_dtype in _UPCAST else out_dtype
        out = along(b, b.convert(x, compute), norm_dim(dim, x.shape.rank))
        return b.convert(out, out_dtype)

    rule.__name__ = along.__name__.replace("_along", "")
    return rule


# ---- layer norm ---------------------------------------------------------------------------------
def _layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int], weight: Instruction | None,
                bias: Instruction | None, eps: float) -> tuple[Instruction, Instruction, Instruction]:
    """(out, mean, rstd) over the trailing ``normalized_shape`` dims; mean/rstd keep those dims as 1."""
    n = len(normalized_shape)
    require(tuple(x.shape.dims[x.shape.rank - n:]) == tuple(normalized_shape),
            f"normalized_shape {list(normalized_shape)} does not match input {list(x.shape.dims)}")
    out_dtype = float_dtype(x)
    x = b.convert(x, "f32" if out_dtype in _UPCAST else out_dtype)
    dims = list(range(x.shape.rank - n, x.shape.rank))
    mean_r = _mean(b, x, dims)
    centered = b.binary("subtract", x, _expand_back(b, mean_r, x.shape.dims, dims))
    var_r = _mean(b, b.binary("multiply", centered, centered), dims)
    rstd_r = b.unary("rsqrt", b.binary("add", var_r, b.scalar(eps, x.shape.dtype)))
    out = b.binary("multiply", centered, _expand_back(b, rstd_r, x.shape.dims, dims))
    if weight is not None:
        out = b.binary("multiply", out, b.broadcast_to(b.convert(weight, x.shape.dtype), out.shape.dims))
    if bias is not None:
        out = b.binary("add", out, b.broadcast_to(b.convert(bias, x.shape.dtype), out.shape.dims))
    return (b.convert(out, out_dtype), keep_dims(b, mean_r, dims, x.shape.dims),
            keep_dims(b, rstd_r, dims, x.shape.dims))


def layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int],
               weight: Instruction | None = None, bias: Instruction | None = None, eps: float = 1e-5,
               cudnn_enable: bool = True) -> Instruction:
    return _layer_norm(b, x, normalized_shape, weight, bias, eps)[0]


def native_layer_norm(b: HloBuilder, x: Instruction, normalized_shape: Sequence[int],
                      weight: Instruction | None, bias: Instruction | None,
                      eps: float) -> tuple[Instruction, Instruction, Instruction]:
    return _layer_norm(b, x, normalized_shape, weight, bias, eps)


RULES = {
    "aten.sum.dim_IntList": sum_,
    "aten.sum.default": sum_all,
    "aten.mean.dim": mean,
    "aten.mean.default": mean_all,
    "aten.amax.default": _extremum("max"),
    "aten.amin.default": _extremum("min"),
    "aten.var.correction": var,
    "aten.softmax.int": _softmax_rule(softmax_along),
    "aten._softmax.default": _softmax_rule(softmax_along),
    "aten.log_softmax.int": _softmax_rule(log_softmax_along),
    "aten._log_softmax.default": _softmax_rule(log_softmax_along),
    "aten.layer_norm.default": layer_norm,
    "aten.native_layer_norm.default": native_layer_norm,
}
