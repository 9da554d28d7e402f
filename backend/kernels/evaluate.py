"""Instruction selection for one tile of an expression (expr.Node): [pw partitions x fw free elements].

Every node evaluates to one of three operand kinds, known before any instruction is chosen:
- T, `Tensor`: a full [pw, fw] tile (the node varies along the free axes);
- V, `PVec`: a per-partition [pw, 1] vector (a free-axis reduction, a leaf broadcast along the free
  axes, anything computed from those);
- S, `Scalar`: an immediate (folded at compile time when all inputs are immediates).

Selection, per node (table driven, greedy):
- ACT computes `func(src * scale + bias)` in one pass: a chain `func?(add|subtract?(mul|div|neg?(x, s), b))`
  whose inner nodes have one use becomes one `activation` (s, b: immediate or vector); x * x is
  ACT's `square`. When a `reduce_add` consumes the node, ACT's accumulator adds the outputs up in the
  same instruction (softmax's exp and row sum).
- binary ops: `tensor_tensor`; `tensor_scalar` when one side is an immediate or (for a T result) a
  vector, swapping the operands of commutative ops and comparisons, chaining two ALU ops for s - x.
- reductions over the free axes: DVE `tensor_reduce` into a [pw, 1] vector.
- select: `select`; iota: `iota` (POOL/DVE); convert/copy: `tensor_copy` or ACT copy. Temporaries come
from free lists and return when their last user has been emitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from backend.alloc import Pool, PoolSpec, Tile
from backend.kernels import integer
from backend.kernels.evaluate_chains import FusedChains, Operand, PVec, Scalar, Tensor
from backend.kernels.expr import FOLD, KEY_DTYPES, REDUCE_OPS, SWAPPED, Node, iota_form, walk, where_of
from hlo.errors import CompilationError
from isa.dtypes import WIDE_INTEGERS
from isa.dtypes import dtype as isa_dtype
from isa.program import AccessPattern


@dataclass(frozen=True)
class Coords:
    """Where a tile lies in the kernel's logical dims (for iota): the partition axis from p0 (None:
    one partition), the free axes as (axis, start, count) outermost first, the pinned loop axes."""

    p_axis: int | None
    p0: int
    free: tuple[tuple[int, int, int], ...]
    fixed: tuple[tuple[int, int], ...] = ()


class TempStore:
    """Free lists of full [pw, fw] and vector [pw, 1] temporaries for one tile (dry: unlimited, counted)."""

    def __init__(self, full: list[Tile] | None, vec: list[Tile] | None, item: int = 4):
        self.dry, self.item = full is None, item  # item: bytes per element the temporaries hold
        self.free = {"T": list(reversed(full or [])), "V": list(reversed(vec or []))}
        self.peak, self.live = {"T": 0, "V": 0}, {"T": 0, "V": 0}
        self.widest = 4  # bytes of the widest element a temporary held (8: 64-bit integers)

    @staticmethod
    def rotating(pool: Pool) -> TempStore:
        """Temporaries taken from a pool's rotation (never given back: the pool must hold more buffers
        than one evaluation takes)."""
        store = TempStore([], [])
        store.pool = pool
        return store

    pool: Pool | None = None

    def take(self, kind: str, where: str, dtype: str = "f32") -> Tile:
        self.widest = max(self.widest, isa_dtype(dtype).itemsize)  # Temporaries sizes the slots by it
        self.live[kind] += 1
        self.peak[kind] = max(self.peak[kind], self.live[kind])
        if self.dry:
            return Tile("sbuf", 0, 1 << 20, None)  # type: ignore[arg-type]
        if self.pool is not None:
            return self.pool.next()
        if not self.free[kind]:
            raise CompilationError(f"{where}: internal error: the tile evaluation ran out of temporaries")
        return self.free[kind].pop()

    def give(self, kind: str, tile: Tile) -> None:
        self.live[kind] -= 1
        if not self.dry and self.pool is None:
            self.free[kind].append(tile)


class _Null:
    """A builder that emits nothing (dry runs count temporaries)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class TileEvaluator(FusedChains):
    """Evaluates expression nodes for one tile; `leaves` maps leaf nodes (by id) to loaded operands,
    `acc` is the accumulator's PSUM pattern, `preset` gives operands of nodes computed elsewhere."""

    def __init__(self, builder, temps: TempStore | Pool, pw: int, fw: int, leaves: dict[int, Operand], *,
                 acc: AccessPattern | None = None, label: str = "", coords: Coords | None = None,
                 preset: dict[int, Operand] | None = None):
        """`temps`: free lists (Temporaries.store()), or a pool whose buffers rotate, with at least
        expr.temps_needed(root) of them."""
        self.b, self.leaves = builder, leaves
        self.pw, self.fw = pw, fw
        self.temps = temps if isinstance(temps, TempStore) else TempStore.rotating(temps)
        self.acc, self.label, self.coords = acc, label, coords
        self._memo: dict[int, Operand] = dict(preset or {})
        self._owned: dict[int, tuple[str, Tile]] = {}
        self._extra: list[tuple[str, Tile]] = []  # instruction-local scratch, a stack
        self._uses: dict[int, int] = {}
        self._users: dict[int, list[Node]] = {}
        self._kind: dict[int, str] = {}

    # -- entry points ---------------------------------------------------------------------------------------
    def run(self, root: Node, dst: AccessPattern) -> None:
        """Compute `root` into `dst` ([pw, fw], or [pw, 1] when root does not vary along the free axes)."""
        self._prepare([root])
        result = self._eval(root, dst)
        if not (isinstance(result, Tensor | PVec) and result.ap is dst):
            self._materialize(result, dst)

    def values(self, nodes: list[Node]) -> list[Operand]:
        """Evaluate several nodes; their operands stay valid (not recycled) afterwards."""
        self._prepare(nodes)
        return [self._eval(n) for n in nodes]

    def kind(self, node: Node) -> str:
        return self._kind[id(node)]

    # -- analysis -------------------------------------------------------------------------------------------
    def _prepare(self, roots: list[Node]) -> None:
        for node in walk(roots):
            for i in node.inputs:
                self._uses[id(i)] = self._uses.get(id(i), 0) + 1
                self._users.setdefault(id(i), []).append(node)
            self._kind[id(node)] = self._static_kind(node)
        for r in roots:
            self._uses[id(r)] = self._uses.get(id(r), 0) + 1  # the caller's use: never recycled

    def _static_kind(self, node: Node) -> str:
        if id(node) in self._memo:
            return _kind_of(self._memo[id(node)])
        if node.op == "leaf":
            return _kind_of(self.leaves[id(node)])
        if node.op == "acc":
            return "T"
        if node.op == "scalar":
            return "S"
        if node.op == "iota":
            return "V" if self._iota_form(node) == "vector" else "T"
        kinds = [self._kind[id(i)] for i in node.inputs]
        if node.op in REDUCE_OPS:
            return "S" if kinds[0] == "S" else "V"
        if "T" in kinds:
            return "T"
        return "V" if "V" in kinds else "S"

    # -- temporaries ----------------------------------------------------------------------------------------
    def _new(self, node: Node, kind: str) -> AccessPattern:
        tile = self.temps.take(kind, where_of(node), node.dtype)
        self._owned[id(node)] = (kind, tile)
        return tile.flat(node.dtype, self.pw, self.fw if kind == "T" else 1)

    def _scratch(self, kind: str, dtype: str = "f32") -> AccessPattern:
        """A temporary for the instruction being built, returned by `_release_extra`."""
        tile = self.temps.take(kind, self.label, dtype)
        self._extra.append((kind, tile))
        return tile.flat(dtype, self.pw, self.fw if kind == "T" else 1)

    def _release_extra(self, mark: int) -> None:
        while len(self._extra) > mark:
            kind, tile = self._extra.pop()
            self.temps.give(kind, tile)

    def _release(self, node: Node) -> None:
        key = id(node)
        self._uses[key] -= 1
        if self._uses[key] == 0 and key in self._owned:
            kind, tile = self._owned.pop(key)
            self.temps.give(kind, tile)

    def _consume(self, node: Node, absorbed: frozenset[int] = frozenset()) -> None:
        """`node`'s instruction(s) are emitted: its inputs lose a use (through absorbed chain nodes)."""
        for i in node.inputs:
            if id(i) in absorbed:
                self._consume(i, absorbed)
            else:
                self._release(i)

    # -- evaluation -----------------------------------------------------------------------------------------
    def _eval(self, node: Node, dst: AccessPattern | None = None) -> Operand:
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        op, kind = node.op, self._kind[key]
        if op == "leaf":
            result: Operand = self.leaves[key]
        elif op == "acc":
            assert self.acc is not None
            result = Tensor(self.acc)
        elif kind == "S":
            result = Scalar(self._fold(node))
        elif self._narrowing(node):
            result = self._eval_narrowed(node, dst)
        else:
            act = None if op == "iota" or op in REDUCE_OPS or integer.is_int_node(node) else self._match_act(node)
            pair = self._match_pair(node) if act is None or not act[4] else None
            operands = list(node.inputs)
            if pair is not None:
                act, operands = None, [pair[0], pair[2], pair[4]]
            elif act is not None:
                src, _, scale, bias, _ = act
                operands = [src] + [n for n in (scale, bias and bias[0]) if isinstance(n, Node)]
            for n in operands:  # operands first: the output tile is taken when they are done
                self._eval(n)
            if key in self._memo:  # a reduce_add that ACT accumulated while computing its input
                return self._memo[key]
            use_dst = dst is not None and (dst.free_size == 1) == (kind == "V")
            out = dst if use_dst else self._new(node, kind)
            mark = len(self._extra)
            if op == "iota":
                self._iota(node, out)
            elif op in REDUCE_OPS:
                self._reduce(node, out)
            elif act is not None:
                self._emit_act(node, out, *act)
            elif pair is not None:
                self._emit_pair(node, out, *pair)
            else:
                self._lower(node, out)
            self._release_extra(mark)
            result = Tensor(out) if kind == "T" else PVec(out)
        self._memo[key] = result
        return result

    def _narrowing(self, node: Node) -> bool:
        """A float convert of an fp32 value only it uses: the instruction computing that value writes the
        converted type (engines compute in fp32 and round on the write, as the convert would)."""
        src = node.inputs[0] if node.op in ("convert", "copy") else None
        return (src is not None and src.dtype == "f32" and not integer.is_integer(node.dtype)
                and self._absorbable(src) and self._kind[id(src)] == self._kind[id(node)])

    def _eval_narrowed(self, node: Node, dst: AccessPattern | None) -> Operand:
        kind = self._kind[id(node)]
        out = dst if dst is not None and (dst.free_size == 1) == (kind == "V") else self._new(node, kind)
        inner = self._eval(node.inputs[0], out)
        if not (isinstance(inner, Tensor | PVec) and inner.ap is out):  # the source ignored the destination
            self._materialize(inner, out)
        self._consume(node)
        return Tensor(out) if kind == "T" else PVec(out)

    def _fold(self, node: Node) -> float | int:
        if node.op == "scalar":
            return node.value
        if (integer.is_int_node(node) or node.op == "total_order_key") and node.op not in REDUCE_OPS:
            return integer.fold(node, [self._eval(i).value for i in node.inputs])  # type: ignore[union-attr]
        values = [np.float32(self._eval(i).value) for i in node.inputs]  # type: ignore[union-attr]
        if node.op in REDUCE_OPS:
            if node.op == "reduce_multiply":
                return float(values[0] ** self.fw)
            return float(values[0] * self.fw) if node.op == "reduce_add" else float(values[0])
        fn = FOLD.get(node.op)
        if fn is None:
            raise CompilationError(f"{where_of(node)}: cannot fold {node.op} of immediates")
        with np.errstate(all="ignore"):
            return float(fn(*values))

    def _array(self, node: Node, kind: str) -> AccessPattern:
        """The operand of `node` as an array of the result's shape (materialized if broadcast)."""
        operand = self._eval(node)
        if _kind_of(operand) == kind:
            return operand.ap  # type: ignore[union-attr]
        ap = self._scratch(kind, node.dtype)
        self._materialize(operand, ap)
        return ap

    def _materialize(self, operand: Operand, dst: AccessPattern) -> None:
        b = self.b
        if isinstance(operand, Scalar):
            b.memset(dst, operand.value, f"{self.label} fill")  # exact for integer dsts (ProgramBuilder.memset)
        elif isinstance(operand, PVec) and dst.free_size != 1:
            b.memset(dst, 0.0, f"{self.label} zero")
            if integer.is_integer(dst.dtype) and integer.is_integer(operand.ap.dtype):
                self._int_emit("tensor_scalar", f"{self.label} expand vector", {"op": "add", "scalar": 0.0},
                               dst=dst, src=dst, scalar_vec=operand.ap)
            else:
                b.tensor_scalar(dst, dst, "add", 0.0, f"{self.label} expand vector", scalar_vec=operand.ap)
        else:
            b.copy(dst, operand.ap, f"{self.label} copy")

    # -- other nodes ----------------------------------------------------------------------------------------
    def _lower(self, node: Node, out: AccessPattern) -> None:
        op, b = node.op, self.b
        kind = self._kind[id(node)]
        if integer.is_int_node(node) and op not in ("convert", "copy", "select"):
            integer.check_int_op(node)
            self._int_lower(node, out, kind)
        elif op == "total_order_key" or (op == "negate" and node.dtype in KEY_DTYPES):
            self._bits_op(node, out, kind)  # exact: NaNs change sign too (TOTALORDER compares see it)
        elif op in ("convert", "copy"):
            b.copy(out, self._array(node.inputs[0], kind), f"{self.label} {op}")
        elif op == "negate":
            b.tensor_scalar(out, self._array(node.inputs[0], kind), "multiply", -1.0, f"{self.label} neg")
        elif op == "select":
            p, x, y = (self._array(i, kind) for i in node.inputs)
            b.select(out, p, x, y, f"{self.label} select")
        elif op in SWAPPED or op in ("subtract", "divide", "pow", "remainder"):
            self._binary(node, out, kind)
        else:
            raise CompilationError(f"{where_of(node)}: elementwise op {op!r} has no instruction mapping")
        self._consume(node)

    def _bits_op(self, node: Node, out: AccessPattern, kind: str) -> None:
        """A float negate or total_order_key: integer ops on its bits (integer.BITS_OPS), from SBUF, in its type."""
        src, dtype = self._array(node.inputs[0], kind), node.inputs[0].dtype
        if src.dtype != dtype or src.memory == "psum":
            src, held = self._scratch(kind, dtype), src
            self.b.copy(src, held, f"{self.label} {dtype} operand")
        dst = out if out.memory != "psum" and out.dtype == node.dtype else self._scratch(kind, node.dtype)
        integer.BITS_OPS[node.op](self.b, dst, src, f"{self.label} {node.op}")
        if dst is not out:
            self.b.copy(out, dst, f"{self.label} {node.op} result")

    def _int_lower(self, node: Node, out: AccessPattern, kind: str) -> None:
        """An integer node on GpSimd in its exact integer mode (docs/integer-semantics.md)."""
        op, label = node.op, f"{self.label} {node.op}"
        if op == "negate":
            self._int_emit("tensor_scalar", label, {"op": "multiply", "scalar": -1.0}, dst=out,
                           src=self._array(node.inputs[0], kind))
            return
        x, y = node.inputs
        kx, ky = self._kind[id(x)], self._kind[id(y)]
        if kx == kind and ky == kind:
            self._int_emit("tensor_tensor", label, {"op": op}, dst=out, a=self._array(x, kind), b=self._array(y, kind))
        elif kx == kind:
            self._int_scalar_op(out, self._array(x, kind), op, y, label)
        elif op in integer.INT_SWAPPED:
            self._int_scalar_op(out, self._array(y, kind), integer.INT_SWAPPED[op], x, label)
        else:
            self._int_emit("tensor_tensor", label, {"op": op}, dst=out, a=self._array(x, kind), b=self._array(y, kind))

    def _int_scalar_op(self, out: AccessPattern, src: AccessPattern, op: str, other: Node, label: str) -> None:
        args = self._scalar_args(other)
        if args["scalar_vec"] is not None and not self.temps.dry and not integer.is_integer(args["scalar_vec"].dtype):
            raise CompilationError(f"{where_of(other)}: internal error: a float vector operand "
                                   f"({args['scalar_vec'].dtype}) of an integer op")
        self._int_emit("tensor_scalar", label, {"op": op, **integer.immediate_attrs(args["scalar"])}, dst=out,
                       src=src, scalar_vec=args["scalar_vec"])

    def _int_emit(self, opcode: str, label: str, attrs: dict, **operands: AccessPattern | None) -> None:
        if not self.temps.dry and any(ap is not None and ap.memory == "psum" for ap in operands.values()):
            raise CompilationError(f"{self.label}: exact integer math reads PSUM, which GpSimd cannot access")
        self.b.emit("pool", opcode, label, {**attrs, "math": "int"}, **operands)

    def _binary(self, node: Node, out: AccessPattern, kind: str) -> None:
        op, b, label = node.op, self.b, f"{self.label} {node.op}"
        x, y = node.inputs
        kx, ky = self._kind[id(x)], self._kind[id(y)]
        if kx == kind and ky == kind:  # the accumulator with an SBUF tile into a narrow result: to fp32 first,
            xa, ya = self._array(x, kind), self._array(y, kind)  # so the op runs on DVE or GpSimd (bias adds)
            if kind == "T" and xa.memory == "psum" and out.memory == ya.memory == "sbuf" and out.dtype != "f32":
                b.copy(xa := self._scratch(kind), self._array(x, kind), f"{label} evacuate")
            b.tensor_tensor(out, xa, ya, op, label)
            return
        if kx == kind:
            b.tensor_scalar(out, self._array(x, kind), op, comment=label, **self._scalar_args(y))
            return
        ya = self._array(y, kind)
        if op in SWAPPED:
            b.tensor_scalar(out, ya, SWAPPED[op], comment=label, **self._scalar_args(x))
        elif op == "subtract":  # x - y = (y * -1) + x
            args = self._scalar_args(x)
            b.tensor_scalar(out, ya, "multiply", -1.0, comment=label, op1="add", scalar1=args["scalar"],
                            scalar1_vec=args["scalar_vec"])
        elif op == "divide" and kx == "S" and self._fold(x) != 0:  # s / y = reciprocal(y * (1 / s))
            b.activation(out, ya, "reciprocal", scale=1.0 / self._fold(x), comment=label)
        elif op == "pow" and kx == "S" and self._fold(x) > 0:  # s ** y = exp(y * ln s)
            b.activation(out, ya, "exp", scale=math.log(self._fold(x)), comment=label)
        else:
            b.tensor_tensor(out, self._array(x, kind), ya, op, label)

    def _scalar_args(self, node: Node) -> dict:
        operand = self._eval(node)
        if isinstance(operand, Scalar):
            return {"scalar": operand.value, "scalar_vec": None}
        return {"scalar": 0.0, "scalar_vec": operand.ap}  # type: ignore[union-attr]

    def _reduce(self, node: Node, out: AccessPattern) -> None:
        op, operand = node.op[len("reduce_"):], self._eval(node.inputs[0])
        if isinstance(operand, Tensor) and (integer.needs_exact_reduce(node) or op == "multiply"):
            self._tree_reduce(node, out, operand.ap, op)
        elif isinstance(operand, Tensor):
            self.b.tensor_reduce(out, operand.ap, op, f"{self.label} {node.op}")
        elif op == "add" and integer.needs_exact_reduce(node):  # fw equal integers
            self._int_emit("tensor_scalar", f"{self.label} {node.op}", {"op": "multiply", "scalar": float(self.fw)},
                           dst=out, src=operand.ap)  # type: ignore[union-attr]
        elif op == "add":  # a vector summed over fw equal elements
            self.b.tensor_scalar(out, operand.ap, "multiply", float(self.fw), f"{self.label} {node.op}")
        elif op == "multiply":
            raise CompilationError(f"{where_of(node)}: a product of a value broadcast along the reduced axes is not "
                                   "supported by the backend")
        else:
            self.b.copy(out, operand.ap, f"{self.label} {node.op}")  # type: ignore[union-attr]
        self._consume(node)

    def _tree_reduce(self, node: Node, out: AccessPattern, src: AccessPattern, op: str) -> None:
        """A reduction over the free axis by pairwise halving: the upper half is combined into the lower until
        one element is left. Integers: exact on GpSimd (math=int; wrapping adds are associative); products
        (no engine reduces by multiplying): fp32 multiplies."""
        label = f"{self.label} {node.op}"
        work = self._scratch("T", node.inputs[0].dtype)
        self.b.copy(work, src, f"{label} stage", engines=("dve", "pool"))
        size, n = src.itemsize, self.fw
        while n > 1:
            h = n // 2
            lo = replace(work, pattern=((1, h),))
            hi = replace(work, offset=work.offset + (n - h) * size, pattern=((1, h),))
            if integer.is_integer(work.dtype):
                self._int_emit("tensor_tensor", label, {"op": op}, dst=lo, a=lo, b=hi)
            else:
                self.b.tensor_tensor(lo, lo, hi, op, label)
            n -= h
        self.b.copy(out, replace(work, pattern=((1, 1),)), f"{label} result", engines=("dve", "pool"))

    def _iota_form(self, node: Node) -> str:
        assert node.view is not None and self.coords is not None
        return iota_form(node.view, [(a, n) for a, _, n in self.coords.free])

    def _iota(self, node: Node, out: AccessPattern) -> None:
        """value = offset + strides . index: POOL/DVE iota gives base + channel_multiplier * p + i."""
        view, c = node.view, self.coords
        assert view is not None and c is not None
        base = view.offset + sum(view.strides[a] * s for a, s, _ in c.free)
        base += sum(view.strides[a] * i for a, i in c.fixed)
        cm = 0
        if c.p_axis is not None:
            base += view.strides[c.p_axis] * c.p0
            cm = view.strides[c.p_axis]
        form = self._iota_form(node)
        wide = out.dtype in WIDE_INTEGERS  # 64-bit integers: GpSimd only
        engine = "pool" if wide else self.b.pick_engine(("pool", "dve")) if out.memory == "sbuf" else "dve"
        if form in ("vector", "ramp"):
            self.b.iota(out, int(base), int(cm), f"{self.label} iota", engine=engine)
            return
        if form == "table":  # the kernels read such iotas as constants (elementwise._iotas_as_constants)
            raise CompilationError(f"{where_of(node)}: internal error: an iota over several free axes of a tile")
        stride = next(view.strides[a] for a, _, n in c.free if n > 1)
        vec = self._scratch("V", out.dtype if wide else "f32")
        self.b.iota(vec, int(base), int(cm), f"{self.label} iota base", engine=engine)
        self.b.iota(out, 0, 0, f"{self.label} iota ramp", engine=engine)
        if wide:  # exact: the ramp times its stride plus the base, in GpSimd's integer mode
            self._int_emit("tensor_scalar", f"{self.label} iota stride", {"op": "multiply", **integer.immediate_attrs(
                stride), "op1": "add", "scalar1": 0.0}, dst=out, src=out, scalar1_vec=vec)
        else:
            self.b.tensor_scalar(out, out, "multiply", float(stride), f"{self.label} iota stride", op1="add",
                                 scalar1_vec=vec)


