"""Attention as one kernel: O = softmax(f(Q K^T)) V, flash-attention style (online softmax).

The fusion (kind=kCustom) holds dot1 = Q K^T over batch dims, an elementwise score expression f (scale,
mask...), softmax along the key axis and dot2 = P V. Per batch index, K^T and V are loaded once (the
head dim on partitions for K^T, keys on partitions for V); per block of 128 queries:

    for each chunk of <= 512 keys (chunks the constant mask removes entirely are skipped):
        S   = Q^T(block)' K^T(chunk)            PE, one PSUM bank
        X   = f(S)                              the score expression (evaluate.TileEvaluator), SBUF
        m'  = max(m, rowmax(X));  alpha = exp(m - m')
        P   = exp(X - m'), l_c = rowsum(P)      one ACT instruction (accumulator)
        l   = l * alpha + l_c                   one DVE instruction
        O  *= alpha (in PSUM);  O += P V        PE transposes P per 128 keys, matmuls accumulate in PSUM
    out = O / l

With one chunk (keys <= 512) this is the plain fused softmax(QK^T)V with the division deferred to the
[queries, head dim] result. Intermediates never leave the chip.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.dot_plan import _merge_groups, compute_dtype
from backend.kernels.evaluate import FOLD, Coords, Temporaries, TileEvaluator, dry_operand
from backend.kernels.expr import INT_DTYPES, Node, walk
from backend.kernels.leaves import LeafLoader
from backend.kernels.operands import PSUM_SLOT, KOperand, Loaded
from backend.layout import View, itemsize
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from isa.dtypes import dtype as isa_dtype
from isa.instructions import start_partition_allowed
from isa.program import AccessPattern

# the running max starts at the lowest finite fp32: a row masked in a whole chunk gives exp(-inf) = 0, not NaN,
# and a row whose scores are all finite but very negative (a finfo.min mask) keeps its own max
NEG_FLOOR = float(np.finfo(np.float32).min)
MASK_FILL = -1e30  # added to masked scores in PSUM: finite, so identity x mask has no 0 * inf
MAX_MASKS = 8  # distinct diagonal mask tiles a kernel builds on chip (else: mask in SBUF by affine_select)


@dataclass
class AttentionPlan:
    name: str
    where: str
    q: View  # (batch..., Tq, dh)
    k: View  # (batch..., Tk, dh)
    v: View  # (batch..., Tk, dv)
    out: View  # (batch..., Tq, dv)
    score: Node  # X over (batch..., Tq, Tk), reading the accumulator
    affine: AffineScores | None
    p_dtype: str  # dtype of P as dot2 reads it
    compute1: str  # PE dtype of Q K^T
    compute2: str  # PE dtype of P V
    safe: bool = False  # torch's safe softmax: out = O / max(l, 1), so a row of -inf scores gives 0

    @property
    def batch_dims(self) -> tuple[int, ...]:
        return self.out.dims[:-2]

    @property
    def macs(self) -> int:
        nb = int(np.prod(self.batch_dims, dtype=np.int64))
        tq, dh = self.q.dims[-2:]
        tk, dv = self.v.dims[-2:]
        return nb * tq * tk * (dh + dv)


def _unguard(node: Node, reduce_op: str, bound: float) -> tuple[Node, bool]:
    """(the reduce, True) when `node` is max(reduce, bound), the guard of torch's safe softmax; else (node, False)."""
    if node.op == "max" and node.inputs[0].op == reduce_op and node.inputs[1].op == "scalar" \
            and node.inputs[1].value == bound:
        return node.inputs[0], True
    return node, False


