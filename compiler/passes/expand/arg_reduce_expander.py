"""argmax / argmin as two plain reductions (the variadic value+index reduce jax writes for jnp.argmax).

A two-operand ``reduce(x, index, init_x, init_index)`` whose comparator behaves like argmax (or argmin) -- keep
the larger (smaller) value, NaN counting as the largest (smallest), ties to the smaller index -- and whose index
operand is an iota along the reduced dimension (floats or integers) becomes::

    m   = reduce(x, init_x), to_apply=maximum (minimum)            the value result
    hit = or(compare(x, broadcast(m), EQ), compare(x, x, NE))      where the extreme (or a NaN) is
    i   = convert_s32(reduce(select(hit, convert_f32(index), +inf), +inf), to_apply=minimum)

which the backend lowers with its row reductions (indices below 2^24 are exact in fp32; s32 or s64 indices). A
variadic reduce whose comparator combines each operand with its own accumulator only (output i = add/maximum/
minimum/multiply/and/or of parameters i and n + i) becomes n plain reduces. Any other variadic reduce stays as it
is (the backend refuses it with a typed error). The comparator is recognized by what it computes, not by its
text: it is evaluated on probe values (infinities, NaN, ties) and must agree with argmax or argmin on every one.
The init values must be the reduction's identity (-inf/+inf, or the integer type's extremes) and index 0.
"""

from __future__ import annotations

import itertools

import numpy as np

from compiler.passes.expand.op_expander import Expansion
from compiler.passes.interface import HloPass
from compiler.passes.utils import new_instruction, reachable_computations
from hlo.interpreter import evaluate_computation
from hlo.ir import Computation, Instruction, Module, Shape, numpy_dtype

_FLOATS = ("f16", "bf16", "f32")
_INTS = ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64")
_INDEX = ("s32", "s64")
_PROBES_FLOAT = (-np.inf, -1.5, 0.0, 2.0, np.inf, np.nan)
_PROBES_INT = (-7, 0, 3)


def _is_nan(v) -> bool:
    return isinstance(v, float) and v != v


def _reference(kind: str, a, ia: int, b, ib: int) -> tuple:
    """argmax/argmin's combiner: the pair kept."""
    if _is_nan(a) or _is_nan(b):
        if _is_nan(a) and _is_nan(b):
            return None  # which NaN wins is left to the reduction order
        return (a, ia) if _is_nan(a) else (b, ib)
    better = a > b if kind == "max" else a < b
    if better or (a == b and ia < ib):
        return a, ia
    return b, ib


def comparator_kind(comp: Computation, dtype: str, index: str = "s32") -> str | None:
    """"max" or "min" when ``comp`` computes argmax's or argmin's combiner on (value, index) pairs."""
    params = comp.parameters
    if len(params) != 4 or [p.shape.dtype for p in params] != [dtype, index, dtype, index]:
        return None
    root = comp.root
    if root is None or not root.shape.is_tuple or len(root.shape.tuple_shapes) != 2:
        return None
    probes = _PROBES_FLOAT if dtype in _FLOATS else _PROBES_INT
    if dtype.startswith("u"):
        probes = tuple(abs(p) for p in probes)
    np_dtype, index_np = numpy_dtype(dtype), numpy_dtype(index)
    for kind in ("max", "min"):
        ok = True
        for (a, b), (ia, ib) in itertools.product(itertools.product(probes, repeat=2), ((0, 1), (1, 0), (2, 2))):
            want = _reference(kind, a, ia, b, ib)
            if want is None:
                continue
            args = [np.array(a, np_dtype), np.array(ia, index_np), np.array(b, np_dtype), np.array(ib, index_np)]
            with np.errstate(all="ignore"):
                got = evaluate_computation(comp, args)
            value, index = (float(np.asarray(g)) for g in got)
            if int(index) != want[1] or not (value == float(want[0]) or (_is_nan(value) and _is_nan(want[0]))):
                ok = False
                break
        if ok:
            return kind
    return None


_COMBINERS = ("add", "maximum", "minimum", "multiply", "and", "or")


def _independent_reducers(red: Instruction) -> list[str] | None:
    """The combiner of every operand when the comparator's output i is a combiner of its parameters i and
    n + i only (a tuple of independent reductions), else None."""
    comp = red.attrs.get("to_apply")
    n = len(red.operands) // 2
    if not isinstance(comp, Computation) or comp.root is None or comp.root.opcode != "tuple" or \
            len(comp.root.operands) != n:
        return None
    params = {p.parameter_number: p for p in comp.parameters}
    ops = []
    for i, out in enumerate(comp.root.operands):
        if out.opcode not in _COMBINERS or {o.uid for o in out.operands} != {params[i].uid, params[n + i].uid} \
                or len(out.operands) != 2:
            return None
        ops.append(out.opcode)
    return ops


def _is_iota_along(inst: Instruction, dim: int) -> bool:
    if inst.opcode == "iota":
        return inst.attrs.get("iota_dimension") == dim
    if inst.opcode == "broadcast" and inst.operands[0].opcode == "iota":
        mapping = tuple(inst.attrs.get("dimensions", ()))
        return mapping[inst.operands[0].attrs.get("iota_dimension", 0)] == dim
    return False


def _scalar(inst: Instruction) -> float | None:
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size != 1:
        return None
    return float(np.asarray(inst.literal, np.float64).reshape(()))


