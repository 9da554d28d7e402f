"""Numerics for the frontend tests: the project's interpreter when it exists, else a tiny evaluator.

The private evaluator covers exactly the opcodes the frontend emits, with numpy semantics; it lets
the frontend be tested before (and independently of) compiler/hlo/interpreter.py.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.hlo.ir import Instruction, Module, numpy_dtype

_UNARY = {
    "negate": np.negative, "abs": np.abs, "exponential": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh, "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "sine": np.sin, "cosine": np.cos, "floor": np.floor, "ceil": np.ceil, "not": np.logical_not,
}
_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "and": np.logical_and,
    "or": np.logical_or,
}
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
            "GE": np.greater_equal}
_REDUCE = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod}
_erf = np.vectorize(math.erf)
_CUSTOM = {
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
}


def _dot(inst: Instruction, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    a = inst.attrs
    lc, rc = list(a["lhs_contracting_dims"]), list(a["rhs_contracting_dims"])
    lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    lf = [d for d in range(lhs.ndim) if d not in lc + lb]
    rf = [d for d in range(rhs.ndim) if d not in rc + rb]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lsub, rsub = [""] * lhs.ndim, [""] * rhs.ndim
    for i, j in zip(lb + lc, rb + rc):
        lsub[i] = rsub[j] = next(letters)
    for d in lf:
        lsub[d] = next(letters)
    for d in rf:
        rsub[d] = next(letters)
    out = [lsub[d] for d in lb + lf] + [rsub[d] for d in rf]
    return np.einsum(f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}", lhs, rhs)


def _broadcast(inst: Instruction, x: np.ndarray) -> np.ndarray:
    dims = inst.shape.dims
    mapping = list(inst.attrs["dimensions"])
    shape = [1] * len(dims)
    for i, m in enumerate(mapping):
        shape[m] = x.shape[i]
    order = np.argsort(mapping)
    return np.broadcast_to(np.transpose(x, order).reshape(shape), dims)


def _run(inst: Instruction, ops: list[np.ndarray], args: list[np.ndarray]) -> np.ndarray | tuple:
    op, a = inst.opcode, inst.attrs
    if op == "parameter":
        return np.asarray(args[inst.parameter_number])
    if op == "constant":
        return inst.literal
    if op == "tuple":
        return tuple(ops)
    if op in _UNARY:
        return _UNARY[op](ops[0])
    if op in _BINARY:
        return _BINARY[op](ops[0], ops[1])
    if op == "compare":
        return _COMPARE[a["direction"]](ops[0], ops[1])
    if op == "select":
        return np.where(ops[0], ops[1], ops[2])
    if op == "convert":
        return ops[0]
    if op == "reshape":
        return ops[0].reshape(inst.shape.dims)
    if op == "transpose":
        return np.transpose(ops[0], a["dimensions"])
    if op == "broadcast":
        return _broadcast(inst, ops[0])
    if op == "dot":
        return _dot(inst, ops[0], ops[1])
    if op == "reduce":
        combiner = inst.attrs["to_apply"].root.opcode
        return _REDUCE[combiner](ops[0], axis=tuple(a["dimensions"]))
    if op == "slice":
        return ops[0][tuple(slice(lo, hi, st) for lo, hi, st in a["slice"].ranges)]
    if op == "concatenate":
        return np.concatenate(ops, axis=a["dimensions"][0])
    if op == "custom-call":
        return _CUSTOM[a["custom_call_target"].text](ops[0])
    raise NotImplementedError(op)


def private_evaluate(module: Module, args: list[np.ndarray]) -> list[np.ndarray]:
    """Evaluate the entry computation with numpy; every result is cast to its instruction's dtype."""
    values: dict[int, object] = {}
    comp = module.entry
    for inst in comp.instructions:
        out = _run(inst, [values[o.uid] for o in inst.operands], args)
        if not inst.shape.is_tuple:
            out = np.asarray(out).astype(numpy_dtype(inst.shape.dtype))
            assert out.shape == inst.shape.dims, (inst, out.shape)
        values[inst.uid] = out
    root = values[comp.root.uid]
    return list(root) if comp.root.shape.is_tuple else [root]


def evaluate(module: Module, args: list[np.ndarray]) -> list[np.ndarray]:
    """compiler.hlo.interpreter.evaluate if it exists, else the private evaluator."""
    try:
        from compiler.hlo.interpreter import evaluate as project_evaluate
    except ImportError:
        return private_evaluate(module, args)
    return project_evaluate(module, args)
