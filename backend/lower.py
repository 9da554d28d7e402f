"""From the HLO entry computation to kernels: values as views, layout choice, kernel dispatch.

Layout operators (transpose, reshape, broadcast, slice, convert, tuple, get-tuple-element) create no
code: they become new strided views (layout.View) of the data of their operand. Compute operators
become kernels writing a fresh HBM tensor, whose storage order is chosen for its consumers: a value
contracted over its minor axis by a dot is stored transposed (K-major) so the dot reads contiguous
rows, and ROOT outputs are written in place, row-major. `KERNELS` maps an opcode to the function that
lowers it (the kernels of every op class register there); fusions dispatch on what they contain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from backend.emit import ProgramBuilder
from backend.fused import (
    LAYOUT_OPS,
    Expr,
    ExprBuilder,
    Value,
    has_tile_rule,
    kernel_space,
    layout_value,
    view_of,
)
from backend.kernels import expr
from backend.kernels.attention import attention_kernel, plan_attention
from backend.kernels.conv import conv_kernel, plan_conv
from backend.kernels.dot import dot_kernel
from backend.kernels.dot_plan import plan_dot
from backend.kernels.elementwise import copy_kernel, fused_kernel
from backend.kernels.gather import gather_kernel, plan_gather
from backend.kernels.head import HEAD_NAME, head_kernel
from backend.kernels.indirect_ops import HANDLERS as INDIRECT_HANDLERS
from backend.kernels.indirect_ops import rows_or
from backend.kernels.reduce import reduce_kernel
from backend.kernels.scan import plan_window, window_kernel
from backend.kernels.sort import lower_sort
from backend.kernels.topk import lower_topk
from backend.kernels.transpose import can_transpose
from backend.layout import Buffer, View, isa_dtype_of
from hlo.errors import CompilationError
from hlo.ir import Computation, Instruction, Module
from hlo.opcodes import custom_call_target
from hlo.shape_inference import parse_padding
from hlo.shape_util import ShapeInferenceError

Handler = Callable[["Lowering", Instruction, list[Value]], Value]
FusionHandler = Callable[["Lowering", Instruction, Computation, list[Value]], Value]


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
            value = view_of(self.values[r.uid], r)
            self.b.origin = r.name
            if not (value.buffer is out.buffer and value.is_dense_row_major()):
                copy_kernel(self.b, value, out, f"output{j}", r.where())

    def _assign_destination(self, inst: Instruction, view: View) -> None:
        """Let the kernel producing a ROOT output write the output tensor directly, through single-use
        reshapes and transposes."""
        while inst.uid not in self.dest:
            if is_compute(inst):
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

    def name(self, inst: Instruction) -> str:
        self._kernels += 1
        return f"k{self._kernels}.{inst.name}"

    def destination(self, inst: Instruction) -> View:
        dest = self.dest.get(inst.uid)
        if dest is not None:
            return dest
        return self.b.scratch(isa_dtype_of(inst), inst.shape.dims, self._storage_order(inst), label=inst.name)

    def _storage_order(self, inst: Instruction, depth: int = 0) -> tuple[int, ...]:
        """The order (major to minor) a kernel stores its value in, chosen for the consumers:
        - a value whose only user is a transpose is stored transposed (the transpose, and a reshape
          after it, are then free views: e.g. attention heads back to [tokens, features]);
        - a value a dot contracts over its minor axis is stored K-major (the consumer's batch dims, the
          contracted axis, the rest) so the dot reads contiguous rows of K, unless the producer reduces
          along rows (a row kernel writes whole rows; the dot then transposes on PE);
        - else row-major."""
        rank = inst.shape.rank
        order = tuple(range(rank))
        if rank < 2:
            return order
        users = self.users.get(inst, [])
        if (len(users) == 1 and users[0].opcode == "transpose" and inst is not self.entry.root
                and _writes_any_layout(inst) and not self._minor_moved_for_kernels(users[0])):
            perm = tuple(users[0].attrs["dimensions"])
            self.b.layout_notes.append(f"%{inst.name}: stored in the order {list(perm)} of its transpose "
                                       f"%{users[0].name}")
            return perm
        if _reduces_rows(inst):
            return order
        frontier = [inst]
        while frontier:  # look through converts: auto-cast puts one between layers
            value = frontier.pop()
            for user in self.users.get(value, []):
                if user.opcode in ("convert", "copy"):
                    frontier.append(user)
                    continue
                use = _dims_of_use(user, value)
                if use is not None and use[1] == (rank - 1,) and not self._reads_rows(inst):
                    batch = use[0]
                    self.b.layout_notes.append(f"%{inst.name}: stored K-major (contracted axis {rank - 1} on "
                                               f"partitions for %{user.name})")
                    return batch + (rank - 1,) + tuple(d for d in range(rank - 1) if d not in batch)
        return self._order_of_elementwise_users(inst, depth) or order

    def _reads_rows(self, inst: Instruction) -> bool:
        """An elementwise kernel reading a computed operand of its own shape in rows (minor axis contiguous,
        as RoPE reads the q projection): stored K-major, it would write one element per DMA descriptor, where
        the dot (or attention) that contracts it transposes on PE."""
        if not _writes_any_layout(inst) or inst.opcode == "fusion" and inst.attrs.get("kind") == "kCustom":
            return False
        dims = tuple(inst.shape.dims)
        for operand in inst.operands:
            view = self.values.get(operand.uid)
            if (isinstance(view, View) and not view.is_const and view.dims == dims and view.strides[-1] == 1
                    and dims[-1] > 1):
                return True
        return False

    def _order_of_elementwise_users(self, inst: Instruction, depth: int) -> tuple[int, ...] | None:
        """The order every user stores in when all of them are elementwise kernels of `inst`'s shape
        storing in one non-row-major order (SwiGLU's silu(gate) * up, stored K-major for the down
        projection: its inputs stored the same way are read in whole rows, not 4-byte transposing runs)."""
        users = self.users.get(inst, [])
        if depth >= 3 or not users or inst is self.entry.root or not _writes_any_layout_or_dot(inst):
            return None
        orders = set()
        for user in users:
            if (user.shape.dims != inst.shape.dims or _reduces_rows(user) or user.opcode == "dot"
                    or not (_writes_any_layout(user) or _epilogue_operand(user, inst))):
                return None
            notes = len(self.b.layout_notes)
            orders.add(self._storage_order(user, depth + 1))
            del self.b.layout_notes[notes:]  # the user notes its own order when it is lowered
        order = orders.pop() if len(orders) == 1 else None
        if order is None or order == tuple(range(inst.shape.rank)):
            return None
        self.b.layout_notes.append(f"%{inst.name}: stored in the order {list(order)} of its elementwise users")
        return order

    # -- instructions -----------------------------------------------------------------------------------------
    def lower(self, inst: Instruction) -> Value:
        """The kernels of one instruction. An internal error of a kernel (a broken invariant) reaches the user
        as a CompilationError naming the instruction and its torch source line, not as a bare traceback."""
        self.b.origin = inst.name  # what the kernels emit for it is tagged with its name (as in exe.hlo)
        try:
            return self._lower(inst)
        except INTERNAL_ERRORS as e:
            raise CompilationError(f"{inst.where()}: internal compiler error in the backend while lowering it "
                                   f"({type(e).__name__}: {e}); please report it with this model") from e

    def _lower(self, inst: Instruction) -> Value:
        ops = [self.values[o.uid] for o in inst.operands]
        handler = KERNELS.get(inst.opcode)
        if handler is not None:
            return handler(self, inst, ops)
        if inst.opcode in LAYOUT_OPS:
            return self._layout(inst, ops)
        if has_tile_rule(inst):
            return _elementwise(self, inst, ops)
        what = f"custom-call {custom_call_target(inst)!r}" if inst.opcode == "custom-call" else f"op {inst.opcode}"
        raise CompilationError(f"{inst.where()}: {what} is not supported by the backend")

    def materialize(self, view: View, inst: Instruction) -> View:
        """`view` copied into a dense row-major scratch tensor (constants: rearranged at compile time)."""
        if view.is_const:
            return self.b.const_view(view.const_array(), view.dtype)
        dense = self.b.scratch(view.dtype, view.dims, label=f"{inst.name} operand copy")
        copy_kernel(self.b, view, dense, self.name(inst) + ".copy", inst.where())
        return dense

    def _layout(self, inst: Instruction, ops: list[Value]) -> Value:
        value = layout_value(inst, ops, self.b)
        if isinstance(value, View) and inst.opcode == "transpose" and self._transpose_on_pe(inst, value):
            dense = self.b.scratch(value.dtype, value.dims, label=inst.name)
            copy_kernel(self.b, value, dense, self.name(inst), inst.where())  # PE transposes (transpose.py)
            return dense
        if value is not None:
            return value
        x = view_of(ops[0], inst.operands[0])
        dense = self.b.scratch(x.dtype, x.dims, label=inst.name)
        copy_kernel(self.b, x, dense, self.name(inst), inst.where())
        if inst.opcode == "convert":  # the operand's own (narrowing) convert done, this one pending
            return dense.with_cast(isa_dtype_of(inst))
        result = dense.reshape(inst.shape.dims)
        assert result is not None
        return result


    def _minor_moved_for_kernels(self, transpose: Instruction) -> bool:
        """A transpose that moves the minor axis, read by kernels that do not transpose operands themselves:
        its operand is stored in its own order and the transpose runs on PE (_transpose_on_pe), rather than
        one side of a kernel moving one element per DMA descriptor."""
        perm = tuple(transpose.attrs["dimensions"])
        users = self.users.get(transpose, [])
        return perm[-1] != len(perm) - 1 and bool(users) and not any(_transposes_operands(u) for u in users)

    def _transpose_on_pe(self, inst: Instruction, view: View) -> bool:
        """Materialize a transpose that moves the minor axis (ConvNeXt's permutes between channel-major
        convolutions and channel-last layer norms) when no user transposes operands itself (elementwise,
        row and convolution kernels would read it with one DMA descriptor per element, where PE transposes
        it in 128 x 128 blocks; dots and attention read transposed operands on their own)."""
        users = self.users.get(inst, [])
        if not users or inst is self.entry.root or view.strides[-1] == 1 or view.dims[-1] == 1:
            return False
        if view.size <= self.b.options.strided_dma_max_elements or any(_transposes_operands(u) for u in users):
            return False
        return can_transpose(view, View.of(Buffer(view.dtype, view.size), tuple(view.dims)))


# what a broken invariant inside a kernel raises (assert, a bad index or key, a bad value or type)
INTERNAL_ERRORS = (AssertionError, IndexError, KeyError, ValueError, TypeError, ZeroDivisionError)


def is_compute(inst: Instruction) -> bool:
    return inst.opcode in KERNELS or (has_tile_rule(inst) and inst.opcode not in ("convert", "copy"))


# -- handlers ---------------------------------------------------------------------------------------------------
def _elementwise(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    value = ExprBuilder(tuple(inst.shape.dims), lw.b).lower(inst, ops)
    assert isinstance(value, Expr)
    out = lw.destination(inst)
    fused_kernel(lw.b, value.node, out, lw.name(inst), inst.where())
    return out


def anchored(plan_fn: Callable, kernel_fn: Callable, materializes: bool = False) -> Handler:
    """The handler of an op whose kernel applies an elementwise epilogue to its accumulator on the way out
    (`plan_fn(inst, name, *operand views, out, epilogue)`, `kernel_fn(builder, plan)`); unfused, the
    epilogue only converts the accumulator to the result type. With `materializes`, plan_fn also takes
    `materialize=` (Lowering.materialize) for views it cannot use as they are."""

    def handler(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
        out = lw.destination(inst)
        acc = expr.unary("convert", expr.Node("acc", "f32", inst=inst), isa_dtype_of(inst), inst)
        views = [view_of(v, o) for v, o in zip(ops, inst.operands, strict=True)]
        extra = {"materialize": lambda v: lw.materialize(v, inst)} if materializes else {}
        kernel_fn(lw.b, plan_fn(inst, lw.name(inst), *views, out, acc, **extra))
        return out

    return handler


def _reduce(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    space = tuple(inst.operands[0].shape.dims)
    eb = ExprBuilder(space, lw.b)
    value = eb.lower(inst, ops)
    assert isinstance(value, Expr) and eb.reduce_axes is not None
    out = lw.destination(inst)
    reduce_kernel(lw.b, value.node, out.broadcast(space, value.axes), eb.reduce_axes, lw.name(inst), inst.where())
    return out


def _concatenate(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    out = lw.destination(inst)
    (dim,) = tuple(inst.attrs["dimensions"])
    start = 0
    name = lw.name(inst)
    for value, operand in zip(ops, inst.operands, strict=True):
        size = operand.shape.dims[dim]
        ranges = tuple((start, start + size, 1) if d == dim else (0, n, 1) for d, n in enumerate(inst.shape.dims))
        copy_kernel(lw.b, view_of(value, operand), out.slice(ranges), name, inst.where())
        start += size
    return out


def _pad(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    """The output filled with the pad value, then the operand (cropped by negative edges) copied into the
    strided interior view."""
    out = lw.destination(inst)
    x, value = view_of(ops[0], inst.operands[0]), ops[1]
    try:
        config = parse_padding(inst.attrs.get("padding"), x.rank)
    except ShapeInferenceError as e:
        raise CompilationError(f"{inst.where()}: {e}") from None
    name = lw.name(inst)
    eb = ExprBuilder(tuple(inst.shape.dims), lw.b)
    fused_kernel(lw.b, eb.node(value, (), inst.operands[1]), out, f"{name}.fill", inst.where())
    src, dst = [], []
    for (lo, _, interior), n, m in zip(config, x.dims, inst.shape.dims, strict=True):
        step = interior + 1
        first = max(0, (step - 1 - lo) // step)  # the first operand element at a position >= 0
        last = min(n - 1, (m - 1 - lo) // step)  # the last at a position < m
        if last < first:
            return out  # nothing of the operand survives the cropping
        src.append((first, last + 1, 1))
        dst.append((lo + first * step, lo + last * step + 1, step))
    copy_kernel(lw.b, x.slice(tuple(src)), out.slice(tuple(dst)), f"{name}.interior", inst.where())
    return out


def _fusion(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    comp = inst.attrs.get("calls")
    if not isinstance(comp, Computation):
        raise CompilationError(f"{inst.where()}: fusion without a fused computation")
    kind_handler = FUSION_KINDS.get(str(inst.attrs.get("kind", "")))
    if kind_handler is not None:
        return kind_handler(lw, inst, comp, ops)
    for anchor, handler in FUSION_ANCHORS.items():
        if any(sub.opcode == anchor for sub in comp.instructions):
            return handler(lw, inst, comp, ops)
    eb = ExprBuilder(kernel_space(comp), lw.b, comp)
    root = _lower_body(comp, ops, eb)
    out = lw.destination(inst)
    if isinstance(root, Expr):
        space_out = out if root.axes == eb.full else out.broadcast(eb.dims, root.axes)
        fused_kernel(lw.b, root.node, space_out, lw.name(inst), inst.where(), eb.reduce_axes or ())
    else:
        copy_kernel(lw.b, view_of(root, inst), out, lw.name(inst), inst.where())
    return out


def _lower_body(comp: Computation, ops: list[Value], eb: ExprBuilder,
                special: Callable[[Instruction, list[Value]], Value | None] | None = None) -> Value:
    env: dict[int, Value] = {p.uid: ops[p.parameter_number or 0] for p in comp.parameters}
    for sub in comp.post_order():
        if sub.uid in env:
            continue
        sub_ops = [env[o.uid] for o in sub.operands]
        value = special(sub, sub_ops) if special is not None else None
        env[sub.uid] = value if value is not None else eb.lower(sub, sub_ops)
    assert comp.root is not None
    return env[comp.root.uid]


def anchored_fusion(opcode: str, plan_fn: Callable, kernel_fn: Callable, materializes: bool = False
                    ) -> FusionHandler:
    """The handler of a fusion around one `opcode` (a dot, a convolution...) with an elementwise epilogue
    (kOutput): the anchor's operands are views of the fusion's, its result the accumulator."""

    def handler(lw: Lowering, inst: Instruction, comp: Computation, ops: list[Value]) -> Value:
        anchors = [sub for sub in comp.instructions if sub.opcode == opcode]
        if len(anchors) != 1:
            raise CompilationError(f"{inst.where()}: a fusion with {len(anchors)} {opcode} ops is not supported")
        anchor = anchors[0]
        eb = ExprBuilder(tuple(anchor.shape.dims), lw.b)
        operands: list[View] = []
        acc = expr.Node("acc", "f32", inst=anchor)

        def special(sub: Instruction, sub_ops: list[Value]) -> Value | None:
            if sub is not anchor:
                return None
            operands.extend(view_of(v, o) for v, o in zip(sub_ops, sub.operands, strict=True))
            return Expr(expr.unary("convert", acc, isa_dtype_of(sub), sub), eb.full)

        root = _lower_body(comp, ops, eb, special)
        if not isinstance(root, Expr) or root.axes != eb.full or not any(n is acc for n in expr.walk(root.node)):
            raise CompilationError(f"{inst.where()}: the fusion's root is not an elementwise function of its "
                                   f"{opcode}")
        out = lw.destination(inst)
        extra = {"materialize": lambda v: lw.materialize(v, inst)} if materializes else {}
        kernel_fn(lw.b, plan_fn(anchor, lw.name(inst), *operands, out, root.node, **extra))
        return out

    return handler


def _attention_fusion(lw: Lowering, inst: Instruction, comp: Computation, ops: list[Value]) -> Value:
    """softmax(f(Q K^T)) V (kind=kCustom, see compiler/passes/fusion/attention.py): one flash kernel."""
    dots = [sub for sub in comp.post_order() if sub.opcode == "dot"]
    if len(dots) != 2:
        raise CompilationError(f"{inst.where()}: an attention fusion needs two dots, it has {len(dots)}")
    dot1, dot2 = dots
    eb = ExprBuilder(tuple(dot1.shape.dims), lw.b)
    parts: dict[str, Any] = {}
    acc = expr.Node("acc", "f32", inst=dot1)
    result = expr.Node("attention", isa_dtype_of(dot2), inst=dot2)

    def special(sub: Instruction, sub_ops: list[Value]) -> Value | None:
        if sub is dot1:
            parts["q"], parts["k"] = (view_of(v, o) for v, o in zip(sub_ops, sub.operands, strict=True))
            return Expr(expr.unary("convert", acc, isa_dtype_of(sub), sub), eb.full)
        if sub is dot2:
            if not isinstance(sub_ops[0], Expr):
                raise CompilationError(f"{inst.where()}: the attention's second dot does not read the softmax")
            parts["p"], parts["v"] = sub_ops[0].node, view_of(sub_ops[1], sub.operands[1])
            return Expr(result, tuple(range(sub.shape.rank)))
        return None

    root = _lower_body(comp, ops, eb, special)
    if not isinstance(root, Expr) or any(n.op not in ("convert", "attention") for n in expr.walk(root.node)):
        raise CompilationError(f"{inst.where()}: only converts may follow the attention's second dot")
    out = lw.destination(inst)  # converts after dot2: the kernel stores in the fusion's result type
    plan = plan_attention(dot1, dot2, lw.name(inst), parts["q"], parts["k"], parts["p"], parts["v"], out)
    attention_kernel(lw.b, plan)
    return out


def _head_fusion(lw: Lowering, inst: Instruction, comp: Computation, ops: list[Value]) -> Value:
    """A CNN's pooling, normalization and classifier (kind=kCustom, compiler/passes/fusion/head.py): one kernel."""
    out = lw.destination(inst)
    head_kernel(lw.b, comp, ops, out, lw.name(inst), inst.where())
    return out


