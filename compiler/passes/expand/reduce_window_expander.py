"""A reduce-window over more than two windowed dimensions as a chain of reduce-windows over at most two each.

The backend's pooling kernel (backend/kernels/pool.py) puts at most two windowed dimensions on an SBUF band. A
window is a box, and the reducers XLA writes for reduce-window (add, multiply, maximum, minimum, and, or of the
two parameters) are associative and commutative, so the reduction over the box is the reduction over its
leading dimensions, then over the rest: the first stages start from the reducer's identity, the last one from
the instruction's init value. Padding and holes are skipped (they contribute nothing, as in the interpreter
and XLA's evaluator), so each stage keeps its dimensions' stride, padding and dilation and the others trivial.
Float sums are reassociated (the kernels' order differs from a sequential one anyway).
"""

from __future__ import annotations

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.utils import insert_before, new_instruction, reachable_computations
from hlo.interpreter.core import reducer_ufunc
from hlo.ir import Computation, Instruction, Module, Shape, Window, WindowDim, numpy_dtype
from hlo.shape_window import window_output_size

MAX_WINDOWED = 2  # windowed dimensions the pooling kernel takes


def _trivial(w: WindowDim) -> bool:
    return w.size == 1 and w.stride == 1 and w.pad_low == 0 and w.pad_high == 0 and w.lhs_dilate == 1


def identity(ufunc: np.ufunc, dtype: np.dtype) -> np.ndarray:
    """The reducer's identity in `dtype` (max of floats: -inf, or the lowest finite value without infinities)."""
    if ufunc is np.add or ufunc is np.bitwise_or:
        return np.zeros((), dtype)
    if ufunc is np.multiply:
        return np.ones((), dtype)
    if ufunc is np.bitwise_and:
        return np.array(True if dtype.kind == "b" else -1).astype(dtype)
    low = ufunc is np.maximum
    if dtype.kind == "b":
        return np.array(not low, dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array(info.min if low else info.max, dtype)
    value = np.array(-np.inf if low else np.inf).astype(dtype)
    if not np.isinf(value.astype(np.float32)):  # fp8 without infinities
        finfo = np.finfo(dtype)
        value = np.array(finfo.min if low else finfo.max, dtype)
    return value


class ReduceWindowExpander(HloPass):
    name = "reduce_window_expander"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for inst in [i for i in comp.instructions if i.opcode == "reduce-window"]:
                changed |= self._split(module, comp, inst)
        return changed

    def _split(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        window, reducer = inst.attrs.get("window"), inst.attrs.get("to_apply")
        if len(inst.operands) != 2 or not isinstance(window, Window) or not isinstance(reducer, Computation):
            return False
        windowed = [a for a, w in enumerate(window.dims) if not _trivial(w)]
        ufunc = reducer_ufunc(reducer)
        if len(windowed) <= MAX_WINDOWED or ufunc is None or any(w.lhs_dilate != 1 for w in window.dims):
            return False
        x, init = inst.operands
        dtype = x.shape.dtype
        ident = new_instruction(module, "constant", Shape(dtype, ()), [], metadata=inst.metadata,
                                literal=identity(ufunc, np.dtype(numpy_dtype(dtype))), name=f"{inst.name}.identity")
        insert_before(comp, inst, ident)
        groups = [windowed[i:i + MAX_WINDOWED] for i in range(0, len(windowed), MAX_WINDOWED)]
        dims = list(x.shape.dims)
        for g, group in enumerate(groups[:-1]):
            stage = tuple(window.dims[a] if a in group else WindowDim(1) for a in range(len(dims)))
            dims = [window_output_size(n, w) for n, w in zip(dims, stage, strict=True)]
            x = new_instruction(module, "reduce-window", Shape(dtype, tuple(dims)), [x, ident],
                                {"window": Window(stage), "to_apply": reducer}, inst.metadata,
                                name=f"{inst.name}.stage{g}")
            insert_before(comp, inst, x)
        inst.operands[:] = [x, init]
        inst.attrs["window"] = Window(tuple(window.dims[a] if a in groups[-1] else WindowDim(1)
                                            for a in range(len(dims))))
        return True
