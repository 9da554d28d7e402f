"""Rotary position embeddings as model code writes them, made fusible into one loop kernel.

HF Llama's ``apply_rotary_pos_emb`` (and every model copied from it) computes::

    rotate_half(x) = cat(-x[..., h:], x[..., :h], dim=-1)
    out = x * cos + rotate_half(x) * sin

which reaches HLO as ``add(multiply(x, C), multiply(concatenate(negate(slice(x)), slice(x)), S))``. The
concatenate is not elementwise, so the negate, the concatenate and the multiply-adds became three kernels
with the rotated copy of x written to HBM and read back. Over the index space [..., 2, h] (the last dim
split into its two halves, j the half) the same value is elementwise::

    x4 = reshape(x);  lo = x4[..., 0, :] and hi = x4[..., 1, :], each broadcast back over j
    rot = hi * [-1, 0][j] + lo * [0, 1][j]                 (= rotate_half(x) over [..., 2, h])
    out = reshape(x4 * C4 + rot * S4)                     (C4, S4: cos and sin over [..., 2, h])

Every reshape, slice and broadcast here is of a value the fusion reads (a view in the backend), so the loop
fusion after this step computes RoPE in one kernel, converts on the way out included (a single-use convert
after the add moves into the [..., 2, h] space too).
"""

from __future__ import annotations

import numpy as np

from compiler.passes.utils import insert_before, insert_constant, new_instruction
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec, numpy_dtype


def _full_slice_of(inst: Instruction, x: Instruction, lo: int, hi: int) -> bool:
    """Is `inst` x[..., lo:hi] (every other dim whole, stride 1)?"""
    spec = inst.attrs.get("slice")
    if inst.opcode != "slice" or inst.operands[0] is not x or not isinstance(spec, SliceSpec):
        return False
    *rest, last = spec.ranges
    whole = all(r == (0, n, 1) for r, n in zip(rest, x.shape.dims[:-1], strict=True))
    return whole and tuple(last) == (lo, hi, 1)


class _Rope:
    """One match: root = x * C + rotate_half(x) * S."""

    def __init__(self, root: Instruction, x: Instruction, c: Instruction, s: Instruction, inner: list[Instruction]):
        self.root, self.x, self.c, self.s, self.inner = root, x, c, s, inner


def _rotate_half_of(r: Instruction) -> Instruction | None:
    """x when `r` is concatenate(negate(x[..., h:]), x[..., :h]) along the last dim."""
    if r.opcode != "concatenate" or len(r.operands) != 2 or r.shape.rank == 0:
        return None
    last = r.shape.rank - 1
    if tuple(r.attrs.get("dimensions", ())) != (last,):
        return None
    neg, lo = r.operands
    if neg.opcode != "negate" or lo.opcode != "slice":
        return None
    x = lo.operands[0]
    if x.shape.dims != r.shape.dims or x.shape.dims[-1] % 2:
        return None
    h = x.shape.dims[-1] // 2
    if not (_full_slice_of(lo, x, 0, h) and _full_slice_of(neg.operands[0], x, h, 2 * h)):
        return None
    return x


def _match(root: Instruction, users: dict[Instruction, list[Instruction]]) -> _Rope | None:
    if root.opcode != "add" or root.shape.rank == 0 or not root.shape.dtype.startswith(("f", "bf")):
        return None
    for a, b in (root.operands, root.operands[::-1]):
        if a.opcode != "multiply" or b.opcode != "multiply" or a is b:
            continue
        for r, s in (b.operands, b.operands[::-1]):
            x = _rotate_half_of(r)
            if x is None or x not in a.operands:
                continue
            c = a.operands[1] if a.operands[0] is x else a.operands[0]
            neg = r.operands[0]
            inner = [a, b, r, neg, neg.operands[0], r.operands[1]]
            if all(len(users[i]) == 1 for i in inner) and c.shape.dims == s.shape.dims == x.shape.dims:
                return _Rope(root, x, c, s, inner)
    return None