def _softmax_input(p: Node, where: str) -> tuple[Node, str, bool]:
    """X of P = [convert](exp(X - max(X)) / sum(exp(X - max(X)))), P's dtype, and whether it is torch's safe
    softmax (max(rowmax, lowest finite) and max(rowsum, 1): a row of -inf scores gives 0, not NaN)."""
    dtype = p.dtype
    while p.op == "convert":
        p = p.inputs[0]
    total, safe_sum = _unguard(p.inputs[1], "reduce_add", 1.0) if p.op == "divide" else (None, False)
    if p.op != "divide" or total is None or total.op != "reduce_add":
        raise CompilationError(f"{where}: the attention's probabilities are not a softmax (no row-sum divide)")
    e = p.inputs[0]
    summed = total.inputs[0]
    while summed.op == "convert":
        summed = summed.inputs[0]
    if summed is not e or e.op != "exp" or e.inputs[0].op != "subtract":
        raise CompilationError(f"{where}: the attention's softmax is not exp(x - max(x)) / sum")
    x, top = e.inputs[0].inputs
    lowest = np.nan if x.dtype in INT_DTYPES else float(ml_dtypes.finfo(isa_dtype(x.dtype).numpy).min)
    top, safe_max = _unguard(top, "reduce_max", lowest)
    if top.op != "reduce_max" or top.inputs[0] is not x:
        raise CompilationError(f"{where}: the attention's softmax does not subtract the row maximum")
    if safe_max != safe_sum:
        raise CompilationError(f"{where}: the attention's softmax guards only one of its row max and row sum")
    if any(n.is_reduce for n in walk(x)):
        raise CompilationError(f"{where}: the attention's scores contain a reduction")
    return x, dtype, safe_sum


@dataclass(frozen=True)
class AffineScores:
    """Scores X = scale * S (S = Q K^T, scale > 0), set to -inf where key > query + diag (a causal mask
    with an offset, from a constant); diag None: no mask."""

    scale: float
    diag: int | None

    def trim(self, q0: int, qw: int, k0: int, kw: int) -> tuple[int, int]:
        """The keys of a chunk that some query of the block sees (kw 0: none)."""
        if self.diag is None:
            return k0, kw
        return k0, max(0, min(kw, q0 + qw - 1 + self.diag - k0 + 1))

    def kind(self, q0: int, qw: int, k0: int, kw: int) -> str:
        """"skip" (every score masked), "full" (none masked) or "partial" for a tile."""
        if self.diag is None:
            return "full"
        if k0 - (q0 + qw - 1) > self.diag:
            return "skip"
        return "full" if (k0 + kw - 1) - q0 <= self.diag else "partial"


def _linear(node: Node) -> float | None:
    """c when node is c * acc (through converts; c > 0), else None."""
    def bare(n: Node) -> bool:
        while n.op == "convert":
            n = n.inputs[0]
        return n.op == "acc"

    if bare(node):
        return 1.0
    if node.op in ("multiply", "divide") and len(node.inputs) == 2:
        a, c = node.inputs
        if node.op == "multiply" and a.op == "scalar":
            a, c = c, a
        if bare(a) and c.op == "scalar" and c.value > 0:
            return c.value if node.op == "multiply" else 1.0 / c.value
    return None


def affine_scores(score: Node, nb: int) -> AffineScores | None:
    """The score expression as scale * S plus a constant causal-style mask, when it is one."""
    scale = _linear(score)
    if scale is not None:
        return AffineScores(scale, None)
    keep = None
    if score.op == "add":
        for lin, mask in (score.inputs, score.inputs[::-1]):
            if _linear(lin) is not None and mask.op == "leaf" and mask.view is not None and mask.view.is_const:
                values = _batch_invariant(mask.view, nb)
                if values is not None and np.all((values == 0) | (values == -np.inf)):
                    scale, keep = _linear(lin), values == 0
                break
    elif score.op == "select":
        pred, on_true, on_false = score.inputs
        if pred.op == "leaf" and pred.view is not None and pred.view.is_const:
            values = _batch_invariant(pred.view, nb)
            for lin, other, kept in ((on_true, on_false, True), (on_false, on_true, False)):
                if values is not None and _linear(lin) is not None and other.op == "scalar" \
                        and other.value == -np.inf:
                    scale, keep = _linear(lin), (values != 0) == kept
    if scale is None or keep is None:
        return None
    tq, tk = keep.shape
    rows_kept = keep.sum(axis=1)
    diag = int(rows_kept[0]) - 1
    if not np.array_equal(keep, (np.arange(tk)[None, :] - np.arange(tq)[:, None]) <= diag):
        return None
    return AffineScores(scale, diag)


def _batch_invariant(view: View, nb: int) -> np.ndarray | None:
    """The [Tq, Tk] values of a constant leaf that does not vary along the batch dims."""
    if any(view.strides[a] != 0 and view.dims[a] != 1 for a in range(nb)):
        return None
    for _ in range(nb):
        view = view.index(0, 0)
    return view.const_array().astype(np.float32)


