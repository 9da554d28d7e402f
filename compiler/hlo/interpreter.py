"""The reference interpreter: evaluates an HLO module with numpy, one function per opcode (``OPS``; the
windowed ops are in interpreter_window.py, the indexing ops in interpreter_indexing.py).

Low-precision floats (bf16, f16, fp8) are computed in fp32 and rounded (nearest even) to the instruction's
type, as the hardware does, fp8 saturating at its largest finite value (``to_dtype``); ``dot``,
``convolution``, ``reduce``, ``reduce-window`` and scatter-add accumulate in fp32. Transcendentals of the custom calls
(gelu) are computed in float64. Values are numpy arrays, or Python tuples for tuple-shaped instructions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from compiler.hlo.interpreter_base import (
    FLOATS,
    EvaluationError,
    Op,
    Value,
    accumulator,
    pad_array,
    reducer_ufunc,
    wide,
)
from compiler.hlo.interpreter_indexing import INDEXING_OPS
from compiler.hlo.interpreter_window import WINDOW_OPS
from compiler.hlo.ir import Computation, Instruction, Module, Quoted, numpy_dtype
from compiler.hlo.shape_inference import parse_padding

__all__ = ["CUSTOM_CALLS", "OPS", "EvaluationError", "erf", "evaluate", "evaluate_computation", "gelu",
           "gelu_tanh", "reducer_ufunc", "to_dtype"]

_FP8 = {numpy_dtype(d): float(ml_dtypes.finfo(numpy_dtype(d)).max) for d in ("f8e4m3fn", "f8e5m2")}


def to_dtype(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` rounded (nearest even) to ``dtype``; fp8 saturates to its largest finite value (inf too), as
    the hardware and the emulator do, instead of overflowing to NaN (e4m3fn) or inf (e5m2); NaN stays NaN."""
    limit = _FP8.get(dtype)
    if limit is not None and x.dtype != dtype:
        x = np.clip(np.asarray(x, np.float32), -limit, limit)
    return np.asarray(x).astype(dtype)