class RopeRewrite:
    """Rewrites every RoPE of the entry computation into the [..., 2, h] elementwise form (module doc)."""

    def __init__(self, module: Module, comp: Computation):
        self.module, self.comp = module, comp
        self.notes: list[str] = []

    def run(self) -> bool:
        changed = False
        users = self.comp.users()
        for root in list(self.comp.instructions):
            if root.opcode != "add" or root not in users:
                continue
            match = _match(root, users)
            if match is not None:
                self._rewrite(match)
                users = self.comp.users()
                changed = True
        return changed

    def _new(self, anchor: Instruction, opcode: str, shape: Shape, operands: list[Instruction],
             attrs: dict | None = None) -> Instruction:
        return insert_before(self.comp, anchor, new_instruction(self.module, opcode, shape, operands, attrs,
                                                                anchor.metadata))

    def _split(self, anchor: Instruction, y: Instruction, d4: tuple[int, ...]) -> Instruction:
        """`y` (of x's shape) over [..., 2, h]; a broadcast whose operand holds the last dim is split there,
        so the fusion still reads the small operand (cos and sin of [tokens, head dim])."""
        dtype, h = y.shape.dtype, d4[-1]
        dims = tuple(y.attrs.get("dimensions", ())) if y.opcode == "broadcast" else ()
        if y.opcode == "broadcast" and dims and dims[-1] == len(d4) - 2:
            src = y.operands[0]
            small = self._new(anchor, "reshape", Shape(dtype, (*src.shape.dims[:-1], 2, h)), [src])
            return self._new(anchor, "broadcast", Shape(dtype, d4), [small],
                             {"dimensions": (*dims[:-1], len(d4) - 2, len(d4) - 1)})
        return self._new(anchor, "reshape", Shape(dtype, d4), [y])

    def _half(self, anchor: Instruction, x4: Instruction, j: int) -> Instruction:
        """x4[..., j, :] broadcast back over the half axis."""
        d4, dtype = x4.shape.dims, x4.shape.dtype
        r = len(d4)
        ranges = tuple((0, n, 1) for n in d4[:-2]) + ((j, j + 1, 1), (0, d4[-1], 1))
        part = self._new(anchor, "slice", Shape(dtype, (*d4[:-2], 1, d4[-1])), [x4], {"slice": SliceSpec(ranges)})
        flat = self._new(anchor, "reshape", Shape(dtype, (*d4[:-2], d4[-1])), [part])
        return self._new(anchor, "broadcast", Shape(dtype, d4), [flat],
                         {"dimensions": (*range(r - 2), r - 1)})

    def _weight(self, anchor: Instruction, values: tuple[float, float], d4: tuple[int, ...],
                dtype: str) -> Instruction:
        """[a, b] along the half axis, broadcast over [..., 2, h] (from a [2, h] constant: whole rows to load)."""
        literal = np.repeat(np.array(values)[:, None], d4[-1], axis=1).astype(numpy_dtype(dtype))
        const = new_instruction(self.module, "constant", Shape(dtype, (2, d4[-1])), [], literal=literal,
                                metadata=anchor.metadata)
        insert_constant(self.comp, const)
        return self._new(anchor, "broadcast", Shape(dtype, d4), [const],
                         {"dimensions": (len(d4) - 2, len(d4) - 1)})

    def _rewrite(self, m: _Rope) -> None:
        users = self.comp.users()
        last = m.root
        while len(users[last]) == 1 and users[last][0].opcode == "convert" and last is not self.comp.root:
            last = users[last][0]
        anchor = last
        x, dtype = m.x, m.root.shape.dtype
        *outer, width = x.shape.dims
        d4 = (*outer, 2, width // 2)
        x4 = self._new(anchor, "reshape", Shape(x.shape.dtype, d4), [x])
        lo, hi = self._half(anchor, x4, 0), self._half(anchor, x4, 1)
        f4 = Shape(dtype, d4)
        rot = self._new(anchor, "add", f4, [
            self._new(anchor, "multiply", f4, [hi, self._weight(anchor, (-1.0, 0.0), d4, dtype)]),
            self._new(anchor, "multiply", f4, [lo, self._weight(anchor, (0.0, 1.0), d4, dtype)])])
        value = self._new(anchor, "add", f4, [
            self._new(anchor, "multiply", f4, [x4, self._split(anchor, m.c, d4)]),
            self._new(anchor, "multiply", f4, [rot, self._split(anchor, m.s, d4)])])
        cur = m.root
        while cur is not last:  # the converts after the add, over [..., 2, h]
            cur = users[cur][0]
            value = self._new(anchor, "convert", Shape(cur.shape.dtype, d4), [value])
        out = self._new(anchor, "reshape", Shape(last.shape.dtype, last.shape.dims), [value])
        self.comp.replace_all_uses(last, out)
        chain, cur = [], last
        while cur is not m.root:
            chain.append(cur)
            cur = cur.operands[0]
        for inst in [*chain, m.root, *m.inner]:  # users first: each is dead once those before it are gone
            if inst in self.comp.instructions and not self.comp.users().get(inst):
                self.comp.remove(inst)
        self.notes.append(f"RoPE %{m.root.name} (rotate_half of %{x.name}) rewritten over [..., 2, {width // 2}] "
                          "for one loop kernel")
