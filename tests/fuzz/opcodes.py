"""Per-opcode differential fuzzing: every opcode of the IR's table (hlo.shape_inference.RULES), random shapes
(0-d, size 1, odd, more than 128 rows) and every element type the op accepts, compiled at -O0 and -O2, run
in checked mode and compared with the HLO interpreter.

``opcode_case(opcode, rng)`` writes one small module around the opcode (HLO text) and its inputs;
``run_opcode_case`` classifies it per optimization level:

  ok        the emulator's outputs equal the interpreter's (integers and pred exactly; floats within the
            dtype's tolerance, NaN where the interpreter has NaN)
  refused   a typed error (NeuroncError) before anything ran: the backend says it does not compile it
  mismatch  it ran and gave other numbers (a wrong number: a failure)
  crash     any other exception, or an ISA error while running (race, uninitialized read...): a failure
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from compiler.errors import NeuroncError
from hlo.interpreter import evaluate
from hlo.ir import numpy_dtype
from hlo.parser import parse_module
from hlo.shape_inference import RULES

FLOATS = ("f32", "bf16", "f16")
SIGNED = ("s8", "s16", "s32")
UNSIGNED = ("u8", "u16", "u32")
INTS = SIGNED + UNSIGNED
ALL = ("pred",) + INTS + FLOATS
FP8 = ("f8e4m3fn", "f8e5m2")
DIMS = (1, 1, 2, 3, 5, 7, 8, 13, 33, 130, 200)
TOL = {"f32": 1e-4, "bf16": 2e-2, "f16": 2e-3, "f8e4m3fn": 0.13, "f8e5m2": 0.26}
OUTCOMES = ("ok", "refused", "mismatch", "crash")


@dataclass
class OpCase:
    opcode: str
    text: str
    inputs: list[np.ndarray]


class _Module:
    """HLO text: helper computations and the entry, with numbered names and parameters."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.comps: list[str] = []
        self.lines: list[str] = []
        self.params: list[tuple[str, str]] = []
        self.inputs: list[np.ndarray] = []
        self.n = 0

    def name(self, base: str = "v") -> str:
        self.n += 1
        return f"%{base}{self.n}"

    def param(self, dtype: str, dims: tuple[int, ...], values: np.ndarray | None = None, kind: str = "any") -> str:
        name = f"%p{len(self.params)}"
        self.params.append((name, shape(dtype, dims)))
        self.inputs.append(values if values is not None else random_array(self.rng, dtype, dims, kind))
        return name

    def op(self, text_shape: str, rhs: str) -> str:
        name = self.name()
        self.lines.append(f"  {name} = {text_shape} {rhs}")
        return name

    def scalar_comp(self, opcode: str, dtype: str) -> str:
        return self.comp(f"  %a = {dtype}[] parameter(0)\n  %b = {dtype}[] parameter(1)\n"
                         f"  ROOT %r = {dtype}[] {opcode}(%a, %b)\n")

    def comp(self, body: str) -> str:
        """A helper computation; its instruction names get a suffix (names are unique in a module)."""
        k = len(self.comps)
        body = re.sub(r"%(\w+)", lambda mt: f"%{mt.group(1)}_{k}", body)
        name = f"%c{k}"
        self.comps.append(f"{name} {{\n{body}}}\n")
        return name

    def constant(self, dtype: str, value: float | bool) -> str:
        if dtype == "pred":
            text = "true" if value else "false"
        elif dtype in INTS:
            text = str(int(value))
        else:
            text = "inf" if value == np.inf else "-inf" if value == -np.inf else repr(float(value))
        return self.op(f"{dtype}[]", f"constant({text})")

    def text(self, root_shape: str, root: str) -> str:
        params = "".join(f"  {n} = {s} parameter({i})\n" for i, (n, s) in enumerate(self.params))
        body = "\n".join(self.lines + [f"  ROOT %root = {root_shape} {root}"])
        return "HloModule fuzz\n\n" + "\n".join(self.comps) + f"\nENTRY %main {{\n{params}{body}\n}}\n"


