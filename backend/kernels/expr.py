"""Elementwise expression DAGs and their lowering onto one [P, F] tile.

Both kernel kinds use this: a kLoop fusion (or a lone elementwise op) is an expression over HBM views,
and a dot kernel's epilogue is an expression over the PSUM accumulator (`acc`) and HBM views.

Instruction selection (per node, greedy, table driven):
- ACT computes `func(src * scale + bias)` in one pass: a chain `func?(add?(mul?(x, s), b))` whose
  intermediate nodes have one use becomes one `activation` (s: scalar or per-partition vector, b: a
  per-partition vector).
- other binary ops: DVE/POOL `tensor_tensor`, or `tensor_scalar` when one side is a scalar constant.
- unary functions: ACT `activation`; convert/copy: `tensor_copy` (or ACT copy), rounding to the dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.alloc import Pool
from backend.emit import ProgramBuilder
from backend.layout import View
from compiler.errors import CompilationError
from compiler.hlo.ir import Instruction as HloInstruction
from isa.program import AccessPattern

# HLO opcode (or custom-call target) -> node op. Node ops that are ACT functions keep the ISA name.
HLO_UNARY: dict[str, str] = {
    "tanh": "tanh", "logistic": "sigmoid", "exponential": "exp", "log": "log", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "negate": "negate", "copy": "copy", "convert": "convert",
}
CUSTOM_CALL_UNARY: dict[str, str] = {"gelu": "gelu", "gelu_tanh": "gelu_tanh"}
HLO_BINARY: dict[str, str] = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "maximum": "max", "minimum": "min", "power": "pow",
}
ACT_FUNCS = frozenset({"tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "gelu", "gelu_tanh", "relu"})
COMMUTATIVE = frozenset({"add", "multiply", "max", "min"})


@dataclass(eq=False)
class Node:
    """One value of an elementwise expression.

    op: "leaf" (an HBM view with the output's logical dims), "acc" (the matmul accumulator in PSUM),
    "scalar" (an immediate), or a node op of the tables above.
    """

    op: str
    dtype: str
    inputs: tuple[Node, ...] = ()
    view: View | None = None
    value: float = 0.0
    inst: HloInstruction | None = None


def leaf(view: View, inst: HloInstruction | None = None) -> Node:
    """A node reading `view`; constants whose elements are all equal become immediates and a pending
    cast becomes an explicit convert."""
    scalar = view.scalar_value()
    if scalar is not None:
        return Node("scalar", view.dtype, value=scalar, inst=inst)
    if view.cast is not None:
        base = Node("leaf", view.stored_dtype, view=view.with_cast(view.stored_dtype), inst=inst)
        return Node("convert", view.dtype, (base,), inst=inst)
    return Node("leaf", view.dtype, view=view, inst=inst)


def unary(op: str, x: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    if op in ("convert", "copy") and x.dtype == dtype:
        return x
    if x.op == "scalar" and op in ("convert", "copy"):
        return Node("scalar", dtype, value=x.value, inst=inst)
    return Node(op, dtype, (x,), inst=inst)


def binary(op: str, a: Node, b: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    if op == "max" and b.op == "scalar" and b.value == 0.0:
        return Node("relu", dtype, (a,), inst=inst)
    if op == "max" and a.op == "scalar" and a.value == 0.0:
        return Node("relu", dtype, (b,), inst=inst)
    return Node(op, dtype, (a, b), inst=inst)


def walk(root: Node) -> list[Node]:
    """Nodes reachable from root, inputs before users."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((i, False) for i in reversed(node.inputs))
    return order


def substitute_leaves(root: Node, views: dict[int, View]) -> Node:
    """A copy of the expression whose leaves (by id) read the given replacement views."""
    memo: dict[int, Node] = {}
    for node in walk(root):
        if node.op == "leaf":
            memo[id(node)] = Node("leaf", node.dtype, view=views[id(node)], inst=node.inst)
        elif node.inputs:
            memo[id(node)] = Node(node.op, node.dtype, tuple(memo[id(i)] for i in node.inputs),
                                  node.view, node.value, node.inst)
        else:
            memo[id(node)] = node
    return memo[id(root)]


def temps_needed(root: Node) -> int:
    """Upper bound of the temporary tiles one evaluation of `root` takes."""
    nodes = walk(root)
    ops = sum(1 for n in nodes if n.op not in ("leaf", "acc", "scalar"))
    leaves = sum(1 for n in nodes if n.op in ("leaf", "scalar"))
    return ops + leaves + 1


# -- operands of one tile -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensor:
    """A full [P, F] tile operand."""

    ap: AccessPattern


@dataclass(frozen=True)
class Scalar:
    value: float


@dataclass(frozen=True)
class PVec:
    """A per-partition [P, 1] vector, broadcast along the free dim."""

    ap: AccessPattern


Operand = Tensor | Scalar | PVec


@dataclass
class TileEvaluator:
    """Evaluates an expression for one tile of [pw partitions x fw free elements].

    `leaves` maps leaf nodes to their loaded operand, `acc` is the accumulator's PSUM pattern.
    Temporaries rotate through `temps` (buffers sized for fw elements of 4 bytes).
    """

    builder: ProgramBuilder
    temps: Pool
    pw: int
    fw: int
    leaves: dict[int, Operand]
    acc: AccessPattern | None = None
    label: str = ""
    _memo: dict[int, Operand] = field(default_factory=dict)
    _uses: dict[int, int] = field(default_factory=dict)

    def run(self, root: Node, dst: AccessPattern) -> None:
        """Compute `root` into `dst` ([pw, fw] in SBUF)."""
        for node in walk(root):
            for i in node.inputs:
                self._uses[id(i)] = self._uses.get(id(i), 0) + 1
        result = self._eval(root, dst)
        if isinstance(result, Tensor) and result.ap is dst:
            return
        self._materialize(result, dst)

    # -- helpers --------------------------------------------------------------------------------------------
    def _temp(self, dtype: str) -> AccessPattern:
        return self.temps.next().flat(dtype, self.pw, self.fw)

    def _materialize(self, operand: Operand, dst: AccessPattern) -> AccessPattern:
        b = self.builder
        if isinstance(operand, Tensor):
            b.copy(dst, operand.ap, f"{self.label} copy")
        elif isinstance(operand, Scalar):
            b.emit("dve", "memset", f"{self.label} fill", {"value": float(operand.value)}, dst=dst)
        else:
            zero = self._temp("f32")
            b.emit("dve", "memset", f"{self.label} zero", {"value": 0.0}, dst=zero)
            b.activation(dst, zero, "identity", bias=operand.ap, comment=f"{self.label} expand vector")
        return dst

    def _tensor(self, operand: Operand, dtype: str = "f32") -> AccessPattern:
        if isinstance(operand, Tensor):
            return operand.ap
        return self._materialize(operand, self._temp(dtype))

    def _single_use(self, node: Node) -> bool:
        return self._uses.get(id(node), 0) <= 1 and id(node) not in self._memo

    # -- evaluation -----------------------------------------------------------------------------------------
    def _eval(self, node: Node, dst: AccessPattern | None = None) -> Operand:
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        if node.op == "leaf":
            result: Operand = self.leaves[key]
        elif node.op == "acc":
            assert self.acc is not None
            result = Tensor(self.acc)
        elif node.op == "scalar":
            result = Scalar(node.value)
        else:
            out = dst if dst is not None else self._temp(node.dtype)
            result = self._lower(node, out)
        self._memo[key] = result
        return result

    def _lower(self, node: Node, out: AccessPattern) -> Operand:
        act = self._match_act(node)
        if act is not None:
            src, func, scale, bias = act
            scale_vec = scale.ap if isinstance(scale, PVec) else None
            imm = scale.value if isinstance(scale, Scalar) else 1.0
            self.builder.activation(out, self._tensor(src), func, bias=bias.ap if bias else None, scale=imm,
                                    scale_vec=scale_vec, comment=f"{self.label} {node.op}")
            return Tensor(out)
        op, b = node.op, self.builder
        if op in ("convert", "copy"):
            b.copy(out, self._tensor(self._eval(node.inputs[0])), f"{self.label} {op}")
        elif op == "negate":
            b.tensor_scalar(out, self._tensor(self._eval(node.inputs[0])), "multiply", -1.0, f"{self.label} neg")
        elif op in ("add", "subtract", "multiply", "divide", "max", "min", "pow"):
            self._binary(node, out)
        else:
            raise CompilationError(f"{_where(node)}: elementwise op {op!r} has no instruction mapping")
        return Tensor(out)

    def _binary(self, node: Node, out: AccessPattern) -> None:
        x, y = (self._eval(i) for i in node.inputs)
        op, b = node.op, self.builder
        if isinstance(y, Scalar) and not isinstance(x, Scalar):
            b.tensor_scalar(out, self._tensor(x), op, y.value, f"{self.label} {op} imm")
        elif isinstance(x, Scalar) and op in COMMUTATIVE and not isinstance(y, Scalar):
            b.tensor_scalar(out, self._tensor(y), op, x.value, f"{self.label} {op} imm")
        else:
            b.tensor_tensor(out, self._tensor(x), self._tensor(y), op, f"{self.label} {op}")

    def _match_act(self, node: Node) -> tuple[Operand, str, Operand | None, PVec | None] | None:
        """Match func?(add?(mul?(x, scale), bias)) for one ACT instruction; None if nothing fits."""
        func, cur, matched = "identity", node, False
        if cur.op in ACT_FUNCS:
            func, cur, matched = cur.op, cur.inputs[0], True
            if not self._single_use(cur) or cur.op in ("leaf", "acc", "scalar"):
                return self._eval(cur), func, None, None
        bias: PVec | None = None
        if cur.op == "add" and (cur is node or self._single_use(cur)):
            for i, j in ((0, 1), (1, 0)):
                operand = self._peek(cur.inputs[j])
                if isinstance(operand, PVec):
                    bias, cur, matched = operand, cur.inputs[i], True
                    break
        scale: Operand | None = None
        if cur.op in ("multiply", "divide", "negate") and (cur is node or self._single_use(cur)):
            if cur.op == "negate":
                scale, cur = Scalar(-1.0), cur.inputs[0]
            else:
                pairs = ((0, 1), (1, 0)) if cur.op == "multiply" else ((0, 1),)
                for i, j in pairs:
                    operand = self._peek(cur.inputs[j])
                    if isinstance(operand, Scalar) and cur.op == "divide":
                        scale, cur = Scalar(1.0 / operand.value), cur.inputs[i]
                        break
                    if isinstance(operand, Scalar | PVec) and cur.op == "multiply":
                        scale, cur = operand, cur.inputs[i]
                        break
            matched = matched or isinstance(scale, PVec) or (
                scale is not None and (bias is not None or self._reads_psum(cur)))
        if not matched or cur.op == "scalar":
            return None
        src = self._eval(cur)
        if isinstance(src, Scalar | PVec):
            return None
        return src, func, scale, bias

    def _peek(self, node: Node) -> Operand | None:
        if node.op == "scalar":
            return Scalar(node.value)
        if node.op == "leaf":
            return self.leaves[id(node)]
        return None

    def _reads_psum(self, node: Node) -> bool:
        return node.op == "acc"


def _where(node: Node) -> str:
    return node.inst.where() if node.inst is not None else f"elementwise {node.op}"