def plan_attention(dot1: HloInstruction, dot2: HloInstruction, name: str, q: View, k: View, p: Node, v: View,
                   out: View) -> AttentionPlan:
    """Normalize both dots to (batch..., rows, cols) views; P must be a softmax of a score expression."""
    where = dot1.where()
    nb = dot1.shape.rank - 2
    a1, a2 = dot1.attrs, dot2.attrs

    def norm(view: View, batch, contract, free_first: bool) -> View:
        free = tuple(d for d in range(view.rank) if d not in batch + contract)
        if len(free) != 1 or len(contract) < 1:
            raise CompilationError(f"{where}: attention operands need one free dim each (got {view.dims})")
        perm = batch + (free + contract if free_first else contract + free)
        merged = _merge_groups([view.transpose(perm)], [(nb + (1 if free_first else 0), len(contract))])
        if merged is None:
            raise CompilationError(f"{where}: the attention's head dims cannot be merged into one")
        return merged[0]

    lb, lc = tuple(a1.get("lhs_batch_dims", ())), tuple(a1.get("lhs_contracting_dims", ()))
    rb, rc = tuple(a1.get("rhs_batch_dims", ())), tuple(a1.get("rhs_contracting_dims", ()))
    qn, kn = norm(q, lb, lc, True), norm(k, rb, rc, True)
    vb, vc = tuple(a2.get("rhs_batch_dims", ())), tuple(a2.get("rhs_contracting_dims", ()))
    if len(vc) != 1 or tuple(a2.get("lhs_batch_dims", ())) != tuple(range(nb)):
        raise CompilationError(f"{where}: the second dot of the attention does not contract the key axis")
    v_free = tuple(d for d in range(v.rank) if d not in vb + vc)
    vn = _merge_groups([v.transpose(vb + vc + v_free)], [(nb + 1, len(v_free))])
    on = _merge_groups([out], [(nb + 1, len(v_free))])
    if vn is None or on is None:
        raise CompilationError(f"{where}: the attention's value dims cannot be merged into one")
    score, p_dtype, safe = _softmax_input(p, where)
    compute1 = compute_dtype(qn, kn, where)
    compute2 = p_dtype if p_dtype == vn[0].dtype and p_dtype in ("bf16", "f16") else "f32"
    return AttentionPlan(name, where, qn, kn, vn[0], on[0], score, affine_scores(score, nb), p_dtype, compute1,
                         compute2, safe)


def attention_kernel(builder: ProgramBuilder, plan: AttentionPlan) -> None:
    _Attention(builder, plan).emit()


