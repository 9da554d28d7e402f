"""A sort comparator (the `to_apply` computation of an HLO sort) as expressions the sort kernel evaluates.

XLA's comparator takes the parameters (a_0, b_0, a_1, b_1, ...): element a and element b of every sorted
operand, and returns pred: "a goes before b". The kernel compares many pairs per instruction, so the
comparator is split in two parts:

- **derived arrays**: every maximal sub-expression that reads one parameter only (jax's canonicalization of
  -0 and NaN, a negation for a descending sort, a convert...) is an elementwise function of one operand. It
  is computed once per element before the sorting network and carried through it beside the operands
  (`Derived`); the same function of a_k and of b_k is one array. The operands of a float compare with
  `type=TOTALORDER` are derived arrays too, mapped to order-preserving integers (`total_order_keys`):
  the float's bits as a signed integer, negative values with their magnitude bits flipped
  (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN), then compared exactly on GpSimd in integer mode.
- **the pair expression** (`less`): the rest of the comparator over leaves that read the derived arrays at
  the two positions of a pair, evaluated once per network stage for every pair at once.

What cannot be split so (a TOTALORDER compare of a value that mixes two parameters, tuples, ops without
an elementwise mapping) is refused with a CompilationError naming the comparator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.fused import elementwise_node
from backend.kernels import expr
from backend.kernels.expr import KEY_DTYPES, Node
from backend.layout import isa_dtype_of
from hlo.errors import CompilationError
from hlo.interpreter.elementwise import total_order_key
from hlo.ir import Computation, Instruction

FLOAT_DTYPES = frozenset(KEY_DTYPES)


@dataclass
class Derived:
    """An array computed per element of operand `operand` before the network: `node` over the leaf
    `source` (None: the operand itself), as TOTALORDER keys when `total_order`."""

    operand: int
    node: Node | None
    source: Node
    total_order: bool
    dtype: str  # the carried array's dtype (the key type when total_order)
    value_dtype: str  # the dtype of `node`'s value


class Comparator:
    """The comparator `comp` of a sort of operands with ISA dtypes `dtypes`."""

    def __init__(self, comp: Computation, dtypes: list[str], where: str):
        self.comp, self.dtypes, self.where = comp, dtypes, where
        self.derived: list[Derived] = []
        self._keys: dict[tuple, int] = {}
        self._deps: dict[int, frozenset[int]] = {}
        if comp.root is None or len(comp.parameters) != 2 * len(dtypes):
            raise CompilationError(f"{where}: the comparator %{comp.name} must take two parameters per operand")
        for inst in comp.post_order():
            if inst.opcode == "parameter":
                self._deps[inst.uid] = frozenset({int(inst.parameter_number or 0)})
            else:
                self._deps[inst.uid] = frozenset().union(*(self._deps[o.uid] for o in inst.operands))
        # the pair expression with symbolic sides: leaves are (derived index, side) placeholders
        self.leaves: dict[tuple[int, int], Node] = {}
        self._memo: dict[int, Node] = {}
        self.root = self._pair(comp.root)

    def why(self, inst: Instruction, what: str) -> str:
        return (f"{self.where}: the sort comparator %{self.comp.name} ({inst.opcode} %{inst.name}) {what}; not "
                "supported by the backend")

    # -- the pair expression --------------------------------------------------------------------------------
    def _pair(self, inst: Instruction) -> Node:
        if inst.uid in self._memo:
            return self._memo[inst.uid]
        deps = self._deps[inst.uid]
        if inst.shape.is_tuple or inst.shape.rank:
            raise CompilationError(self.why(inst, "is not a scalar"))
        if not deps:
            node = expr.scalar(self._constant(inst), isa_dtype_of(inst), inst)
        elif len(deps) == 1:
            node = self._leaf(inst, total_order=False)
        elif inst.opcode == "compare" and self._total_order(inst):
            x, y = (self._key_operand(o) for o in inst.operands)
            direction = str(inst.attrs.get("direction", ""))
            if direction not in expr.COMPARE_DIRECTIONS:
                raise CompilationError(self.why(inst, f"has the compare direction {direction!r}"))
            node = Node(expr.COMPARE_DIRECTIONS[direction], "pred", (x, y), inst=inst)
        else:
            ops = [self._pair(o) for o in inst.operands]
            node = self._elementwise(inst, ops)
        self._memo[inst.uid] = node
        return node

    def _total_order(self, inst: Instruction) -> bool:
        return inst.attrs.get("type") == "TOTALORDER" and isa_dtype_of(inst.operands[0]) in FLOAT_DTYPES

    def _key_operand(self, inst: Instruction) -> Node:
        deps = self._deps[inst.uid]
        if not deps:
            key = total_order_key(np.asarray(inst.literal if inst.literal is not None else self._constant(inst)))
            return expr.scalar(float(key.reshape(-1)[0]), KEY_DTYPES[isa_dtype_of(inst)], inst)
        if len(deps) != 1:
            raise CompilationError(self.why(inst, "compares with type=TOTALORDER a value computed from several "
                                                  "parameters"))
        return self._leaf(inst, total_order=True)

    def _leaf(self, inst: Instruction, total_order: bool) -> Node:
        (param,) = self._deps[inst.uid]
        operand, side = param // 2, param % 2
        canon = self._canon(inst)
        key = (operand, canon, total_order)
        if key not in self._keys:
            source = Node("leaf", self.dtypes[operand], inst=inst)
            node = None if canon == "P" else self._single(inst, source)
            value_dtype = isa_dtype_of(inst)
            dtype = KEY_DTYPES[value_dtype] if total_order else value_dtype
            if node is None and not total_order and value_dtype != self.dtypes[operand]:
                raise CompilationError(self.why(inst, "reads a parameter of another type than its operand"))
            self._keys[key] = len(self.derived)
            self.derived.append(Derived(operand, node, source, total_order, dtype, value_dtype))
        index = self._keys[key]
        return self.leaves.setdefault((index, side), Node("leaf", self.derived[index].dtype, inst=inst))

    def _single(self, inst: Instruction, source: Node) -> Node:
        """`inst` (reading one parameter) as an expression of the operand leaf `source`."""
        memo: dict[int, Node] = {}

        def build(i: Instruction) -> Node:
            if i.uid in memo:
                return memo[i.uid]
            if i.opcode == "parameter":
                node = source
            elif not self._deps[i.uid]:
                node = expr.scalar(self._constant(i), isa_dtype_of(i), i)
            elif i.opcode == "compare" and self._total_order(i):
                raise CompilationError(self.why(i, "compares with type=TOTALORDER inside a function of one parameter"))
            else:
                node = self._elementwise(i, [build(o) for o in i.operands])
            memo[i.uid] = node
            return node

        return build(inst)

    def _elementwise(self, inst: Instruction, ops: list[Node]) -> Node:
        if inst.opcode not in _ELEMENTWISE:
            raise CompilationError(self.why(inst, "has no elementwise mapping"))
        return elementwise_node(inst, ops, isa_dtype_of(inst))

    def _constant(self, inst: Instruction) -> float:
        if inst.opcode == "constant" and inst.literal is not None and np.asarray(inst.literal).size == 1:
            return float(np.asarray(inst.literal).reshape(-1)[0])
        if inst.opcode in ("convert", "copy", "broadcast", "reshape") and inst.operands:
            return self._constant(inst.operands[0])
        raise CompilationError(self.why(inst, "is a constant expression the backend does not fold"))

    def _canon(self, inst: Instruction) -> str:
        """A structural key of the expression of one parameter (the parameter itself is "P")."""
        if inst.opcode == "parameter":
            return "P"
        if not self._deps[inst.uid]:
            return f"c{self._constant(inst)!r}:{inst.shape.dtype}"
        attrs = ",".join(f"{k}={inst.attrs[k]}" for k in sorted(inst.attrs) if k in ("direction", "type"))
        return f"{inst.opcode}:{inst.shape.dtype}[{attrs}](" + ",".join(self._canon(o) for o in inst.operands) + ")"


_ELEMENTWISE = frozenset(expr.HLO_BINARY) | frozenset(expr.HLO_UNARY) | expr.STRUCTURED_ELEMENTWISE
