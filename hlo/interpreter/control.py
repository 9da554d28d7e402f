"""The interpreter's control flow, sorting and integer bit ops (shape_control.py gives their forms).

``while`` and ``conditional`` evaluate their computations as written; ``sort`` is a stable sort of each
1-D slice along the sort dimension driven by the comparator (``cmp(a, b)`` says a goes before b);
``topk`` orders by compare's TOTALORDER, largest first, ties by lower index (XLA's CPU TopK); shifts follow
XLA: an amount outside 0..bits-1 gives 0, or the sign for an arithmetic right shift.
"""

from __future__ import annotations

import functools

import numpy as np

from hlo.interpreter.core import EvaluationError, Op, Value, call
from hlo.interpreter.elementwise import total_order_key
from hlo.ir import Instruction
from hlo.shape_control import branches

MAX_TRIPS = 1 << 20  # a while loop running longer is taken for an endless one


def _while(inst: Instruction, ops: list) -> Value:
    cond, body = inst.attrs["condition"], inst.attrs["body"]
    state = ops[0]
    for _ in range(MAX_TRIPS):
        if not bool(np.asarray(call(cond, [state]))):
            return state
        state = call(body, [state])
    raise EvaluationError(f"{inst.where()}: the loop ran {MAX_TRIPS} times without its condition failing")


def _conditional(inst: Instruction, ops: list) -> Value:
    comps = branches(inst.attrs)
    selector = np.asarray(ops[0])
    if selector.dtype == np.bool_:
        index = 0 if bool(selector) else 1
    else:
        index = int(selector)
        if not 0 <= index < len(comps):
            index = len(comps) - 1
    return call(comps[index], [ops[1 + index]])


def _sort(inst: Instruction, ops: list) -> Value:
    (dim,) = tuple(inst.attrs["dimensions"])
    cmp = inst.attrs["to_apply"]
    moved = [np.moveaxis(x, dim, -1) for x in ops]
    n = moved[0].shape[-1]
    out = [np.empty_like(m) for m in moved]

    def less(row: tuple, i: int, j: int) -> bool:
        args = [v for m in moved for v in (m[row + (i,)], m[row + (j,)])]
        return bool(np.asarray(call(cmp, [np.asarray(a) for a in args])))

    for row in np.ndindex(*moved[0].shape[:-1]):
        def order(i: int, j: int, row: tuple = row) -> int:
            return -1 if less(row, i, j) else 1 if less(row, j, i) else 0

        perm = sorted(range(n), key=functools.cmp_to_key(order))  # Python's sort is stable
        for m, o in zip(moved, out, strict=True):
            o[row] = m[row][perm]
    result = [np.moveaxis(o, -1, dim) for o in out]
    return result[0] if len(result) == 1 else tuple(result)


def _topk(inst: Instruction, ops: list) -> Value:
    """XLA's TopK: by compare's TOTALORDER (+NaN first, -0 after +0, -NaN last), ties by lower index."""
    x = ops[0]
    k = int(inst.attrs["k"])
    largest = str(inst.attrs.get("largest", "true")).lower() != "false"
    key = total_order_key(x)
    key = -key if largest else key
    idx = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


def _bits(x: np.ndarray) -> int:
    return x.dtype.itemsize * 8


def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) & ((1 << _bits(x)) - 1)


def _popcnt(inst: Instruction, ops: list) -> np.ndarray:
    u = _unsigned(ops[0])
    count = np.zeros(u.shape, np.int64)
    for b in range(_bits(ops[0])):
        count += (u >> b) & 1
    return count.astype(ops[0].dtype)


def _clz(inst: Instruction, ops: list) -> np.ndarray:
    u, bits = _unsigned(ops[0]), _bits(ops[0])
    width = np.zeros(u.shape, np.int64)
    for b in range(bits):
        width = np.where((u >> b) & 1, b + 1, width)
    return (bits - width).astype(ops[0].dtype)


def _shift(kind: str) -> Op:
    def op(inst: Instruction, ops: list) -> np.ndarray:
        a, s = ops
        bits = _bits(a)
        u, amount = _unsigned(a), s.astype(np.int64)
        if a.dtype.kind == "u":
            amount = amount & ((1 << bits) - 1)
        ok = (amount >= 0) & (amount < bits)
        sh = np.where(ok, amount, 0)
        if kind == "left":
            out = np.where(ok, u << sh, 0)
        elif kind == "logical":
            out = np.where(ok, u >> sh, 0)
        else:
            signed = np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
            out = np.where(ok, signed >> sh, np.where(signed < 0, -1, 0))
        return out.astype(a.dtype)

    return op


OPS: dict[str, Op] = {
    "while": _while, "conditional": _conditional, "sort": _sort, "topk": _topk,
    "reverse": lambda inst, ops: np.flip(ops[0], tuple(inst.attrs["dimensions"])),
    "popcnt": _popcnt, "count-leading-zeros": _clz,
    "shift-left": _shift("left"), "shift-right-logical": _shift("logical"),
    "shift-right-arithmetic": _shift("arith"),
}
