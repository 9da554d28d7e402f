"""A CNN's classifier head as one fusion: global average pooling, a normalization over channels, the classifier.

Matched on the entry computation, from the classifier's dot backwards (batch 1)::

    r = reduce(x [1, C, H, W], dims={2,3}) by add from 0     global average pooling's sum
    v = f(r, ...)                                            elementwise over [1, C] (or [1, C, 1, 1]): the
                                                             mean's scale, ConvNeXt's LayerNorm (sums over the
                                                             channels reduce to [1], broadcast back), converts
    y = dot(v, W)                                            W a constant [O, C] or [C, O] contracting C
    out = g(y, ...)                                          elementwise epilogue: bias add, converts

Every intermediate is used only inside the pattern; the other operands are constants (scalars, [C] or [O]
vectors, or broadcasts of them). The fusion is ``kind=kCustom`` with a fused computation named ``fused_head``;
the backend (backend/kernels/head.py) runs it as one kernel with the channels on partitions from the pooled
sums to the classifier (whose weight rows it reads with K on partitions): without it the head is three kernels
with an HBM round trip between each (the pooled vector stored from 128 partitions and read onto one for the
LayerNorm, then stored and read back with K on partitions for the dot): ~17 us of ConvNeXt's last 17.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from compiler.passes.fusion.group import FusionGroup
from compiler.passes.utils import constant_value, dot_dims
from hlo.ir import Computation, Instruction

Record = Callable[[Instruction, Instruction, bool, str, str], None]
KIND = "kCustom"
NAME = "fused_head"
# elementwise ops the head kernel computes (hlo opcode -> engine op or activation function)
BINARY = {"add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide", "maximum": "max",
          "minimum": "min"}
UNARY = {"rsqrt": "rsqrt", "sqrt": "sqrt", "exponential": "exp", "tanh": "tanh", "logistic": "sigmoid",
         "log": "log", "abs": "abs", "negate": "negate", "convert": "copy"}
FLOATS = ("f32", "bf16", "f16")
MAX_OUTPUTS = 2048  # classes: four PSUM banks of 512 fp32 columns
MAX_WEIGHT_BYTES = 64 * 1024  # per partition: the classifier's weight is held whole


def _is_add_reduce(inst: Instruction) -> bool:
    comp = inst.attrs.get("to_apply")
    root = comp.root if isinstance(comp, Computation) else None
    return (inst.opcode == "reduce" and len(inst.operands) == 2 and root is not None and root.opcode == "add"
            and all(o.opcode == "parameter" for o in root.operands) and constant_value(inst.operands[1]) == 0)


def is_pooling(inst: Instruction) -> bool:
    """reduce(x [1, C, H, W], dims={2,3}) by add from zero."""
    return (_is_add_reduce(inst) and inst.operands[0].shape.rank == 4 and inst.operands[0].shape.dims[0] == 1
            and tuple(sorted(inst.attrs.get("dimensions", ()))) == (2, 3) and inst.shape.dtype == "f32")


def _size(inst: Instruction) -> int:
    return prod(inst.shape.dims)


def _constant_like(inst: Instruction, sizes: tuple[int, ...]) -> bool:
    """A constant (or a broadcast of one) of one of `sizes` elements, or of a scalar's."""
    if inst.opcode == "broadcast":
        src = inst.operands[0]
        return src.opcode == "constant" and (_size(src) in sizes or src.shape.rank == 0) and _size(inst) in sizes
    return inst.opcode == "constant" and (_size(inst) in sizes or constant_value(inst) is not None)