MAX_REVERSE_COPIES = 256


def _reverse(lw: Lowering, inst: Instruction, ops: list[Value]) -> Value:
    """One copy per index combination of the reversed dims: slice i of the operand to slice n - 1 - i."""
    out = lw.destination(inst)
    x = view_of(ops[0], inst.operands[0])
    rev = tuple(sorted(inst.attrs.get("dimensions", ())))
    dims = inst.shape.dims
    copies = math.prod(dims[d] for d in rev)
    name = lw.name(inst)
    if copies > MAX_REVERSE_COPIES and len(rev) > 1 and sum(dims[d] for d in rev) <= MAX_REVERSE_COPIES:
        for k, d in enumerate(rev):  # one axis at a time (through scratch): the sum of the sizes, not the product
            dst = out if k == len(rev) - 1 else lw.b.scratch(x.dtype, dims, label=f"{inst.name} reversed {d}")
            for i in range(dims[d]):
                src = tuple((i, i + 1, 1) if a == d else (0, n, 1) for a, n in enumerate(dims))
                to = tuple((n - 1 - i, n - i, 1) if a == d else (0, n, 1) for a, n in enumerate(dims))
                copy_kernel(lw.b, x.slice(src), dst.slice(to), name, inst.where())
            x = dst
        return out
    if copies > MAX_REVERSE_COPIES:
        raise CompilationError(f"{inst.where()}: reverse over {copies} slices (more than {MAX_REVERSE_COPIES}) is "
                               "not supported by the backend")
    for idx in itertools.product(*(range(dims[d]) for d in rev)):
        at = dict(zip(rev, idx, strict=True))
        src = tuple((at[d], at[d] + 1, 1) if d in at else (0, n, 1) for d, n in enumerate(dims))
        dst = tuple((n - 1 - at[d], n - at[d], 1) if d in at else (0, n, 1) for d, n in enumerate(dims))
        copy_kernel(lw.b, x.slice(src), out.slice(dst), name, inst.where())
    return out


