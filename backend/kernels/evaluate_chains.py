"""How the tile evaluator (evaluate.py) maps short chains of elementwise nodes to one instruction: an ACT
activation func(src * scale + bias) with its immediate or per-partition scale and bias, or one tensor_scalar
chaining two scalar operations; and the operand kinds it evaluates to."""

from __future__ import annotations

from dataclasses import dataclass

from backend.kernels import integer
from backend.kernels.expr import ACT_FUNCS, REDUCE_OPS, SWAPPED, Node
from isa.program import AccessPattern

PAIR_OPS = ("add", "subtract", "multiply", "divide", "max", "min")  # fp32 ALU ops tensor_scalar chains two of


@dataclass(frozen=True)
class Tensor:
    ap: AccessPattern


@dataclass(frozen=True)
class PVec:
    ap: AccessPattern


@dataclass(frozen=True)
class Scalar:
    value: float | int  # an int for integer immediates (exact beyond 2^53)


Operand = Tensor | PVec | Scalar


class FusedChains:
    """TileEvaluator's matchers of instruction-sized chains (a mixin: it uses the evaluator's analysis,
    `_kind`, `_uses`, `_users`, `_memo`, and its `_eval`, `_array`, `_scratch`, `_new`, `_consume`, `_fold`)."""

    # -- ACT chains -----------------------------------------------------------------------------------------
    def _absorbable(self, node: Node) -> bool:
        return (self._uses.get(id(node), 0) == 1 and id(node) not in self._memo
                and node.op not in ("leaf", "acc", "scalar", "iota") and node.op not in REDUCE_OPS)

    def _match_act(self, node: Node):
        """(src, func, scale, (bias, negated) | None, absorbed) for one ACT instruction computing `node`,
        or None. `scale` is an immediate or a vector node."""
        func, cur, absorbed = "identity", node, set()
        if node.op in ACT_FUNCS:
            func, cur = node.op, node.inputs[0]
            if not self._absorbable(cur):
                return cur, func, None, None, frozenset()
        elif node.op == "multiply" and node.inputs[0] is node.inputs[1] and self._kind[id(node)] == "T":
            return node.inputs[0], "square", None, None, frozenset()
        bias = None
        if cur.op in ("add", "subtract"):
            pairs = ((0, 1), (1, 0)) if cur.op == "add" else ((0, 1),)
            for i, j in pairs:
                if self._kind[id(cur.inputs[j])] in ("V", "S") and self._kind[id(cur.inputs[i])] != "S":
                    if cur is not node:
                        absorbed.add(id(cur))
                    bias, cur = (cur.inputs[j], cur.op == "subtract"), cur.inputs[i]
                    break
        scale: Node | float | None = None
        if cur.op in ("multiply", "divide", "negate") and (cur is node or self._absorbable(cur)):
            found: tuple[Node | float, Node] | None = None
            if cur.op == "negate":
                found = (-1.0, cur.inputs[0])
            else:
                pairs = ((0, 1), (1, 0)) if cur.op == "multiply" else ((0, 1),)
                for i, j in pairs:
                    other, k = cur.inputs[j], self._kind[id(cur.inputs[j])]
                    if k == "S" and (cur.op == "multiply" or self._fold(other) != 0):
                        value = self._fold(other)
                        found = (value if cur.op == "multiply" else 1.0 / value, cur.inputs[i])
                    elif k == "V" and cur.op == "multiply" and self._kind[id(cur.inputs[i])] != "S":
                        found = (other, cur.inputs[i])
                    if found:
                        break
            if found is not None:
                if cur is not node:
                    absorbed.add(id(cur))
                scale, cur = found
        useful = (func != "identity" or isinstance(scale, Node) or (scale is not None and bias is not None)
                  or (scale is not None and cur.op == "acc"))
        if not useful or self._kind[id(cur)] == "S":
            return None
        return cur, func, scale, bias, frozenset(absorbed)

    def _emit_act(self, node: Node, out: AccessPattern, src: Node, func: str, scale, bias, absorbed) -> None:
        b, kind = self.b, self._kind[id(node)]
        src_ap, bias_ap = self._array(src, kind), None
        if bias is not None and self._kind[id(bias[0])] == "S":  # an immediate: a [P, 1] vector of it
            bias_ap, value = self._scratch("V"), float(self._fold(bias[0])) * (-1.0 if bias[1] else 1.0)
            b.emit(b.pick_engine(("dve", "pool")), "memset", f"{self.label} bias", {"value": value}, dst=bias_ap)
        elif bias is not None:
            bias_ap = self._eval(bias[0]).ap  # type: ignore[union-attr]
            if bias[1]:
                bias_ap, plain = self._scratch("V"), bias_ap
                b.tensor_scalar(bias_ap, plain, "multiply", -1.0, f"{self.label} negate bias")
        scale_vec = self._eval(scale).ap if isinstance(scale, Node) else None  # type: ignore[union-attr]
        imm = float(scale) if isinstance(scale, float | int) else 1.0
        reducer = self._pending_sum(node)
        acc_ap = self._new(reducer, "V") if reducer is not None else None
        b.activation(out, src_ap, func, bias=bias_ap, scale=imm, scale_vec=scale_vec, acc=acc_ap,
                     comment=f"{self.label} {node.op if func == 'identity' else func}")
        self._consume(node, absorbed)
        if reducer is not None:
            self._memo[id(reducer)] = PVec(acc_ap)  # type: ignore[arg-type]
            self._consume(reducer)

    # -- two scalar operations, one instruction --------------------------------------------------------------
    def _scalar_side(self, node: Node) -> tuple[Node, Node] | None:
        """(tile, scalar) of `node` = tile <op> scalar (a per-partition vector or an immediate), tile first."""
        if node.op not in PAIR_OPS or len(node.inputs) != 2:
            return None
        (x, y), kind = node.inputs, self._kind[id(node)]
        if self._kind[id(x)] == kind and self._kind[id(y)] in ("V", "S"):
            return x, y
        if node.op in SWAPPED and SWAPPED[node.op] == node.op and self._kind[id(y)] == kind \
                and self._kind[id(x)] in ("V", "S"):
            return y, x
        return None

    def _match_pair(self, node: Node):
        """(tile, op, scalar, op1, scalar1, inner) when `node` = (tile <op> scalar) <op1> scalar1 with an fp32
        inner result only it uses: one tensor_scalar (fp32 in between, as the inner tile would hold), e.g. a batch
        norm's (acc - mean) * scale straight from PSUM, where ACT would take the multiply and DVE the subtract."""
        if integer.is_int_node(node) or self._kind[id(node)] != "T":
            return None
        outer = self._scalar_side(node)
        if outer is None or not self._absorbable(outer[0]) or outer[0].dtype != "f32":
            return None
        inner = self._scalar_side(outer[0])
        if inner is None or integer.is_int_node(outer[0]):
            return None
        return inner[0], outer[0].op, inner[1], node.op, outer[1], outer[0]

    def _emit_pair(self, node: Node, out: AccessPattern, tile: Node, op: str, scalar: Node, op1: str,
                   scalar1: Node, inner: Node) -> None:
        first, second = self._scalar_args(scalar), self._scalar_args(scalar1)
        self.b.tensor_scalar(out, self._array(tile, self._kind[id(node)]), op, first["scalar"],
                             f"{self.label} {op} {op1}", scalar_vec=first["scalar_vec"], op1=op1,
                             scalar1=second["scalar"], scalar1_vec=second["scalar_vec"])
        self._consume(node, frozenset({id(inner)}))

    def _pending_sum(self, node: Node) -> Node | None:
        """An unevaluated reduce_add of this full-tile node: ACT accumulates it in the same instruction."""
        if self._kind[id(node)] != "T":
            return None
        for user in self._users.get(id(node), []):
            if user.op == "reduce_add" and id(user) not in self._memo:
                return user
        return None
