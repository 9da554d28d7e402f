"""The interpreter's core: value and op types, compute types, reducers, padding, and the evaluator.

The op table (``OPS``) is empty here and filled by the package from its family modules (elementwise.py,
structural.py, window.py, indexing.py), which import this module and never each other. Ops that evaluate a
called computation (reduce, fusion, call, scatter, reduce-window) use ``call``, which looks the table up at run
time, so no family module needs the evaluator's module to import it back.

Low-precision floats (bf16, f16, fp8) are computed in fp32 and rounded (nearest even) to the instruction's
type, as the hardware does, fp8 saturating at its largest finite value (``to_dtype``); ``dot``,
``convolution``, ``reduce``, ``reduce-window`` and scatter-add accumulate in fp32. Values are numpy arrays, or
Python tuples for tuple-shaped instructions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from hlo.errors import NeuroncError
from hlo.ir import FLOAT_DTYPES, Computation, Instruction, Module, numpy_dtype


class EvaluationError(NeuroncError):
    """The interpreter was given wrong inputs, or an instruction it cannot evaluate."""


Value = np.ndarray | tuple
Op = Callable[[Instruction, list[Any]], Value]
OPS: dict[str, Op] = {}  # filled by the package (__init__.py) from the family modules

LOW_PRECISION = frozenset(numpy_dtype(d) for d in ("bf16", "f16", "f8e4m3fn", "f8e5m2"))
FLOATS = frozenset(numpy_dtype(d) for d in FLOAT_DTYPES)


def wide(x: np.ndarray) -> np.ndarray:
    """The array in the type arithmetic is done in: fp32 for low-precision floats, else its own."""
    return x.astype(np.float32) if x.dtype in LOW_PRECISION else x


def accumulator(x: np.ndarray) -> np.dtype:
    """The type a sum over ``x`` accumulates in: fp32 (f64 for f64), int64 for ints, bool for pred."""
    if x.dtype in FLOATS:
        return np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    return np.dtype(np.bool_ if x.dtype == np.bool_ else np.int64)


_REDUCERS = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
             "and": np.bitwise_and, "or": np.bitwise_or}


def reducer_ufunc(comp: Computation) -> np.ufunc | None:
    """The numpy ufunc a reducer computation amounts to (``p0 op p1`` for a commutative op), else None."""
    params, root = comp.parameters, comp.root
    if len(params) != 2 or root is None or root.opcode not in _REDUCERS:
        return None
    return _REDUCERS[root.opcode] if {o.uid for o in root.operands} == {p.uid for p in params} and \
        len(root.operands) == 2 else None


def returns_second(comp: Computation) -> bool:
    """Whether a 2-parameter combiner returns its second parameter (scatter's "replace")."""
    params = comp.parameters
    return len(params) == 2 and comp.root is params[1]


def call(comp: Computation, args: Sequence[Value]) -> Value:
    """Evaluate a called computation (to_apply) elementwise over array arguments."""
    return evaluate_computation(comp, args)


def pad_array(x: np.ndarray, value: Any, config: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """XLA pad: per dimension (low, high, interior); negative low/high crop."""
    inner_dims = [n + max(n - 1, 0) * it for n, (_, _, it) in zip(x.shape, config, strict=True)]
    inner = np.full(inner_dims, value, dtype=x.dtype)
    inner[tuple(slice(None, None, it + 1) for _, _, it in config)] = x
    grown = np.full([n + max(lo, 0) + max(hi, 0) for n, (lo, hi, _) in zip(inner_dims, config, strict=True)],
                    value, dtype=x.dtype)
    grown[tuple(slice(max(lo, 0), max(lo, 0) + n) for n, (lo, _, _) in zip(inner_dims, config, strict=True))] = inner
    return grown[tuple(slice(-min(lo, 0), g + min(hi, 0)) for g, (lo, hi, _) in zip(grown.shape, config,
                                                                                   strict=True))]


_FP8 = {numpy_dtype(d): float(ml_dtypes.finfo(numpy_dtype(d)).max) for d in ("f8e4m3fn", "f8e5m2")}


def to_dtype(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` rounded (nearest even) to ``dtype``; fp8 saturates to its largest finite value (inf too), as
    the hardware and the emulator do, instead of overflowing to NaN (e4m3fn) or inf (e5m2); NaN stays NaN."""
    limit = _FP8.get(dtype)
    if limit is not None and x.dtype != dtype:
        x = np.clip(np.asarray(x, np.float32), -limit, limit)
    return np.asarray(x).astype(dtype)


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