# opcode -> handler of an unfused instruction (op classes register their kernels here)
KERNELS: dict[str, Handler] = {
    "reverse": _reverse,
    "dot": anchored(plan_dot, dot_kernel, materializes=True),
    "fusion": _fusion,
    "reduce": _reduce,
    "concatenate": _concatenate,
    "pad": _pad,
    "convolution": anchored(plan_conv, conv_kernel, materializes=True),
    "reduce-window": anchored(plan_window, window_kernel),
    "gather": rows_or(anchored(plan_gather, gather_kernel)),  # several indexed dims: rows by indirect DMA
    **INDIRECT_HANDLERS,  # dynamic-slice, dynamic-update-slice, scatter: rows by indirect DMA
    "sort": lower_sort,
    "topk": lower_topk,
}
# fusions of this kind are lowered by the handler
FUSION_KINDS: dict[str, FusionHandler] = {
    "kCustom": lambda lw, inst, comp, ops: _custom_handler(comp)(lw, inst, comp, ops),
}
# kCustom fusions by the prefix of their computation's name (the fusion pass that made them names them so);
# any other kCustom fusion is an attention
CUSTOM_FUSIONS: dict[str, FusionHandler] = {HEAD_NAME: _head_fusion}


def _custom_handler(comp: Computation) -> FusionHandler:
    return next((h for prefix, h in CUSTOM_FUSIONS.items() if comp.name.startswith(prefix)), _attention_fusion)


