"""Top-k (HLO `topk(x), k=K, largest=...`): the k greatest elements of every row along the last dimension and
their indices, ties by lower index, NaN above everything (the interpreter's and XLA's order).

Keys as fp32-exact digits: the engines compare in fp32, so every element becomes a short tuple of numbers
that fp32 holds exactly and that orders the elements lexicographically:
- floats: (is NaN, value with NaN -> -BIG); -0 and +0 are equal digits, so they tie (and lower index wins);
- 32-bit integers: (high 16 bits, low 16 bits), split exactly on GpSimd in integer mode;
- narrower integers and pred: the value.
`largest=false` negates every digit.

Selection, k rounds on a [rows, F] tile (DVE reductions along the free axis): the greatest first digit
(tensor_reduce max), the elements equal to it, the greatest second digit among those, ..., then the lowest
index among the survivors (reduce min); that element's digits are recorded, and its first digit knocked
out (-BIG). Indices are f32 (exact below 2^24).

Long rows (more than SPLIT elements) are spread over G partitions each (G = 32, 64 or 128): every
partition selects its own k candidates (with global indices), the candidates go through an HBM scratch
into one partition per row (G * k of them) and a second selection picks the row's k. The top k of a row
are each among the top k of their partition, so the result is the same.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from backend.alloc import PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.integer import total_order_keys
from backend.kernels.sort import RowLayout, operand_views, result_views
from backend.kernels.sort_compare import FLOAT_DTYPES, KEY_DTYPES
from backend.layout import View
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from isa.program import AccessPattern

BIG = 3.0e38  # below every digit of a real element (knocked out, padding)
SPLIT = 2048  # rows longer than this are spread over several partitions
MAX_INDEX = 1 << 24
VEC_BUFS = 8


class TopKKernel:
    def __init__(self, builder: ProgramBuilder, name: str, where: str, x: View, values: View, indices: View,
                 k: int, largest: bool):
        self.b, self.name, self.where, self.k, self.largest = builder, name, where, k, largest
        self.layout = RowLayout.of([x, values, indices], x.rank - 1)
        self.n = self.layout.n
        self.dtype, self.out_dtype = x.dtype, values.dtype
        if self.n >= MAX_INDEX:
            raise CompilationError(f"{where}: top-k over {self.n} elements per row is not supported (indices are "
                                   "carried as f32)")
        # floats are ordered by their TOTALORDER keys (integers of the same width)
        self.int_dtype = KEY_DTYPES.get(self.dtype, self.dtype)
        self.n_digits = 2 if self.int_dtype in ("i32", "u32") else 1
        parts = builder.target.partitions
        rows = self.layout.rows
        self.G = 1 if self.n <= SPLIT else 128 if rows == 1 else 64 if rows == 2 else 32
        self.T = parts // self.G  # rows per tile
        self.C = -(-self.n // self.G)  # elements per partition
        self.F2 = self.G * k

    # -- plan ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        b, k, L = self.b, self.k, self.n_digits
        if self.n == 0 or k == 0 or self.layout.rows == 0 or any(d == 0 for d in self.layout.loops):
            return
        F = self.C
        width = max(F, self.F2 if self.G > 1 else 0)
        specs = [PoolSpec("x", "sbuf", F * 4, 2),
                 PoolSpec("digits", "sbuf", width * 4, 2 * L), PoolSpec("index", "sbuf", width * 4, 2),
                 PoolSpec("work", "sbuf", width * 4, 6), PoolSpec("vec", "sbuf", 4, VEC_BUFS),
                 PoolSpec("rec", "sbuf", k * 4, 2 * (L + 1)), PoolSpec("out", "sbuf", k * 4, 6),
                 PoolSpec("fill", "sbuf", width * 4, 2)]
        if not b.alloc.fits(specs):
            raise CompilationError(f"{self.where}: top-k over {self.n} elements per row does not fit in SBUF")
        pools = b.alloc.begin_kernel(self.name, specs, self.where)
        self.pools = pools
        parts = b.target.partitions
        neg, pos = (t.flat("f32", parts, width) for t in (pools["fill"].next(), pools["fill"].next()))
        b.memset(neg, -BIG, f"{self.name} -big")
        b.memset(pos, BIG, f"{self.name} +big")
        self.neg, self.pos = neg, pos
        layout = self.layout
        for fixed, r0, nr in layout.tiles(self.T):
            self._tile(fixed, r0, nr)
        b.alloc.end_kernel()

    def _fill(self, ap: AccessPattern, pw: int, n: int) -> AccessPattern:
        return replace(ap, partitions=pw, pattern=((1, n),))

    # -- one tile of rows ----------------------------------------------------------------------------------
    def _tile(self, fixed: dict[int, int], r0: int, nr: int) -> None:
        b, G, C = self.b, self.G, self.C
        label = f"{self.name} rows {r0}:{r0 + nr}"
        pw = nr * G
        xt = self.pools["x"].next()
        x = xt.flat(self.dtype, pw, C)
        index = self.pools["index"].next().flat("f32", pw, C)
        if G == 1:
            b.dma(x, self.layout.load_ap(0, fixed, r0, nr), f"{label} load")
            b.iota(index, 0, 0, f"{label} index")
        else:
            b.memset(x, 0.0, f"{label} pad")
            stride = self.layout.views[0].strides[-1]
            full, rem = divmod(self.n, C)
            for t in range(nr):
                if full:
                    src = replace(self.layout.load_ap(0, fixed, r0 + t, 1, 0, C), partitions=full,
                                  partition_stride=C * stride)
                    b.dma(replace(xt.flat(self.dtype, full, C), start_partition=t * G), src, f"{label} row {t} load")
                if rem:
                    src = self.layout.load_ap(0, fixed, r0 + t, 1, full * C, rem)
                    b.dma(replace(xt.flat(self.dtype, 1, rem), start_partition=t * G + full), src,
                          f"{label} row {t} tail")
                b.iota(replace(index, partitions=G, start_partition=t * G), 0, C, f"{label} row {t} index")
        digits = self._digits(x, index, pw, C, label)
        rec, rec_index = self._select(digits, index, pw, C, label)
        if G > 1:
            digits, index = self._gather(rec, rec_index, nr, label)
            rec, rec_index = self._select(digits, index, nr, self.F2, f"{label} merge")
        self._store(rec, rec_index, fixed, r0, nr, label)

    def _digits(self, x: AccessPattern, index: AccessPattern, pw: int, F: int, label: str) -> list[AccessPattern]:
        """The fp32-exact digits of every element: (high 16 bits, low 16 bits) of 32-bit integers (floats:
        their TOTALORDER keys), the value of narrower ones."""
        b = self.b
        ds = [self.pools["digits"].next().flat("f32", pw, F) for _ in range(self.n_digits)]
        src = x
        if self.dtype in FLOAT_DTYPES:
            src = self.pools["work"].next().flat(self.int_dtype, pw, F)
            total_order_keys(b, src, x, f"{label} keys")
        if self.n_digits == 2:
            shift = "shift_right_logical" if self.int_dtype == "u32" else "shift_right_arith"
            hi = self.pools["work"].next().flat(self.int_dtype, pw, F)
            lo = self.pools["work"].next().flat(self.int_dtype, pw, F)
            b.emit("pool", "tensor_scalar", f"{label} high bits", {"op": shift, "scalar": 16.0, "math": "int"},
                   dst=hi, src=src)
            b.emit("pool", "tensor_scalar", f"{label} low bits", {"op": "bitwise_and", "scalar": 65535.0,
                                                                   "math": "int"}, dst=lo, src=src)
            b.copy(ds[0], hi, f"{label} high digit", engines=("dve", "pool"))
            b.copy(ds[1], lo, f"{label} low digit", engines=("dve", "pool"))
        else:
            b.copy(ds[0], src, f"{label} digit", engines=("dve", "pool"))
        if not self.largest:
            for d in ds:
                b.tensor_scalar(d, d, "multiply", -1.0, f"{label} smallest first")
        if self.G * self.C > self.n:  # padding: below every element
            mask = self.pools["work"].next().flat("f32", pw, F)
            b.tensor_scalar(mask, index, "is_lt", float(self.n), f"{label} real")
            b.select(ds[0], mask, ds[0], self._fill(self.neg, pw, F), f"{label} padding")
        return ds

    def _vec(self, pw: int) -> AccessPattern:
        return self.pools["vec"].next().flat("f32", pw, 1)

    def _select(self, digits: list[AccessPattern], index: AccessPattern, pw: int, F: int, label: str
                ) -> tuple[list[AccessPattern], AccessPattern]:
        """k rounds of selection on [pw, F]: the recorded digits and indices, [pw, k] each."""
        b, k, pools = self.b, self.k, self.pools
        neg, pos = self._fill(self.neg, pw, F), self._fill(self.pos, pw, F)
        recs = [pools["rec"].next() for _ in range(len(digits) + 1)]
        rec = [t.flat("f32", pw, k) for t in recs[:-1]]
        rec_index = recs[-1].flat("f32", pw, k)
        d0 = digits[0]
        for t in range(k):
            tag = f"{label} top{t}"
            eq = pools["work"].next().flat("f32", pw, F)
            best = []
            for level, d in enumerate(digits):
                m = self._vec(pw)
                if level == 0:
                    b.tensor_reduce(m, d, "max", f"{tag} max digit 0")
                    b.tensor_scalar(eq, d, "is_equal", scalar_vec=m, comment=f"{tag} ties 0")
                else:
                    cand = pools["work"].next().flat("f32", pw, F)
                    b.select(cand, eq, d, neg, f"{tag} candidates {level}")
                    b.tensor_reduce(m, cand, "max", f"{tag} max digit {level}")
                    b.tensor_scalar(cand, d, "is_equal", scalar_vec=m, comment=f"{tag} equal {level}")
                    b.tensor_tensor(eq, eq, cand, "multiply", f"{tag} ties {level}")
                best.append(m)
            cand = pools["work"].next().flat("f32", pw, F)
            b.select(cand, eq, index, pos, f"{tag} candidate indices")
            at = self._vec(pw)
            b.tensor_reduce(at, cand, "min", f"{tag} first index")
            hit = pools["work"].next().flat("f32", pw, F)
            b.tensor_scalar(hit, index, "is_equal", scalar_vec=at, comment=f"{tag} chosen")
            b.copy(_column(rec_index, t), at, f"{tag} record index", engines=("dve", "pool"))
            for level in range(len(digits)):  # the digits are exact: the maxima are the chosen element's
                b.copy(_column(rec[level], t), best[level], f"{tag} record digit {level}", engines=("dve", "pool"))
            b.select(d0, hit, neg, d0, f"{tag} knock out")
        return rec, rec_index

    def _gather(self, rec: list[AccessPattern], rec_index: AccessPattern, nr: int, label: str
                ) -> tuple[list[AccessPattern], AccessPattern]:
        """The [nr * G, k] candidates as [nr, G * k], through an HBM scratch tensor."""
        b, G, k = self.b, self.G, self.k
        out = []
        for i, ap in enumerate(rec + [rec_index]):
            scratch = b.scratch("f32", (nr * G, k), label=f"{self.name} candidates {i}")
            b.dma(scratch.hbm_ap(0, 0, nr * G, [(1, 0, k)]), ap, f"{label} candidates {i} out")
            merged = scratch.reshape((nr, G * k))
            assert merged is not None
            pool = self.pools["index" if i == len(rec) else "digits"]
            dst = pool.next().flat("f32", nr, G * k)
            b.dma(dst, merged.hbm_ap(0, 0, nr, [(1, 0, G * k)]), f"{label} candidates {i} in")
            out.append(dst)
        return out[:-1], out[-1]

    def _store(self, rec: list[AccessPattern], rec_index: AccessPattern, fixed: dict[int, int], r0: int, nr: int,
               label: str) -> None:
        b, k = self.b, self.k
        if not self.largest:
            for d in rec:
                b.tensor_scalar(d, d, "multiply", -1.0, f"{label} undo negation")
        values = self.pools["out"].next()
        ints = values.flat(self.int_dtype, nr, k)
        if len(rec) == 2:
            hi, lo = (self.pools["out"].next().flat(self.int_dtype, nr, k) for _ in range(2))
            b.copy(hi, rec[0], f"{label} high", engines=("dve", "pool"))
            b.copy(lo, rec[1], f"{label} low", engines=("dve", "pool"))
            b.emit("pool", "tensor_scalar", f"{label} shift high", {"op": "multiply", "scalar": 65536.0, "math": "int"},
                   dst=hi, src=hi)
            b.emit("pool", "tensor_tensor", f"{label} values", {"op": "add", "math": "int"}, dst=ints, a=hi, b=lo)
        else:
            b.copy(ints, rec[0], f"{label} values", engines=("dve", "pool"))
        if self.dtype in FLOAT_DTYPES:  # the key map is its own inverse
            keys, values = ints, self.pools["out"].next()
            total_order_keys(b, values.flat(self.int_dtype, nr, k), keys, f"{label} bits")
        idx = self.pools["out"].next().flat(self.layout.views[2].dtype, nr, k)
        b.copy(idx, rec_index, f"{label} indices", engines=("dve", "pool"))
        b.dma(self.layout.load_ap(1, fixed, r0, nr, 0, k), values.flat(self.out_dtype, nr, k),
              f"{label} store values")
        b.dma(self.layout.load_ap(2, fixed, r0, nr, 0, k), idx, f"{label} store indices")


def _column(ap: AccessPattern, t: int) -> AccessPattern:
    """Column t of a [P, k] f32 tile."""
    return replace(ap, offset=ap.offset + 4 * t, pattern=((1, 1),))


def lower_topk(lw: Any, inst: HloInstruction, ops: list) -> Any:
    """The backend handler of HLO topk (lower.KERNELS)."""
    k = int(inst.attrs["k"])
    largest = str(inst.attrs.get("largest", "true")).lower() != "false"
    (x,) = operand_views(lw, inst, ops)
    values, indices = result_views(lw, inst)
    TopKKernel(lw.b, lw.name(inst), inst.where(), x, values, indices, k, largest).run()
    return [values, indices]