class _Attention:
    def __init__(self, builder: ProgramBuilder, plan: AttentionPlan):
        self.b, self.plan = builder, plan
        parts = builder.target.partitions
        self.nb = len(plan.batch_dims)
        self.Tq, self.dh = plan.q.dims[-2:]
        self.Tk, self.dv = plan.v.dims[-2:]
        if self.dv > builder.target.data["pe"]["max_n"]:
            raise CompilationError(f"{plan.where}: attention with a value dim of {self.dv} (> one PSUM bank)")
        self.W = min(self.Tk, builder.target.data["pe"]["max_n"])  # keys per chunk: one PSUM bank of scores
        self.qmax = min(parts, self.Tq)
        bank = builder.target.psum_bank_bytes  # a 2-byte P^T fills half a transpose bank: the output accumulators
        # take the other half of the two transpose banks, and the kernel 4 PSUM banks, not 6 (its neighbours the others)
        self.o_in_tpsum, self.n_out = itemsize(plan.compute2) == 2 and 8 * PSUM_SLOT + 4 * self.dv <= bank, 0
        self.nkh = -(-self.dh // parts)
        self.nkv = -(-self.Tk // parts)
        self.p_axis, self.f_axis = self.nb, self.nb + 1
        # Q, K, V are read in place only when every batch's can be (their pools are sized once)
        views = [self._views(i) for i in itertools.product(*(range(d) for d in plan.batch_dims))]
        computes = (plan.compute1, plan.compute1, plan.compute2)
        self._in_place = [KOperand.all_in_place(builder, [v[r] for v in views], c) for r, c in enumerate(computes)]
        self.loader = LeafLoader(builder, plan.score, self.p_axis, (self.f_axis,), plan.name,
                                 loop_axes=tuple(range(self.nb)))
        self.merged = self._merged_heads()
        self.mask_offsets = self._mask_offsets()
        self.masks: dict[int, AccessPattern] = {}
        self.temps = Temporaries("temps", self.W)
        leaves = {key: dry_operand(kind) for key, kind in self.loader.kinds().items()}
        acc = AccessPattern("psum", "f32", 0, ((1, self.W),), partitions=self.qmax)
        coords = Coords(self.p_axis, 0, ((self.f_axis, 0, self.W),))
        x = AccessPattern("sbuf", "f32", 0, ((1, self.W),), partitions=self.qmax)
        self.temps.measure(lambda bb, store: TileEvaluator(bb, store, self.qmax, self.W, leaves, acc=acc,
                                                           coords=coords).run(plan.score, x))

    def _merged_heads(self) -> tuple[View, View, View] | None:
        """Q^T, K^T [heads * dh, T] and V [T, heads * dv] of all heads at once, when the heads are side
        by side along the contiguous axis (one batch axis of size > 1, as the QKV projection writes
        [tokens, heads * dh]): each is then loaded once for the kernel in rows of every head (runs of
        heads * dh elements instead of dh), and a head's Q^T / K^T are partitions of a K-tile."""
        plan, parts = self.plan, self.b.target.partitions
        big = [a for a, d in enumerate(plan.batch_dims) if d > 1]
        if len(big) != 1 or parts % self.dh or parts % self.dv:
            return None
        heads = plan.batch_dims[big[0]]
        if not all(start_partition_allowed(h * self.dh % parts, self.dh) for h in range(heads)):
            return None
        merged = []
        for view, width in ((plan.q, self.dh), (plan.k, self.dh), (plan.v, self.dv)):
            for a in reversed(range(self.nb)):
                if a != big[0]:
                    view = view.index(a, 0)
            if view.strides[2] != 1 or view.strides[0] != width:
                return None
            merged.append(View(view.buffer, (view.dims[1], heads * width), (view.strides[1], 1), view.offset,
                               view.cast))
        return merged[0].transpose((1, 0)), merged[1].transpose((1, 0)), merged[2]

    def _merged_operands(self) -> tuple[KOperand, KOperand, KOperand]:
        assert self.merged is not None
        q, k, v = self.merged
        plan = self.plan
        return (KOperand(self.b, q, plan.compute1, "qa", plan.name),
                KOperand(self.b, k, plan.compute1, "ka", plan.name),
                KOperand(self.b, v, plan.compute2, "va", plan.name))

    def _mask_offsets(self) -> list[int] | None:
        """The diagonal offsets of the 128-key blocks a causal-style mask cuts (those get the mask added in
        PSUM by one matmul against an identity, so every score tile is read straight from PSUM), or None
        when the mask is applied in SBUF instead (no affine mask, rows entirely masked, too many)."""
        affine, parts = self.plan.affine, self.b.target.partitions
        if affine is None or affine.diag is None or affine.diag < 0:
            return None
        if MASK_FILL < float(ml_dtypes.finfo(isa_dtype(self.plan.compute1).numpy).min):
            return None  # f16 rounds MASK_FILL to -inf, and identity x mask would then add 0 * -inf = NaN
        offsets: set[int] = set()
        for q0 in range(0, self.Tq, self.qmax):
            qw = min(self.qmax, self.Tq - q0)
            for k0 in range(0, self.Tk, self.W):
                k0, kw = affine.trim(q0, qw, k0, min(self.W, self.Tk - k0))
                for kb in range(k0, k0 + kw, parts):
                    if affine.kind(q0, qw, kb, min(parts, k0 + kw - kb)) == "partial":
                        offsets.add(q0 + affine.diag - kb)
        return sorted(offsets) if len(offsets) <= MAX_MASKS else None

    def _build_masks(self) -> None:
        """[128, 128] tiles of 0 (kept) and MASK_FILL (key - query > offset), built by POOL once."""
        parts, dtype = self.b.target.partitions, self.plan.compute1
        for offset in self.mask_offsets or ():
            tile = self.pools["mask"].next().flat(dtype, self.qmax, parts)
            self.b.memset(tile, 0.0, f"{self.plan.name} mask {offset}")
            self.b.emit("pool", "affine_select", f"{self.plan.name} mask {offset}",
                        {"cmp": "is_ge", "offset": offset, "channel_multiplier": 1, "free_multiplier": -1,
                         "fill": MASK_FILL}, dst=tile, src=tile)
            self.masks[offset] = tile

    def _views(self, index: tuple[int, ...]) -> tuple[View, View, View]:
        """[K, C] views of one batch: Q^T [dh, Tq], K^T [dh, Tk], V [Tk, dv]."""
        q, k, v = (_index(x, index) for x in (self.plan.q, self.plan.k, self.plan.v))
        return q.transpose((1, 0)), k.transpose((1, 0)), v

    def _operands(self, index: tuple[int, ...]) -> tuple[KOperand, KOperand, KOperand]:
        plan, tag = self.plan, f"{self.plan.name}{list(index) if index else ''}"
        q, k, v = self._views(index)
        return (KOperand(self.b, q, plan.compute1, "q", tag, allow_image=self._in_place[0]),
                KOperand(self.b, k, plan.compute1, "k", tag, allow_image=self._in_place[1]),
                KOperand(self.b, v, plan.compute2, "v", tag, allow_image=self._in_place[2]))

    def _operand_specs(self) -> list[PoolSpec]:
        c1, c2 = itemsize(self.plan.compute1), itemsize(self.plan.compute2)
        if self.merged is not None:
            qa, ka, va = self._merged_operands()
            return [PoolSpec("qa", "sbuf", 0 if qa.in_sbuf else qa.nk * self.Tq * c1, 1, source=qa.stages),
                    PoolSpec("ka", "sbuf", 0 if ka.in_sbuf else ka.nk * self.Tk * c1, 1, source=ka.stages),
                    PoolSpec("va", "sbuf", 0 if va.in_sbuf else va.nk * va.C * c2, 1, source=va.stages),
                    *qa.specs(self.Tq), *ka.specs(self.Tk), *va.specs(va.C)]
        q0, k0, v0 = self._operands((0,) * self.nb)
        return [PoolSpec("qT", "sbuf", 0 if q0.in_sbuf else self.nkh * self.qmax * c1, 2, source=q0.stages),
                PoolSpec("kT", "sbuf", 0 if k0.in_sbuf else self.nkh * self.Tk * c1, 2, source=k0.stages),
                PoolSpec("vr", "sbuf", 0 if v0.in_sbuf else self.nkv * self.dv * c2, 2, source=v0.stages),
                *q0.specs(self.qmax), *k0.specs(self.Tk), *v0.specs(self.dv)]

    def specs(self) -> list[PoolSpec]:
        c1, c2 = itemsize(self.plan.compute1), itemsize(self.plan.compute2)
        specs = self.temps.specs() + self._operand_specs() + [
            PoolSpec("x", "sbuf", self.W * 4, 2),
            PoolSpec("p", "sbuf", self.W * c2, 2),
            PoolSpec("pT", "sbuf", 4 * self.qmax * c2, 4),
            PoolSpec("vec", "sbuf", 4, 16),
            PoolSpec("out", "sbuf", self.dv * itemsize(self.plan.out.dtype), 2),
            PoolSpec("s", "psum", 0, 2), PoolSpec("tpsum", "psum", 0, 2)]
        specs += [PoolSpec("o", "psum", 0, 2)] * (not self.o_in_tpsum)
        if self.mask_offsets:
            specs.append(PoolSpec("mask", "sbuf", self.b.target.partitions * c1, len(self.mask_offsets)))
        n_tiles = -(-self.Tq // self.qmax) * -(-self.Tk // self.W)
        return specs + self.loader.specs(self.qmax, self.W, -(-self.Tk // self.W), 32 * 1024, loop_tiles=n_tiles)

    def emit(self) -> None:
        b, plan = self.b, self.plan
        pools = b.alloc.begin_kernel(plan.name, self.specs(), plan.where)
        self.pools = pools
        self.loader.bind(pools)
        self.temps.bind(pools)
        self._build_masks()
        b.useful_macs += plan.macs
        n_batches = int(np.prod(plan.batch_dims, dtype=np.int64))
        merged = None
        if self.merged is not None:
            qa, ka, va = self._merged_operands()
            for operand in (qa, ka, va):
                operand.bind(pools)
                operand.note_layout(plan.name)
            merged = (qa.load(None if qa.in_sbuf else pools["qa"].next(), 0, self.Tq, self.Tq),
                      ka.load(None if ka.in_sbuf else pools["ka"].next(), 0, self.Tk, self.Tk),
                      va.load(None if va.in_sbuf else pools["va"].next(), 0, va.C, va.C))
        else:
            for operand in self._operands((0,) * self.nb):
                operand.note_layout(plan.name, n_batches)
        indices = list(itertools.product(*(range(d) for d in plan.batch_dims)))
        for q0, index in itertools.product(range(0, self.Tq, self.qmax), indices) if merged is not None else ():
            head = max(index)  # the one batch axis of size > 1; query blocks outer: every head's first rows first
            qT, kT = (_HeadRows(m, head * self.dh, self.dh, b.target.partitions) for m in merged[:2])
            vr = _HeadColumns(merged[2], head * self.dv)
            self.block(dict(enumerate(index)), q0, min(self.qmax, self.Tq - q0), qT, kT, vr)
        for index in indices if merged is None else ():
            q, k, v = self._operands(index)
            for operand in (q, k, v):
                operand.bind(pools)
            kT = k.load(None if k.in_sbuf else pools["kT"].next(), 0, self.Tk, self.Tk)
            vr = v.load(None if v.in_sbuf else pools["vr"].next(), 0, self.dv, self.dv)
            for q0 in range(0, self.Tq, self.qmax):
                qw = min(self.qmax, self.Tq - q0)
                qT = q.load(None if q.in_sbuf else pools["qT"].next(), q0, qw, self.qmax)
                self.block(dict(enumerate(index)), q0, qw, qT, kT, vr)
        b.alloc.end_kernel()

    def _out_acc(self, qw: int) -> AccessPattern:
        """A block's [queries, dv] fp32 accumulator: a bank, or the upper half of a transpose bank, in turn."""
        if not self.o_in_tpsum:
            return self.pools["o"].next().flat("f32", qw, self.dv)
        self.n_out += 1
        self.pools["tpsum"].touch()
        return self.pools["tpsum"].tiles[self.n_out % 2].flat("f32", qw, self.dv, 2 * PSUM_SLOT)

    def _vec(self, qw: int) -> AccessPattern:
        return self.pools["vec"].next().flat("f32", qw, 1)

    def block(self, fixed: dict[int, int], q0: int, qw: int, qT, kT, vr) -> None:
        """One block of queries against every (unmasked) chunk of keys."""
        b, plan = self.b, self.plan
        label = f"{plan.name}{[fixed[a] for a in sorted(fixed)]}q{q0}"
        chunks = [(k0, min(self.W, self.Tk - k0)) for k0 in range(0, self.Tk, self.W)]
        if plan.affine is not None:
            live = [c for c in (plan.affine.trim(q0, qw, *c) for c in chunks) if c[1] > 0] or chunks[:1]
        else:
            live = [c for c in chunks if not self._masked(fixed, q0, qw, *c)] or chunks[:1]
        o = self._out_acc(qw)
        m = l_sum = None
        for i, (k0, kw) in enumerate(live):
            tag = f"{label} k{k0}"
            s = self.pools["s"].next().flat("f32", qw, kw)
            for kt in range(self.nkh):
                b.load_stationary(qT.ap(kt, q0, qw), f"{tag} q")
                b.multiply_moving(s, kT.ap(kt, k0, kw), acc=kt > 0, comment=f"{tag} qk")
            x, scale = self._scores(fixed, q0, qw, k0, kw, s, tag)
            mc = self._vec(qw)
            b.tensor_reduce(mc, x, "max", f"{tag} rowmax")
            m_new, alpha = self._vec(qw), None
            if m is None:  # running max of the scores (scale * S), at least NEG_FLOOR
                b.tensor_scalar(m_new, mc, "multiply", scale, f"{tag} max", op1="max", scalar1=NEG_FLOOR)
            else:
                b.tensor_scalar(m_new, mc, "multiply", scale, f"{tag} max", op1="max", scalar1_vec=m)
            neg = self._vec(qw)
            b.tensor_scalar(neg, m_new, "multiply", -1.0, f"{tag} -max")
            if m is not None:
                alpha = self._vec(qw)
                b.activation(alpha, m, "exp", bias=neg, comment=f"{tag} rescale")
            p = self.pools["p"].next().flat(plan.compute2, qw, kw)
            lc = self._vec(qw)
            b.activation(p, x, "exp", bias=neg, scale=scale, acc=lc, comment=f"{tag} exp")
            if l_sum is None:
                l_sum = lc
            else:
                l_new = self._vec(qw)
                b.tensor_scalar(l_new, l_sum, "multiply", 0.0, f"{tag} rowsum", scalar_vec=alpha, op1="add",
                                scalar1_vec=lc)
                l_sum = l_new
                b.tensor_scalar(o, o, "multiply", 0.0, f"{tag} rescale out", scalar_vec=alpha)
            self._pv(p, vr, o, qw, k0, kw, first=i == 0, tag=tag)
            m = m_new
        store = plan.out.hbm_ap(self.nb, q0, qw, [(self.nb + 1, 0, self.dv)], fixed)
        on_chip = b.resident(store)  # a result kept on chip is written in place where engines may
        out = on_chip or self.pools["out"].next().flat(plan.out.dtype, qw, self.dv)
        if plan.safe:  # l >= 1 unless every score of the row is -inf (then O = l = 0)
            l_safe = self._vec(qw)
            b.tensor_scalar(l_safe, l_sum, "max", 1.0, f"{label} safe rowsum")
            l_sum = l_safe
        b.tensor_scalar(out, o, "divide", 0.0, f"{label} normalize", scalar_vec=l_sum)
        if on_chip is None:
            b.dma(store, out, f"{label} store")

    def _scores(self, fixed, q0: int, qw: int, k0: int, kw: int, s: AccessPattern, tag: str
                ) -> tuple[AccessPattern, float]:
        """(X', c) with scores = c * X': a tile without masked scores is read straight from PSUM; a
        diagonal tile of an affine mask is scaled into SBUF and masked by POOL's affine_select; any
        other score expression is evaluated into SBUF."""
        b, plan, affine = self.b, self.plan, self.plan.affine
        if affine is not None and affine.kind(q0, qw, k0, kw) == "full":
            return s, affine.scale
        if affine is not None and self.masks:
            assert affine.diag is not None
            parts = b.target.partitions
            ident = b.identity(plan.compute1).flat(plan.compute1, qw, qw)
            for kb in range(k0, k0 + kw, parts):
                sub = min(parts, k0 + kw - kb)
                if affine.kind(q0, qw, kb, sub) != "partial":
                    continue
                mask = self.masks[q0 + affine.diag - kb]
                b.load_stationary(ident, f"{tag} mask identity")
                b.multiply_moving(replace(s, offset=s.offset + (kb - k0) * 4, pattern=((1, sub),)),
                                  replace(mask, partitions=qw, pattern=((1, sub),)), acc=True,
                                  comment=f"{tag} causal mask")
            return s, affine.scale
        x = self.pools["x"].next().flat("f32", qw, kw)
        if affine is not None:
            b.activation(x, s, "identity", scale=affine.scale, comment=f"{tag} scale")
            assert affine.diag is not None
            b.emit("pool", "affine_select", f"{tag} causal mask",  # keep key <= query + diag
                   {"cmp": "is_ge", "offset": q0 + affine.diag - k0, "channel_multiplier": 1,
                    "free_multiplier": -1, "fill": float("-inf")}, dst=x, src=x)
            return x, 1.0
        operands = self.loader.load(fixed, q0, qw, [(self.f_axis, k0, kw)])
        coords = Coords(self.p_axis, q0, ((self.f_axis, k0, kw),), tuple(fixed.items()))
        TileEvaluator(b, self.temps.store(), qw, kw, operands, acc=s, label=f"{tag} score",
                      coords=coords).run(plan.score, x)
        return x, 1.0

    def _pv(self, p: AccessPattern, vr, o: AccessPattern, qw: int, k0: int, kw: int, first: bool, tag: str) -> None:
        """O (+)= P V: P^T per 128 keys by PE transposes (4 per PSUM bank), then matmuls into O."""
        b, plan, parts = self.b, self.plan, self.b.target.partitions
        blocks = [(j, min(parts, kw - j)) for j in range(0, kw, parts)]
        groups = [blocks[i:i + 4] for i in range(0, len(blocks), 4)]
        n_blocks = 0
        tdt = plan.compute2 if self.o_in_tpsum else "f32"  # P^T in PSUM: exact either way
        for group in groups:
            bank = self.pools["tpsum"].next()
            pT = self.pools["pT"].next()
            for slot, (j, jw) in enumerate(group):
                src = replace(p, offset=p.offset + j * p.itemsize, pattern=((1, jw),))
                b.emit("pe", "transpose", f"{tag} transpose p", dst=bank.ap(tdt, jw, [(1, qw)], slot * PSUM_SLOT),
                       src=src)
            widths = [jw for _, jw in group]
            n_same = len(group) if len(set(widths)) == 1 else len(group) - 1  # the last block may be narrower
            b.copy(pT.ap(plan.compute2, widths[0], [(self.qmax, n_same), (1, qw)]),
                   bank.ap(tdt, widths[0], [(PSUM_SLOT, n_same), (1, qw)]), f"{tag} evacuate p^T")
            if n_same < len(group):
                slot, jw = len(group) - 1, widths[-1]
                b.copy(pT.ap(plan.compute2, jw, [(1, qw)], slot * self.qmax),
                       bank.ap(tdt, jw, [(1, qw)], slot * PSUM_SLOT), f"{tag} evacuate p^T")
            for slot, (j, jw) in enumerate(group):
                kt = (k0 + j) // parts
                b.load_stationary(pT.ap(plan.compute2, jw, [(1, qw)], slot * self.qmax), f"{tag} p^T")
                b.multiply_moving(o, vr.ap(kt, 0, self.dv, rows=jw), acc=not (first and n_blocks == 0),
                                  comment=f"{tag} pv")
                n_blocks += 1

    def _masked(self, fixed: dict[int, int], q0: int, qw: int, k0: int, kw: int) -> bool:
        """Is the score tile -inf everywhere whatever Q and K hold (a constant mask removes it)?"""
        for probe in (0.0, 1.0, -1.0):  # a runtime (e.g. pred) mask must not count as the probe's value
            values = _constant_eval(self.plan.score, self.p_axis, q0, qw, self.f_axis, k0, kw, fixed, probe)
            if values is None or not np.all(values == -np.inf):
                return False
        return True


@dataclass(frozen=True)
class _HeadRows:
    """One head's Q^T or K^T: `dh` partitions from row `f0` of the all-heads operand (K-tile f0 // 128)."""

    loaded: Loaded
    f0: int
    dh: int
    parts: int

    def ap(self, kt: int, c: int, n: int, rows: int | None = None) -> AccessPattern:
        assert kt == 0
        parts = self.parts
        ap = self.loaded.ap(self.f0 // parts, c, n)
        return replace(ap, start_partition=ap.start_partition + self.f0 % parts,
                       partitions=self.dh if rows is None else rows)


@dataclass(frozen=True)
class _HeadColumns:
    """One head's V: columns from `c0` of the all-heads [T, heads * dv] operand."""

    loaded: Loaded
    c0: int

    def ap(self, kt: int, c: int, n: int, rows: int | None = None) -> AccessPattern:
        return self.loaded.ap(kt, self.c0 + c, n, rows)


def _constant_eval(root: Node, p_axis: int, p0: int, pw: int, f_axis: int, f0: int, fw: int,
                   fixed: dict[int, int], probe: float = 0.0) -> np.ndarray | None:
    """The tile of `root` with the accumulator and non-constant leaves at `probe` (None if not evaluable)."""
    memo: dict[int, np.ndarray] = {}
    for node in walk(root):
        if node.op == "acc" or (node.op == "leaf" and node.view is not None and not node.view.is_const):
            memo[id(node)] = np.full((pw, fw), probe, np.float32)
        elif node.op == "scalar":
            memo[id(node)] = np.full((pw, fw), node.value, np.float32)
        elif node.view is not None:
            v = node.view
            base = v.offset + sum(v.strides[a] * i for a, i in fixed.items())
            idx = (base + v.strides[p_axis] * (p0 + np.arange(pw))[:, None]
                   + v.strides[f_axis] * (f0 + np.arange(fw))[None, :])
            memo[id(node)] = (idx.astype(np.float32) if node.op == "iota"
                              else v.buffer.data.reshape(-1)[idx].astype(np.float32))  # type: ignore[union-attr]
        elif node.op in FOLD:
            with np.errstate(all="ignore"):
                memo[id(node)] = np.asarray(FOLD[node.op](*(memo[id(i)] for i in node.inputs)), np.float32)
        else:
            return None
    return memo[id(root)]


def _index(view: View, index: tuple[int, ...]) -> View:
    for i in index:
        view = view.index(0, i)
    return view