# a fusion containing this opcode is lowered by the handler (checked in this order)
FUSION_ANCHORS: dict[str, FusionHandler] = {
    "dot": anchored_fusion("dot", plan_dot, dot_kernel, materializes=True),
    "convolution": anchored_fusion("convolution", plan_conv, conv_kernel, materializes=True),
    "reduce-window": anchored_fusion("reduce-window", plan_window, window_kernel),
    "gather": anchored_fusion("gather", plan_gather, gather_kernel),
}


def _transposes_operands(inst: Instruction) -> bool:
    """Dots (and fusions around one, attention) load a transposed operand with PE transposes of their own."""
    if inst.opcode == "dot":
        return True
    comp = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    return inst.opcode == "fusion" and (inst.attrs.get("kind") == "kCustom" or isinstance(comp, Computation)
                                        and any(sub.opcode == "dot" for sub in comp.instructions))


def _writes_any_layout(inst: Instruction) -> bool:
    """Elementwise and row kernels and attention store tiles into any strided view; kernels built around
    one op (a dot, a convolution, a gather...) need their output groups mergeable."""
    if inst.opcode != "fusion":
        return has_tile_rule(inst) or inst.opcode == "reduce"
    comp = inst.attrs.get("calls")
    return (inst.attrs.get("kind") == "kCustom" or isinstance(comp, Computation)
            and not any(sub.opcode in KERNELS or sub.opcode in FUSION_ANCHORS for sub in comp.instructions
                        if sub.opcode not in ("reduce", "concatenate", "pad")))


