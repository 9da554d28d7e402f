"""Which instruction groups one row kernel can compute: the kernel space of a candidate fusion.

A fused loop or row kernel iterates over one index space S: the dims of its root, or, when it reduces,
the operand dims of its reductions, which must all reduce the same axes R of S. Every member value
is over S or over S without R (a row statistic); a broadcast of a row statistic back over S is free,
any other reshaping of a computed value is not (views of the fusion's operands are). This mirrors
the backend's lowering of fused computations (backend/fused.py), so every group this module accepts
compiles.

A row kernel holds whole rows (the R extent) in SBUF when a reduction feeds a full-size value
(softmax, layer norm): the working set estimate below bounds that; a plain reduction with an
elementwise prologue is reduced in chunks and has no limit.
"""

from __future__ import annotations

from math import prod

from hlo.ir import Computation, Instruction
from hlo.opcodes import is_elementwise

# Per-partition SBUF bytes a row kernel may use for its tiles (the backend's elementwise budget).
ROW_BUDGET_BYTES = 96 * 1024
_REDUCER_OPS = ("add", "maximum", "minimum", "and", "or")


def is_row_reduce(inst: Instruction) -> bool:
    """A single-operand reduce with a scalar init and an add/max/min/and/or reducer."""
    if inst.opcode != "reduce" or len(inst.operands) != 2 or inst.operands[1].shape.rank != 0:
        return False
    comp = inst.attrs.get("to_apply")
    root = comp.root if isinstance(comp, Computation) else None
    return root is not None and root.opcode in _REDUCER_OPS and all(o.opcode == "parameter" for o in root.operands)


def fusible(inst: Instruction) -> bool:
    """Can `inst` be a member of a loop/row fusion at all?"""
    return (is_elementwise(inst) or inst.opcode in ("broadcast", "iota") or is_row_reduce(inst)
            or (inst.opcode == "constant" and inst.shape.rank == 0))


class RowSpace:
    """The kernel space of a group (members in program order): S, R and each member's S-axes."""

    def __init__(self, members: list[Instruction]):
        self.members = members
        self.uids = {m.uid for m in members}
        reduces = [m for m in members if m.opcode == "reduce"]
        root_dims = tuple(members[-1].shape.dims)
        self.S = tuple(reduces[0].operands[0].shape.dims) if reduces else root_dims
        self.R: tuple[int, ...] | None = tuple(sorted(reduces[0].attrs.get("dimensions", ()))) if reduces else None
        if self.R is None:  # no reduction yet: a row statistic broadcast back tells the reduced axes
            back = [m for m in members if m.opcode == "broadcast" and m.operands[0].uid in self.uids
                    and tuple(m.shape.dims) == self.S]
            if back:
                kept = tuple(back[0].attrs.get("dimensions", ()))
                self.R = tuple(a for a in range(len(self.S)) if a not in kept)
        self.axes: dict[int, tuple[int, ...]] = {}

    @property
    def full(self) -> tuple[int, ...]:
        return tuple(range(len(self.S)))

    def _place(self, dims: tuple[int, ...]) -> tuple[int, ...] | None:
        """S-axes of a value with `dims` that is not derived from a member (matched by dims)."""
        if dims == self.S:
            return self.full
        if self.R is not None:
            kept = tuple(a for a in self.full if a not in self.R)
            if tuple(self.S[a] for a in kept) == dims:
                return kept
        return None

    def check(self) -> str | None:
        """None if one kernel can compute the group, else the reason it cannot."""
        for m in self.members:
            reason = self._assign(m)
            if reason is not None:
                return reason
        return None

    def _operand_axes(self, op: Instruction) -> tuple[int, ...] | None:
        return self.axes.get(op.uid) if op.uid in self.uids else None

    def _assign(self, m: Instruction) -> str | None:
        dims = tuple(m.shape.dims)
        if m.opcode == "constant":
            self.axes[m.uid] = ()
            return None
        if m.opcode == "reduce":
            src = m.operands[0]
            axes = self._operand_axes(src) if src.uid in self.uids else self._place(tuple(src.shape.dims))
            if axes != self.full:
                return f"%{m.name} reduces a value that is not over the kernel's {list(self.S)}"
            red = tuple(sorted(axes[d] for d in m.attrs.get("dimensions", ())))
            if self.R != red:
                return f"%{m.name} reduces other axes than the fusion's other reductions"
            self.axes[m.uid] = tuple(a for a in axes if a not in red)
            return None
        if m.opcode == "broadcast":
            src = m.operands[0]
            if src.uid in self.uids:
                inner = self.axes[src.uid]
                bdims = tuple(m.attrs.get("dimensions", ()))
                if dims != self.S or any(inner[i] != d for i, d in enumerate(bdims)):
                    return f"%{m.name} broadcasts a computed value other than back along the reduced axes"
                self.axes[m.uid] = self.full
                return None
        member_axes = {self._operand_axes(o) for o in m.operands if o.uid in self.uids and o.shape.rank == m.shape.rank}
        if len(member_axes) > 1:
            return f"%{m.name} combines values over different axes"
        placed = member_axes.pop() if member_axes else self._place(dims)
        if placed is None or len(placed) != len(dims):
            return f"%{m.name} ({list(dims)}) does not fit a kernel over {list(self.S)}"
        self.axes[m.uid] = placed
        return None

    def row_bytes(self) -> int:
        """Estimated SBUF bytes per partition when whole rows are held (0 when rows can be chunked)."""
        if not self.R:
            return 0
        after_reduce: set[int] = set()
        holds_rows = False
        for m in self.members:
            if m.opcode == "reduce" or any(o.uid in after_reduce for o in m.operands):
                after_reduce.add(m.uid)
                if self.axes.get(m.uid) == self.full and m.opcode != "reduce":
                    holds_rows = True
        if not holds_rows:
            return 0
        row = prod(self.S[a] for a in self.R)
        full_members = sum(1 for m in self.members if self.axes.get(m.uid) == self.full and m.opcode != "broadcast")
        outside = {o.uid for m in self.members for o in m.operands
                   if o.uid not in self.uids and tuple(o.shape.dims) == self.S}
        # two alternating sets of temporaries at most one per full member, three buffers per loaded operand
        return row * 4 * (2 * max(2, full_members // 2) + 3 * len(outside) + 2)


def space_reason(members: list[Instruction], budget: int = ROW_BUDGET_BYTES) -> str | None:
    """Why one kernel cannot compute `members` (program order, root last), or None."""
    space = RowSpace(members)
    reason = space.check()
    if reason is not None:
        return reason
    need = space.row_bytes()
    if need > budget:
        row = prod(space.S[a] for a in space.R or ())
        return f"rows of {row} elements would need ~{need} bytes of SBUF per partition (budget {budget})"
    return None
