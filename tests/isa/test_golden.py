"""Golden tests: every compute and data-movement instruction against a numpy reference, for every
dtype it accepts (PE: the float dtypes; everything else: all seven), run in checked mode.

References are computed in float64 from the exact input values and rounded into the destination
dtype the way machine-model.md says the machine does (fp32, then nearest even; fp8 and integers
saturate). Tolerances allow one unit in the last place of the destination for the math that fp32
and float64 round differently; data movement is compared bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from isa.dtypes import DTYPES, WIDE_INTEGERS
from isa.emulator import run_program
from isa.instructions import ACTIVATION_FUNCS, ALU_OPS
from tests.isa.emulator_helpers import hb, ins, program, ps, sb, tile_program

ALL = [d for d in DTYPES if d != "pred" and d not in WIDE_INTEGERS]  # pred, i64, u64: test_integer_mode.py
INTS = ("i32", "i8", "u8", "i16", "u16", "u32")
PE_DTYPES = ("f32", "bf16", "f16", "fp8e4", "fp8e5")
RTOL = {"f32": 2e-6, "f16": 2**-10, "bf16": 2**-7, "fp8e4": 2**-3, "fp8e5": 2**-2, **{i: 0.0 for i in INTS}}
P, F = 32, 48
rng = np.random.default_rng(7)


def values(dt: str, shape=(P, F), lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    """Random values of ``dt`` in [lo, hi] (integers for the integer dtypes, scaled up when the range is small)."""
    if dt in INTS:
        scale = 4 if hi - lo <= 8 else 1
        info = np.iinfo(DTYPES[dt].numpy)
        return rng.integers(max(int(lo * scale), info.min), min(int(hi * scale), info.max) + 1,
                            size=shape).astype(DTYPES[dt].numpy)
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(DTYPES[dt].numpy)


def f64(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def machine(x: np.ndarray, dt: str) -> np.ndarray:
    """float64 values as the machine stores them in ``dt``: via fp32, nearest even, saturating."""
    np_dt = DTYPES[dt].numpy
    x = np.asarray(x, dtype=np.float64)
    if dt in INTS:
        info = np.iinfo(np_dt)
        return np.clip(np.rint(np.nan_to_num(x)), info.min, info.max).astype(np_dt)
    x32 = x.astype(np.float32)
    if dt.startswith("fp8"):
        limit = float(ml_dtypes.finfo(np_dt).max)
        x32 = np.clip(x32, -limit, limit)
    with np.errstate(over="ignore"):  # f16/bf16 overflow to inf, as on the machine
        return x32.astype(np_dt)


def check(got: np.ndarray, ref: np.ndarray, dt: str, exact: bool = False, atol: float | None = None) -> None:
    """``got`` (dtype ``dt``) equals the float64 reference rounded into ``dt``, within one ulp unless exact."""
    want = machine(ref, dt)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if exact:
        np.testing.assert_array_equal(got, want)
        return
    if atol is None:
        atol = 1.0 if dt in INTS else 1e-6 if dt == "f32" else RTOL[dt] * 1e-2
    np.testing.assert_allclose(f64(got), f64(want), rtol=RTOL[dt], atol=atol)


def run_tiles(inputs, outputs, compute, target: str = "trn1") -> dict[str, np.ndarray]:
    prog, arrays = tile_program(inputs, outputs, compute, target)
    return run_program(prog, arrays, check=True).outputs


# ACT ------------------------------------------------------------------------------------------

def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACT_REF = {
    "identity": lambda x: x, "copy": lambda x: x, "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "sigmoid": _sigmoid, "tanh": np.tanh, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x, "square": np.square,
    "silu": lambda x: x * _sigmoid(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "erf": np.vectorize(math.erf),
    "cbrt": np.cbrt, "floor": np.floor, "ceil": np.ceil, "round_even": np.rint,
    "round_afz": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), "abs": np.abs, "sign": np.sign,
}
POSITIVE = ("log", "sqrt", "rsqrt", "reciprocal")


def test_the_reference_covers_every_activation_function():
    assert set(ACT_REF) == set(ACTIVATION_FUNCS)


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("func", ACTIVATION_FUNCS)
def test_activation(func, dt):
    x = values(dt, lo=0.25, hi=4.0) if func in POSITIVE else values(dt)
    if func == "tan":  # away from the pole at pi/2, where fp32's rounding of the argument dominates
        x = values(dt, lo=-1.0, hi=1.0)
    bias = rng.uniform(0.0, 0.5, (P, 1)).astype(np.float32)
    out = run_tiles({"x": (dt, x), "b": ("f32", bias)}, {"y": (dt, (P, F))},
                    lambda t: [ins("act", "activation", dst=t["y"], src=t["x"], bias=t["b"], func=func,
                                   scale=0.5)])["y"]
    check(out, ACT_REF[func](f64(x) * 0.5 + bias), dt)


@pytest.mark.parametrize("dt", ALL)
def test_activation_per_partition_scale_and_accumulator(dt):
    """exp(x * s) into dst; the registers sum the fp32 outputs over two instructions and are read out."""
    x, s = values("f32", lo=-1, hi=1), rng.uniform(-1, 1, (P, 1)).astype(np.float32)

    def body(t):
        def half(name: str, dt_: str, h: int):
            ap = t[name]
            return replace(ap, offset=ap.offset + h * (F // 2) * DTYPES[dt_].itemsize, pattern=((1, F // 2),))

        return [ins("act", "activation", dst=half("y", dt, 0), src=half("x", "f32", 0), scale_vec=t["s"],
                    func="exp", acc_cmd="reset_reduce"),
                ins("act", "activation", dst=half("y", dt, 1), src=half("x", "f32", 1), scale_vec=t["s"],
                    func="exp", acc_cmd="reduce", acc=t["a"])]

    out = run_tiles({"x": ("f32", x), "s": ("f32", s)}, {"y": (dt, (P, F)), "a": (dt, (P, 1))}, body)
    y = np.exp(f64(x) * s)
    check(out["y"], y, dt)
    check(out["a"], y.sum(axis=1, keepdims=True), dt, atol=1e-4 if dt == "f32" else None)


# DVE / POOL elementwise -----------------------------------------------------------------------

ALU_REF = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "max": np.maximum, "min": np.minimum, "pow": np.power,
    "is_equal": np.equal, "not_equal": np.not_equal, "is_gt": np.greater, "is_ge": np.greater_equal,
    "is_lt": np.less, "is_le": np.less_equal,
    "logical_and": lambda a, b: np.logical_and(a != 0, b != 0),
    "logical_or": lambda a, b: np.logical_or(a != 0, b != 0),
    **{name: (lambda fn: lambda a, b: fn(np.trunc(a).astype(np.int64), np.trunc(b).astype(np.int64)))(
        getattr(np, name)) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "remainder": np.fmod,
    **{name: (lambda f: lambda a, b: _shift32(f, a, b))(shift) for name, shift in (
        ("shift_left", lambda a, s: (a << s) & 0xFFFFFFFF), ("shift_right_logical", lambda a, s: a >> s),
        ("shift_right_arith", None))},
}


def _shift32(fn, a, b):
    """fp32-mode shifts: the values truncated to 32-bit integers, amounts outside 0..31 give 0 (the sign for
    an arithmetic right shift)."""
    a = np.trunc(a).astype(np.int64)
    s = np.trunc(b).astype(np.int64)
    ok = (s >= 0) & (s < 32)
    if fn is None:
        return np.where(ok, a >> np.where(ok, s, 0), np.where(a < 0, -1, 0))
    bits = fn(a & 0xFFFFFFFF, np.where(ok, s, 0))
    bits = np.where(bits >= 2**31, bits - 2**32, bits)
    return np.where(ok, bits, 0)


def alu_operands(op: str, dt: str) -> tuple[np.ndarray, np.ndarray]:
    if op == "pow":
        return values(dt, lo=0.5, hi=2.0), values(dt, lo=-2.0, hi=2.0) if dt not in INTS else values(dt, lo=0, hi=0.75)
    a, b = values(dt), values(dt)
    b[:, :8] = a[:, :8]  # equal elements for the comparisons
    b[:, 8:16] = 0  # zeros for the logical ops
    if op in ("divide", "remainder"):
        b[b == 0] = 1
    return a, b


def test_the_reference_covers_every_alu_op():
    assert set(ALU_REF) == set(ALU_OPS)


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("op", ALU_OPS)
def test_tensor_tensor(op, dt):
    a, b = alu_operands(op, dt)
    engine = "pool" if ALU_OPS.index(op) % 2 else "dve"
    out = run_tiles({"a": (dt, a), "b": (dt, b)}, {"y": (dt, (P, F))},
                    lambda t: [ins(engine, "tensor_tensor", dst=t["y"], a=t["a"], b=t["b"], op=op)])["y"]
    check(out, ALU_REF[op](f64(a), f64(b)), dt)


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("op,scalar", [("add", 1.5), ("subtract", 2.0), ("multiply", -0.25), ("divide", 3.0),
                                       ("max", 0.0), ("min", 0.5), ("is_ge", 0.5), ("bitwise_and", 6.0)])
def test_tensor_scalar(op, scalar, dt):
    x = values(dt)
    out = run_tiles({"x": (dt, x)}, {"y": (dt, (P, F))},
                    lambda t: [ins("dve", "tensor_scalar", dst=t["y"], src=t["x"], op=op, scalar=scalar)])["y"]
    check(out, ALU_REF[op](f64(x), np.float64(scalar)), dt)


@pytest.mark.parametrize("dt", ALL)
def test_tensor_scalar_two_chained_ops_with_per_partition_vectors(dt):
    """(x - mean) * rstd with mean and rstd per partition, then clamp: three forms of the two-op chain."""
    x, mean, rstd = values(dt), values(dt, (P, 1)), values(dt, (P, 1), lo=0.5, hi=2.0)

    def body(t):
        return [ins("pool", "tensor_scalar", dst=t["y"], src=t["x"], op="subtract", scalar=0.0,
                    scalar_vec=t["m"], op1="multiply", scalar1_vec=t["r"]),
                ins("dve", "tensor_scalar", dst=t["z"], src=t["x"], op="max", scalar=-1.0, op1="min",
                    scalar1=2.0),
                ins("dve", "tensor_scalar", dst=t["w"], src=t["x"], op="add", scalar=0.0, scalar_vec=t["m"],
                    op1="none", scalar1=5.0)]

    out = run_tiles({"x": (dt, x), "m": (dt, mean), "r": (dt, rstd)},
                    {"y": (dt, (P, F)), "z": (dt, (P, F)), "w": (dt, (P, F))}, body)
    check(out["y"], (f64(x) - f64(mean)) * f64(rstd), dt)
    check(out["z"], np.minimum(np.maximum(f64(x), -1.0), 2.0), dt)
    check(out["w"], f64(x) + f64(mean), dt)


@pytest.mark.parametrize("dst_dt", ALL)
@pytest.mark.parametrize("src_dt", ALL)
def test_tensor_copy_converts_exactly(src_dt, dst_dt):
    """Every conversion: nearest even (0.5, 1.5, 2.5 to integers), saturation of fp8 and integers."""
    x = values(src_dt, lo=-100, hi=100) if src_dt in INTS else values(src_dt, lo=-60, hi=60)
    if src_dt not in INTS:
        special = np.array([1e6, -1e6, 448.5, 0.5, 1.5, 2.5, -2.5, 300.0], np.float32)
        x[0, :8] = machine(special, src_dt)  # saturated into the source dtype, as the machine stores them
    engine = ("act", "dve", "pool")[(ALL.index(src_dt) + ALL.index(dst_dt)) % 3]
    out = run_tiles({"x": (src_dt, x)}, {"y": (dst_dt, (P, F))},
                    lambda t: [ins(engine, "tensor_copy", dst=t["y"], src=t["x"])])["y"]
    check(out, f64(x), dst_dt, exact=True)


@pytest.mark.parametrize("dt", ALL)
def test_select(dt):
    pred, a, b = values(dt), values(dt), values(dt)
    pred[:, ::3] = 0
    out = run_tiles({"p": (dt, pred), "a": (dt, a), "b": (dt, b)}, {"y": (dt, (P, F)), "z": ("f32", (P, F))},
                    lambda t: [ins("dve", "select", dst=t["y"], pred=t["p"], a=t["a"], b=t["b"]),
                               ins("pool", "select", dst=t["z"], pred=t["p"], a=t["a"], b=t["b"])])
    ref = np.where(f64(pred) != 0, f64(a), f64(b))
    check(out["y"], ref, dt, exact=True)
    check(out["z"], ref, "f32", exact=True)


@pytest.mark.parametrize("dt", ALL)
def test_memset_and_iota_on_both_engines(dt):
    def body(t):
        return [ins("pool", "memset", dst=t["m"], value=2.75),
                ins("dve", "memset", dst=t["s"], value=-1e6),
                ins("pool", "iota", dst=t["i"], base=-3, channel_multiplier=F),
                ins("dve", "iota", dst=t["j"], base=7, channel_multiplier=-2)]

    out = run_tiles({}, {n: (dt, (P, F)) for n in "msij"}, body)
    check(out["m"], np.full((P, F), 2.75), dt, exact=True)
    check(out["s"], np.full((P, F), -1e6), dt, exact=True)
    p, i = np.arange(P)[:, None], np.arange(F)[None, :]
    check(out["i"], -3 + F * p + i, dt, exact=True)
    check(out["j"], 7 - 2 * p + i, dt, exact=True)


@pytest.mark.parametrize("dt", ALL)
def test_affine_select_causal_mask(dt):
    """Keep x[p, i] where p - i + 4 >= 0 (a causal mask shifted by 4), else fill; and an is_equal diagonal."""
    x = values(dt)

    def body(t):
        return [ins("pool", "affine_select", dst=t["y"], src=t["x"], cmp="is_ge", offset=4, channel_multiplier=1,
                    free_multiplier=-1, fill=-1e4),
                ins("pool", "affine_select", dst=t["d"], src=t["x"], cmp="is_equal", offset=0, channel_multiplier=2,
                    free_multiplier=-1, fill=0.0)]

    out = run_tiles({"x": (dt, x)}, {"y": (dt, (P, F)), "d": (dt, (P, F))}, body)
    p, i = np.arange(P)[:, None], np.arange(F)[None, :]
    fill = f64(machine(np.array(-1e4), dt))
    check(out["y"], np.where(p - i + 4 >= 0, f64(x), fill), dt, exact=True)
    check(out["d"], np.where(2 * p == i, f64(x), 0.0), dt, exact=True)


# reductions, transposes, statistics -----------------------------------------------------------

REDUCE_REF = {"add": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("axes", ["all", "1", "0,2", "2"])
def test_tensor_reduce_over_chosen_free_axes(axes, op, dt):
    """src seen as [P, 4, 3, 4] (outermost free axis first); dst keeps the axes not reduced."""
    x = values(dt)
    dims = (4, 3, 4)
    picked = tuple(range(3)) if axes == "all" else tuple(int(a) for a in axes.split(","))
    kept = math.prod(d for a, d in enumerate(dims) if a not in picked)

    def body(t):
        src = replace(t["x"], pattern=((12, 4), (4, 3), (1, 4)))
        return [ins("dve", "tensor_reduce", dst=replace(t["y"], pattern=((1, kept),)), src=src, op=op, axes=axes)]

    out = run_tiles({"x": (dt, x)}, {"y": ("f32", (P, kept))}, body)["y"]
    ref = REDUCE_REF[op](f64(x).reshape(P, *dims), axis=tuple(1 + a for a in picked)).reshape(P, kept)
    check(out, ref, "f32", atol=1e-4)
    if dt != "f32":  # the result rounded into the source dtype as well
        out = run_tiles({"x": (dt, x)}, {"y": (dt, (P, kept))}, body)["y"]
        check(out, ref, dt, atol=1.0 if dt in INTS else RTOL[dt])


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_partition_reduce(op, dt):
    x = values(dt)
    out = run_tiles({"x": (dt, x)}, {"y": (dt, (1, F)), "z": (dt, (32, F))},
                    lambda t: [ins("pool", "partition_reduce", dst=t["y"], src=t["x"], op=op),
                               ins("pool", "partition_reduce", dst=t["z"], src=t["x"], op=op)])
    ref = REDUCE_REF[op](f64(x), axis=0, keepdims=True)
    check(out["y"], ref, dt, atol=1.0 if dt in INTS else max(1e-4, RTOL[dt]))
    np.testing.assert_array_equal(out["z"], np.broadcast_to(out["y"], (32, F)))


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("shape", [(20, 12), (32, 32), (64, 96)])
def test_transpose32(shape, dt):
    parts, free = shape
    x = values(dt, shape)
    out_shape = (free, parts) if parts <= 32 and free <= 32 else shape
    out = run_tiles({"x": (dt, x)}, {"y": (dt, out_shape)},
                    lambda t: [ins("dve", "transpose32", dst=t["y"], src=t["x"])])["y"]
    if parts <= 32 and free <= 32:
        ref = x.T
    else:
        ref = x.reshape(parts // 32, 32, free // 32, 32).transpose(0, 3, 2, 1).reshape(parts, free)
    check(out, f64(ref), dt, exact=True)


@pytest.mark.parametrize("dt", ALL)
def test_bn_stats_and_bn_aggr(dt):
    """Mean and variance of 2 x 40 elements per partition from two bn_stats and one bn_aggr (NKI's layout)."""
    x = values(dt, (P, 80))

    def body(t):
        stats = t["s"]
        halves = [replace(t["x"], offset=t["x"].offset + h * 40 * DTYPES[dt].itemsize, pattern=((1, 40),))
                  for h in range(2)]
        return [ins("dve", "bn_stats", dst=replace(stats, offset=stats.offset + 24 * h, pattern=((1, 6),)),
                    src=halves[h], signals=[5]) for h in range(2)] + [
                ins("dve", "bn_aggr", dst=t["m"], src=stats, waits=[(5, 2)])]

    out = run_tiles({"x": (dt, x)}, {"s": ("f32", (P, 12)), "m": ("f32", (P, 2))}, body)
    xs = f64(x)
    stats = []
    for half in (xs[:, :40], xs[:, 40:]):
        for part in (half[:, 0::2], half[:, 1::2]):
            mean = part.mean(axis=1)
            stats += [np.full(P, part.shape[1]), mean, ((part - mean[:, None]) ** 2).sum(axis=1)]
    check(out["s"], np.stack(stats, axis=1), "f32", atol=1e-4)
    check(out["m"], np.stack([xs.mean(axis=1), xs.var(axis=1)], axis=1), "f32", atol=1e-4)


# PE -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", PE_DTYPES)
def test_matmul_accumulates_in_fp32(dt):
    """psum = w0^T x0 + w1^T x1 (two K tiles accumulated), copied out: stationary/moving in ``dt``."""
    K, M, N = 64, 32, 48
    x, w = values(dt, (2 * K, N), lo=-2, hi=2), values(dt, (2 * K, M), lo=-2, hi=2)
    size = DTYPES[dt].itemsize
    insts = [ins("sp", "dma", dst=sb(0, K, h * 512, [[1, N]], dt), src=hb("x", h * K * N * size, [[N, K], [1, N]], dt),
                 queue=h, signals=[0]) for h in range(2)]
    insts += [ins("sp", "dma", dst=sb(0, K, 2048 + h * 512, [[1, M]], dt),
                  src=hb("w", h * K * M * size, [[M, K], [1, M]], dt), queue=2 + h, signals=[0]) for h in range(2)]
    for h in range(2):
        insts += [ins("pe", "load_stationary", src=sb(0, K, 2048 + h * 512, [[1, M]], dt), waits=[(0, 4)]),
                  ins("pe", "multiply_moving", dst=ps(0, M, 0, [[1, N]]), src=sb(0, K, h * 512, [[1, N]], dt), acc=h)]
    insts[-1].signals.append(1)
    insts += [ins("dve", "tensor_copy", dst=sb(0, M, 4096, [[1, N]]), src=ps(0, M, 0, [[1, N]]), waits=[(1, 1)],
                  signals=[2]),
              ins("sp", "dma", dst=hb("y", 0, [[N, M], [1, N]]), src=sb(0, M, 4096, [[1, N]]), waits=[(2, 1)])]
    prog = program([("x", "input", dt, (2 * K, N)), ("w", "input", dt, (2 * K, M)), ("y", "output", "f32", (M, N))],
                   insts)
    out = run_program(prog, {"x": x, "w": w}, check=True).outputs["y"]
    check(out, f64(w).T @ f64(x), "f32", atol=1e-4)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("dst_same", [False, True])
@pytest.mark.parametrize("dt", PE_DTYPES)
def test_pe_transpose_is_exact(dt, dst_same, target):
    parts, free = 96, 40
    x = values(dt, (parts, free))
    out_dt = dt if dst_same else "f32"
    size = DTYPES[out_dt].itemsize

    def body(t):
        return [ins("pe", "transpose", dst=ps(0, free, 2048, [[1, parts]], out_dt), src=t["x"], signals=[3]),
                ins("act", "tensor_copy", dst=t["y"], src=ps(0, free, 2048, [[1, parts]], out_dt), waits=[(3, 1)])]

    assert parts * size <= 2048
    out = run_tiles({"x": (dt, x)}, {"y": (out_dt, (free, parts))}, body, target)["y"]
    check(out, f64(x).T, out_dt, exact=True)


# DMA ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", ALL)
def test_dma_every_direction_and_partition_broadcast(dt):
    """HBM->SBUF (strided), SBUF->SBUF (other partitions), SBUF->HBM, HBM->HBM and a row broadcast."""
    x = values(dt, (16, 8))
    insts = [
        ins("sp", "dma", dst=sb(0, 8, 0, [[1, 16]], dt), src=hb("x", 0, [[1, 8], [8, 16]], dt), queue=1, signals=[0]),
        ins("sp", "dma", dst=sb(40, 48, 256, [[1, 16]], dt), src=sb(0, 8, 0, [[1, 16]], dt), queue=2,
            waits=[(0, 1)], signals=[1]),
        ins("sp", "dma", dst=hb("t", 0, [[16, 8], [1, 16]], dt), src=sb(40, 48, 256, [[1, 16]], dt), queue=3,
            waits=[(1, 1)]),
        ins("sp", "dma", dst=hb("c", 0, [[8, 16], [1, 8]], dt), src=hb("x", 0, [[8, 16], [1, 8]], dt), queue=4),
        ins("sp", "dma", dst=sb(0, 128, 512, [[1, 8]], dt), src=hb("x", 3 * 8 * DTYPES[dt].itemsize, [[0, 128], [1, 8]],
                                                                  dt), queue=5, signals=[2]),
        ins("sp", "dma", dst=hb("b", 0, [[8, 128], [1, 8]], dt), src=sb(0, 128, 512, [[1, 8]], dt), queue=6,
            waits=[(2, 1)]),
    ]
    prog = program([("x", "input", dt, (16, 8)), ("t", "output", dt, (8, 16)), ("c", "output", dt, (16, 8)),
                    ("b", "output", dt, (128, 8))], insts)
    out = run_program(prog, {"x": x}, check=True).outputs
    np.testing.assert_array_equal(out["t"], x.T)
    np.testing.assert_array_equal(out["c"], x)
    np.testing.assert_array_equal(out["b"], np.broadcast_to(x[3], (128, 8)))