def _writes_any_layout_or_dot(inst: Instruction) -> bool:
    """Can the kernel of `inst` store its value transposed (a dot writes out^T tiles)?"""
    if inst.opcode == "dot":
        return True
    comp = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    return _writes_any_layout(inst) or (isinstance(comp, Computation) and inst.attrs.get("kind") == "kOutput"
                                         and any(sub.opcode == "dot" for sub in comp.instructions))


def _epilogue_operand(user: Instruction, value: Instruction) -> bool:
    """Does `user`, a fusion around a dot, read `value` in its epilogue (not as an operand of the dot)? The dot
    writes its result tile by tile in its own storage order and reads such operands in the same tiles."""
    comp = user.attrs.get("calls") if user.opcode == "fusion" else None
    if not isinstance(comp, Computation) or user.attrs.get("kind") != "kOutput":
        return False
    dots = [sub for sub in comp.instructions if sub.opcode == "dot"]
    return len(dots) == 1 and _dims_of_use(user, value) is None


def _reduces_rows(inst: Instruction) -> bool:
    """A reduce, or a fusion with one: its kernel writes whole rows."""
    if inst.opcode == "reduce":
        return True
    comp = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    return isinstance(comp, Computation) and any(sub.opcode == "reduce" for sub in comp.instructions)


def _dims_of_use(user: Instruction, value: Instruction) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(batch dims, contracting dims) of `value` when `user` (a dot, or a fusion around one) contracts it."""
    if user.opcode == "dot":
        side = "lhs" if user.operands.index(value) == 0 else "rhs"
        return tuple(user.attrs.get(f"{side}_batch_dims", ())), tuple(user.attrs.get(f"{side}_contracting_dims", ()))
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
                return _dims_of_use(u, cur)
            if u.opcode in ("convert", "copy"):
                frontier.append(u)
    return None
