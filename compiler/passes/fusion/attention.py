"""Attention as one fusion: softmax(f(Q K^T)) V, which the backend computes flash-attention style.

Matched on the entry computation, from the second dot backwards::

    s = dot(q, k)                    batch dims B, contracting over the head dim
    x = f(s, operands...)            elementwise: scale, mask add, select...  (one user each)
    m = reduce-max(x) over the last dim;  e = exp(x - broadcast(m))
    l = reduce-add(e) over the last dim;  p = e / broadcast(l)      (converts allowed around p)
    (torch's safe softmax, as the frontend writes SDPA: m = maximum(reduce-max, lowest finite) and
    l = maximum(reduce-add, 1), so that a row of -inf scores gives 0 rather than NaN)
    o = dot(p, v)                    same batch dims, contracting over the dim softmax reduced

Every intermediate must be used only inside the pattern. The fusion is ``kind=kCustom`` with a fused
computation named ``fused_attention``.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes

from compiler.passes.fusion.group import FusionGroup
from compiler.passes.fusion.rows import is_row_reduce
from compiler.passes.utils import constant_value
from hlo.ir import Computation, Instruction, numpy_dtype
from hlo.opcodes import is_elementwise

Record = Callable[[Instruction, Instruction, bool, str, str], None]
KIND = "kCustom"


class _Match:
    def __init__(self, users: dict[Instruction, list[Instruction]]):
        self.users = users
        self.members: dict[int, Instruction] = {}

    def add(self, *insts: Instruction) -> None:
        for inst in insts:
            self.members[inst.uid] = inst

    def through_converts(self, inst: Instruction) -> Instruction:
        while inst.opcode == "convert":
            self.add(inst)
            inst = inst.operands[0]
        return inst

    def broadcast_of_reduce(self, inst: Instruction, reducer: str, axis: int) -> Instruction | None:
        """The reduce when `inst` is broadcast(reduce-<reducer>(...)) over `axis`, or broadcast of the
        reduce's ``maximum`` with the guard constant of torch's safe softmax (_GUARDS)."""
        if inst.opcode != "broadcast":
            return None
        red = inst.operands[0]
        if red.opcode == "maximum" and _is_guard(red, reducer):
            self.add(red)
            red = red.operands[0]
        if red.opcode != "reduce":
            return None
        comp = red.attrs.get("to_apply")
        root = comp.root if isinstance(comp, Computation) else None
        if not is_row_reduce(red) or root is None or root.opcode != reducer:
            return None
        if tuple(red.attrs.get("dimensions", ())) != (axis,):
            return None
        self.add(inst, red)
        return red


def _guard_value(reducer: str, dtype: str) -> float:
    """The bound a safe softmax puts on its row max (the dtype's lowest finite) or row sum (1)."""
    return float(ml_dtypes.finfo(numpy_dtype(dtype)).min) if reducer == "maximum" else 1.0


def _is_guard(inst: Instruction, reducer: str) -> bool:
    """Is `inst` maximum(reduce-<reducer>, the guard constant or a broadcast of it)?"""
    red, bound = inst.operands
    return red.opcode == "reduce" and constant_value(bound) == _guard_value(reducer, inst.shape.dtype)


def _match(dot2: Instruction, users: dict[Instruction, list[Instruction]]) -> tuple[dict[int, Instruction], str]:
    """The members of the attention rooted at `dot2`, or ({}, why not)."""
    m = _Match(users)
    attrs = dot2.attrs
    if tuple(attrs.get("lhs_contracting_dims", ())) != (dot2.operands[0].shape.rank - 1,):
        return {}, "the second dot does not contract the last dim of its lhs"
    axis = dot2.operands[0].shape.rank - 1
    p = m.through_converts(dot2.operands[0])
    if p.opcode != "divide":
        return {}, f"%{p.name} ({p.opcode}) before the second dot is not a softmax's divide"
    e, bl = p.operands
    m.add(p)
    total = m.broadcast_of_reduce(bl, "add", axis)
    if total is None or m.through_converts(total.operands[0]) is not e:
        return {}, f"%{p.name} does not divide by the row sum of its dividend"
    if e.opcode != "exponential" or e.operands[0].opcode != "subtract":
        return {}, f"%{e.name} is not exp(x - max)"
    sub = e.operands[0]
    x, bm = sub.operands
    m.add(e, sub)
    top = m.broadcast_of_reduce(bm, "maximum", axis)
    if top is None or top.operands[0] is not x:
        return {}, f"%{sub.name} does not subtract the row maximum of its operand"
    # x = f(dot1, ...): walk elementwise single-user ops back to a dot
    chain, cur = [], x
    while cur.opcode != "dot":
        if not is_elementwise(cur):
            return {}, f"%{cur.name} ({cur.opcode}) between the dots is not elementwise"
        chain.append(cur)
        computed = [o for o in cur.operands if o.opcode not in ("broadcast", "constant", "parameter")]
        if len(computed) != 1:
            return {}, f"%{cur.name} combines {len(computed)} computed values (one score path expected)"
        cur = computed[0]
    dot1 = cur
    m.add(dot1, *chain, dot2)
    if dot1.shape.dims != p.shape.dims:
        return {}, f"%{dot1.name} and the softmax differ in shape"
    if len(dot1.attrs.get("lhs_batch_dims", ())) != dot1.shape.rank - 2:
        return {}, f"%{dot1.name} is not a batched product of one query and one key dim"
    for inst in m.members.values():
        if inst is dot2:
            continue
        outside = [u for u in users[inst] if u.uid not in m.members]
        if outside:
            return {}, f"%{inst.name} is also used by %{outside[0].name} outside the attention"
    return m.members, "attention: QK^T, softmax and PV in one flash-attention kernel"


def attention_groups(comp: Computation, record: Record) -> list[FusionGroup]:
    """The attention fusions of `comp` ."""

    users = comp.users()
    groups = []
    claimed: set[int] = set()
    for dot2 in comp.instructions:
        if dot2.opcode != "dot" or dot2.uid in claimed:
            continue
        lhs = dot2.operands[0]
        if lhs.opcode not in ("divide", "convert"):
            continue
        members, reason = _match(dot2, users)
        record(lhs, dot2, bool(members), reason, KIND)
        if members and not (set(members) & claimed):
            root = dot2
            while len(users[root]) == 1 and users[root][0].opcode == "convert" and root is not comp.root:
                root = users[root][0]  # the attention stores its result converted
                members[root.uid] = root
            claimed.update(members)
            groups.append(FusionGroup(root, KIND, dict(members), set()))
    return groups