# ---- special functions ---------------------------------------------------------------------------------


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (to ~1e-15): 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!, all terms positive."""
    x = np.asarray(x, np.float64)
    a = np.minimum(np.abs(np.nan_to_num(x)), 6.0)  # erf(6) rounds to 1 in float64
    a2 = a * a
    term, total = a.copy(), a.copy()
    n = 0
    while np.any(term > 1e-17 * total):
        n += 1
        term = term * (2.0 * a2 / (2 * n + 1))
        total += term
    result = np.sign(x) * np.minimum(2.0 / math.sqrt(math.pi) * np.exp(-a2) * total, 1.0)
    return np.where(np.isnan(x), np.nan, result)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, exact: x/2 (1 + erf(x/sqrt 2))."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (PyTorch's approximate="tanh")."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


CUSTOM_CALLS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"gelu": gelu, "gelu_tanh": gelu_tanh}


# ---- elementwise -----------------------------------------------------------------------------------------


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _round_afz(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "negate": np.negative, "sign": np.sign, "not": _not, "copy": np.copy,
    "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log, "log-plus-one": np.log1p,
    "cbrt": np.cbrt, "tan": np.tan, "is-finite": np.isfinite, "tanh": np.tanh, "logistic": _logistic, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "erf": lambda x: erf(x).astype(x.dtype), "sine": np.sin,
    "cosine": np.cos, "floor": np.floor, "ceil": np.ceil, "round-nearest-even": np.rint,
    "round-nearest-afz": _round_afz,
}


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    q = np.floor_divide(a, np.where(b == 0, 1, b))
    q = q + ((q * b != a) & ((a < 0) != (b < 0)) & (b != 0))  # truncate toward zero, as C and XLA do
    return np.where(b == 0, -1, q).astype(a.dtype)


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "remainder": np.fmod,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "atan2": np.arctan2,
}
COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
           "GE": np.greater_equal}


def _unary_op(fn: Callable) -> Op:
    return lambda inst, ops: fn(wide(ops[0]))


def _binary_op(fn: Callable) -> Op:
    return lambda inst, ops: fn(wide(ops[0]), wide(ops[1]))


def _compare(inst: Instruction, ops: list) -> np.ndarray:
    return COMPARE[inst.attrs["direction"]](wide(ops[0]), wide(ops[1]))


def _select(inst: Instruction, ops: list) -> np.ndarray:
    return np.where(ops[0], ops[1], ops[2])


def _clamp(inst: Instruction, ops: list) -> np.ndarray:
    lo, x, hi = (wide(o) for o in ops)
    return np.minimum(np.maximum(x, lo), hi)


def _convert(inst: Instruction, ops: list) -> np.ndarray:
    x, target = ops[0], numpy_dtype(inst.shape.dtype)
    if target == np.bool_:
        return x != 0
    if target.kind in "iu" and x.dtype in FLOATS:  # truncate, saturate, NaN -> 0 (XLA's semantics)
        info = np.iinfo(target)
        truncated = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
        return np.clip(truncated, info.min, info.max).astype(target)
    return to_dtype(x, target)


# ---- data movement ---------------------------------------------------------------------------------------


def _iota(inst: Instruction, ops: list) -> np.ndarray:
    dims, axis = inst.shape.dims, inst.attrs["iota_dimension"]
    view = [1] * len(dims)
    view[axis] = dims[axis]
    return np.broadcast_to(np.arange(dims[axis]).reshape(view), dims)


def _broadcast(inst: Instruction, ops: list) -> np.ndarray:
    x, mapping = ops[0], tuple(inst.attrs.get("dimensions", ()))
    order = sorted(range(len(mapping)), key=lambda i: mapping[i])
    view = [1] * inst.shape.rank
    for i in order:
        view[mapping[i]] = x.shape[i]
    return np.broadcast_to(np.transpose(x, order).reshape(view), inst.shape.dims)


def _bitcast(inst: Instruction, ops: list) -> np.ndarray:
    """The operand's elements in its physical (layout) order, laid out again in the result's layout."""
    x, source, target = ops[0], inst.operands[0].shape, inst.shape
    physical = np.transpose(x, tuple(reversed(source.minor_to_major))).reshape(-1)
    major_to_minor = tuple(reversed(target.minor_to_major))
    stored = physical.reshape([target.dims[d] for d in major_to_minor])
    return np.transpose(stored, np.argsort(major_to_minor))


def _slice(inst: Instruction, ops: list) -> np.ndarray:
    return ops[0][tuple(slice(s, lim, st) for s, lim, st in inst.attrs["slice"].ranges)]


def _pad(inst: Instruction, ops: list) -> np.ndarray:
    x, value = ops
    return pad_array(x, value, parse_padding(inst.attrs.get("padding"), x.ndim))


def _dot(inst: Instruction, ops: list) -> np.ndarray:
    a = inst.attrs
    lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lhs, rhs = ops
    acc = accumulator(lhs)
    lhs, rhs = lhs.astype(acc), rhs.astype(acc)
    lf = [i for i in range(lhs.ndim) if i not in lb + lc]
    rf = [i for i in range(rhs.ndim) if i not in rb + rc]
    batch = [lhs.shape[i] for i in lb]
    m, k, n = (math.prod(lhs.shape[i] for i in lf), math.prod(lhs.shape[i] for i in lc),
               math.prod(rhs.shape[i] for i in rf))
    left = lhs.transpose(lb + lf + lc).reshape(math.prod(batch), m, k)
    right = rhs.transpose(rb + rc + rf).reshape(math.prod(batch), k, n)
    out = np.matmul(left, right)
    return out.reshape(batch + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf])


# ---- reductions and calls --------------------------------------------------------------------------------

def _reduce(inst: Instruction, ops: list) -> Value:
    n = len(ops) // 2
    axes = tuple(inst.attrs["dimensions"])
    ufunc = reducer_ufunc(inst.attrs["to_apply"]) if n == 1 else None
    if ufunc is not None:
        x, init = ops
        acc = accumulator(x)
        return ufunc.reduce(x.astype(acc), axis=axes, initial=init.astype(acc)[()])
    return _fold(inst, ops[:n], ops[n:], axes)


def _fold(inst: Instruction, inputs: list, inits: list, axes: tuple[int, ...]) -> Value:
    """Any reducer: apply ``to_apply`` once per reduced position, vectorised over the kept positions."""
    kept = [d for i, d in enumerate(inputs[0].shape) if i not in axes]
    moved = [np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim)).reshape(kept + [-1]) for x in inputs]
    acc: list[np.ndarray] = [np.broadcast_to(init, kept) for init in inits]
    for r in range(moved[0].shape[-1]):
        out = evaluate_computation(inst.attrs["to_apply"], acc + [m[..., r] for m in moved])
        acc = list(out) if isinstance(out, tuple) else [out]
    return acc[0] if len(acc) == 1 else tuple(acc)


def _called(key: str) -> Op:
    """fusion (calls=) and call (to_apply=): evaluate the called computation on the operands."""
    return lambda inst, ops: evaluate_computation(inst.attrs[key], ops)


def _custom_call(inst: Instruction, ops: list) -> np.ndarray:
    target = inst.attrs.get("custom_call_target")
    name = target.text if isinstance(target, Quoted) else str(target)
    if name not in CUSTOM_CALLS:
        raise EvaluationError(f"{inst.where()}: no implementation of custom_call_target=\"{name}\" "
                              f"(known: {', '.join(CUSTOM_CALLS)})")
    return CUSTOM_CALLS[name](ops[0])


def _constant(inst: Instruction, ops: list) -> np.ndarray:
    if inst.literal is None:
        raise EvaluationError(f"{inst.where()}: the constant has no data (was its side file loaded?)")
    return inst.literal


OPS: dict[str, Op] = {
    "constant": _constant, "iota": _iota, "convert": _convert, "compare": _compare, "select": _select,
    "clamp": _clamp, "broadcast": _broadcast,
    "reshape": lambda inst, ops: ops[0].reshape(inst.shape.dims), "bitcast": _bitcast,
    "transpose": lambda inst, ops: np.transpose(ops[0], inst.attrs["dimensions"]),
    "slice": _slice,
    "concatenate": lambda inst, ops: np.concatenate(ops, axis=inst.attrs["dimensions"][0]),
    "pad": _pad, "reduce": _reduce, "dot": _dot, "custom-call": _custom_call,
    "fusion": _called("calls"), "call": _called("to_apply"),
    "tuple": lambda inst, ops: tuple(ops),
    "get-tuple-element": lambda inst, ops: ops[0][inst.attrs["index"]],
    **{op: _unary_op(fn) for op, fn in UNARY.items()},
    **{op: _binary_op(fn) for op, fn in BINARY.items()},
    **WINDOW_OPS,
    **INDEXING_OPS,
}


# ---- driver ----------------------------------------------------------------------------------------------


def _in_type(value: Value, inst: Instruction) -> Value:
    if isinstance(value, tuple):
        return value
    dtype = numpy_dtype(inst.shape.dtype)
    return value if value.dtype == dtype else to_dtype(value, dtype)


def evaluate_computation(comp: Computation, args: Sequence[Value]) -> Value:
    """The value of ``comp``'s ROOT with its parameters bound to ``args``."""
    env: dict[int, Value] = {}
    for inst in comp.post_order():
        if inst.opcode == "parameter":
            env[inst.uid] = args[inst.parameter_number]
            continue
        op = OPS.get(inst.opcode)
        if op is None:
            raise EvaluationError(f"computation %{comp.name}: {inst.where()}: the interpreter has no rule for "
                                  f"'{inst.opcode}'")
        env[inst.uid] = _in_type(op(inst, [env[o.uid] for o in inst.operands]), inst)
    return env[comp.root.uid]


