"""A CNN's classifier head in one kernel (the ``fused_head`` fusion of compiler/passes/fusion/head.py).

Batch 1. Channel c of every value over the C channels lives at partition c % P, column c // P of a [P, T]
fp32 tile (P = min(C, 128), T = C / P): the layout the feature map already has (channels on partitions), so

- the pooling sums each channel tile's pixels along the free dim (DVE), reading the feature map in place when it
  is kept on chip (else one DMA per tile);
- a sum over the channels (a LayerNorm's mean and variance) is one matmul by a [P, P] ones stationary, which
  leaves every partition holding the column sums of the T tiles, then one DVE reduce over the T columns: a
  statistic [P, 1], the same value on every partition, that the engines apply per partition (scalar_vec);
- elementwise ops run on the [P, T] tiles (statistics and scalars as per-partition or immediate scalars);
- the classifier contracts the channels on partitions: for each channel tile t the column t is the stationary
  (one column) and the weight rows of those channels the moving operand, accumulated in PSUM as one [1, O] row
  on partition 0; its epilogue (bias, converts) runs on that row, which is stored with one contiguous DMA.

The weight is laid out at compile time as [P, T * O] (partition p: the weights of channels p, P + p, ...), loaded
once at the kernel's start into a prefetched pool (placed apart, so the load waits only on long-done kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec
from backend.emit import ProgramBuilder
from backend.kernels.conv_geometry import simplified
from backend.layout import View, isa_dtype_of, itemsize
from hlo.errors import CompilationError
from hlo.ir import Computation, Instruction
from isa.program import AccessPattern

BINARY = {"add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide", "maximum": "max",
          "minimum": "min"}
COMMUTATIVE = ("add", "multiply", "max", "min")
ACTIVATIONS = {"rsqrt": "rsqrt", "sqrt": "sqrt", "exponential": "exp", "tanh": "tanh", "logistic": "sigmoid",
               "log": "log", "abs": "abs", "convert": "copy"}
PSUM_COLS = 512  # fp32 columns of one PSUM bank
WEIGHT_RUN = 12 * 1024  # bytes per partition of one weight DMA (at least)
COPY_COLS = 256  # classes per PSUM-to-SBUF copy: the pieces go to ACT and DVE in turn
HEAD_NAME = "fused_head"  # the fused computation of compiler/passes/fusion/head.py


@dataclass(frozen=True)
class Val:
    """A value of the head: `kind` vec ([P, T] over the channels), stat ([P, 1], the same on every partition),
    row ([1, O] on partition 0, after the classifier) or scalar (`scalar`, an immediate)."""

    kind: str
    ap: AccessPattern | None = None
    scalar: float = 0.0


class HeadKernel:
    def __init__(self, b: ProgramBuilder, comp: Computation, ops: list, out: View, name: str, where: str):
        self.b, self.comp, self.out, self.name, self.where = b, comp, out, name, where
        self.params = {p.uid: ops[p.parameter_number or 0] for p in comp.parameters}
        pools = [i for i in comp.instructions if i.opcode == "reduce" and i.operands[0].shape.rank == 4]
        dots = [i for i in comp.instructions if i.opcode == "dot"]
        if len(pools) != 1 or len(dots) != 1:
            raise CompilationError(f"{where}: a head fusion needs one pooling and one dot")
        self.pool_inst, self.dot = pools[0], dots[0]
        self.x: View = self.params[self.pool_inst.operands[0].uid]
        _, self.C, self.H, self.W = self.x.dims
        self.P = min(self.C, b.target.partitions)
        self.T = self.C // self.P
        weight = self.params[self.dot.operands[1].uid]
        rc = tuple(self.dot.attrs.get("rhs_contracting_dims", ()))
        w = weight.const_array() if weight.is_const else None
        if w is None or self.C % self.P:
            raise CompilationError(f"{where}: the head's classifier weight must be a constant over whole channel tiles")
        self.w = w if rc == (0,) else w.T  # [C, O]
        self.O = self.w.shape[1]
        self.wdtype = weight.dtype
        self.vals: dict[int, Val] = {}

    # -- pools ------------------------------------------------------------------------------------------------
    def _specs(self) -> list[PoolSpec]:
        """One buffer per value (a head has a few dozen values of a few bytes per partition; the rows after
        the classifier and its constant vectors are [1, O] on one partition)."""
        insts = self.comp.instructions
        n = len(insts)
        rows = n - insts.index(self.dot) + 1
        consts = sum(1 for i in insts if i.opcode in ("parameter", "constant") and np.prod(i.shape.dims) > 1)
        banks = -(-self.O // PSUM_COLS)
        return [PoolSpec("w", "sbuf", self.T * self.O * itemsize(self.wdtype), 1, prefetch=True),
                PoolSpec("x", "sbuf", self.H * self.W * itemsize(self.x.stored_dtype), 2),
                PoolSpec("ones", "sbuf", self.P * 4, 1),
                PoolSpec("vec", "sbuf", self.T * 4, n),
                PoolSpec("const", "sbuf", max(self.T, self.O) * 4, consts),
                PoolSpec("row", "sbuf", self.O * 4, rows),
                PoolSpec("lhs", "sbuf", self.T * 4, 1),
                PoolSpec("sums", "psum", 0, 1),
                PoolSpec("out", "psum", 0, banks)]

    def emit(self) -> None:
        b = self.b
        self.pools: dict[str, Pool] = b.alloc.begin_kernel(self.name, self._specs(), self.where)
        self._load_weight()
        for inst in self.comp.instructions:
            if inst.opcode != "parameter" and inst.uid not in self.vals:  # a bias add is done with the dot
                self.vals[inst.uid] = self._value(inst)
        root = self.vals[self.comp.root.uid]
        if root.kind != "row":
            raise CompilationError(f"{self.where}: the head's result is not the classifier's row")
        flat = self.out.reshape((self.O,))
        if flat is None:
            raise CompilationError(f"{self.where}: the head's output is not a row of {self.O} values")
        for c0 in range(0, self.O, COPY_COLS):  # piece by piece, each as soon as its copy out of PSUM is done
            cw = min(COPY_COLS, self.O - c0)
            b.dma(flat.hbm_ap(None, 0, 1, [(0, c0, cw)]), _slice(root.ap, c0, cw), f"{self.name} store {c0}")
        b.alloc.end_kernel()

    def _load_weight(self) -> None:
        P, T, n = self.P, self.T, self.O
        laid = self.w.reshape(T, P, n).transpose(1, 0, 2).reshape(P, T * n)  # partition p: channels p, P + p...
        const = self.b.new_const(laid, self.wdtype)
        self.wtile = self.pools["w"].next()
        # a few channel tiles per DMA: per-partition runs of >= WEIGHT_RUN bytes (one tile of 1000 bf16 classes
        # is a 2000-byte run, 13% descriptor overhead), while the first matmuls still start before the last
        # rows arrive (ResNet-50's classifier streams in behind stage 4's weights)
        runs = max(1, min(T, -(-T * n * itemsize(self.wdtype) // WEIGHT_RUN)))
        step = -(-T // runs)
        for t0 in range(0, T, step):
            tn = min(step, T - t0)
            src = const.hbm_ap(0, 0, P, [(1, t0 * n, tn * n)])
            self.b.dma(self.wtile.flat(self.wdtype, P, tn * n, t0 * n), src, f"{self.name} weights c{t0 * P}")

    # -- values -----------------------------------------------------------------------------------------------
    def _new(self, kind: str, dtype: str = "f32") -> AccessPattern:
        if kind == "vec":
            return self.pools["vec"].next().flat(dtype, self.P, self.T)
        if kind == "stat":
            return self.pools["vec"].next().flat(dtype, self.P, 1)
        return self.pools["row"].next().flat(dtype, 1, self.O)

    def _value(self, inst: Instruction) -> Val:
        op = inst.opcode
        if op == "constant":
            return self._const(inst, inst.literal)
        if op in ("reshape", "bitcast", "copy"):
            return self._operand(inst, 0)
        if op == "broadcast":
            src = self._operand(inst, 0)
            if src.kind in ("scalar", "stat") or np.prod(inst.shape.dims) == np.prod(inst.operands[0].shape.dims):
                return src  # a statistic broadcast over the channels is applied per partition
            raise CompilationError(f"{self.where}: %{inst.name} broadcasts a {src.kind} value")
        if inst is self.pool_inst:
            return self._pool()
        if op == "reduce":
            return self._channel_sum(inst, self._operand(inst, 0))
        if op == "dot":
            return self._classifier(self._operand(inst, 0))
        if op in BINARY:
            return self._binary(inst, BINARY[op], self._operand(inst, 0), self._operand(inst, 1))
        if op == "negate":
            a = self._operand(inst, 0)
            return self._binary(inst, "multiply", a, Val("scalar", scalar=-1.0))
        if op in ACTIVATIONS:
            return self._unary(inst, ACTIVATIONS[op], self._operand(inst, 0))
        raise CompilationError(f"{self.where}: %{inst.name} ({op}) is not computed by the head kernel")

    def _operand(self, inst: Instruction, i: int) -> Val:
        operand = inst.operands[i]
        if operand.uid in self.vals:
            return self.vals[operand.uid]
        view = self.params.get(operand.uid)
        if not isinstance(view, View) or not view.is_const:
            raise CompilationError(f"{self.where}: %{inst.name} reads %{operand.name}, not a constant")
        val = self._const(operand, view.const_array())
        self.vals[operand.uid] = val
        return val

    def _const(self, inst: Instruction, array: np.ndarray | None) -> Val:
        if array is None:
            raise CompilationError(f"{self.where}: %{inst.name} has no value")
        flat = np.asarray(array, dtype=np.float32).reshape(-1)
        if flat.size == 1 or np.all(flat == flat[0]):
            return Val("scalar", scalar=float(flat[0]))
        if flat.size == self.C:  # [P, T] as the channel tiles: partition p holds channels p, P + p, ...
            data, kind, pattern = flat.reshape(self.T, self.P).T, "vec", (self.P, self.T)
        elif flat.size == self.O:
            data, kind, pattern = flat.reshape(1, self.O), "row", (1, self.O)
        else:
            raise CompilationError(f"{self.where}: constant %{inst.name} of {flat.size} elements in the head")
        const = self.b.new_const(np.ascontiguousarray(data), "f32")
        tile = self.pools["const"].next().flat("f32", *pattern)
        self.b.dma(tile, const.hbm_ap(0, 0, pattern[0], [(1, 0, pattern[1])]), f"{self.name} {inst.name}")
        return Val(kind, tile)

    def _pool(self) -> Val:
        b, P, x = self.b, self.P, self.x
        dst = self._new("vec")
        for t in range(self.T):
            src = simplified(x.hbm_ap(1, t * P, P, [(2, 0, self.H), (3, 0, self.W)], {0: 0}))
            tile = b.resident(src)
            if tile is None:  # the feature map is in HBM
                tile = self.pools["x"].next().flat(x.stored_dtype, P, self.H * self.W)
                b.dma(tile, src, f"{self.name} pixels c{t * P}")
            b.tensor_reduce(_column(dst, t), tile, "add", f"{self.name} pool c{t * P}")
        return Val("vec", dst)

    def _channel_sum(self, inst: Instruction, v: Val) -> Val:
        if v.kind != "vec":
            raise CompilationError(f"{self.where}: %{inst.name} sums a {v.kind} value over the channels")
        b, P, T = self.b, self.P, self.T
        ones = self._ones_tile()
        src = v.ap if v.ap.dtype == "f32" else self._as(v.ap, "f32")
        sums = self.pools["sums"].next().flat("f32", P, T)
        b.load_stationary(ones, f"{self.name} {inst.name} ones")
        b.multiply_moving(sums, src, acc=False, comment=f"{self.name} {inst.name} channel sums")
        dst = self._new("stat")
        b.tensor_reduce(dst, sums, "add", f"{self.name} {inst.name} total")
        return Val("stat", dst)

    def _as(self, ap: AccessPattern, dtype: str) -> AccessPattern:
        dst = self._new("vec" if ap.partitions > 1 else "row", dtype)
        dst = replace(dst, pattern=ap.pattern, partitions=ap.partitions)
        self.b.copy(dst, ap, f"{self.name} as {dtype}")
        return dst

    def _classifier(self, v: Val) -> Val:
        if v.kind != "vec":
            raise CompilationError(f"{self.where}: the head's classifier reads a {v.kind} value")
        b, P, T, n = self.b, self.P, self.T, self.O
        lhs = v.ap
        if lhs.dtype != self.wdtype:
            lhs = self.pools["lhs"].next().flat(self.wdtype, P, T)
            b.copy(lhs, v.ap, f"{self.name} classifier operand")
        bias = self._bias()
        if bias is not None:
            ones = self._ones_tile()
        row = self._new("row")
        for o0 in range(0, n, PSUM_COLS):
            ow = min(PSUM_COLS, n - o0)
            acc = self.pools["out"].next().flat("f32", 1, ow)
            if bias is not None:  # the bias first (fp32 1 x bias: exact), while the weights still arrive
                b.load_stationary(replace(ones, partitions=1, pattern=((1, 1),)), f"{self.name} bias")
                b.multiply_moving(acc, _slice(bias[1].ap, o0, ow), acc=False, comment=f"{self.name} bias {o0}")
            for t in range(T):
                b.load_stationary(_column(lhs, t), f"{self.name} features c{t * P}")
                b.multiply_moving(acc, self.wtile.flat(self.wdtype, P, ow, t * n + o0), acc=bias is not None or t > 0,
                                  comment=f"{self.name} classes {o0}:{o0 + ow} c{t * P}")
            for c0 in range(o0, o0 + ow, COPY_COLS):  # in pieces, on the engines in turn
                cw = min(COPY_COLS, o0 + ow - c0)
                b.copy(_slice(row, c0, cw), _slice(acc, c0 - o0, cw), f"{self.name} classes {c0}:{c0 + cw}")
        if bias is not None:
            self.vals[bias[0].uid] = Val("row", row)
        return Val("row", row)

    def _bias(self) -> tuple[Instruction, Val] | None:
        """The dot's bias add (its only user, adding a constant row), accumulated in PSUM with the products."""
        users = [i for i in self.comp.instructions if self.dot in i.operands]
        if len(users) != 1 or users[0].opcode != "add" or self.dot.shape.dtype != "f32" \
                or users[0].shape.dtype != "f32" or self.dot is self.comp.root:
            return None
        add = users[0]
        other = self._operand(add, 1 if add.operands[0] is self.dot else 0)
        return (add, other) if other.kind == "row" and other.ap.dtype == "f32" else None

    def _ones_tile(self) -> AccessPattern:
        if not hasattr(self, "_ones"):
            self._ones = self.pools["ones"].next().flat("f32", self.P, self.P)
            self.b.memset(self._ones, 1.0, f"{self.name} ones")
        return self._ones

    def _binary(self, inst: Instruction, op: str, a: Val, c: Val) -> Val:
        b = self.b
        kinds = {a.kind, c.kind} - {"scalar", "stat"}
        if len(kinds) > 1:
            raise CompilationError(f"{self.where}: %{inst.name} combines {a.kind} and {c.kind} values")
        if not kinds:
            kind = "stat" if "stat" in (a.kind, c.kind) else "scalar"
        else:
            kind = kinds.pop()
        if kind == "scalar":
            return Val("scalar", scalar=float(_fold(op, a.scalar, c.scalar)))
        if a.kind == kind and c.kind == kind:
            dst = self._new(kind)
            b.tensor_tensor(dst, a.ap, c.ap, op, f"{self.name} {inst.name}")
            return Val(kind, dst)
        if a.kind != kind and op in COMMUTATIVE:
            a, c = c, a
        if a.kind == kind and c.kind in ("scalar", "stat") and not (kind == "row" and c.kind == "stat"):
            dst = self._new(kind)
            if c.kind == "scalar":
                b.tensor_scalar(dst, a.ap, op, c.scalar, f"{self.name} {inst.name}")
            else:
                b.tensor_scalar(dst, a.ap, op, comment=f"{self.name} {inst.name}", scalar_vec=c.ap)
            return Val(kind, dst)
        # a scalar or statistic first in a non-commutative op: spread it over the value's shape first
        return self._binary(inst, op, self._spread(a, kind), self._spread(c, kind))

    def _spread(self, v: Val, kind: str) -> Val:
        if v.kind == kind:
            return v
        dst = self._new(kind)
        b = self.b
        if v.kind == "scalar":
            b.memset(dst, v.scalar, f"{self.name} spread")
        elif kind == "row":
            raise CompilationError(f"{self.where}: a statistic over the channels read after the classifier")
        else:
            b.memset(dst, 0.0, f"{self.name} spread")
            b.tensor_scalar(dst, dst, "add", comment=f"{self.name} spread", scalar_vec=v.ap)
        return Val(kind, dst)

    def _unary(self, inst: Instruction, func: str, a: Val) -> Val:
        dtype = isa_dtype_of(inst)
        if a.kind == "scalar":
            if func != "copy":
                raise CompilationError(f"{self.where}: %{inst.name} of a scalar constant was not folded")
            return a
        dst = replace(self._new(a.kind, dtype), pattern=a.ap.pattern, partitions=a.ap.partitions)
        if func == "copy":
            self.b.copy(dst, a.ap, f"{self.name} {inst.name}")
        else:
            self.b.activation(dst, a.ap, func, comment=f"{self.name} {inst.name}")
        return Val(a.kind, dst)


def _column(ap: AccessPattern, t: int) -> AccessPattern:
    """Column t of a [P, T] tile."""
    return _slice(ap, t, 1)


def _slice(ap: AccessPattern, c0: int, n: int) -> AccessPattern:
    return replace(ap, offset=ap.offset + c0 * ap.itemsize, pattern=((1, n),))


def _fold(op: str, a: float, c: float) -> float:
    f32 = np.float32
    return {"add": lambda: f32(a) + f32(c), "subtract": lambda: f32(a) - f32(c), "multiply": lambda: f32(a) * f32(c),
            "divide": lambda: f32(a) / f32(c), "max": lambda: max(f32(a), f32(c)),
            "min": lambda: min(f32(a), f32(c))}[op]()


def head_kernel(b: ProgramBuilder, comp: Computation, ops: list, out: View, name: str, where: str) -> None:
    HeadKernel(b, comp, ops, out, name, where).emit()
