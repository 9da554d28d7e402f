"""Integer dots, composed exactly from fp32 tensor-engine dots (docs/integer-semantics.md, "Integer dots").

PE multiplies and accumulates in fp32, exact for integers up to 2^24 in magnitude. Two forms:

- **short 8-bit dots**: operands of 8 bits at most whose contraction is short enough that no partial sum can
  exceed 2^24 (K * max|a| * max|b| <= 2^24) become ``convert(convert_s32(dot(convert_f32(a), convert_f32(b))))``
  to the result type: every product and partial sum is an integer below 2^24, so the fp32 result is exact; the
  convert to s32 truncates an integral value, the last one wraps to the result type (XLA's wrap for s8 results).
- **limbs** (everything else, e.g. s32 x s32, s64 x s64): with an n-bit result type, XLA's result is the sum of
  products modulo 2^n. Each operand, converted to the result type, is split into n/8 unsigned 8-bit limbs,
  ``a = sum_i a_i 2^(8i) (mod 2^n)`` with ``a_i = (a >>> 8i) & 255``. Then
  ``a . b = sum_{i+j < n/8} (a_i . b_j) 2^(8(i+j)) (mod 2^n)``. Each limb dot ``a_i . b_j`` runs on PE in fp32
  over a chunk of at most 258 contraction elements (258 * 255 * 255 < 2^24: exact), is converted to s32 and
  then to the result type, shifted left by 8(i+j) and added up with wrapping integer adds on GpSimd's integer
  mode. A contraction longer than one chunk is sliced along its (single) contracting dimension; several
  contracting dimensions longer than a chunk are left for the backend, which refuses them (typed).
"""

from __future__ import annotations

import math

from compiler.passes.expand.op_expander import Expansion, OpExpanderPass
from compiler.passes.utils import dot_dims
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec
from hlo.opcodes import is_float

EXACT = 1 << 24
MAGNITUDE = {"s8": 128, "u8": 255, "pred": 1}
LIMB_BITS = 8
LIMB_CHUNK = EXACT // (255 * 255)  # 258 contraction elements: every limb dot's partial sums stay below 2^24
BITS = {"s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64}


def exact_on_pe(dot: Instruction) -> bool:
    lhs, rhs = dot.operands
    if lhs.shape.dtype not in MAGNITUDE or rhs.shape.dtype not in MAGNITUDE:
        return False
    k = math.prod(lhs.shape.dims[d] for d in dot.attrs.get("lhs_contracting_dims", ()))
    return k * MAGNITUDE[lhs.shape.dtype] * MAGNITUDE[rhs.shape.dtype] <= EXACT


def _chunks(dot: Instruction) -> list[tuple[int, int]] | None:
    """Ranges of the contracting dimension each limb dot covers ([(0, K)] when K fits one chunk); None when
    the contraction is longer than a chunk and spread over several dimensions."""
    lhs_c, _, _, _ = dot_dims(dot)
    k = math.prod(dot.operands[0].shape.dims[d] for d in lhs_c)
    if k <= LIMB_CHUNK:
        return [(0, k)]
    if len(lhs_c) != 1:
        return None
    return [(s, min(k, s + LIMB_CHUNK)) for s in range(0, k, LIMB_CHUNK)]


class IntegerDotExpander(OpExpanderPass):
    name = "integer_dot_expander"

    def matches(self, inst: Instruction) -> bool:
        return inst.opcode == "dot" and not is_float(inst.shape)

    def _expand(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        if exact_on_pe(inst):
            self._short(module, comp, inst)
            return True
        if inst.shape.dtype not in BITS or any(o.shape.dtype not in BITS and o.shape.dtype != "pred"
                                               for o in inst.operands):
            return False
        chunks = _chunks(inst)
        if chunks is None:
            return False
        self._limbs(module, comp, inst, chunks)
        return True

    @staticmethod
    def _place(comp: Computation, inst: Instruction, expansion: Expansion, result: Instruction) -> None:
        at = comp.instructions.index(inst)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(inst, result)

    def _short(self, module: Module, comp: Computation, dot: Instruction) -> None:
        e = Expansion(module, dot)
        floats = [e.add("convert", Shape("f32", o.shape.dims), [o]) for o in dot.operands]
        fdot = e.add("dot", Shape("f32", dot.shape.dims), floats, dict(dot.attrs))
        result = e.add("convert", Shape("s32", dot.shape.dims), [fdot])
        if dot.shape.dtype != "s32":
            result = e.add("convert", Shape(dot.shape.dtype, dot.shape.dims), [result])
        self._place(comp, dot, e, result)

    def _limbs(self, module: Module, comp: Computation, dot: Instruction, chunks: list[tuple[int, int]]) -> None:
        e = Expansion(module, dot)
        rtype, dims = dot.shape.dtype, dot.shape.dims
        n_limbs = BITS[rtype] // LIMB_BITS
        lhs_c, rhs_c, _, _ = dot_dims(dot)

        def limbs(x: Instruction) -> list[Instruction]:
            wide = x if x.shape.dtype == rtype else e.add("convert", Shape(rtype, x.shape.dims), [x])
            out = []
            mask = e.add("broadcast", Shape(rtype, x.shape.dims), [e.const(255, rtype)], {"dimensions": ()})
            for i in range(n_limbs):
                part = wide
                if i:
                    amount = e.add("broadcast", Shape(rtype, x.shape.dims), [e.const(LIMB_BITS * i, rtype)],
                                   {"dimensions": ()})
                    part = e.add("shift-right-logical", Shape(rtype, x.shape.dims), [wide, amount])
                byte = e.add("and", Shape(rtype, x.shape.dims), [part, mask])
                out.append(e.add("convert", Shape("f32", x.shape.dims), [byte]))
            return out

        def sliced(x: Instruction, dim: int | None, start: int, limit: int) -> Instruction:
            if dim is None:
                return x
            ranges = tuple((start, limit, 1) if d == dim else (0, n, 1) for d, n in enumerate(x.shape.dims))
            shape = Shape(x.shape.dtype, tuple(limit - start if d == dim else n for d, n in enumerate(x.shape.dims)))
            return e.add("slice", shape, [x], {"slice": SliceSpec(ranges)})

        lhs, rhs = dot.operands
        ldim = lhs_c[0] if len(chunks) > 1 else None
        rdim = rhs_c[0] if len(chunks) > 1 else None
        total: Instruction | None = None
        for start, limit in chunks:
            a_limbs = limbs(sliced(lhs, ldim, start, limit))
            b_limbs = limbs(sliced(rhs, rdim, start, limit))
            for i in range(n_limbs):
                for j in range(n_limbs - i):
                    fdot = e.add("dot", Shape("f32", dims), [a_limbs[i], b_limbs[j]], dict(dot.attrs))
                    term = e.add("convert", Shape("s32", dims), [fdot])
                    if rtype != "s32":
                        term = e.add("convert", Shape(rtype, dims), [term])
                    if i + j:
                        amount = e.add("broadcast", Shape(rtype, dims), [e.const(LIMB_BITS * (i + j), rtype)],
                                       {"dimensions": ()})
                        term = e.add("shift-left", Shape(rtype, dims), [term, amount])
                    total = term if total is None else e.add("add", Shape(rtype, dims), [total, term])
        assert total is not None
        self._place(comp, dot, e, total)
