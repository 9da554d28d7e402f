"""From the HLO entry computation to kernels: values as views, layout choice, kernel emission.

Layout operators (transpose, reshape, broadcast, slice, convert, tuple, get-tuple-element) create no
code: they become new strided views (layout.View) of the data of their operand. Compute operators
(dot, fusion, elementwise ops) become kernels writing a fresh HBM tensor, whose storage order is chosen
for its consumers: a value contracted over its minor axis by a dot is stored transposed (K-major) so the
dot reads contiguous rows, and ROOT outputs are written in place, row-major.
"""

from __future__ import annotations

from typing import Any

from backend.emit import ProgramBuilder
from backend.kernels.dot import dot_kernel, plan_dot
from backend.kernels.elementwise import copy_kernel, elementwise_kernel
from backend.kernels.expr import CUSTOM_CALL_UNARY, HLO_BINARY, HLO_UNARY, Node, binary, leaf, unary, walk
from backend.layout import View, isa_dtype_of
from compiler.errors import CompilationError
from compiler.hlo.ir import Computation, Instruction, Module, Quoted, SliceSpec

Value = Any  # View | Node | list[Value] (a tuple)
LAYOUT_OPS = ("parameter", "constant", "tuple", "get-tuple-element", "transpose", "reshape", "bitcast",
              "broadcast", "slice", "convert", "copy")


def _custom_target(inst: Instruction) -> str | None:
    target = inst.attrs.get("custom_call_target")
    return target.text if isinstance(target, Quoted) else None


def _is_compute(inst: Instruction) -> bool:
    return (inst.opcode in ("dot", "fusion") or inst.opcode in HLO_BINARY
            or (inst.opcode in HLO_UNARY and inst.opcode not in ("convert", "copy"))
            or (inst.opcode == "custom-call" and _custom_target(inst) in CUSTOM_CALL_UNARY))