def _kind_of(operand: Operand) -> str:
    return "T" if isinstance(operand, Tensor) else "V" if isinstance(operand, PVec) else "S"


class Temporaries:
    """The temporaries of a kernel's tile evaluations: full [pmax, fmax] tiles and [pmax, 1] vectors in
    two alternating sets, so that a tile's instructions do not wait for the readers of the previous
    tile's. Sized by a dry run of the kernel's own tile evaluation (`measure`)."""

    def __init__(self, name: str, fmax: int):
        self.name = name
        self.fmax = fmax
        self.n_full = self.n_vec = 0
        self.item = 4  # bytes per element: 8 when an evaluation holds 64-bit integers
        self._pools: tuple[Pool, Pool] | None = None
        self._turn = 0

    def measure(self, evaluate) -> None:
        """Run `evaluate(builder, temps)` dry and keep the peak number of temporaries it takes."""
        temps = TempStore(None, None)
        evaluate(_Null(), temps)
        self.n_full = max(self.n_full, temps.peak["T"])
        self.n_vec = max(self.n_vec, temps.peak["V"])
        self.item = max(self.item, temps.widest)

    def specs(self) -> list[PoolSpec]:
        return [PoolSpec(f"{self.name}_full", "sbuf", self.fmax * self.item, 2 * max(1, self.n_full)),
                PoolSpec(f"{self.name}_vec", "sbuf", self.item, 2 * max(1, self.n_vec))]

    def bind(self, pools: dict[str, Pool]) -> None:
        self._pools = (pools[f"{self.name}_full"], pools[f"{self.name}_vec"])

    def store(self) -> TempStore:
        """The free lists for the next tile (the sets alternate)."""
        assert self._pools is not None
        full, vec = self._pools
        t = self._turn % 2
        self._turn += 1
        nf, nv = max(1, self.n_full), max(1, self.n_vec)
        return TempStore(full.tiles[t * nf:(t + 1) * nf], vec.tiles[t * nv:(t + 1) * nv], self.item)


def dry_operand(kind: str) -> Operand:
    """A stand-in operand of `kind` ("T", "V", "S") for dry runs."""
    ap = AccessPattern("sbuf", "f32", 0, ((1, 1),))
    return Tensor(ap) if kind == "T" else PVec(ap) if kind == "V" else Scalar(0.0)