class _Match:
    def __init__(self, dot: Instruction, users: dict[Instruction, list[Instruction]]):
        self.dot, self.users = dot, users
        self.members: dict[int, Instruction] = {dot.uid: dot}
        self.pool: Instruction | None = None

    def body(self, inst: Instruction, channels: int) -> str | None:
        """Walk the values before the dot back to the pooling; None when they all fit, else why not."""
        if inst.uid in self.members:
            return None
        if _constant_like(inst, (channels, 1)):
            return None
        if is_pooling(inst):
            if self.pool is not None and self.pool is not inst:
                return f"%{inst.name} is a second pooling"
            if inst.operands[0].shape.dims[1] != channels:
                return f"%{inst.name} pools {inst.operands[0].shape.dims[1]} channels, the classifier reads {channels}"
            self.pool = inst
            self.members[inst.uid] = inst
            return None
        size, op = _size(inst), inst.opcode
        if size not in (channels, 1) or inst.shape.dtype not in FLOATS:
            return f"%{inst.name} ({op} {inst.shape}) is not a value over the channels or a statistic"
        if op == "reduce":
            if not _is_add_reduce(inst) or size != 1 or _size(inst.operands[0]) != channels:
                return f"%{inst.name} is not a sum over the channels"
        elif op not in BINARY and op not in UNARY and op not in ("broadcast", "reshape"):
            return f"%{inst.name} ({op}) is not an op the head kernel computes"
        elif op == "broadcast" and _size(inst.operands[0]) != 1:
            return f"%{inst.name} broadcasts a value that is not a statistic"
        elif op == "convert" and inst.operands[0].shape.dtype not in FLOATS:
            return f"%{inst.name} converts from {inst.operands[0].shape.dtype}"
        self.members[inst.uid] = inst
        for operand in dict.fromkeys(o for o in inst.operands if not (op == "reduce" and o is inst.operands[1])):
            reason = self.body(operand, channels)
            if reason is not None:
                return reason
        return None

    def epilogue(self, comp: Computation, outputs: int) -> Instruction:
        """The dot's single-user elementwise consumers (bias add, converts) as members; returns the root."""
        tail = self.dot
        while tail is not comp.root and len(self.users[tail]) == 1:
            user = self.users[tail][0]
            if _size(user) != outputs or user.shape.dtype not in FLOATS or not (
                    user.opcode in ("reshape", "convert")
                    or user.opcode in BINARY and all(o is tail or _constant_like(o, (outputs, 1))
                                                     for o in user.operands)):
                break
            self.members[user.uid] = user
            tail = user
        return tail

    def private(self, root: Instruction) -> str | None:
        for inst in self.members.values():
            if inst is root:
                continue
            outside = [u for u in self.users[inst] if u.uid not in self.members]
            if outside:
                return f"%{inst.name} is also used by %{outside[0].name} outside the head"
        return None


def _match(dot: Instruction, comp: Computation, users: dict[Instruction, list[Instruction]],
           ) -> tuple[FusionGroup | None, str]:
    lhs, weight = dot.operands
    lc, rc, lb, rb = dot_dims(dot)
    if lb or rb or lhs.shape.rank != 2 or lhs.shape.dims[0] != 1 or lc != (1,) or weight.opcode != "constant" \
            or weight.literal is None or weight.shape.rank != 2 or rc not in ((0,), (1,)):
        return None, "not a classifier (a [1, C] row times a constant weight)"
    channels = lhs.shape.dims[1]
    outputs = weight.shape.dims[1 - rc[0]]
    parts = 128
    if channels > parts and channels % parts:
        return None, f"{channels} channels are not whole tiles of {parts}"
    if outputs > MAX_OUTPUTS or -(-channels // parts) * weight.shape.nbytes // channels > MAX_WEIGHT_BYTES:
        return None, f"the classifier's weight [{outputs}, {channels}] is larger than the head kernel holds"
    m = _Match(dot, users)
    reason = m.body(lhs, channels)
    if reason is None and m.pool is None:
        reason = "no global average pooling before the classifier"
    if reason is not None:
        return None, reason
    root = m.epilogue(comp, outputs)
    reason = m.private(root)
    if reason is not None:
        return None, reason
    return FusionGroup(root, KIND, dict(m.members), set(), NAME), \
        "classifier head: pooling, normalization and classifier in one kernel (channels on partitions)"


def head_groups(comp: Computation, record: Record) -> list[FusionGroup]:
    """The classifier-head fusions of `comp`."""
    if not any(is_pooling(inst) for inst in comp.instructions):
        return []  # no global average pooling: nothing to match (nor to record)
    users = comp.users()
    groups = []
    for dot in comp.instructions:
        if dot.opcode != "dot":
            continue
        group, reason = _match(dot, comp, users)
        record(dot.operands[0], dot, group is not None, reason, KIND)
        if group is not None:
            groups.append(group)
    return groups
