"""Normalizing an HLO dot for the dot kernel: batch, free and contracting dims merged to (batch..., M, K) x
(batch..., K, N) -> (batch..., M, N), with the epilogue's leaves merged the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backend.kernels.expr import Node, has_reduce, substitute_views, view_nodes
from backend.layout import View
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction


@dataclass
class DotPlan:
    """A dot after normalization: lhs (batch..., M, K), rhs (batch..., K, N), out (batch..., M, N).

    `epilogue` is an expression over the accumulator ("acc" node) and leaves with out's dims.
    """

    name: str
    where: str
    lhs: View
    rhs: View
    out: View
    epilogue: Node
    compute: str

    @property
    def batch_dims(self) -> tuple[int, ...]:
        return self.out.dims[:-2]

    @property
    def macs(self) -> int:
        m, k = self.lhs.dims[-2:]
        n = self.rhs.dims[-1]
        batches = 1
        for d in self.batch_dims:
            batches *= d
        return m * n * k * batches


def _merge_groups(views: list[View], groups: list[tuple[int, int]]) -> list[View] | None:
    """Merge, in every view, each (start, count) group of consecutive axes into one axis (count 0: a new
    size-1 axis). Groups are given left to right in the coordinates before any merge."""
    shift = 0
    for start, count in groups:
        start -= shift
        if count == 0:
            views = [v.insert_axis(start) for v in views]
            shift -= 1
            continue
        for _ in range(count - 1):
            merged = [v.merge_axes(start) for v in views]
            if any(m is None for m in merged):
                return None
            views = [m for m in merged if m is not None]
        shift += count - 1
    return views


def compute_dtype(lhs: View, rhs: View, where: str) -> str:
    """PE input dtype: bf16/f16 when both operands are (auto-cast), else f32."""
    kinds = {lhs.dtype, rhs.dtype}
    if kinds - {"f32", "bf16", "f16"}:
        raise CompilationError(f"{where}: dot of {'/'.join(sorted(kinds))} operands is not supported")
    return kinds.pop() if len(kinds) == 1 else "f32"


def plan_dot(inst: HloInstruction, name: str, lhs: View, rhs: View, out: View, epilogue: Node,
             materialize: Callable[[View], View] | None = None) -> DotPlan:
    """Normalize an HLO dot to (batch..., M, K) x (batch..., K, N) -> (batch..., M, N).

    Several free or contracting dims are merged into one when the strides allow it; `out` and the
    epilogue's leaves (views with the dot's output dims) are merged the same way. An operand or leaf
    whose dims cannot be merged is first copied dense (in its normalized order) by `materialize`.
    """
    where = inst.where()
    attrs = inst.attrs
    lb, rb = tuple(attrs.get("lhs_batch_dims", ())), tuple(attrs.get("rhs_batch_dims", ()))
    lc, rc = tuple(attrs.get("lhs_contracting_dims", ())), tuple(attrs.get("rhs_contracting_dims", ()))
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise CompilationError(f"{where}: dot with mismatched batch/contracting dimensions")
    lf = tuple(d for d in range(lhs.rank) if d not in lb + lc)
    rf = tuple(d for d in range(rhs.rank) if d not in rb + rc)
    nb = len(lb)
    if has_reduce(epilogue):
        raise CompilationError(f"{where}: a reduction in a dot's epilogue is not supported")

    def merged(view: View, groups: list[tuple[int, int]], what: str) -> View:
        result = _merge_groups([view], groups)
        if result is None and materialize is not None:
            result = _merge_groups([materialize(view)], groups)
        if result is None:
            raise CompilationError(f"{where}: dot whose {what} dimensions cannot be merged into one "
                                   f"(lhs {lhs.dims}, rhs {rhs.dims})")
        return result[0]

    lhs_t, rhs_t = lhs.transpose(lb + lf + lc), rhs.transpose(rb + rc + rf)
    leaves = [n for n in view_nodes(epilogue) if n.view is not None]
    outs = [out] + [n.view for n in leaves]
    nlf, nrf = len(lf), len(rf)
    out_n = _merge_groups([out], [(nb, nlf), (nb + nlf, nrf)])
    if out_n is None:
        lhs_t, rhs_t, outs, nb, nlf, nrf = _peel(lhs_t, rhs_t, outs, nb, nlf, len(lc), nrf)
        out_n = _merge_groups(outs[:1], [(nb, nlf), (nb + nlf, nrf)])
    if out_n is None:
        raise CompilationError(f"{where}: dot whose output view {out.dims} cannot be merged into a matrix")
    out_groups = [(nb, nlf), (nb + nlf, nrf)]
    lhs_n = merged(lhs_t, [(nb, nlf), (nb + nlf, len(lc))], "lhs")
    rhs_n = merged(rhs_t, [(nb, len(rc)), (nb + len(rc), nrf)], "rhs")
    views = {id(n): merged(v, out_groups, "epilogue operand") for n, v in zip(leaves, outs[1:], strict=True)}
    epilogue = substitute_views(epilogue, views)
    return DotPlan(name, where, lhs_n, rhs_n, out_n[0], epilogue, compute_dtype(lhs, rhs, where))


def _peel(lhs: View, rhs: View, outs: list[View], nb: int, nlf: int, nc: int,
          nrf: int) -> tuple[View, View, list[View], int, int, int]:
    """An output whose free dims cannot be merged into a matrix (e.g. a projection written straight into a
    [batch, heads, seq, head_dim] layout): the leading free dims of the side that does not merge become batch
    dims, the other operand broadcast along them (stride 0), until the rest merges. lhs is (B, LF, C), rhs
    (B, C, RF), outs (B, LF, RF); returns them with the new dim counts."""

    def fits(views: list[View], b: int, f1: int, f2: int) -> bool:
        return _merge_groups(views[:1], [(b, f1), (b + f1, f2)]) is not None

    for j in range(1, nrf):  # peel RF dims: out (B, RF[:j], LF, RF[j:]); lhs broadcast
        perm = tuple(range(nb)) + tuple(nb + nlf + i for i in range(j)) + tuple(range(nb, nb + nlf)) + tuple(
            range(nb + nlf + j, nb + nlf + nrf))
        cand = [v.transpose(perm) for v in outs]
        if fits(cand, nb + j, nlf, nrf - j):
            peeled = rhs.dims[nb + nc:nb + nc + j]
            dims = lhs.dims[:nb] + peeled + lhs.dims[nb:]
            lhs_b = lhs.broadcast(dims, tuple(range(nb)) + tuple(range(nb + j, len(dims))))
            rperm = tuple(range(nb)) + tuple(nb + nc + i for i in range(j)) + tuple(range(nb, nb + nc)) + tuple(
                range(nb + nc + j, nb + nc + nrf))
            return lhs_b, rhs.transpose(rperm), cand, nb + j, nlf, nrf - j
    for j in range(1, nlf):  # peel LF dims: out (B, LF[:j], LF[j:], RF); rhs broadcast
        if fits(outs, nb + j, nlf - j, nrf):
            peeled = lhs.dims[nb:nb + j]
            dims = rhs.dims[:nb] + peeled + rhs.dims[nb:]
            rhs_b = rhs.broadcast(dims, tuple(range(nb)) + tuple(range(nb + j, len(dims))))
            return lhs, rhs_b, outs, nb + j, nlf - j, nrf
    return lhs, rhs, outs, nb, nlf, nrf
