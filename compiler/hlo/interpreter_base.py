"""What the interpreter's op modules share: the error type, value types, compute types, reducers, padding.

Kept apart from interpreter.py so that interpreter_window.py and interpreter_indexing.py can use it while
interpreter.py assembles the op table from all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.errors import NeuroncError
from compiler.hlo.ir import FLOAT_DTYPES, Computation, Instruction, numpy_dtype


class EvaluationError(NeuroncError):
    """The interpreter was given wrong inputs, or an instruction it cannot evaluate."""


Value = np.ndarray | tuple
Op = Callable[[Instruction, list[Any]], Value]

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
    from compiler.hlo.interpreter import evaluate_computation  # the op table needs this module first

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