def shape(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def random_dims(rng: random.Random, rank: int | None = None, max_elements: int = 4096) -> tuple[int, ...]:
    rank = rng.choice((0, 1, 1, 2, 2, 2, 3)) if rank is None else rank
    while True:
        dims = tuple(rng.choice(DIMS) for _ in range(rank))
        if math.prod(dims) <= max_elements:
            return dims


def random_array(rng: random.Random, dtype: str, dims: tuple[int, ...], kind: str = "any") -> np.ndarray:
    """Values for `dtype`; kind: "any" (specials included for floats), "positive", "small", "nonzero",
    "plain" (finite floats)."""
    g = np.random.default_rng(rng.getrandbits(32))
    np_dtype = numpy_dtype(dtype)
    if dtype == "pred":
        return g.integers(0, 2, dims).astype(bool)
    if dtype in INTS:
        info = np.iinfo(np_dtype)
        if kind in ("small", "exponent"):
            lo = 0 if kind == "exponent" else max(info.min, -9)
            return g.integers(lo, min(info.max, 9) + 1, dims).astype(np_dtype)
        x = g.integers(int(info.min), int(info.max) + 1, dims, dtype=np.int64)
        if x.size > 2:
            flat = x.reshape(-1)
            flat[g.integers(0, x.size, 2)] = [info.min, info.max]
            if kind != "nonzero":
                flat[g.integers(0, x.size)] = 0
        return x.astype(np_dtype)
    x = g.standard_normal(dims) * 2.0
    if kind == "positive":
        x = np.abs(x) + 0.1
    elif kind == "small":
        x = np.clip(x, -1.2, 1.2)
    elif kind == "nonzero":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    x = x.astype(np.float32)
    if kind == "any" and x.size > 3:
        flat = x.reshape(-1)
        picks = g.choice(x.size, 3, replace=False)
        flat[picks] = [np.nan, -0.0, np.inf]
    if kind == "any" and x.size > 5:
        x.reshape(-1)[:2] = x.reshape(-1)[2:4]  # ties
    return x.astype(np_dtype) if dtype != "bf16" else x.astype(ml_dtypes.bfloat16)


# ---- generators: one per opcode family ------------------------------------------------------------------------

UNARY_FLOAT = {"exponential": "small", "log": "positive", "sqrt": "positive", "rsqrt": "positive", "tanh": "plain",
               "logistic": "plain", "sine": "plain", "cosine": "plain", "tan": "small", "erf": "plain",
               "cbrt": "plain", "floor": "any", "ceil": "any", "round-nearest-afz": "any",
               "round-nearest-even": "any", "exponential-minus-one": "small", "log-plus-one": "positive",
               "is-finite": "any"}
UNARY_ANY = {"abs": SIGNED + FLOATS + ("u8",), "negate": SIGNED + FLOATS, "sign": SIGNED + FLOATS,
             "copy": ALL, "not": ("pred",) + INTS, "popcnt": INTS, "count-leading-zeros": INTS}
BINARY = {"add": INTS + FLOATS, "subtract": INTS + FLOATS, "multiply": INTS + FLOATS, "maximum": ALL[1:],
          "minimum": ALL[1:], "divide": INTS + FLOATS, "remainder": INTS + FLOATS, "power": FLOATS + ("s32",),
          "atan2": FLOATS, "and": ("pred",) + INTS, "or": ("pred",) + INTS, "xor": ("pred",) + INTS,
          "shift-left": INTS, "shift-right-arithmetic": INTS, "shift-right-logical": INTS}


def _unary(m: _Module, opcode: str) -> tuple[str, str]:
    dims = random_dims(m.rng)
    if opcode in UNARY_FLOAT:
        dtype = m.rng.choice(FLOATS)
        x = m.param(dtype, dims, kind=UNARY_FLOAT[opcode])
        out = "pred" if opcode == "is-finite" else dtype
    else:
        dtype = out = m.rng.choice(UNARY_ANY[opcode])
        x = m.param(dtype, dims, kind="any" if opcode in ("abs", "negate", "copy", "sign") else "plain")
    return shape(out, dims), f"{opcode}({x})"


def _binary(m: _Module, opcode: str) -> tuple[str, str]:
    dims = random_dims(m.rng)
    dtype = m.rng.choice(BINARY[opcode])
    kind_a, kind_b = "plain", "plain"
    if opcode in ("divide", "remainder"):
        kind_b = "any" if dtype in INTS else "nonzero"
    elif opcode == "power":
        kind_a, kind_b = ("positive", "small") if dtype in FLOATS else ("small", "exponent")
    elif opcode in ("maximum", "minimum", "add", "subtract"):
        kind_a = kind_b = "any"
    elif opcode.startswith("shift"):
        kind_b = "small"
    a, b = m.param(dtype, dims, kind=kind_a), m.param(dtype, dims, kind=kind_b)
    return shape(dtype, dims), f"{opcode}({a}, {b})"


def _compare(m: _Module, opcode: str) -> tuple[str, str]:
    dims = random_dims(m.rng)
    dtype = m.rng.choice(ALL)
    a = m.param(dtype, dims)
    b = m.param(dtype, dims, values=m.inputs[-1].copy() if m.rng.random() < 0.3 else None)
    direction = m.rng.choice(("EQ", "NE", "LT", "LE", "GT", "GE"))
    extra = ", type=TOTALORDER" if dtype in FLOATS and m.rng.random() < 0.5 else ""
    return shape("pred", dims), f"compare({a}, {b}), direction={direction}{extra}"


def _select_clamp(m: _Module, opcode: str) -> tuple[str, str]:
    dims = random_dims(m.rng)
    if opcode == "select":
        dtype = m.rng.choice(ALL + FP8)
        p = m.param("pred", dims)
        return shape(dtype, dims), f"select({p}, {m.param(dtype, dims)}, {m.param(dtype, dims)})"
    dtype = m.rng.choice(INTS + FLOATS)
    lo = m.param(dtype, (), values=np.array(-1, numpy_dtype(dtype)) if dtype not in UNSIGNED else
                 np.array(3, numpy_dtype(dtype)))
    hi = m.param(dtype, (), values=np.array(100, numpy_dtype(dtype)))
    return shape(dtype, dims), f"clamp({lo}, {m.param(dtype, dims)}, {hi})"


def _convert(m: _Module, opcode: str) -> tuple[str, str]:
    dims = random_dims(m.rng)
    src, dst = m.rng.choice(ALL + FP8), m.rng.choice(ALL + FP8)
    return shape(dst, dims), f"convert({m.param(src, dims)})"


def _layout(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dtype = rng.choice(ALL)
    dims = random_dims(rng, rank=rng.choice((1, 2, 3)))
    x = m.param(dtype, dims)
    if opcode in ("reshape", "bitcast"):
        n = math.prod(dims)
        out = rng.choice([(n,), (1, n), (n, 1)] + ([(dims[0], n // dims[0])] if dims[0] else []))
        return shape(dtype, out), f"{opcode}({x})"
    if opcode == "transpose":
        perm = list(range(len(dims)))
        rng.shuffle(perm)
        return shape(dtype, tuple(dims[p] for p in perm)), f"transpose({x}), dimensions={{{','.join(map(str, perm))}}}"
    if opcode == "broadcast":
        new = rng.choice((1, 3, 130))
        at = rng.randrange(len(dims) + 1)
        out = dims[:at] + (new,) + dims[at:]
        mapping = [i if i < at else i + 1 for i in range(len(dims))]
        return shape(dtype, out), f"broadcast({x}), dimensions={{{','.join(map(str, mapping))}}}"
    if opcode == "reverse":
        axes = sorted(rng.sample(range(len(dims)), rng.randint(1, len(dims))))
        return shape(dtype, dims), f"reverse({x}), dimensions={{{','.join(map(str, axes))}}}"
    if opcode == "slice":
        ranges, out = [], []
        for d in dims:
            start = rng.randrange(d)
            stop = rng.randint(start + 1, d)
            step = rng.choice((1, 1, 2, 3))
            ranges.append(f"[{start}:{stop}{'' if step == 1 else f':{step}'}]")
            out.append(-(-(stop - start) // step))
        return shape(dtype, tuple(out)), f"slice({x}), slice={{{', '.join(ranges)}}}"
    if opcode == "concatenate":
        axis = rng.randrange(len(dims))
        other = dims[:axis] + (rng.choice((1, 4, 130)),) + dims[axis + 1:]
        y = m.param(dtype, other)
        out = dims[:axis] + (dims[axis] + other[axis],) + dims[axis + 1:]
        return shape(dtype, out), f"concatenate({x}, {y}), dimensions={{{axis}}}"
    if opcode == "pad":
        cfg, out = [], []
        for d in dims:
            lo, hi, interior = rng.randint(-1 if d > 1 else 0, 2), rng.randint(0, 2), rng.choice((0, 0, 1))
            cfg.append(f"{lo}_{hi}" + (f"_{interior}" if interior else ""))
            out.append(d + lo + hi + (d - 1) * interior)
        value = m.param(dtype, ())
        return shape(dtype, tuple(out)), f"pad({x}, {value}), padding={'x'.join(cfg)}"
    raise AssertionError(opcode)


def _structural(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dtype = rng.choice(ALL)
    dims = random_dims(rng)
    if opcode == "iota":
        dims = random_dims(rng, rank=rng.choice((1, 2)))
        x = m.param(dtype if dtype != "pred" else "s32", dims)
        iota = m.op(shape(x and (dtype if dtype != "pred" else "s32"), dims),
                    f"iota(), iota_dimension={rng.randrange(len(dims))}")
        return shape(dtype if dtype != "pred" else "s32", dims), f"add({iota}, {x})" if dtype != "pred" else \
            f"add({iota}, {x})"
    if opcode == "constant":
        values = random_array(rng, "f32", dims, "plain").round(2)
        x = m.param("f32", dims)
        text = np.array2string(values, separator=", ", threshold=1 << 30).replace("[", "{").replace("]", "}")
        c = m.op(shape("f32", dims), f"constant({text})")
        return shape("f32", dims), f"add({c}, {x})"
    if opcode == "parameter":
        return shape(dtype, dims), f"copy({m.param(dtype, dims)})"
    x, y = m.param(dtype, dims), m.param("f32", ())
    t = m.op(f"({shape(dtype, dims)}, f32[])", f"tuple({x}, {y})")
    if opcode == "get-tuple-element":
        return shape(dtype, dims), f"get-tuple-element({t}), index=0"
    return f"({shape(dtype, dims)}, f32[])", f"tuple({x}, {y})"


def _reduce(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dims = random_dims(rng, rank=rng.choice((1, 2, 3)))
    kind = rng.choice(("add", "maximum", "minimum", "multiply", "and", "or"))
    dtype = "pred" if kind in ("and", "or") else rng.choice(INTS + FLOATS)
    x = m.param(dtype, dims, kind="small" if kind == "multiply" else "plain")
    init = {"add": 0, "multiply": 1, "and": True, "or": False}.get(kind)
    if init is None:
        init = (np.iinfo(numpy_dtype(dtype)).min if kind == "maximum" else np.iinfo(numpy_dtype(dtype)).max) \
            if dtype in INTS else (-np.inf if kind == "maximum" else np.inf)
    i = m.param(dtype, (), values=np.array(init, numpy_dtype(dtype))) if rng.random() < 0.15 else \
        m.constant(dtype, init)
    comp = m.scalar_comp(kind, dtype)
    if opcode == "reduce-window":
        window, out = [], []
        for d in dims:
            size = rng.randint(1, min(d, 3)) if rng.random() < 0.8 else d
            stride = rng.choice((1, 1, 2))
            lo = size - 1 if size == d and d > 1 and rng.random() < 0.5 else rng.randint(0, size - 1)
            hi = rng.randint(0, size - 1) if lo != size - 1 or size != d else 0
            window.append((size, stride, lo, hi))
            out.append((d + lo + hi - size) // stride + 1)
        attr = "size=" + "x".join(str(w[0]) for w in window) + " stride=" + "x".join(str(w[1]) for w in window) + \
            " pad=" + "x".join(f"{w[2]}_{w[3]}" for w in window)
        return shape(dtype, tuple(out)), f"reduce-window({x}, {i}), window={{{attr}}}, to_apply={comp}"
    axes = sorted(rng.sample(range(len(dims)), rng.randint(1, len(dims))))
    out = tuple(d for a, d in enumerate(dims) if a not in axes)
    return shape(dtype, out), f"reduce({x}, {i}), dimensions={{{','.join(map(str, axes))}}}, to_apply={comp}"


def _dot_conv(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dtype = rng.choice(("f32", "f32", "bf16", "s32", "s8"))
    out_dtype = "s32" if dtype == "s8" and rng.random() < 0.5 else dtype
    kind = "small" if dtype in INTS else "plain"
    if opcode == "dot":
        mm, k, n = rng.choice((1, 3, 130)), rng.choice((1, 5, 33, 140)), rng.choice((1, 7, 64))
        if rng.random() < 0.3:
            bt = rng.choice((2, 3))
            a, b = m.param(dtype, (bt, mm, k), kind=kind), m.param(dtype, (bt, k, n), kind=kind)
            return shape(out_dtype, (bt, mm, n)), (f"dot({a}, {b}), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, "
                                                   "rhs_batch_dims={0}, rhs_contracting_dims={1}")
        a, b = m.param(dtype, (mm, k), kind=kind), m.param(dtype, (k, n), kind=kind)
        return shape(out_dtype, (mm, n)), f"dot({a}, {b}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    if dtype in INTS:
        dtype = out_dtype = "f32"
    nb, c, o = rng.choice((1, 2)), rng.choice((1, 3, 8)), rng.choice((2, 5))
    h, w = rng.choice((4, 7)), rng.choice((4, 9))
    kh, kw = rng.choice((1, 3)), rng.choice((1, 3))
    x, wt = m.param(dtype, (nb, c, h, w), kind=kind), m.param(dtype, (o, c, kh, kw), kind=kind)
    pad = rng.choice((0, 1))
    ho, wo = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
    return shape(out_dtype, (nb, o, ho, wo)), (f"convolution({x}, {wt}), window={{size={kh}x{kw} pad={pad}_{pad}x"
                                               f"{pad}_{pad}}}, dim_labels=bf01_oi01->bf01")


def _indexing(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dtype = rng.choice(INTS + FLOATS)
    rows, cols = rng.choice((1, 5, 130)), rng.choice((1, 3, 17))
    x = m.param(dtype, (rows, cols))
    if opcode in ("dynamic-slice", "dynamic-update-slice"):
        i = m.param("s32", (), values=np.array(rng.randint(-2, rows + 2), np.int32))
        j = m.param("s32", (), values=np.array(rng.randint(-2, cols + 2), np.int32))
        sr, sc = rng.randint(1, rows), rng.randint(1, cols)
        if opcode == "dynamic-slice":
            return shape(dtype, (sr, sc)), f"dynamic-slice({x}, {i}, {j}), dynamic_slice_sizes={{{sr},{sc}}}"
        u = m.param(dtype, (sr, sc))
        return shape(dtype, (rows, cols)), f"dynamic-update-slice({x}, {u}, {i}, {j})"
    n = rng.choice((1, 4, 9))
    idx = m.param("s32", (n, 1), values=np.array([[rng.randint(-1, rows)] for _ in range(n)], np.int32))
    if opcode == "gather":
        return shape(dtype, (n, cols)), (f"gather({x}, {idx}), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
                                         f"start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{cols}}}")
    comb = rng.choice(("add", "maximum", "minimum", "multiply")) if rng.random() < 0.8 else None
    body = (f"  %a = {dtype}[] parameter(0)\n  %b = {dtype}[] parameter(1)\n"
            + (f"  ROOT %r = {dtype}[] {comb}(%a, %b)\n" if comb else f"  ROOT %r = {dtype}[] copy(%b)\n"))
    u = m.param(dtype, (n, cols), kind="small")
    return shape(dtype, (rows, cols)), (f"scatter({x}, {idx}, {u}), update_window_dims={{1}}, inserted_window_dims="
                                        f"{{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, "
                                        f"to_apply={m.comp(body)}")


def _sorting(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dtype = rng.choice(INTS + FLOATS)
    dims = random_dims(rng, rank=rng.choice((1, 2)), max_elements=2048)
    x = m.param(dtype, dims, kind="small" if rng.random() < 0.5 else "any")
    if opcode == "topk":
        k = rng.randint(0, min(dims[-1], 20))
        out = dims[:-1] + (k,)
        largest = rng.choice(("true", "false"))
        t = m.op(f"({shape(dtype, out)}, {shape('s32', out)})", f"topk({x}), k={k}, largest={largest}")
        return shape("s32", out), f"get-tuple-element({t}), index=1" if rng.random() < 0.5 else \
            f"get-tuple-element({t}), index=1"
    axis = rng.randrange(len(dims))
    direction = rng.choice(("LT", "GT"))
    total = ", type=TOTALORDER" if dtype in FLOATS and rng.random() < 0.7 else ""
    two = rng.random() < 0.5
    params = f"  %a = {dtype}[] parameter(0)\n  %b = {dtype}[] parameter(1)\n"
    if two:
        params += "  %c = s32[] parameter(2)\n  %d = s32[] parameter(3)\n"
    comp = m.comp(params + f"  ROOT %r = pred[] compare(%a, %b), direction={direction}{total}\n")
    if not two:
        return shape(dtype, dims), f"sort({x}), dimensions={{{axis}}}, is_stable=true, to_apply={comp}"
    v = m.param("s32", dims)
    s = m.op(f"({shape(dtype, dims)}, {shape('s32', dims)})",
             f"sort({x}, {v}), dimensions={{{axis}}}, is_stable=true, to_apply={comp}")
    return shape("s32", dims), f"get-tuple-element({s}), index=1"


def _control(m: _Module, opcode: str) -> tuple[str, str]:
    rng = m.rng
    dims = random_dims(rng, rank=rng.choice((1, 2)))
    x = m.param("f32", dims, kind="plain")
    xs = shape("f32", dims)
    if opcode == "call":
        comp = m.comp(f"  %a = {xs} parameter(0)\n  %t = {xs} tanh(%a)\n  ROOT %r = {xs} add(%t, %a)\n")
        return xs, f"call({x}), to_apply={comp}"
    if opcode == "custom-call":
        return xs, f"custom-call({x}), custom_call_target=\"{rng.choice(('gelu', 'gelu_tanh'))}\""
    if opcode == "fusion":
        comp = m.comp(f"  %a = {xs} parameter(0)\n  %t = {xs} multiply(%a, %a)\n  ROOT %r = {xs} subtract(%t, %a)\n")
        return xs, f"fusion({x}), kind=kLoop, calls={comp}"
    if opcode == "conditional":
        p = m.param("pred", ())
        b0 = m.comp(f"  %a = {xs} parameter(0)\n  ROOT %r = {xs} negate(%a)\n")
        b1 = m.comp(f"  %a = {xs} parameter(0)\n  ROOT %r = {xs} exponential(%a)\n")
        return xs, f"conditional({p}, {x}, {x}), true_computation={b0}, false_computation={b1}"
    trips = rng.choice((0, 1, 3, 16, 40))
    st = f"(s32[], {xs})"
    cond = m.comp(f"  %s = {st} parameter(0)\n  %i = s32[] get-tuple-element(%s), index=0\n"
                  f"  %n = s32[] constant({trips})\n  ROOT %r = pred[] compare(%i, %n), direction=LT\n")
    body = m.comp(f"  %s = {st} parameter(0)\n  %i = s32[] get-tuple-element(%s), index=0\n"
                  f"  %v = {xs} get-tuple-element(%s), index=1\n  %one = s32[] constant(1)\n"
                  f"  %j = s32[] add(%i, %one)\n  %h = f32[] constant(0.5)\n"
                  f"  %hb = {xs} broadcast(%h), dimensions={{}}\n"
                  f"  %w = {xs} multiply(%v, %hb)\n  ROOT %r = {st} tuple(%j, %w)\n")
    zero = m.op("s32[]", "constant(0)")
    init = m.op(st, f"tuple({zero}, {x})")
    loop = m.op(st, f"while({init}), condition={cond}, body={body}")
    return xs, f"get-tuple-element({loop}), index=1"


GENERATORS: dict[str, Callable[[_Module, str], tuple[str, str]]] = {
    **{op: _unary for op in (*UNARY_FLOAT, *UNARY_ANY)},
    **{op: _binary for op in BINARY},
    "compare": _compare, "select": _select_clamp, "clamp": _select_clamp, "convert": _convert,
    **{op: _layout for op in ("reshape", "bitcast", "transpose", "broadcast", "reverse", "slice", "concatenate",
                              "pad")},
    **{op: _structural for op in ("iota", "constant", "parameter", "tuple", "get-tuple-element")},
    "reduce": _reduce, "reduce-window": _reduce, "dot": _dot_conv, "convolution": _dot_conv,
    **{op: _indexing for op in ("gather", "scatter", "dynamic-slice", "dynamic-update-slice")},
    "sort": _sorting, "topk": _sorting,
    **{op: _control for op in ("call", "custom-call", "fusion", "conditional", "while")},
}
OPCODES = tuple(sorted(RULES))


def opcode_case(opcode: str, rng: random.Random) -> OpCase:
    m = _Module(rng)
    root_shape, root = GENERATORS[opcode](m, opcode)
    return OpCase(opcode, m.text(root_shape, root), m.inputs)


def mismatch(got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, the interpreter gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape} vs {w.shape}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g.astype(w.dtype), w):
                bad = np.argwhere(g.astype(w.dtype) != w)[0]
                return f"output {i} ({w.dtype}): {g[tuple(bad)]} vs {w[tuple(bad)]} at {tuple(bad)}"
            continue
        gf, wf = g.astype(np.float64), w.astype(np.float64)
        tol = TOL.get(str(w.dtype).replace("bfloat16", "bf16").replace("float32", "f32").replace("float16", "f16"),
                      1e-4)
        scale = np.nanmax(np.abs(np.where(np.isinf(wf), 0, wf))) if wf.size and not np.isnan(wf).all() else 0.0
        with np.errstate(invalid="ignore"):
            ok = (np.isnan(gf) & np.isnan(wf)) | (gf == wf) | (np.abs(gf - wf) <= tol * (np.abs(wf) + scale + 1e-6))
        if not ok.all():
            bad = tuple(np.argwhere(~ok)[0])
            return f"output {i} ({w.dtype}): {g[bad]} vs {w[bad]} at {bad}"
    return None


def run_opcode_case(case: OpCase, levels: tuple[int, ...] = (0, 2)) -> dict[int, tuple[str, str]]:
    """Per level: (outcome, detail)."""
    import compiler  # the compiler package (tests may import any layer)

    module = parse_module(case.text)
    with np.errstate(all="ignore"):
        want = evaluate(module, case.inputs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    result = {}
    for level in levels:
        try:
            exe = compiler.compile(case.text, opt_level=level)
        except NeuroncError as e:
            result[level] = ("refused", f"{type(e).__name__}: {e}".splitlines()[0])
            continue
        except Exception as e:  # noqa: BLE001 - the fuzzer classifies every failure
            result[level] = ("crash", f"compile: {type(e).__name__}: {e}".splitlines()[0])
            continue
        try:
            with np.errstate(all="ignore"):
                got = exe.run(*case.inputs, check=True)
        except Exception as e:  # noqa: BLE001
            result[level] = ("crash", f"run: {type(e).__name__}: {e}".splitlines()[0])
            continue
        why = mismatch(got, want)
        result[level] = ("mismatch", why) if why else ("ok", "")
    return result