class Lowering:
    def __init__(self, module: Module, builder: ProgramBuilder):
        if module.entry is None:
            raise CompilationError(f"module {module.name} has no entry computation")
        self.module = module
        self.entry: Computation = module.entry
        self.b = builder
        self.users = self.entry.users()
        self.values: dict[int, Value] = {}
        self.dest: dict[int, View] = {}
        self._kernels = 0

    # -- driver -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        entry = self.entry
        root = entry.root
        assert root is not None
        roots = list(root.operands) if root.opcode == "tuple" else [root]
        for p in entry.parameters:
            self.values[p.uid] = self.b.input_tensor(p.parameter_number or 0, isa_dtype_of(p), p.shape.dims)
        outs = []
        for j, r in enumerate(roots):
            if r.shape.is_tuple:
                raise CompilationError(f"{r.where()}: nested tuple outputs are not supported")
            outs.append(self.b.output_tensor(j, isa_dtype_of(r), r.shape.dims))
            self._assign_destination(r, outs[-1])
        for inst in entry.post_order():
            if inst.uid not in self.values:
                self.values[inst.uid] = self.lower(inst)
        for j, (r, out) in enumerate(zip(roots, outs, strict=True)):
            value = self._view(self.values[r.uid], r)
            if not (value.buffer is out.buffer and value.is_dense_row_major()):
                copy_kernel(self.b, value, out, f"output{j}", r.where())

    def _assign_destination(self, inst: Instruction, view: View) -> None:
        """Let the kernel producing a ROOT output write the output tensor directly, through single-use
        reshapes and transposes."""
        while inst.uid not in self.dest:
            if _is_compute(inst):
                self.dest[inst.uid] = view
                return
            if inst.opcode not in ("reshape", "bitcast", "transpose", "copy") or not inst.operands:
                return
            operand = inst.operands[0]
            if len(self.users.get(operand, [])) != 1 or operand is self.entry.root:
                return
            if inst.opcode == "transpose":
                perm = tuple(inst.attrs["dimensions"])
                view = view.transpose(tuple(perm.index(i) for i in range(len(perm))))
            elif inst.opcode != "copy":
                reshaped = view.reshape(operand.shape.dims)
                if reshaped is None:
                    return
                view = reshaped
            inst = operand

    def _name(self, inst: Instruction) -> str:
        self._kernels += 1
        return f"k{self._kernels}.{inst.name}"

    def _destination(self, inst: Instruction) -> View:
        dest = self.dest.get(inst.uid)
        if dest is not None:
            return dest
        return self.b.scratch(isa_dtype_of(inst), inst.shape.dims, self._storage_order(inst))

    def _storage_order(self, inst: Instruction) -> tuple[int, ...]:
        """Row-major, except that a value contracted over its minor axis by a dot is stored K-major."""
        rank = inst.shape.rank
        order = tuple(range(rank))
        if rank < 2:
            return order
        frontier = [inst]
        while frontier:  # look through converts: auto-cast puts one between layers
            value = frontier.pop()
            for user in self.users.get(value, []):
                if user.opcode in ("convert", "copy"):
                    frontier.append(user)
                elif _contracting_dims_of_use(user, value) == (rank - 1,):
                    return tuple(range(rank - 2)) + (rank - 1, rank - 2)
        return order

    # -- values -----------------------------------------------------------------------------------------------
    @staticmethod
    def _view(value: Value, inst: Instruction) -> View:
        if not isinstance(value, View):
            raise CompilationError(f"{inst.where()}: expected an array value here")
        return value

    def lower(self, inst: Instruction, env: dict[int, Value] | None = None) -> Value:
        """The value of `inst`; `env` holds the values of a fused computation (else the entry's)."""
        values = self.values if env is None else env
        ops = [values[o.uid] for o in inst.operands]
        op = inst.opcode
        if op in LAYOUT_OPS:
            return self._layout(inst, ops, fused=env is not None)
        if env is not None:
            return self._fused_compute(inst, ops)
        if op == "dot":
            out = self._destination(inst)
            acc = unary("convert", Node("acc", "f32", inst=inst), isa_dtype_of(inst), inst)
            lhs, rhs = (self._view(v, o) for v, o in zip(ops, inst.operands, strict=True))
            dot_kernel(self.b, plan_dot(inst, self._name(inst), lhs, rhs, out, acc))
            return out
        if op == "fusion":
            return self._fusion(inst, ops)
        node = self._elementwise(inst, [self._as_node(v, o) for v, o in zip(ops, inst.operands, strict=True)])
        out = self._destination(inst)
        elementwise_kernel(self.b, node, out, self._name(inst), inst.where())
        return out

    def _layout(self, inst: Instruction, ops: list[Value], fused: bool) -> Value:
        op = inst.opcode
        if op == "parameter":
            raise CompilationError(f"{inst.where()}: parameter outside the entry's parameter list")
        if op == "constant":
            if inst.literal is None:
                raise CompilationError(f"{inst.where()}: constant without data")
            return self.b.const_view(inst.literal.reshape(inst.shape.dims), isa_dtype_of(inst))
        if op == "tuple":
            return list(ops)
        if op == "get-tuple-element":
            return ops[0][int(inst.attrs["index"])]
        x = ops[0]
        if isinstance(x, Node):
            if op in ("convert", "copy"):
                return unary(op, x, isa_dtype_of(inst), inst)
            raise CompilationError(f"{inst.where()}: {op} of a value computed inside a fusion is not "
                                   f"supported by the backend")
        x = self._view(x, inst.operands[0])
        if op == "transpose":
            return x.transpose(tuple(inst.attrs["dimensions"]))
        if op == "broadcast":
            return x.broadcast(inst.shape.dims, tuple(inst.attrs.get("dimensions", ())))
        if op == "slice":
            spec = inst.attrs.get("slice")
            if not isinstance(spec, SliceSpec):
                raise CompilationError(f"{inst.where()}: slice without a slice= attribute")
            return x.slice(spec.ranges)
        if op == "convert":
            return x.with_cast(isa_dtype_of(inst))
        if op == "copy":
            return x
        reshaped = x.reshape(inst.shape.dims)
        if reshaped is not None:
            return reshaped
        if fused:
            raise CompilationError(f"{inst.where()}: reshape inside a fusion needs a copy")
        dense = self.b.scratch(x.dtype, x.dims)
        copy_kernel(self.b, x, dense, self._name(inst), inst.where())
        result = dense.reshape(inst.shape.dims)
        assert result is not None
        return result

    # -- compute ----------------------------------------------------------------------------------------------
    @staticmethod
    def _as_node(value: Value, inst: Instruction) -> Node:
        if isinstance(value, Node):
            return value
        if isinstance(value, View):
            return leaf(value, inst)
        raise CompilationError(f"{inst.where()}: a tuple cannot be an elementwise operand")

    def _elementwise(self, inst: Instruction, ops: list[Node]) -> Node:
        op, dtype = inst.opcode, isa_dtype_of(inst)
        if op in HLO_BINARY and len(ops) == 2:
            return binary(HLO_BINARY[op], ops[0], ops[1], dtype, inst)
        if op in HLO_UNARY and len(ops) == 1:
            return unary(HLO_UNARY[op], ops[0], dtype, inst)
        target = _custom_target(inst)
        if op == "custom-call" and target in CUSTOM_CALL_UNARY and len(ops) == 1:
            return unary(CUSTOM_CALL_UNARY[target], ops[0], dtype, inst)
        what = f"custom-call {target!r}" if op == "custom-call" else f"op {op}"
        raise CompilationError(f"{inst.where()}: {what} is not supported by the backend")

    def _fused_compute(self, inst: Instruction, ops: list[Value]) -> Value:
        if inst.opcode == "dot":
            lhs, rhs = (self._view(v, o) for v, o in zip(ops, inst.operands, strict=True))
            node = Node("acc", "f32", inst=inst)
            self._fused_dots.append((inst, lhs, rhs, node))
            return unary("convert", node, isa_dtype_of(inst), inst)
        return self._elementwise(inst, [self._as_node(v, o) for v, o in zip(ops, inst.operands, strict=True)])

    def _fusion(self, inst: Instruction, ops: list[Value]) -> Value:
        comp = inst.attrs.get("calls")
        kind = inst.attrs.get("kind")
        if not isinstance(comp, Computation) or kind not in ("kOutput", "kLoop"):
            raise CompilationError(f"{inst.where()}: fusion kind {kind} is not supported by the backend")
        env: dict[int, Value] = {}
        for param in comp.parameters:
            env[param.uid] = ops[param.parameter_number or 0]
        self._fused_dots: list[tuple[Instruction, View, View, Node]] = []
        for sub in comp.post_order():
            if sub.uid not in env:
                env[sub.uid] = self.lower(sub, env)
        assert comp.root is not None
        result = env[comp.root.uid]
        out = self._destination(inst)
        name = self._name(inst)
        if len(self._fused_dots) > 1:
            raise CompilationError(f"{inst.where()}: a fusion with {len(self._fused_dots)} dots")
        if self._fused_dots:
            dot, lhs, rhs, acc = self._fused_dots[0]
            if not isinstance(result, Node) or not any(n is acc for n in walk(result)):
                raise CompilationError(f"{inst.where()}: the fusion's root does not use its dot")
            dot_kernel(self.b, plan_dot(dot, name, lhs, rhs, out, result))
        elif isinstance(result, Node):
            elementwise_kernel(self.b, result, out, name, inst.where())
        else:
            copy_kernel(self.b, self._view(result, inst), out, name, inst.where())
        return out


def _contracting_dims_of_use(user: Instruction, value: Instruction) -> tuple[int, ...] | None:
    """The contracting dims of `value` when `user` (a dot, or a fusion around one) contracts it."""
    if user.opcode == "dot":
        i = user.operands.index(value)
        return tuple(user.attrs.get("lhs_contracting_dims" if i == 0 else "rhs_contracting_dims", ()))
    if user.opcode != "fusion":
        return None
    comp = user.attrs.get("calls")
    if not isinstance(comp, Computation):
        return None
    i = user.operands.index(value)
    params = [p for p in comp.parameters if p.parameter_number == i]
    if not params:
        return None
    frontier = [params[0]]
    inner_users = comp.users()
    while frontier:
        cur = frontier.pop()
        for u in inner_users.get(cur, []):
            if u.opcode == "dot":
                j = u.operands.index(cur)
                return tuple(u.attrs.get("lhs_contracting_dims" if j == 0 else "rhs_contracting_dims", ()))
            if u.opcode in ("convert", "copy"):
                frontier.append(u)
    return None