def _input(arg: Any, param: Instruction) -> np.ndarray:
    array = np.asarray(arg)
    dtype = numpy_dtype(param.shape.dtype)
    if tuple(array.shape) != param.shape.dims:
        raise EvaluationError(f"parameter({param.parameter_number}) %{param.name} expects shape "
                              f"{list(param.shape.dims)}, got {list(array.shape)}")
    if array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, "same_kind"):
            raise EvaluationError(f"parameter({param.parameter_number}) %{param.name} expects "
                                  f"{param.shape.dtype}, got {array.dtype}")
        array = array.astype(dtype)
    return array


def _flatten(value: Value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [a for v in value for a in _flatten(v)]
    return [np.array(value)]


def evaluate(module: Module, args: Sequence[Any]) -> list[np.ndarray]:
    """Run the entry computation on ``args`` (one array per parameter, cast within its kind to the declared
    type): the elements of a ROOT tuple, or [the ROOT array], as fresh arrays of the declared types."""
    entry = module.entry
    params = entry.parameters
    if len(args) != len(params):
        raise EvaluationError(f"%{entry.name} takes {len(params)} arguments, got {len(args)}")
    inputs = [_input(a, p) for a, p in zip(args, params, strict=True)]
    with np.errstate(all="ignore"):
        return _flatten(evaluate_computation(entry, inputs))
