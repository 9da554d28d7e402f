"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, any/all, logsumexp,
cumsum/cumprod, and softmax/log_softmax.

A reduction is an HLO ``reduce`` with a scalar ``to_apply`` computation; results are brought back to
the operand's shape with a ``broadcast`` over the kept dims. argmax/argmin (and max/min along a dim)
reduce (value, index) pairs with a variadic ``reduce`` whose combiner keeps the first extreme element;
cumsum/cumprod are a ``reduce-window`` whose window spans the whole dim, padded in front (XLA's own
lowering). Softmax subtracts the row max before ``exponential`` (the numerically stable form).
Half-precision inputs of softmax are computed in f32 and converted back, as torch does on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import ml_dtypes

from hlo.ir import Instruction, Shape, Window, numpy_dtype

from .builder import HloBuilder, hlo_dtype, reduction_identity
from .ops_common import float_dtype, is_float, keep_dims, norm_dim, norm_dims, require

_UPCAST = ("f16", "bf16")


def expand_back(b: HloBuilder, r: Instruction, dims: Sequence[int], reduced: Sequence[int]) -> Instruction:
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


def mean_over(b: HloBuilder, x: Instruction, dims: list[int], keepdim: bool = False) -> Instruction:
    total = b.reduce(x, dims, "add")
    mean = b.binary("multiply", total, b.scalar(1.0 / max(_count(x, dims), 1), x.shape.dtype))
    return _finish(b, mean, x, dims, keepdim)


