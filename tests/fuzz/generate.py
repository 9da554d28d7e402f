"""Random HLO programs: chains and DAGs of elementwise ops, broadcasts, reductions, dots and batched dots,
transposes, reshapes, slices, concatenations, converts, selects (compare/select/clamp, iota masks) and pads,
in f32 and bf16.

``generate(chooser, config)`` builds a verified ``hlo.ir.Module``. Every op class has a switch
(``GenConfig.classes``). Values keep an estimated range so that the generator can keep the numerics
well-defined: log/sqrt/rsqrt/divide/power get operands bounded away from zero (``exp(tanh(x))``), exp and
products get bounded operands (``tanh(x)``). Shapes are mostly small with a tail up to ``max_dim``; element
and multiply-accumulate caps keep one case fast on the emulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hlo.ir import Computation, Instruction, Module, Quoted, Shape, SliceSpec, numpy_dtype
from hlo.verifier import verify_module
from tests.fuzz.choices import Chooser

OP_CLASSES = ("elementwise", "broadcast", "reduce", "dot", "batch_dot", "transpose", "reshape", "slice",
              "concatenate", "convert", "select", "pad")
DIM_TIERS = (((1, 8), 55), ((9, 64), 30), ((65, 256), 10), ((257, 700), 5))
UNARY = (("negate", 10), ("tanh", 15), ("logistic", 10), ("exponential", 10), ("log", 8), ("sqrt", 8),
         ("rsqrt", 6), ("gelu", 6), ("gelu_tanh", 4), ("sine", 4), ("cosine", 4), ("abs", 4))
BINARY = (("add", 25), ("multiply", 20), ("subtract", 15), ("maximum", 12), ("minimum", 8), ("divide", 10),
          ("power", 5))
CONSTANTS = (0.0, 0.5, 1.0, -1.5, 2.0, 3.0, -0.25)
INPUT_RANGE = 5.0  # inputs are N(0, 1): |x| stays below this for the sizes generated


@dataclass(frozen=True)
class GenConfig:
    classes: tuple[str, ...] = OP_CLASSES
    dtypes: tuple[str, ...] = ("f32", "bf16")
    max_ops: int = 8
    max_dim: int = 700
    max_rank: int = 4
    max_elements: int = 1 << 14  # per value
    max_macs: int = 1 << 20  # per dot
    max_batch: int = 64  # batch elements of a batched dot (the backend emits matmuls per batch element)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.classes) - set(OP_CLASSES))
        if unknown:
            raise ValueError(f"unknown op class(es) {', '.join(unknown)}; known: {', '.join(OP_CLASSES)}")
        if not self.classes or not self.dtypes:
            raise ValueError("a GenConfig needs at least one op class and one dtype")


@dataclass
class Value:
    inst: Instruction
    lo: float  # estimated range of the values (exact for the elementwise ops, typical for sums)
    hi: float

    @property
    def dims(self) -> tuple[int, ...]:
        return self.inst.shape.dims

    @property
    def dtype(self) -> str:
        return self.inst.shape.dtype

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Program:
    module: Module
    classes: frozenset[str]  # the op classes the program actually uses
    choices: list[int] = field(default_factory=list)  # replaying these rebuilds the program
    spans: list[int] = field(default_factory=list)  # where each op's choices start


def generate(chooser: Chooser, config: GenConfig | None = None) -> Program:
    """A random program; ``chooser.choices`` afterwards records every decision taken."""
    gen = _Generator(chooser, config or GenConfig())
    module = gen.run()
    verify_module(module)
    return Program(module, frozenset(gen.used), list(chooser.choices), list(chooser.spans))


class _Generator:
    def __init__(self, ch: Chooser, cfg: GenConfig):
        self.ch, self.cfg = ch, cfg
        self.insts: list[Instruction] = []
        self.values: list[Value] = []
        self.n_params = 0
        self.reducers: dict[tuple[str, str], Computation] = {}
        self.used: set[str] = set()
        self.cls_of: dict[Instruction, str] = {}

    # -- driver ----------------------------------------------------------------------------------------------
    def run(self) -> Module:
        for _ in range(self.ch.integer(1, 3)):
            self.param(self.ch.choice(self.cfg.dtypes), self.shape())
        ops = {"elementwise": self.elementwise, "broadcast": self.broadcast, "reduce": self.reduce,
               "dot": lambda: self.dot(batch=False), "batch_dot": lambda: self.dot(batch=True),
               "transpose": self.transpose, "reshape": self.reshape, "slice": self.slice,
               "concatenate": self.concatenate, "convert": self.convert, "select": self.select, "pad": self.pad}
        for _ in range(self.ch.integer(1, self.cfg.max_ops)):
            self.ch.mark()
            cls = self.ch.choice(self.cfg.classes)
            ops[cls]()
        self.ch.mark()
        outputs = [self.values[-1]]
        used = {id(o) for inst in self.insts for o in inst.operands}
        dangling = [v for v in self.values[:-1] if id(v.inst) not in used and v.inst.opcode != "parameter"]
        for _ in range(self.ch.weighted([(0, 40), (1, 35), (2, 25)])):
            if dangling and self.ch.boolean(70):
                outputs.append(dangling.pop(self.ch.integer(0, len(dangling) - 1)))
            else:
                outputs.append(self.pick())
        if len(outputs) > 1:
            root = self.emit_tuple([v.inst for v in outputs])
        else:
            root = outputs[0].inst
        live = _live(root)
        module = Module("fuzz")
        for comp in self.reducers.values():
            if any(i.attrs.get("to_apply") is comp for i in live):
                module.add_computation(comp)
        insts = [i for i in self.insts if i in live or i.opcode == "parameter"]
        self.used = {self.cls_of[i] for i in insts if i in self.cls_of}
        module.add_computation(Computation("main", insts, root), entry=True)
        return module

    # -- emission --------------------------------------------------------------------------------------------
    def emit(self, opcode: str, dtype: str, dims: tuple[int, ...], operands: list[Value], lo: float, hi: float,
             cls: str | None = None, pickable: bool = True, **attrs: object) -> Value:
        inst = Instruction(f"v{len(self.insts)}", opcode, Shape.array(dtype, dims), [v.inst for v in operands],
                           dict(attrs))
        self.insts.append(inst)
        value = Value(inst, float(lo), float(hi))
        if pickable:  # predicates are not: they only feed selects
            self.values.append(value)
        if cls:
            self.cls_of[inst] = cls
        return value

    def emit_tuple(self, operands: list[Instruction]) -> Instruction:
        shape = Shape.tuple_of(o.shape for o in operands)
        inst = Instruction(f"v{len(self.insts)}", "tuple", shape, list(operands))
        self.insts.append(inst)
        return inst

    def param(self, dtype: str, dims: tuple[int, ...]) -> Value:
        inst = Instruction(f"p{self.n_params}", "parameter", Shape.array(dtype, dims),
                           parameter_number=self.n_params)
        self.n_params += 1
        self.insts.append(inst)
        value = Value(inst, -INPUT_RANGE, INPUT_RANGE)
        self.values.append(value)
        return value

    def constant(self, dtype: str, dims: tuple[int, ...]) -> Value:
        data = [self.ch.choice(CONSTANTS) for _ in range(math.prod(dims))]
        value = self.emit("constant", dtype, dims, [], min(data), max(data))
        value.inst.literal = np.array(data, dtype=np.float64).astype(numpy_dtype(dtype)).reshape(dims)
        return value

    # -- shapes and picking ----------------------------------------------------------------------------------
    def dim(self, cap: int) -> int:
        cap = max(1, min(cap, self.cfg.max_dim))
        lo, hi = self.ch.weighted(DIM_TIERS)
        hi = min(hi, cap)
        return self.ch.integer(min(lo, hi), hi)

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        if rank is None:
            rank = self.ch.weighted([(r, w) for r, w in ((0, 5), (1, 20), (2, 45), (3, 20), (4, 10))
                                     if r <= self.cfg.max_rank])
        dims: list[int] = []
        for _ in range(rank):
            dims.append(self.dim(self.cfg.max_elements // max(1, math.prod(dims))))
        return tuple(dims)

    def pick(self, accept=lambda v: True) -> Value | None:
        """An existing value (the latest one half of the time), or None when none is acceptable."""
        candidates = [v for v in self.values if accept(v)]
        if not candidates:
            return None
        if self.ch.boolean(50):
            return candidates[-1]
        return self.ch.choice(candidates)

    def pick_or_param(self, accept, rank: int) -> Value:
        value = self.pick(accept) if self.ch.boolean(85) else None
        return value or self.param(self.ch.choice(self.cfg.dtypes), self.shape(rank))

    # -- numeric guards --------------------------------------------------------------------------------------
    def unary(self, fn: str, x: Value) -> Value:
        lo, hi = _unary_range(fn, x.lo, x.hi)
        if fn in ("gelu", "gelu_tanh"):
            return self.emit("custom-call", x.dtype, x.dims, [x], lo, hi, "elementwise",
                             custom_call_target=Quoted(fn))
        return self.emit(fn, x.dtype, x.dims, [x], lo, hi, "elementwise")

    def bounded(self, x: Value, limit: float) -> Value:
        return x if x.mag <= limit else self.unary("tanh", x)

    def positive(self, x: Value) -> Value:
        """x itself when it is surely >= 0.25, else exp(tanh(x)) (in [0.37, 2.72])."""
        return x if x.lo >= 0.25 else self.unary("exponential", self.unary("tanh", x))

    # -- op classes ------------------------------------------------------------------------------------------
    def elementwise(self) -> None:
        a = self.pick() or self.param(self.ch.choice(self.cfg.dtypes), self.shape())
        if self.ch.boolean(35):
            fn = self.ch.weighted(UNARY)
            if fn in ("exponential", "sine", "cosine"):  # sin/cos: a large argument amplifies its rounding
                a = self.bounded(a, 8.0)
            elif fn in ("log", "sqrt", "rsqrt"):
                a = self.positive(a)
            self.unary(fn, a)
            return
        fn = self.ch.weighted(BINARY)
        b = self.partner(a)
        if fn == "divide":
            b = self.positive(b)
        elif fn == "power":
            a, b = self.positive(a), self.bounded(b, 2.0)
        elif fn == "multiply" and a.mag * b.mag > 1e6:
            b = self.unary("tanh", b)
        elif fn in ("add", "subtract") and max(a.mag, b.mag) > 1e6:
            a, b = self.bounded(a, 1.0), self.bounded(b, 1.0)
        lo, hi = _binary_range(fn, (a.lo, a.hi), (b.lo, b.hi))
        self.emit(fn, a.dtype, a.dims, [a, b], lo, hi, "elementwise")

    def partner(self, a: Value) -> Value:
        """A second operand with a's dims and dtype: an existing value, a new parameter, a broadcast of a
        lower-rank parameter or of a scalar constant, or a small constant."""
        same = [v for v in self.values if v.dims == a.dims and v.dtype == a.dtype]
        bcast = "broadcast" in self.cfg.classes
        source = self.ch.weighted([("existing", 35), ("param", 30), ("bcast_param", 15 if bcast and a.rank else 0),
                                   ("bcast_const", 12 if bcast else 0), ("const", 8 if a.size <= 16 else 0)])
        if source == "existing":
            return self.ch.choice(same)
        if source == "param":
            return self.param(a.dtype, a.dims)
        if source == "const":
            return self.constant(a.dtype, a.dims)
        if source == "bcast_const":
            return self.emit_broadcast(self.constant(a.dtype, ()), a.dims, ())
        kept = self.ch.subset(list(range(a.rank)))
        small = self.param(a.dtype, tuple(a.dims[i] for i in kept))
        return self.emit_broadcast(small, a.dims, tuple(kept))

    def emit_broadcast(self, x: Value, dims: tuple[int, ...], mapping: tuple[int, ...]) -> Value:
        return self.emit("broadcast", x.dtype, dims, [x], x.lo, x.hi, "broadcast", dimensions=mapping)

    def broadcast(self) -> None:
        if self.cfg.max_rank == 0:
            return
        x = self.pick_or_param(lambda v: v.rank < self.cfg.max_rank, self.ch.integer(0, self.cfg.max_rank - 1))
        dims, mapping = list(x.dims), list(range(x.rank))
        for _ in range(self.ch.integer(1, self.cfg.max_rank - x.rank)):
            at = self.ch.integer(0, len(dims))
            dims.insert(at, self.dim(self.cfg.max_elements // max(1, math.prod(dims))))
            mapping = [m + (m >= at) for m in mapping]
        if len(mapping) > 1 and "transpose" in self.cfg.classes and self.ch.boolean(10):  # transposing too
            order = self.permutation(len(mapping))
            x = self.emit("transpose", x.dtype, tuple(x.dims[p] for p in order), [x], x.lo, x.hi, "transpose",
                          dimensions=tuple(order))
            mapping = [mapping[p] for p in order]
        self.emit_broadcast(x, tuple(dims), tuple(mapping))

    def reduce(self) -> None:
        x = self.pick_or_param(lambda v: v.rank >= 1, self.ch.integer(1, self.cfg.max_rank))
        axes = tuple(self.ch.subset(list(range(x.rank)), min_size=1))
        kind = self.ch.weighted([("add", 60), ("maximum", 25), ("minimum", 15)])
        n = math.prod(x.dims[a] for a in axes)
        init_value = {"add": 0.0, "maximum": -math.inf, "minimum": math.inf}[kind]
        init = self.emit("constant", x.dtype, (), [], 0.0, 0.0)
        init.inst.literal = np.array(init_value, dtype=numpy_dtype(x.dtype))
        if kind == "add":
            spread = n if x.lo >= 0 or x.hi <= 0 else 3 * math.sqrt(n)
            lo, hi = min(x.lo * spread, 0.0), max(x.hi * spread, 0.0)
        else:
            lo, hi = x.lo, x.hi
        kept = tuple(d for i, d in enumerate(x.dims) if i not in axes)
        self.emit("reduce", x.dtype, kept, [x, init], lo, hi, "reduce", dimensions=axes,
                  to_apply=self.reducer(kind, x.dtype))

    def reducer(self, kind: str, dtype: str) -> Computation:
        key = (kind, dtype)
        if key not in self.reducers:
            name = f"{kind}_{dtype}"
            scalar = Shape.array(dtype, ())
            a = Instruction(f"{name}.a", "parameter", scalar, parameter_number=0)
            b = Instruction(f"{name}.b", "parameter", scalar, parameter_number=1)
            root = Instruction(f"{name}.r", kind, scalar, [a, b])
            self.reducers[key] = Computation(name, [a, b, root], root)
        return self.reducers[key]

    def dot(self, batch: bool) -> None:
        cfg, ch = self.cfg, self.ch
        n_batch = (2 if cfg.max_rank >= 4 and ch.boolean(25) else 1) if batch else 0
        lhs_rank = n_batch + (ch.integer(1, 2) if not batch else ch.weighted([(2, 75), (1, 25)]))
        if lhs_rank > cfg.max_rank:
            return
        lhs = self.pick_or_param(lambda v: v.rank == lhs_rank and v.size <= cfg.max_macs, lhs_rank)
        lb = tuple(self.ch.subset(list(range(lhs_rank)), min_size=n_batch)[:n_batch]) if batch else ()
        if math.prod(lhs.dims[i] for i in lb) > cfg.max_batch:
            return
        free = [i for i in range(lhs_rank) if i not in lb]
        lc = (ch.choice(free),)
        k = lhs.dims[lc[0]]
        rhs_free = ch.integer(0, 1) if n_batch + 2 <= cfg.max_rank else 0
        rhs = None
        if ch.boolean(20) and lhs.rank - n_batch - 1 == rhs_free:  # x^T x or a batched gram matrix
            rhs, rb, rc = lhs, lb, lc
        if rhs is None:
            rhs_rank = n_batch + 1 + rhs_free
            order = self.permutation(rhs_rank)  # rhs dim j holds role order[j]: batch..., contracting, free
            rb = tuple(order.index(i) for i in range(n_batch))
            rc = (order.index(n_batch),)
            dims = [0] * rhs_rank
            for i, j in zip(rb, lb):
                dims[i] = lhs.dims[j]
            dims[rc[0]] = k
            for j in range(rhs_rank):
                if order[j] > n_batch:
                    dims[j] = self.dim(cfg.max_macs // max(1, lhs.size))
            rhs = self.param(lhs.dtype, tuple(dims))
        out_dims = ([lhs.dims[i] for i in lb] + [d for i, d in enumerate(lhs.dims) if i not in lb + lc]
                    + [d for i, d in enumerate(rhs.dims) if i not in rb + rc])
        if math.prod(out_dims) > cfg.max_elements:
            return
        dtype = "f32" if lhs.dtype == "bf16" and ch.boolean(30) else lhs.dtype
        signed = lhs.lo < 0 < lhs.hi or rhs.lo < 0 < rhs.hi
        est = (3 * math.sqrt(k) if signed else k) * lhs.mag * rhs.mag
        lo = -est if signed or (lhs.lo < 0) != (rhs.lo < 0) else 0.0
        hi = est if signed or (lhs.lo < 0) == (rhs.lo < 0) else 0.0
        attrs = {"lhs_contracting_dims": lc, "rhs_contracting_dims": rc}
        if batch:
            attrs.update(lhs_batch_dims=lb, rhs_batch_dims=rb)
        self.emit("dot", dtype, tuple(out_dims), [lhs, rhs], lo, hi, "batch_dot" if batch else "dot", **attrs)

    def permutation(self, n: int) -> list[int]:
        items = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.ch.integer(0, i)
            items[i], items[j] = items[j], items[i]
        return items

    def transpose(self) -> None:
        x = self.pick_or_param(lambda v: v.rank >= 2, self.ch.integer(2, max(2, self.cfg.max_rank)))
        perm = tuple(self.permutation(x.rank))
        self.emit("transpose", x.dtype, tuple(x.dims[p] for p in perm), [x], x.lo, x.hi, "transpose",
                  dimensions=perm)

    def reshape(self) -> None:
        x = self.pick() or self.param(self.ch.choice(self.cfg.dtypes), self.shape())
        dims = list(x.dims)
        mode = self.ch.weighted([("merge", 30), ("split", 30), ("unit", 15), ("refactor", 25)])
        if mode == "merge" and len(dims) >= 2:
            i = self.ch.integer(0, len(dims) - 2)
            dims[i:i + 2] = [dims[i] * dims[i + 1]]
        elif mode == "split" and dims and len(dims) < self.cfg.max_rank:
            i = self.ch.integer(0, len(dims) - 1)
            divisors = [f for f in range(1, dims[i] + 1) if dims[i] % f == 0]
            f = self.ch.choice(divisors)
            dims[i:i + 1] = [f, dims[i] // f]
        elif mode == "unit" and len(dims) < self.cfg.max_rank:
            dims.insert(self.ch.integer(0, len(dims)), 1)
        else:
            rank = self.ch.integer(1 if x.size > 1 else 0, self.cfg.max_rank)
            dims = [1] * rank
            for p in _prime_factors(x.size):
                if rank:
                    dims[self.ch.integer(0, rank - 1)] *= p
        self.emit("reshape", x.dtype, tuple(dims), [x], x.lo, x.hi, "reshape")

    def slice(self) -> None:
        x = self.pick_or_param(lambda v: v.rank >= 1, self.ch.integer(1, max(1, self.cfg.max_rank)))
        ranges = []
        for d in x.dims:
            if self.ch.boolean(40):
                ranges.append((0, d, 1))
                continue
            start = self.ch.integer(0, d - 1)
            limit = self.ch.integer(start + 1, d)
            stride = 1 if self.ch.boolean(70) else self.ch.integer(1, 3)
            ranges.append((start, limit, stride))
        dims = tuple(-(-(limit - start) // stride) for start, limit, stride in ranges)
        self.emit("slice", x.dtype, dims, [x], x.lo, x.hi, "slice", slice=SliceSpec(tuple(ranges)))

    def concatenate(self) -> None:
        x = self.pick_or_param(lambda v: v.rank >= 1, self.ch.integer(1, max(1, self.cfg.max_rank)))
        axis = self.ch.integer(0, x.rank - 1)
        parts, total = [x], x.dims[axis]
        rest = x.size // x.dims[axis]

        def fits(v: Value) -> bool:
            return (v.dtype == x.dtype and v.rank == x.rank
                    and all(a == b for i, (a, b) in enumerate(zip(v.dims, x.dims)) if i != axis))

        for _ in range(self.ch.integer(1, 2)):
            other = self.pick(fits) if self.ch.boolean(50) else None
            if other is None:
                dims = list(x.dims)
                dims[axis] = self.dim(self.cfg.max_elements // max(1, rest) - total)
                other = self.param(x.dtype, tuple(dims))
            parts.append(other)
            total += other.dims[axis]
        if total * rest > self.cfg.max_elements:
            return
        dims = list(x.dims)
        dims[axis] = total
        lo, hi = min(p.lo for p in parts), max(p.hi for p in parts)
        self.emit("concatenate", x.dtype, tuple(dims), parts, lo, hi, "concatenate", dimensions=(axis,))

    def select(self) -> None:
        """select(compare(a, b), a, b) or with an iota mask (as attention masks are built), or clamp."""
        a = self.pick() or self.param(self.ch.choice(self.cfg.dtypes), self.shape())
        kind = self.ch.weighted([("compare", 45), ("mask", 30 if a.rank else 0), ("clamp", 25)])
        if kind == "clamp":
            low, high = sorted((self.constant(a.dtype, ()) for _ in range(2)), key=lambda c: c.lo)
            self.emit("clamp", a.dtype, a.dims, [low, a, high], max(low.lo, min(a.lo, high.lo)),
                      min(high.lo, max(a.hi, low.lo)), "select")
            return
        b = self.partner(a)
        direction = self.ch.choice(("EQ", "NE", "LT", "LE", "GT", "GE"))
        if kind == "compare":
            pred = self.emit("compare", "pred", a.dims, [a, b], 0, 1, "select", pickable=False, direction=direction)
        else:
            axis = self.ch.integer(0, a.rank - 1)
            iota = self.emit("iota", "s32", a.dims, [], 0, a.dims[axis], "select", pickable=False,
                             iota_dimension=axis)
            k = self.emit("constant", "s32", (), [], 0, 0, pickable=False)
            k.inst.literal = np.array(self.ch.integer(0, a.dims[axis]), dtype=np.int32)
            bound = self.emit("broadcast", "s32", a.dims, [k], 0, 0, "select", pickable=False, dimensions=())
            pred = self.emit("compare", "pred", a.dims, [iota, bound], 0, 1, "select", pickable=False,
                             direction=direction)
        self.emit("select", a.dtype, a.dims, [pred, a, b], min(a.lo, b.lo), max(a.hi, b.hi), "select")

    def pad(self) -> None:
        x = self.pick_or_param(lambda v: v.rank >= 1, self.ch.integer(1, max(1, self.cfg.max_rank)))
        config, dims = [], []
        for n in x.dims:
            interior = self.ch.weighted([(0, 80), (1, 15), (2, 5)])
            dilated = n + max(n - 1, 0) * interior
            lo = self.ch.integer(-min(2, dilated - 1), 3)
            hi = self.ch.integer(-min(2, dilated + lo - 1), 3)
            config.append((lo, hi, interior))
            dims.append(lo + dilated + hi)
        if math.prod(dims) > self.cfg.max_elements:
            return
        init = self.constant(x.dtype, ())
        text = "x".join(f"{lo}_{hi}" + (f"_{i}" if i else "") for lo, hi, i in config)
        self.emit("pad", x.dtype, tuple(dims), [x, init], min(x.lo, init.lo), max(x.hi, init.hi), "pad",
                  padding=text)

    def convert(self) -> None:
        x = self.pick() or self.param(self.ch.choice(self.cfg.dtypes), self.shape())
        to = "bf16" if x.dtype == "f32" else "f32"
        self.emit("convert", to, x.dims, [x], x.lo, x.hi, "convert")


def _unary_range(fn: str, lo: float, hi: float) -> tuple[float, float]:
    if fn == "negate":
        return -hi, -lo
    if fn == "tanh":
        return math.tanh(lo), math.tanh(hi)
    if fn == "logistic":
        return 1 / (1 + math.exp(-max(lo, -700.0))), 1 / (1 + math.exp(-min(hi, 700.0)))
    if fn == "exponential":
        return math.exp(min(lo, 700.0)), math.exp(min(hi, 700.0))
    if fn == "log":
        return math.log(lo), math.log(hi)
    if fn == "sqrt":
        return math.sqrt(lo), math.sqrt(hi)
    if fn == "rsqrt":
        return 1 / math.sqrt(hi), 1 / math.sqrt(lo)
    if fn in ("sine", "cosine"):
        return -1.0, 1.0
    if fn == "abs":
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    return min(-0.17, lo), max(0.0, hi)  # gelu, gelu_tanh


def _binary_range(fn: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if fn == "add":
        return a[0] + b[0], a[1] + b[1]
    if fn == "subtract":
        return a[0] - b[1], a[1] - b[0]
    if fn == "maximum":
        return max(a[0], b[0]), max(a[1], b[1])
    if fn == "minimum":
        return min(a[0], b[0]), min(a[1], b[1])
    if fn == "multiply":
        corners = [x * y for x in a for y in b]
    elif fn == "divide":
        corners = [x / y for x in a for y in b]
    else:  # power, with a > 0
        corners = [x ** y for x in a for y in b]
    return min(corners), max(corners)


def _live(root: Instruction) -> set[Instruction]:
    """The instructions the root depends on (dead ones are dropped: no pass or kernel ever sees them)."""
    live, stack = set(), [root]
    while stack:
        inst = stack.pop()
        if inst not in live:
            live.add(inst)
            stack.extend(inst.operands)
    return live


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    return factors
