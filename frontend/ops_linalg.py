"""Matrix products: linear, addmm, mm, bmm, baddbmm, matmul, einsum, scaled_dot_product_attention.

Every product is an XLA ``dot`` on rank-2 operands, or rank-3 ones with batch dim 0 (leading dims are
folded in by ``reshape``), so the backend sees two canonical shapes only. A weight transpose is never
materialized: ``linear`` contracts the weight's dim 1 directly (``rhs_contracting_dims={1}``), and when
the right operand of mm/addmm/bmm/matmul is a ``transpose`` of its last two dims the rule contracts
the transpose's operand instead (the dead transpose is dropped when the module is finished).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from hlo.ir import Instruction

from .builder import HloBuilder, broadcast_dims
from .ops_common import float_dtype, require
from .ops_reduce import safe_softmax_along


def _swaps_last_two(x: Instruction) -> bool:
    if x.opcode != "transpose":
        return False
    r = x.shape.rank
    return tuple(x.attrs["dimensions"]) == (*range(r - 2), r - 1, r - 2)


def _unwrap_transpose(m: Instruction) -> tuple[Instruction, bool]:
    """(operand, True) when ``m`` is a transpose of the last two dims, else (m, False)."""
    return (m.operands[0], True) if _swaps_last_two(m) else (m, False)


def _product(b: HloBuilder, a: Instruction, m: Instruction, rhs_transposed: bool = False) -> Instruction:
    """``a @ m`` for a (..., n, k) and m (..., k, p), or m (..., p, k) when ``rhs_transposed``."""
    require(a.shape.dtype == m.shape.dtype, f"matrix product of {a.shape.dtype} and {m.shape.dtype}")
    n, k = a.shape.dims[-2:]
    p = m.shape.dims[-2] if rhs_transposed else m.shape.dims[-1]
    require(k == m.shape.dims[-1 if rhs_transposed else -2],
            f"matrix product of {list(a.shape.dims)} and {list(m.shape.dims)}: inner dims differ")
    if m.shape.rank == 2:  # one weight matrix: fold every leading dim of a into the rows
        lead = a.shape.dims[:-1]
        out = b.dot(b.reshape(a, [prod(lead), k]), m, (1,), (1 if rhs_transposed else 0,))
        return b.reshape(out, [*lead, p])
    batch = broadcast_dims(a.shape.dims[:-2], m.shape.dims[:-2])
    a = b.broadcast_to(a, [*batch, *a.shape.dims[-2:]])
    m = b.broadcast_to(m, [*batch, *m.shape.dims[-2:]])
    a3 = b.reshape(a, [prod(batch), *a.shape.dims[-2:]])
    m3 = b.reshape(m, [prod(batch), *m.shape.dims[-2:]])
    out = b.dot(a3, m3, (2,), (2 if rhs_transposed else 1,), (0,), (0,))
    return b.reshape(out, [*batch, n, p])


def _scale(b: HloBuilder, x: Instruction, factor: Any) -> Instruction:
    return x if factor == 1 else b.binary("multiply", x, b.scalar(factor, x.shape.dtype))


def linear(b: HloBuilder, x: Instruction, weight: Instruction, bias: Instruction | None = None) -> Instruction:
    """``x @ weight.T + bias`` as ``dot(x, weight), rhs_contracting_dims={1}`` plus a broadcast bias."""
    require(weight.shape.rank == 2, f"linear weight must be 2-D, got {list(weight.shape.dims)}")
    lead = x.shape.dims[:-1]
    out = b.dot(b.reshape(x, [prod(lead), x.shape.dims[-1]]), weight, (1,), (1,))
    if bias is not None:
        out = b.binary("add", out, b.broadcast_to(bias, out.shape.dims))
    return b.reshape(out, [*lead, weight.shape.dims[0]])


def mm(b: HloBuilder, a: Instruction, m: Instruction) -> Instruction:
    return _product(b, a, *_unwrap_transpose(m))


def addmm(b: HloBuilder, bias: Instruction, a: Instruction, m: Instruction, beta: Any = 1,
          alpha: Any = 1) -> Instruction:
    """``beta * bias + alpha * (a @ m)``."""
    out = _scale(b, mm(b, a, m), alpha)
    if beta == 0:
        return out
    return b.binary("add", out, b.broadcast_to(_scale(b, bias, beta), out.shape.dims))


def bmm(b: HloBuilder, a: Instruction, m: Instruction) -> Instruction:
    require(a.shape.rank == 3 and m.shape.rank == 3, "bmm needs 3-D operands")
    return _product(b, a, *_unwrap_transpose(m))


def matmul(b: HloBuilder, a: Instruction, m: Instruction) -> Instruction:
    """torch.matmul: 1-D operands gain (then lose) a unit dim; batch dims broadcast."""
    require(a.shape.rank >= 1 and m.shape.rank >= 1, "matmul of a 0-D tensor")
    a2 = b.reshape(a, [1, *a.shape.dims]) if a.shape.rank == 1 else a
    m2 = b.reshape(m, [*m.shape.dims, 1]) if m.shape.rank == 1 else m
    out = _product(b, a2, *_unwrap_transpose(m2))
    dims = list(out.shape.dims)
    if m.shape.rank == 1:
        dims.pop(-1)
    if a.shape.rank == 1:
        dims.pop(-1 if m.shape.rank == 1 else -2)
    return b.reshape(out, dims)


def _repeat_heads(b: HloBuilder, x: Instruction, heads: int) -> Instruction:
    """Grouped-query attention: each of x's heads (dim -3) serves ``heads // n`` consecutive query heads."""
    *lead, n, s, d = x.shape.dims
    require(heads % n == 0, f"{heads} query heads do not divide into {n} key/value heads")
    grouped = b.broadcast_to(b.reshape(x, [*lead, n, 1, s, d]), [*lead, n, heads // n, s, d])
    return b.reshape(grouped, [*lead, heads, s, d])


def scaled_dot_product_attention(b: HloBuilder, q: Instruction, k: Instruction, v: Instruction,
                                 attn_mask: Instruction | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Instruction:
    """``softmax(q @ k^T * scale + mask) @ v`` with k contracted on its last dim (no transpose)."""
    require(dropout_p == 0.0, f"dropout_p={dropout_p} is not supported (inference only)")
    require(q.shape.rank >= 2 and q.shape.rank == k.shape.rank == v.shape.rank,
            "q, k and v must have the same rank (>= 2)")
    if enable_gqa and q.shape.rank >= 3 and k.shape.dims[-3] != q.shape.dims[-3]:
        k, v = _repeat_heads(b, k, q.shape.dims[-3]), _repeat_heads(b, v, q.shape.dims[-3])
    dtype = float_dtype(q)
    scores = _product(b, b.convert(q, dtype), b.convert(k, dtype), rhs_transposed=True)
    factor = scale if scale is not None else 1.0 / float(np.sqrt(q.shape.dims[-1]))
    scores = _scale(b, scores, factor)
    L, S = q.shape.dims[-2], k.shape.dims[-2]
    if is_causal:
        require(attn_mask is None, "attn_mask and is_causal=True together are not supported")
        attn_mask = b.constant(np.tril(np.ones((L, S), dtype=np.bool_)), data_key=f"causal_mask_{L}x{S}")
    if attn_mask is not None and attn_mask.shape.dtype == "pred":
        neg_inf = b.scalar(-np.inf, dtype)
        scores = b.select(b.broadcast_to(attn_mask, scores.shape.dims), scores,
                          b.broadcast_to(neg_inf, scores.shape.dims))
    elif attn_mask is not None:
        scores = b.binary("add", scores, b.broadcast_to(b.convert(attn_mask, dtype), scores.shape.dims))
    probs = safe_softmax_along(b, scores, scores.shape.rank - 1)  # a row with every key masked gives 0
    return _product(b, probs, b.convert(v, dtype))


def baddbmm(b: HloBuilder, bias: Instruction, a: Instruction, m: Instruction, beta: Any = 1,
            alpha: Any = 1) -> Instruction:
    """``beta * bias + alpha * bmm(a, m)``."""
    out = _scale(b, bmm(b, a, m), alpha)
    if beta == 0:
        return out
    return b.binary("add", out, b.broadcast_to(_scale(b, b.convert(bias, out.shape.dtype), beta), out.shape.dims))


def outer(b: HloBuilder, x: Instruction, y: Instruction) -> Instruction:
    """``x[:, None] * y[None, :]`` (no sum: an elementwise product, not a dot)."""
    require(x.shape.rank == 1 and y.shape.rank == 1, "outer takes two vectors")
    dims = [x.shape.dims[0], y.shape.dims[0]]
    op = "and" if x.shape.dtype == "pred" else "multiply"  # bool outer product: and, as torch computes it
    return b.binary(op, b.broadcast(x, dims, (0,)), b.broadcast(b.convert(y, x.shape.dtype), dims, (1,)))


# ---- einsum -------------------------------------------------------------------------------------
def _parse_einsum(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Operand subscripts and output subscripts, with ``...`` spelled out as upper-case letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    require(len(terms) == len(ranks), f"einsum equation {equation!r} names {len(terms)} operands, "
                                      f"{len(ranks)} given")
    ell = ""
    spelled = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            require(n >= 0, f"einsum term {term!r} does not fit rank {rank}")
            ell = max(ell, "ABCDEFGHIJ"[10 - n:] if n else "", key=len)
            term = term.replace("...", "ABCDEFGHIJ"[10 - n:] if n else "")
        require(len(term) == rank, f"einsum term {term!r} does not fit rank {rank}")
        require(len(set(term)) == len(term), f"einsum term {term!r} repeats an index (diagonals are not supported)")
        spelled.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:  # implicit output: the ellipsis dims, then the indices used once, sorted
        counts = "".join(spelled)
        out = ell + "".join(sorted(c for c in set(counts) if c.islower() and counts.count(c) == 1))
    return spelled, out


def _einsum_pair(b: HloBuilder, x: Instruction, xs: str, y: Instruction, ys: str,
                 keep: str) -> tuple[Instruction, str]:
    """Contract two operands over the indices they share that ``keep`` does not need: one dot_general."""
    shared = [c for c in xs if c in ys]
    batch = [c for c in shared if c in keep]
    contract = [c for c in shared if c not in keep]
    out = b.dot(x, y, [xs.index(c) for c in contract], [ys.index(c) for c in contract],
                [xs.index(c) for c in batch], [ys.index(c) for c in batch])
    subs = "".join(batch) + "".join(c for c in xs if c not in shared) + "".join(c for c in ys if c not in shared)
    return out, subs


def einsum(b: HloBuilder, equation: str, tensors: Sequence[Instruction], path: Any = None) -> Instruction:
    """Sum out indices private to one operand, contract operands left to right (batch dims: indices
    still needed later or in the output), then transpose to the output order."""
    require(len(tensors) >= 1, "einsum of no operands")
    terms, out = _parse_einsum(equation, [t.shape.rank for t in tensors])
    dtype = tensors[0].shape.dtype
    for t in tensors[1:]:
        require(t.shape.dtype == dtype, f"einsum of {dtype} and {t.shape.dtype}")
    operands = []
    for i, (t, subs) in enumerate(zip(tensors, terms)):
        elsewhere = out + "".join(s for j, s in enumerate(terms) if j != i)
        private = [k for k, c in enumerate(subs) if c not in elsewhere]
        operands.append((b.reduce(t, private, "add") if private else t,
                         "".join(c for c in subs if c in elsewhere)))
    acc, subs = operands[0]
    for i in range(1, len(operands)):
        later = out + "".join(s for _, s in operands[i + 1:])
        acc, subs = _einsum_pair(b, acc, subs, operands[i][0], operands[i][1], later)
    missing = [c for c in subs if c not in out]
    if missing:
        acc = b.reduce(acc, [subs.index(c) for c in missing], "add")
        subs = "".join(c for c in subs if c in out)
    require(sorted(subs) == sorted(out), f"einsum output {out!r} names indices no operand has")
    return b.transpose(acc, [subs.index(c) for c in out])


RULES = {
    "aten.linear.default": linear,
    "aten.mm.default": mm,
    "aten.addmm.default": addmm,
    "aten.bmm.default": bmm,
    "aten.matmul.default": matmul,
    "aten.scaled_dot_product_attention.default": scaled_dot_product_attention,
    "aten.baddbmm.default": baddbmm,
    "aten.einsum.default": einsum,
    "aten.outer.default": outer,
}