def _integer(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size != 1:
        return None
    return int(np.asarray(inst.literal).reshape(()))


class ArgReduceExpander(HloPass):
    name = "arg_reduce_expander"

    def run(self, module: Module) -> bool:
        changed = False
        self._reducers: dict[tuple[str, str], Computation] = {}
        for comp in reachable_computations(module):
            for red in [i for i in comp.instructions if i.opcode == "reduce" and len(i.operands) == 4]:
                kind = self._match(red)
                if kind is not None:
                    self._rewrite(module, comp, red, kind)
                    changed = True
            for red in [i for i in comp.instructions if i.opcode == "reduce" and len(i.operands) >= 4]:
                ops = _independent_reducers(red)
                if ops is not None:
                    self._split(module, comp, red, ops)
                    changed = True
        return changed

    def _split(self, module: Module, comp: Computation, red: Instruction, ops: list[str]) -> None:
        n = len(ops)
        parts = []
        for i, op in enumerate(ops):
            x, init = red.operands[i], red.operands[n + i]
            shape = red.shape.tuple_shapes[i]
            parts.append(new_instruction(module, "reduce", shape, [x, init],
                                         {"dimensions": tuple(red.attrs.get("dimensions", ())),
                                          "to_apply": self._reducer(module, op, shape.dtype)}, red.metadata,
                                         name=f"{red.name}.{i}"))
        result = new_instruction(module, "tuple", red.shape, parts, {}, red.metadata, name=f"{red.name}.tuple")
        at = comp.instructions.index(red)
        comp.instructions[at:at + 1] = parts + [result]
        comp.replace_all_uses(red, result)
        for user in [u for u in comp.instructions if u.opcode == "get-tuple-element" and u.operands == [result]]:
            comp.replace_all_uses(user, result.operands[user.attrs["index"]])
            comp.remove(user)

    @staticmethod
    def _match(red: Instruction) -> str | None:
        x, index, init_x, init_i = red.operands
        dims = tuple(red.attrs.get("dimensions", ()))
        if len(dims) != 1 or index.shape.dtype not in _INDEX or x.shape.dtype not in _FLOATS + _INTS:
            return None
        if not _is_iota_along(index, dims[0]) or not 0 < x.shape.dims[dims[0]] < 1 << 24 or _scalar(init_i) != 0:
            return None
        comp = red.attrs.get("to_apply")
        kind = comparator_kind(comp, x.shape.dtype, index.shape.dtype) if isinstance(comp, Computation) else None
        if kind is None:
            return None
        if x.shape.dtype in _INTS:
            info = np.iinfo(numpy_dtype(x.shape.dtype))
            return kind if _integer(init_x) == int(info.min if kind == "max" else info.max) else None
        identity = -np.inf if kind == "max" else np.inf
        return kind if _scalar(init_x) == identity else None

    def _reducer(self, module: Module, op: str, dtype: str) -> Computation:
        key = (op, dtype)
        if key not in self._reducers:
            a = Instruction(module.unique_name(f"{op}_lhs"), "parameter", Shape(dtype, ()), parameter_number=0)
            b = Instruction(module.unique_name(f"{op}_rhs"), "parameter", Shape(dtype, ()), parameter_number=1)
            root = Instruction(module.unique_name(op), op, Shape(dtype, ()), [a, b])
            comp = Computation(module.unique_name(f"{op}_{dtype}"), [a, b, root], root)
            module.add_computation(comp)
            self._reducers[key] = comp
        return self._reducers[key]

    def _rewrite(self, module: Module, comp: Computation, red: Instruction, kind: str) -> None:
        x, index, init_x, _ = red.operands
        (dim,) = tuple(red.attrs["dimensions"])
        dtype, dims = x.shape.dtype, x.shape.dims
        kept = tuple(d for d in range(len(dims)) if d != dim)
        out_dims = tuple(dims[d] for d in kept)
        expansion = Expansion(module, red)
        add = expansion.add

        op = "maximum" if kind == "max" else "minimum"
        m = add("reduce", Shape(dtype, out_dims), [x, init_x], {"dimensions": (dim,),
                                                                "to_apply": self._reducer(module, op, dtype)})
        mb = add("broadcast", Shape(dtype, dims), [m], {"dimensions": kept})
        eq = add("compare", Shape("pred", dims), [x, mb], {"direction": "EQ"})
        nan = add("compare", Shape("pred", dims), [x, x], {"direction": "NE"})
        hit = add("or", Shape("pred", dims), [eq, nan])
        idx = add("convert", Shape("f32", dims), [index])
        inf = add("constant", Shape("f32", ()), [], literal=np.array(np.inf, np.float32))
        big = add("broadcast", Shape("f32", dims), [inf], {"dimensions": ()})
        picked = add("select", Shape("f32", dims), [hit, idx, big])
        first = add("reduce", Shape("f32", out_dims), [picked, inf],
                    {"dimensions": (dim,), "to_apply": self._reducer(module, "minimum", "f32")})
        i = add("convert", Shape(index.shape.dtype, out_dims), [first])
        result = add("tuple", red.shape, [m, i])
        at = comp.instructions.index(red)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(red, result)
        for user in [u for u in comp.instructions if u.opcode == "get-tuple-element" and u.operands == [result]]:
            comp.replace_all_uses(user, result.operands[user.attrs["index"]])
            comp.remove(user)
