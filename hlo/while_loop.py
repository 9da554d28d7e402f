"""Trip counts of counted ``while`` loops, as jax writes ``fori_loop`` (used by the WhileUnroller and the backend).

The trip count is known when the initial state is a ``tuple`` whose element k is an integer constant c0, the
condition is ``compare(get-tuple-element(state, k), constant N), direction=LT`` (or ``N > i``), and the body's
ROOT ``tuple`` sets element k to ``add(get-tuple-element(state, k), constant s)`` with s > 0: the body then runs
ceil((N - c0) / s) times (none if N <= c0), whatever else the state holds. The add may be a fusion of that
add alone (loop bodies are fused too).
"""

from __future__ import annotations

from hlo.ir import Computation, Instruction


def _constant_int(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size != 1:
        return None
    if inst.shape.dtype not in ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"):
        return None
    return int(inst.literal.reshape(()))


def _element_of_param(inst: Instruction, comp: Computation) -> int | None:
    """k when ``inst`` is get-tuple-element(parameter(0), index=k) of ``comp``."""
    if inst.opcode != "get-tuple-element" or inst.operands[0].opcode != "parameter" or \
            inst.operands[0] not in comp.instructions:
        return None
    return int(inst.attrs["index"])


def _increment(inst: Instruction) -> tuple[Instruction, Instruction] | None:
    """The operands of ``inst`` when it is an add; a fusion of one add (the fusion pass also fuses loop bodies)
    gives its operands as the fusion's operands (constants stay inside: an equivalent constant stands in)."""
    if inst.opcode == "add":
        return inst.operands[0], inst.operands[1]
    fused = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    if not isinstance(fused, Computation) or fused.root is None or fused.root.opcode != "add":
        return None
    outer = []
    for x in fused.root.operands:
        if x.opcode == "parameter" and x.parameter_number is not None and x.parameter_number < len(inst.operands):
            outer.append(inst.operands[x.parameter_number])
        elif x.opcode == "constant":
            outer.append(x)
        else:
            return None
    return outer[0], outer[1]


def trip_count(loop: Instruction) -> int | None:
    """The number of times ``loop``'s body runs, when the loop is counted (see the module doc); else None."""
    cond, body, init = loop.attrs.get("condition"), loop.attrs.get("body"), loop.operands[0]
    if not isinstance(cond, Computation) or not isinstance(body, Computation) or init.opcode != "tuple":
        return None
    root = cond.root
    if root is None or root.opcode != "compare":
        return None
    direction = root.attrs.get("direction")
    lhs, rhs = root.operands
    if direction == "GT":
        lhs, rhs, direction = rhs, lhs, "LT"
    k, limit = _element_of_param(lhs, cond), _constant_int(rhs)
    if direction != "LT" or k is None or limit is None or k >= len(init.operands):
        return None
    start = _constant_int(init.operands[k])
    broot = body.root
    if start is None or broot is None or broot.opcode != "tuple" or k >= len(broot.operands):
        return None
    a, b = _increment(broot.operands[k]) or (None, None)
    if a is None or b is None:
        return None
    if _element_of_param(b, body) == k:
        a, b = b, a
    step = _constant_int(b)
    if _element_of_param(a, body) != k or step is None or step <= 0:
        return None
    return max(0, -(-(limit - start) // step))
