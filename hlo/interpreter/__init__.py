"""The reference interpreter: evaluates an HLO module with numpy, one rule per opcode.

One evaluator (core.py) and one op table, ``OPS``, assembled here from the families: elementwise math,
structural ops (layout, dot, reduce, calls), windowed ops (convolution, reduce-window) and indexing ops (gather,
scatter, dynamic slices) and control flow, sorting and integer bit ops (control.py).
"""

from hlo.interpreter import control, elementwise, indexing, structural, window
from hlo.interpreter.core import OPS, EvaluationError, evaluate, evaluate_computation, reducer_ufunc, to_dtype
from hlo.interpreter.elementwise import CUSTOM_CALLS, erf, gelu, gelu_tanh

for _family in (elementwise, structural, window, indexing, control):
    _clash = OPS.keys() & _family.OPS.keys()
    if _clash:  # one rule per opcode: a second family defining one is a bug, not an override
        raise RuntimeError(f"interpreter rules defined twice: {sorted(_clash)}")
    OPS.update(_family.OPS)

__all__ = ["CUSTOM_CALLS", "OPS", "EvaluationError", "erf", "evaluate", "evaluate_computation", "gelu",
           "gelu_tanh", "reducer_ufunc", "to_dtype"]