def mean(b: HloBuilder, x: Instruction, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Instruction:
    require(dtype is not None or is_float(x.shape.dtype), "mean of an integer tensor needs a dtype")
    x = b.convert(x, hlo_dtype(dtype) if dtype is not None else x.shape.dtype)
    return mean_over(b, x, norm_dims(dim, x.shape.rank), keepdim)


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
    centered = b.binary("subtract", x, expand_back(b, mean_over(b, x, dims), x.shape.dims, dims))
    squares = b.reduce(b.binary("multiply", centered, centered), dims, "add")
    denom = max(_count(x, dims) - (1 if correction is None else correction), 0)
    out = b.binary("divide", squares, b.scalar(denom, x.shape.dtype))
    return _finish(b, out, x, dims, keepdim)


def std(b: HloBuilder, x: Instruction, dim: Any = None, correction: Any = None,
        keepdim: bool = False) -> Instruction:
    return b.unary("sqrt", var(b, x, dim, correction, keepdim))


def var_mean(b: HloBuilder, x: Instruction, dim: Any = None, correction: Any = None,
             keepdim: bool = False) -> tuple[Instruction, Instruction]:
    xf = b.convert(x, float_dtype(x))
    dims = norm_dims(dim, xf.shape.rank)
    return var(b, x, dim, correction, keepdim), _finish(b, mean_over(b, xf, dims), xf, dims, keepdim)


def std_mean(b: HloBuilder, x: Instruction, dim: Any = None, correction: Any = None,
             keepdim: bool = False) -> tuple[Instruction, Instruction]:
    v, m = var_mean(b, x, dim, correction, keepdim)
    return b.unary("sqrt", v), m


def prod_dim(b: HloBuilder, x: Instruction, dim: int, keepdim: bool = False, dtype: Any = None) -> Instruction:
    x = b.convert(x, _accumulation_dtype(x, dtype))
    dims = [norm_dim(dim, x.shape.rank)]
    if not is_float(x.shape.dtype) and dims[0] != x.shape.rank - 1:
        return _finish(b, _int_product_tree(b, x, dims[0]), x, dims, keepdim)
    return _finish(b, b.reduce(x, dims, "mul"), x, dims, keepdim)


def _int_product_tree(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """The integer product along a dim other than the minor one, as log2(n) elementwise multiplies of the
    dim's two halves (an odd last slice carried over). The machine multiplies integers exactly, wrapping
    (GpSimd), but has no exact integer product across partitions; the wrapped product is the same in any
    order, so this is the reduce's value exactly."""
    r = x.shape.rank
    if x.shape.dims[d] == 0:
        return b.full(1, x.shape.dtype, [n for a, n in enumerate(x.shape.dims) if a != d])
    while x.shape.dims[d] > 1:
        n, h = x.shape.dims[d], x.shape.dims[d] // 2

        def part(lo: int, hi: int, v: Instruction = x) -> Instruction:
            return b.slice(v, [(lo, hi, 1) if a == d else (0, v.shape.dims[a], 1) for a in range(r)])

        y = b.binary("multiply", part(0, h), part(h, 2 * h))
        x = b.concatenate([y, part(2 * h, n)], d) if n % 2 else y
    return b.reshape(x, [n for a, n in enumerate(x.shape.dims) if a != d])


def prod_all(b: HloBuilder, x: Instruction, dtype: Any = None) -> Instruction:
    x = b.convert(x, _accumulation_dtype(x, dtype))
    return b.reduce(x, range(x.shape.rank), "mul")


def _full_reduction(kind: str):
    """max() / min() of every element."""
    def rule(b: HloBuilder, x: Instruction) -> Instruction:
        return b.reduce(x, range(x.shape.rank), kind)

    rule.__name__ = f"{kind}_all"
    return rule


def _truth(kind: str):
    """any / all: nonzero elements as pred, reduced with or / and (over the given dims, or all)."""
    def rule(b: HloBuilder, x: Instruction, dim: Any = None, keepdim: bool = False) -> Instruction:
        dims = norm_dims(dim, x.shape.rank)
        p = b.convert(x, "pred")
        out = _finish(b, b.reduce(p, dims, kind), p, dims, keepdim)
        return b.convert(out, "u8") if x.shape.dtype == "u8" else out  # torch keeps uint8 for uint8 inputs

    rule.__name__ = {"or": "any", "and": "all"}[kind]
    return rule


def logsumexp(b: HloBuilder, x: Instruction, dim: Any, keepdim: bool = False) -> Instruction:
    """``max + log(sum(exp(x - max)))`` (a row of -inf gives -inf)."""
    x = b.convert(x, float_dtype(x))
    dims = norm_dims(dim, x.shape.rank)
    m = b.reduce(x, dims, "max")
    finite = b.select(b.emit("is-finite", m.shape.with_dtype("pred"), [m]), m, b.full(0, m.shape.dtype, m.shape.dims))
    e = b.unary("exponential", b.binary("subtract", x, expand_back(b, finite, x.shape.dims, dims)))
    out = b.binary("add", b.unary("log", b.reduce(e, dims, "add")), finite)
    return _finish(b, out, x, dims, keepdim)


def vector_norm(b: HloBuilder, x: Instruction, ord: Any = 2, dim: Any = None, keepdim: bool = False,
                dtype: Any = None) -> Instruction:
    """``linalg_vector_norm``: max |x| (inf), min |x| (-inf), count of nonzeros (0), else
    ``sum(|x|^p)^(1/p)`` (p = 1 and 2 without the powers). 16-bit floats are accumulated in f32 and the norm
    rounded once, as torch does (their squares overflow f16 for |x| > 256)."""
    x = b.convert(x, hlo_dtype(dtype) if dtype is not None else float_dtype(x))
    out_dtype = x.shape.dtype
    if out_dtype in _UPCAST:
        x = b.convert(x, "f32")
    dims = norm_dims(dim, x.shape.rank)
    a = b.unary("abs", x)
    p = float(ord)
    if p in (float("inf"), float("-inf")):
        out = b.reduce(a, dims, "max" if p > 0 else "min")
    elif p == 0:
        out = b.reduce(b.convert(b.compare(a, b.full(0, a.shape.dtype, a.shape.dims), "NE"), a.shape.dtype),
                       dims, "add")
    elif p == 1:
        out = b.reduce(a, dims, "add")
    elif p == 2:
        out = b.unary("sqrt", b.reduce(b.binary("multiply", a, a), dims, "add"))
    else:
        powered = b.binary("power", a, b.full(p, a.shape.dtype, a.shape.dims))
        total = b.reduce(powered, dims, "add")
        out = b.binary("power", total, b.full(1.0 / p, total.shape.dtype, total.shape.dims))
    return _finish(b, b.convert(out, out_dtype), x, dims, keepdim)


# ---- argmax and friends -------------------------------------------------------------------------
def _arg_reducer(b: HloBuilder, value_dtype: str, direction: str):
    """(value, index) x (value, index) -> the pair with the larger (GT) / smaller (LT) value, the
    smaller index on ties: the first extreme element, as torch returns it."""
    def body(p: list[Instruction]) -> Instruction:
        v0, i0, v1, i1 = p
        better = b.compare(v1, v0, direction)
        same = b.compare(v1, v0, "EQ")
        if is_float(value_dtype):  # NaN is the extreme of both argmax and argmin, as in torch
            nan0, nan1 = b.compare(v0, v0, "NE"), b.compare(v1, v1, "NE")
            better = b.binary("or", better, b.binary("and", nan1, b.unary("not", nan0)))
            same = b.binary("or", same, b.binary("and", nan0, nan1))
        tie = b.binary("and", same, b.compare(i1, i0, "LT"))
        take = b.binary("or", better, tie)
        return b.tuple([b.select(take, v1, v0), b.select(take, i1, i0)])

    scalar = Shape.array(value_dtype, ())
    index = Shape.array("s64", ())
    return b.computation(f"arg{'max' if direction == 'GT' else 'min'}_{value_dtype}",
                         [scalar, index, scalar, index], body)


def _arg_reduce(b: HloBuilder, x: Instruction, d: int, kind: str) -> tuple[Instruction, Instruction]:
    """(values, indices) of the max/min along dim ``d``; bool as u8 (False < True, the same order)."""
    if x.shape.dtype == "pred":
        values, indices = _arg_reduce(b, b.convert(x, "u8"), d, kind)
        return b.convert(values, "pred"), indices
    idx = b.iota("s64", x.shape.dims, d)
    inits = [b.scalar(reduction_identity(kind, x.shape.dtype), x.shape.dtype), b.scalar(0, "s64")]
    reducer = _arg_reducer(b, x.shape.dtype, "GT" if kind == "max" else "LT")
    values, indices = b.reduce_variadic([x, idx], inits, [d], reducer)
    return values, indices


def _argext(kind: str):
    """argmax / argmin along ``dim`` (over the flattened tensor when dim is None)."""
    def rule(b: HloBuilder, x: Instruction, dim: int | None = None, keepdim: bool = False) -> Instruction:
        if x.shape.rank == 0:  # the one element is the extreme: index 0
            if dim is not None:
                norm_dim(dim, 0)
            return b.scalar(0, "s64")
        if dim is None:
            flat = b.reshape(x, [x.shape.size])
            _, idx = _arg_reduce(b, flat, 0, kind)
            return b.reshape(idx, [1] * x.shape.rank) if keepdim else idx
        d = norm_dim(dim, x.shape.rank)
        _, idx = _arg_reduce(b, x, d, kind)
        return _finish(b, idx, x, [d], keepdim)

    rule.__name__ = f"arg{kind}"
    return rule


def _extreme_dim(kind: str):
    """max.dim / min.dim: (values, indices) along one dim."""
    def rule(b: HloBuilder, x: Instruction, dim: int, keepdim: bool = False) -> tuple[Instruction, Instruction]:
        d = norm_dim(dim, x.shape.rank)
        if x.shape.rank == 0:  # a 0-d tensor is its own extreme, at index 0
            return x, b.scalar(0, "s64")
        values, idx = _arg_reduce(b, x, d, kind)
        return _finish(b, values, x, [d], keepdim), _finish(b, idx, x, [d], keepdim)

    rule.__name__ = f"{kind}_dim"
    return rule


# ---- cumulative ---------------------------------------------------------------------------------
def _cumulative(kind: str):
    """cumsum / cumprod: a reduce-window spanning the dim, padded with (n - 1) identities in front."""
    def rule(b: HloBuilder, x: Instruction, dim: int, dtype: Any = None) -> Instruction:
        x = b.convert(x, _accumulation_dtype(x, dtype))
        if x.shape.rank == 0:
            return x
        d = norm_dim(dim, x.shape.rank)
        n = x.shape.dims[d]
        size = [n if i == d else 1 for i in range(x.shape.rank)]
        pad = [(n - 1, 0) if i == d else (0, 0) for i in range(x.shape.rank)]
        return b.reduce_window(x, Window.make(size, pad=pad), kind)

    rule.__name__ = {"add": "cumsum", "mul": "cumprod"}[kind]
    return rule


# ---- softmax ------------------------------------------------------------------------------------
def _shifted(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``x - max(x, d)``."""
    return b.binary("subtract", x, expand_back(b, b.reduce(x, [d], "max"), x.shape.dims, [d]))


def softmax_along(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``exp(x - max) / sum(exp(x - max))`` along dim ``d``."""
    e = b.unary("exponential", _shifted(b, x, d))
    return b.binary("divide", e, expand_back(b, b.reduce(e, [d], "add"), x.shape.dims, [d]))


def safe_softmax_along(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """torch's ``_safe_softmax``: softmax along ``d``, but 0 in a row whose every element is -inf.

    ``exp(x - max(m, lowest)) / max(sum, 1)`` with m the row maximum: a row with a finite element has
    m >= lowest (the dtype's most negative finite value) and a sum >= 1 (its maximum contributes exp(0) = 1
    and the other terms are >= 0), so both guards leave it bit for bit as the plain softmax; an all -inf
    row gives exp(-inf) = 0 over 1. A NaN (or +inf) in a row still makes the row NaN, as in torch."""
    dtype = x.shape.dtype
    top = b.binary("maximum", b.reduce(x, [d], "max"), b.scalar(ml_dtypes.finfo(numpy_dtype(dtype)).min, dtype))
    e = b.unary("exponential", b.binary("subtract", x, expand_back(b, top, x.shape.dims, [d])))
    total = b.binary("maximum", b.reduce(e, [d], "add"), b.scalar(1, dtype))
    return b.binary("divide", e, expand_back(b, total, x.shape.dims, [d]))


def log_softmax_along(b: HloBuilder, x: Instruction, d: int) -> Instruction:
    """``(x - max) - log(sum(exp(x - max)))`` along dim ``d``."""
    s = _shifted(b, x, d)
    lse = b.unary("log", b.reduce(b.unary("exponential", s), [d], "add"))
    return b.binary("subtract", s, expand_back(b, lse, x.shape.dims, [d]))


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


RULES = {
    "aten.sum.dim_IntList": sum_,
    "aten.sum.default": sum_all,
    "aten.mean.dim": mean,
    "aten.mean.default": mean_all,
    "aten.amax.default": _extremum("max"),
    "aten.amin.default": _extremum("min"),
    "aten.var.correction": var,
    "aten.std.correction": std,
    "aten.var_mean.correction": var_mean,
    "aten.std_mean.correction": std_mean,
    "aten.prod.dim_int": prod_dim,
    "aten.prod.default": prod_all,
    "aten.max.default": _full_reduction("max"),
    "aten.min.default": _full_reduction("min"),
    "aten.max.dim": _extreme_dim("max"),
    "aten.min.dim": _extreme_dim("min"),
    "aten.argmax.default": _argext("max"),
    "aten.argmin.default": _argext("min"),
    "aten.any.default": _truth("or"),
    "aten.any.dim": _truth("or"),
    "aten.any.dims": _truth("or"),
    "aten.all.default": _truth("and"),
    "aten.all.dim": _truth("and"),
    "aten.logsumexp.default": logsumexp,
    "aten.linalg_vector_norm.default": vector_norm,
    "aten.cumsum.default": _cumulative("add"),
    "aten.cumprod.default": _cumulative("mul"),
    "aten.softmax.int": _softmax_rule(softmax_along),
    "aten._softmax.default": _softmax_rule(softmax_along),
    "aten.log_softmax.int": _softmax_rule(log_softmax_along),
    "aten._log_softmax.default": _softmax_rule(log_softmax_along),
}
