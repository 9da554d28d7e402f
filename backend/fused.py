"""The body of a fusion (or one unfused op) as an expression over the kernel's logical dims.

A kernel iterates over one index space S: the dims of its root, or, when it reduces, the dims of its
reductions' operand. Every HLO value inside is an `Expr`: a node in S plus the S-axes its own dims
are (a row statistic of a layer norm has the kept axes only; broadcasting it back is free). Layout
operators on parameters stay strided views (layout.View) and become leaves where an op reads them,
broadcast into S along the reader's axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.kernels import expr
from backend.kernels.expr import Node
from backend.layout import View, isa_dtype_of
from hlo.errors import CompilationError
from hlo.ir import Computation, Instruction, SliceSpec
from hlo.opcodes import custom_call_target, is_elementwise
from isa.dtypes import dtype as isa_dtype

LAYOUT_OPS = ("parameter", "constant", "tuple", "get-tuple-element", "transpose", "reshape", "bitcast",
              "broadcast", "slice", "convert", "copy")


@dataclass(frozen=True)
class Expr:
    """A value computed in a kernel: `node` in the kernel space S; `axes[i]` is the S-axis of dim i."""

    node: Node
    axes: tuple[int, ...]


Value = Any  # View | Expr | list[Value] (a tuple)


def has_tile_rule(inst: Instruction) -> bool:
    """An elementwise op (or iota, or copy) that the tile-expression builder lowers (expr's tables)."""
    op = inst.opcode
    if op in ("iota", "copy"):
        return True
    if not is_elementwise(inst):
        return False
    if op == "custom-call":
        return custom_call_target(inst) in expr.CUSTOM_CALL_UNARY
    return op in expr.HLO_BINARY or op in expr.HLO_UNARY or op in expr.STRUCTURED_ELEMENTWISE


def reducer_kind(inst: Instruction) -> str:
    """add/max/min of a reduce's to_apply computation, or a CompilationError."""
    comp = inst.attrs.get("to_apply")
    root = comp.root if isinstance(comp, Computation) else None
    if (len(inst.operands) != 2 or root is None or root.opcode not in expr.REDUCERS
            or {o.opcode for o in root.operands} != {"parameter"}):
        raise CompilationError(f"{inst.where()}: only single-operand add/max/min/and/or reductions are "
                               f"supported by the backend")
    return expr.REDUCERS[root.opcode]


def view_of(value: Value, inst: Instruction) -> View:
    if not isinstance(value, View):
        raise CompilationError(f"{inst.where()}: expected an array value here")
    return value


def lossless_cast(src: str, dst: str) -> bool:
    """Whether converting ISA dtype ``src`` to ``dst`` keeps every value (so a later convert may replace it)."""
    a, b = isa_dtype(src), isa_dtype(dst)
    if a.is_integer and b.is_integer:
        return bool(np.can_cast(a.numpy, b.numpy, "safe"))
    if b.name == "f32":
        return a.is_float or a.itemsize <= 2
    return a.name in ("i8", "u8", "pred", "fp8e4", "fp8e5") and b.name in ("f16", "bf16") or src == dst


def layout_value(inst: Instruction, ops: list[Value], builder) -> Value | None:
    """The value of a layout operator applied to views (None: needs a kernel, e.g. a strided reshape)."""
    op = inst.opcode
    if op == "parameter":
        raise CompilationError(f"{inst.where()}: parameter outside the entry's parameter list")
    if op == "constant":
        if inst.literal is None:
            raise CompilationError(f"{inst.where()}: constant without data")
        return builder.const_view(inst.literal.reshape(inst.shape.dims), isa_dtype_of(inst))
    if op == "tuple":
        return list(ops)
    if op == "get-tuple-element":
        return ops[0][int(inst.attrs["index"])]
    x = view_of(ops[0], inst.operands[0])
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
        if x.cast is not None and not lossless_cast(x.stored_dtype, x.cast):
            return None  # convert(convert(x)) with a narrowing first step: two converts (ints)
        return x.with_cast(isa_dtype_of(inst))
    if op == "copy":
        return x
    return x.reshape(inst.shape.dims)


class ExprBuilder:
    """Lowers instructions of one kernel to Exprs in the kernel space `dims`, reducing over `reduce_axes`."""

    def __init__(self, dims: tuple[int, ...], builder, comp: Computation | None = None):
        self.dims = tuple(dims)
        self.b = builder
        self.reduce_axes: tuple[int, ...] | None = None
        self.hints = _placement_hints(comp, self.dims) if comp is not None else {}
        if comp is not None:  # the reduced axes are known before any instruction is placed
            reduces = [i for i in comp.instructions if i.opcode == "reduce"]
            if reduces and tuple(reduces[0].operands[0].shape.dims) == self.dims:
                self.reduce_axes = tuple(sorted(reduces[0].attrs.get("dimensions", ())))
        self._leaves: dict[tuple[View, tuple[int, ...]], Node] = {}  # one leaf (one load) per view

    @property
    def full(self) -> tuple[int, ...]:
        return tuple(range(len(self.dims)))

    def node(self, value: Value, axes: tuple[int, ...], inst: Instruction) -> Node:
        """`value` as a node of S, its dims being the S-axes `axes`."""
        if isinstance(value, Expr):
            if value.axes != axes:
                raise CompilationError(f"{inst.where()}: operands over different axes inside one kernel")
            return value.node
        view = view_of(value, inst)
        key = (view, axes)
        if key not in self._leaves:
            placed = view.broadcast(self.dims, axes) if axes != self.full or view.dims != self.dims else view
            self._leaves[key] = expr.leaf(placed, inst)
        return self._leaves[key]

    def axes_for(self, inst: Instruction, ops: list[Value]) -> tuple[int, ...]:
        """The S-axes of an elementwise result: those of its Expr operands, else matched by dims."""
        for v in ops:
            if isinstance(v, Expr) and len(v.axes) == inst.shape.rank:
                return v.axes
        if inst.uid in self.hints:
            return self.hints[inst.uid]
        dims = tuple(inst.shape.dims)
        if dims == self.dims:
            return self.full
        if self.reduce_axes is not None:
            kept = tuple(a for a in self.full if a not in self.reduce_axes)
            if tuple(self.dims[a] for a in kept) == dims:
                return kept
        raise CompilationError(f"{inst.where()}: cannot place a {list(dims)} value in a kernel over "
                               f"{list(self.dims)}")

    def lower(self, inst: Instruction, ops: list[Value]) -> Value:
        op = inst.opcode
        if op in LAYOUT_OPS and not any(isinstance(v, Expr) for v in ops):
            value = layout_value(inst, ops, self.b)
            if value is None and op == "convert":  # a second convert after a narrowing one: on chip
                axes = self.axes_for(inst, ops)
                return Expr(expr.unary(op, self.node(ops[0], axes, inst.operands[0]), isa_dtype_of(inst), inst), axes)
            if value is None:
                raise CompilationError(f"{inst.where()}: reshape inside a fusion needs a copy")
            return value
        if op in LAYOUT_OPS:
            return self._layout_of_expr(inst, ops)
        if op == "reduce":
            return self._reduce(inst, ops)
        if not has_tile_rule(inst):
            raise CompilationError(f"{inst.where()}: op {op} is not supported by the backend here")
        axes = self.axes_for(inst, ops)
        dtype = isa_dtype_of(inst)
        if op == "iota":
            dim = int(inst.attrs.get("iota_dimension", 0))
            return Expr(self._iota(axes, axes[dim], dtype, inst), axes)
        operand_axes = [axes if o.shape.rank == inst.shape.rank else () for o in inst.operands]
        nodes = [self.node(v, a, o) for v, a, o in zip(ops, operand_axes, inst.operands, strict=True)]
        return Expr(elementwise_node(inst, nodes, dtype), axes)

    def _iota(self, axes: tuple[int, ...], axis: int, dtype: str, inst: Instruction) -> Node:
        return expr.iota(self.dims, axis, dtype, inst)

    def _layout_of_expr(self, inst: Instruction, ops: list[Value]) -> Value:
        op = inst.opcode
        x = ops[0]
        if op in ("convert", "copy"):
            return Expr(expr.unary(op, x.node, isa_dtype_of(inst), inst), x.axes)
        if op == "broadcast":
            dims = tuple(inst.attrs.get("dimensions", ()))
            if tuple(inst.shape.dims) == self.dims and all(x.axes[i] == d for i, d in enumerate(dims)):
                return Expr(x.node, self.full)
        if op in ("reshape", "bitcast") and tuple(inst.shape.dims) == tuple(inst.operands[0].shape.dims):
            return x
        raise CompilationError(f"{inst.where()}: {op} of a value computed inside a fusion is not supported by "
                               f"the backend (kernel over {list(self.dims)})")

    def _reduce(self, inst: Instruction, ops: list[Value]) -> Expr:
        kind = reducer_kind(inst)
        source = inst.operands[0]
        axes = ops[0].axes if isinstance(ops[0], Expr) else (self.full if tuple(source.shape.dims) == self.dims
                                                              else None)
        if axes is None:
            raise CompilationError(f"{inst.where()}: a reduction whose operand is not over the kernel's "
                                   f"{list(self.dims)}")
        red = tuple(sorted(axes[d] for d in inst.attrs.get("dimensions", ())))
        if self.reduce_axes is None:
            self.reduce_axes = red
        elif self.reduce_axes != red:
            raise CompilationError(f"{inst.where()}: reductions over different axes in one kernel")
        x = self.node(ops[0], axes, source)
        init = self.node(ops[1], (), inst.operands[1])
        node = expr.reduce(kind, x, init, isa_dtype_of(inst), inst)
        return Expr(node, tuple(a for a in axes if a not in red))


def elementwise_node(inst: Instruction, nodes: list[Node], dtype: str) -> Node:
    op = inst.opcode
    if op in expr.HLO_BINARY and len(nodes) == 2:
        return expr.binary(expr.HLO_BINARY[op], nodes[0], nodes[1], dtype, inst)
    if op == "compare":
        direction = str(inst.attrs.get("direction", ""))
        if direction not in expr.COMPARE_DIRECTIONS:
            raise CompilationError(f"{inst.where()}: compare direction {direction!r} is not supported")
        return expr.binary(expr.COMPARE_DIRECTIONS[direction], nodes[0], nodes[1], dtype, inst)
    if op == "select":
        return expr.select(nodes[0], nodes[1], nodes[2], dtype, inst)
    if op == "clamp":
        return expr.clamp(nodes[0], nodes[1], nodes[2], dtype, inst)
    if op in expr.HLO_UNARY and len(nodes) == 1:
        return expr.unary(expr.HLO_UNARY[op], nodes[0], dtype, inst)
    target = custom_call_target(inst)
    if op == "custom-call" and target in expr.CUSTOM_CALL_UNARY and len(nodes) == 1:
        return expr.unary(expr.CUSTOM_CALL_UNARY[target], nodes[0], dtype, inst)
    what = f"custom-call {target!r}" if op == "custom-call" else f"op {op}"
    raise CompilationError(f"{inst.where()}: {what} is not supported by the backend")


def _placement_hints(comp: Computation, dims: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """S-axes of values that are computed from operands only, learned from their consumers: a value
    broadcast into the kernel space sits on the broadcast's dimensions (e.g. negate(x[2,3]) broadcast
    over [4,2,3] sits on axes 1, 2); an elementwise op's operands on its own axes."""
    hints: dict[int, tuple[int, ...]] = {}
    assert comp.root is not None
    if tuple(comp.root.shape.dims) == dims:
        hints[comp.root.uid] = tuple(range(len(dims)))
    for inst in reversed(comp.post_order()):
        axes = hints.get(inst.uid)
        if axes is None:
            continue
        if inst.opcode == "broadcast":
            hints.setdefault(inst.operands[0].uid, tuple(axes[d] for d in inst.attrs.get("dimensions", ())))
        elif has_tile_rule(inst) or inst.opcode in ("convert", "copy"):
            for o in inst.operands:
                if o.shape.rank == inst.shape.rank:
                    hints.setdefault(o.uid, axes)
    return hints


def kernel_space(comp: Computation) -> tuple[int, ...]:
    """S of a fused computation: the operand dims of its reductions, else its root's dims."""
    assert comp.root is not None
    for inst in comp.instructions:
        if inst.opcode == "reduce":
            return tuple(inst.operands[0].shape.dims)
    return tuple(comp.root.shape.dims)
