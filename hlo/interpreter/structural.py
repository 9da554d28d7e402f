"""The interpreter's structural ops: constants, iota, layout and data movement, dot, reduce, calls and tuples."""

from __future__ import annotations

import math

import numpy as np

from hlo.interpreter.core import EvaluationError, Op, Value, accumulator, call, pad_array, reducer_ufunc
from hlo.ir import Instruction
from hlo.shape_inference import parse_padding


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
        out = call(inst.attrs["to_apply"], acc + [m[..., r] for m in moved])
        acc = list(out) if isinstance(out, tuple) else [out]
    return acc[0] if len(acc) == 1 else tuple(acc)


def _called(key: str) -> Op:
    """fusion (calls=) and call (to_apply=): evaluate the called computation on the operands."""
    return lambda inst, ops: call(inst.attrs[key], ops)


def _constant(inst: Instruction, ops: list) -> np.ndarray:
    if inst.literal is None:
        raise EvaluationError(f"{inst.where()}: the constant has no data (was its side file loaded?)")
    return inst.literal


OPS: dict[str, Op] = {
    "constant": _constant, "iota": _iota, "broadcast": _broadcast,
    "reshape": lambda inst, ops: ops[0].reshape(inst.shape.dims), "bitcast": _bitcast,
    "transpose": lambda inst, ops: np.transpose(ops[0], inst.attrs["dimensions"]),
    "slice": _slice,
    "concatenate": lambda inst, ops: np.concatenate(ops, axis=inst.attrs["dimensions"][0]),
    "pad": _pad, "reduce": _reduce, "dot": _dot,
    "fusion": _called("calls"), "call": _called("to_apply"),
    "tuple": lambda inst, ops: tuple(ops),
    "get-tuple-element": lambda inst, ops: ops[0][inst.attrs["index"]],
}
