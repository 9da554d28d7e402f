"""The cases of the XLA conformance corpus: small jax functions and their arguments (needs jax; only
generate.py imports this module). Families name the op class a case is about; every case is small (its .hlo
and .npz stay well under 48 KB)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

R = np.random.default_rng(2024)
I32_MIN, I32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


@dataclass
class Case:
    name: str
    family: str
    doc: str
    fn: Callable
    make_args: Callable[[], tuple]


CASES: list[Case] = []


def case(name: str, family: str, doc: str, *args: np.ndarray) -> Callable:
    def register(fn: Callable) -> Callable:
        CASES.append(Case(name, family, doc, fn, lambda: args))
        return fn

    return register


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


def ints(dtype, *shape: int, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return R.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(dtype)


SPECIALS = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.4999, 1e10, -1e10, 3e9, -3e9, 255.7, 256.0,
                     -1.0, 127.9, 128.0, -128.9, -129.0, np.nan, np.inf, -np.inf, 65535.9, 4294967296.0],
                    np.float32)

# ---- elementwise floats ------------------------------------------------------------------------------------

_UNARY = {
    "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "erf": jax.scipy.special.erf, "cbrt": jnp.cbrt,
    "floor": jnp.floor, "ceil": jnp.ceil, "round_even": jnp.round, "round_afz": partial(lax.round,
                                                                                        rounding_method=0),
    "is_finite": jnp.isfinite, "exp": jnp.exp, "expm1": jnp.expm1, "log1p": jnp.log1p, "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "abs": jnp.abs, "sign": jnp.sign,
    "neg": jnp.negative,
}
for _n, _f in _UNARY.items():
    _x = np.abs(f32(5, 7)) + 0.1 if _n in ("sqrt", "rsqrt", "log1p") else f32(5, 7, scale=2.0)
    if _n in ("floor", "ceil", "round_even", "round_afz", "is_finite", "sign"):
        _x = np.concatenate([SPECIALS[:20], np.array([np.nan, np.inf, -np.inf, 0.0, -3.5], np.float32)])
    case(f"unary_{_n}_f32", "elementwise", f"{_n} of f32", _x)(lambda x, _f=_f: _f(x))

_BINARY = {"atan2": jnp.arctan2, "remainder": lax.rem, "fmod_py": jnp.remainder, "pow": jnp.power,
           "max": jnp.maximum, "min": jnp.minimum, "div": jnp.divide}
for _n, _f in _BINARY.items():
    _b = f32(6, 5, scale=2.0)
    if _n == "pow":
        _a = np.abs(f32(6, 5)) + 0.2
    else:
        _a = f32(6, 5, scale=3.0)
    case(f"binary_{_n}_f32", "elementwise", f"{_n} of f32", _a, _b)(lambda a, b, _f=_f: _f(a, b))


@case("select_compare_clamp_f32", "elementwise", "where(x > y, clip(x, -0.5, 0.5), y * 2)", f32(9, 13), f32(9, 13))
def _sel(x, y):
    return jnp.where(x > y, jnp.clip(x, -0.5, 0.5), y * 2)


@case("unary_sin_bf16", "elementwise", "sin in bf16", f32(4, 33).astype(ml_dtypes.bfloat16))
def _sinbf(x):
    return jnp.sin(x)


@case("unary_floor_f16", "elementwise", "floor, ceil in f16", (f32(4, 9) * 4).astype(np.float16))
def _floorf16(x):
    return jnp.floor(x), jnp.ceil(x)


# ---- integer arithmetic ------------------------------------------------------------------------------------


@case("int_s32_add_wrap", "int_arith", "s32 add/sub/mul near the range ends: exact, two's-complement wrap",
      ints(np.int32, 6, 11), ints(np.int32, 6, 11))
def _s32(a, b):
    return a + b, a - b, a * b


@case("int_s32_exact_big", "int_arith", "s32 add/mul above 2^24 without overflow: exact",
      ints(np.int32, 4, 9, lo=2**24, hi=2**28), ints(np.int32, 4, 9, lo=-7, hi=7))
def _s32big(a, b):
    return a + b, a * b, a + 1


@case("int_s32_misc", "int_arith", "s32 neg/abs/max/min/sign/compare incl. INT_MIN",
      np.array([I32_MIN, I32_MIN + 1, -5, -1, 0, 1, 7, I32_MAX], np.int32),
      np.array([I32_MAX, -1, 5, 0, 0, 2, -7, I32_MIN], np.int32))
def _s32misc(a, b):
    return -a, jnp.abs(a), jnp.maximum(a, b), jnp.minimum(a, b), jnp.sign(a), a < b, a == b


for _dt in (np.int8, np.uint8, np.int16, np.uint16, np.uint32):
    _nm = np.dtype(_dt).name

    @case(f"int_{_nm}_arith", "int_arith", f"{_nm} add/sub/mul/max wrap", ints(_dt, 5, 7), ints(_dt, 5, 7))
    def _small(a, b):
        return a + b, a - b, a * b, jnp.maximum(a, b)


@case("int_divrem_s32", "int_divrem", "s32 div/rem incl. by zero and INT_MIN / -1 (lax.div/rem)",
      np.array([7, -7, 7, -7, 5, -5, I32_MIN, I32_MIN, 0, 9, I32_MAX, 1], np.int32),
      np.array([2, 2, -2, -2, 0, 0, -1, 1, 3, 0, -1, I32_MIN], np.int32))
def _divrem(a, b):
    return lax.div(a, b), lax.rem(a, b)


@case("int_divrem_u8", "int_divrem", "u8 div/rem incl. by zero",
      np.array([7, 200, 255, 0, 9, 13], np.uint8), np.array([2, 0, 16, 3, 0, 255], np.uint8))
def _divrem_u8(a, b):
    return lax.div(a, b), lax.rem(a, b)


@case("int_floordiv_s32", "int_divrem", "jnp floor_divide / mod on s32 (what Python semantics lower to)",
      ints(np.int32, 3, 7, lo=-1000, hi=1000), ints(np.int32, 3, 7, lo=1, hi=9))
def _floordiv(a, b):
    return a // b, a % b


_SH = np.array([-1, 0, 1, 5, 31, 32, 33, 100], np.int32)


@case("int_shifts_s32", "shift", "s32 shift left / right arithmetic / right logical, amounts out of range",
      np.array([1, -1, 12345, -12345, I32_MIN, I32_MAX, 3, -8], np.int32), _SH)
def _shifts(a, s):
    return lax.shift_left(a, s), lax.shift_right_arithmetic(a, s), lax.shift_right_logical(a, s)


@case("int_shifts_u8", "shift", "u8 shifts, amounts out of range",
      np.array([1, 255, 128, 7, 200, 3, 9, 64], np.uint8), np.array([0, 1, 7, 8, 9, 255, 3, 2], np.uint8))
def _shifts8(a, s):
    return lax.shift_left(a, s), lax.shift_right_arithmetic(a, s), lax.shift_right_logical(a, s)


@case("int_bitwise_s32", "bitwise", "and/or/xor/not/popcnt/clz on s32",
      ints(np.int32, 4, 6), ints(np.int32, 4, 6))
def _bitwise(a, b):
    return a & b, a | b, a ^ b, ~a, lax.population_count(a), lax.clz(a)


@case("int_popcnt_u8", "bitwise", "popcnt of u8", np.arange(0, 256, 7, dtype=np.uint8))
def _popcnt8(a):
    return lax.population_count(a)


@case("pred_logic", "bitwise", "pred and/or/xor/not, pred output", f32(7, 5), f32(7, 5))
def _pred(x, y):
    a, b = x > 0, y > 0
    return a & b, a | b, a ^ b, ~a


# ---- converts ----------------------------------------------------------------------------------------------

for _src_name, _src in (("f32", SPECIALS), ("bf16", SPECIALS.astype(ml_dtypes.bfloat16)),
                        ("f16", np.clip(np.nan_to_num(SPECIALS, nan=0), -60000, 60000).astype(np.float16))):
    for _dt in (np.int32, np.uint8, np.int8, np.uint32, np.int16):
        _nm = np.dtype(_dt).name

        @case(f"convert_{_src_name}_to_{_nm}", "convert", f"{_src_name} -> {_nm}: truncate, saturate, NaN -> 0",
              _src)
        def _conv(x, _dt=_dt):
            return x.astype(_dt)


@case("convert_int_to_int", "convert", "s32 -> s8/u8/s16 (wrap) and u8 -> s32, s8 -> f32",
      ints(np.int32, 5, 8, lo=-100000, hi=100000), ints(np.uint8, 5, 8), ints(np.int8, 5, 8))
def _convint(a, b, c):
    return a.astype(jnp.int8), a.astype(jnp.uint8), a.astype(jnp.int16), b.astype(jnp.int32), c.astype(jnp.float32)


@case("convert_s32_to_f32", "convert", "s32 -> f32/bf16 (round to nearest even above 2^24)",
      np.array([0, 1, -1, 2**24 + 1, 2**25 + 3, I32_MAX, I32_MIN, 123456789], np.int32))
def _s32f(a):
    return a.astype(jnp.float32), a.astype(jnp.bfloat16)


@case("convert_float_types", "convert", "f32 -> bf16/f16/fp8e4m3/fp8e5m2 and back, pred -> f32, f32 -> pred",
      f32(6, 10, scale=50.0))
def _convf(x):
    return (x.astype(jnp.bfloat16), x.astype(jnp.float16), x.astype(jnp.float8_e4m3fn), x.astype(jnp.float8_e5m2),
            (x > 0).astype(jnp.float32), x.astype(jnp.bool_))


# ---- element types: one small program per type -------------------------------------------------------------

_TYPES = {"pred": np.bool_, "s8": np.int8, "u8": np.uint8, "s16": np.int16, "u16": np.uint16, "s32": np.int32,
          "u32": np.uint32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32,
          "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
for _nm, _dt in _TYPES.items():
    if _nm == "pred":
        _a, _b = R.random((3, 130)) > 0.5, R.random((3, 130)) > 0.5
    elif np.dtype(_dt).kind in "iu":
        _a, _b = ints(_dt, 3, 130), ints(_dt, 3, 130)
    else:
        _a, _b = f32(3, 130).astype(_dt), f32(3, 130).astype(_dt)

    @case(f"dtype_{_nm}", "dtype", f"{_nm}: max, select on compare, reduce-max, transpose", _a, _b)
    def _typed(a, b):
        m = jnp.maximum(a, b)
        return m, jnp.where(a > b, a, b), jnp.max(m, axis=1), m.T


# ---- shapes: 0-d, size-1 dims, odd sizes, more than 128 partitions -----------------------------------------


@case("shape_scalar", "shape", "0-d f32 and s32 arithmetic", np.float32(1.5), np.int32(7))
def _scalar(x, n):
    return x * 2 + 1, n * 3 - 1


@case("shape_size1", "shape", "size-1 dims: broadcast and reduce", f32(1, 7, 1), f32(1, 1, 5))
def _size1(x, y):
    return x + y, jnp.sum(x + y, axis=(0, 1))


@case("shape_odd_large", "shape", "259x7 (more than 128 partitions): tanh, row sum, column max", f32(259, 7))
def _odd(x):
    return jnp.tanh(x), jnp.sum(x, axis=1), jnp.max(x, axis=0)


@case("shape_matmul_odd", "shape", "matmul 131x24 @ 24x9", f32(131, 24), f32(24, 9, scale=0.1))
def _mm(x, w):
    return x @ w


# ---- call, while, conditional ------------------------------------------------------------------------------


@jax.jit
def _helper(x, y):
    return jnp.tanh(x) * y


@case("call_helper", "call", "a jitted helper function (call)", f32(4, 6), f32(4, 6))
def _call(x, y):
    return _helper(x, y) + _helper(y, x)


@case("while_fori_small", "while", "fori_loop with a static trip count of 5", f32(3, 4))
def _fori(x):
    return lax.fori_loop(0, 5, lambda i, c: c * 0.5 + i.astype(jnp.float32), x)


@case("while_fori_long", "while", "fori_loop with a static trip count of 300 (s32 carry)",
      np.array([1, 2, 3], np.int32))
def _fori_long(x):
    return lax.fori_loop(0, 300, lambda i, c: c * 3 + i, x)


@case("while_dynamic", "while", "while_loop whose trip count depends on the data", np.float32(1.0))
def _while(x):
    return lax.while_loop(lambda c: c[0] < 100.0, lambda c: (c[0] * 1.7 + 1, c[1] + 1), (x, jnp.int32(0)))


@case("cond_pred", "conditional", "lax.cond on a runtime predicate", f32(4, 5), np.float32(0.3))
def _cond(x, t):
    return lax.cond(t > 0, lambda v: jnp.sin(v), lambda v: v * 2, x)


@case("cond_switch", "conditional", "lax.switch on a runtime index (3 branches)", f32(4, 5), np.int32(2))
def _switch(x, i):
    return lax.switch(i, [lambda v: v + 1, lambda v: v * v, lambda v: -v], x)


# ---- sort, top-k, reverse ----------------------------------------------------------------------------------


_DUP = np.array([3.0, 1.0, np.nan, 2.0, 1.0, -0.0, 0.0, -np.inf, 5.0, 2.0, 1.0], np.float32)


@case("sort_f32", "sort", "jnp.sort of f32 with NaN/-0/duplicates, along each axis", _DUP, f32(5, 9))
def _sort(x, y):
    return jnp.sort(x), jnp.sort(y, axis=0), jnp.sort(y, axis=1)


@case("sort_argsort_stable", "sort", "stable argsort (multi-operand sort with iota), descending sort",
      np.array([2, 1, 2, 0, 1, 2, 0], np.int32), f32(4, 7))
def _argsort(k, y):
    return jnp.argsort(k, stable=True), -jnp.sort(-y, axis=1), jnp.argsort(y, axis=0)


@case("sort_multi_operand", "sort", "lax.sort of (keys, values) with num_keys=1, and of two keys",
      ints(np.int32, 9, lo=0, hi=3), f32(9), ints(np.int32, 9, lo=0, hi=2))
def _sortmulti(k, v, k2):
    return lax.sort((k, v), num_keys=1), lax.sort((k, k2, v), num_keys=2)


@case("topk", "topk", "lax.top_k of f32 rows and of s32", f32(3, 17), ints(np.int32, 12, lo=-50, hi=50))
def _topk(x, n):
    return lax.top_k(x, 4), lax.top_k(n, 3)


@case("reverse", "reverse", "jnp.flip over one and two axes", f32(5, 6, 3), ints(np.int32, 7))
def _rev(x, n):
    return jnp.flip(x, axis=1), jnp.flip(x, axis=(0, 2)), jnp.flip(n)


# ---- dynamic slices ----------------------------------------------------------------------------------------


@case("dynamic_slice", "dynamic_slice", "lax.dynamic_slice with runtime offsets (one clamped)",
      f32(10, 12), np.int32(3), np.int32(9))
def _ds(x, i, j):
    return lax.dynamic_slice(x, (i, j), (4, 5))


@case("dynamic_update_slice", "dynamic_slice", "lax.dynamic_update_slice with runtime offsets (KV-cache style)",
      f32(16, 8), f32(2, 8), np.int32(5))
def _dus(cache, new, pos):
    return lax.dynamic_update_slice(cache, new, (pos, jnp.int32(0)))


@case("dynamic_index_embedding", "dynamic_slice", "x[i] with a runtime scalar i (embedding row)",
      f32(20, 16), np.int32(13))
def _dindex(x, i):
    return x[i]


# ---- gather, scatter ---------------------------------------------------------------------------------------


@case("gather_take", "gather", "jnp.take rows by an index vector (with out-of-range clamped)",
      f32(12, 5), np.array([0, 11, 3, 3, 7], np.int32))
def _take(x, idx):
    return jnp.take(x, idx, axis=0, mode="clip")


@case("gather_two_index_dims", "gather", "x[i, j] with two index arrays (several index dims)",
      f32(6, 7, 3), np.array([0, 5, 2, 2], np.int32), np.array([6, 0, 3, 1], np.int32))
def _g2(x, i, j):
    return x[i, j]


@case("gather_batching_dims", "gather", "vmap of take_along_axis (batching dims)",
      f32(4, 9), ints(np.int32, 4, 3, lo=0, hi=8))
def _gb(x, idx):
    return jax.vmap(lambda r, i: r[i])(x, idx)


@case("gather_take_along_axis", "gather", "jnp.take_along_axis on axis 1", f32(5, 8), ints(np.int32, 5, 2, lo=0,
                                                                                             hi=7))
def _tal(x, idx):
    return jnp.take_along_axis(x, idx, axis=1)


_SIDX = np.array([1, 4, 1, 0, 6], np.int32)
for _comb in ("set", "add", "mul", "min", "max"):
    @case(f"scatter_{_comb}", "scatter", f"x.at[idx].{_comb}(u) with a duplicate index", f32(7, 3), _SIDX,
          f32(5, 3))
    def _sc(x, idx, u, _comb=_comb):
        return getattr(x.at[idx], _comb)(u)


@case("scatter_add_s32_2d", "scatter", "s32 scatter-add at (i, j) points", ints(np.int32, 4, 5, lo=-9, hi=9),
      np.array([[0, 1], [3, 4], [0, 1], [2, 2]], np.int32), ints(np.int32, 4, lo=-9, hi=9))
def _sc2(x, ij, u):
    return x.at[ij[:, 0], ij[:, 1]].add(u)


# ---- reductions --------------------------------------------------------------------------------------------


@case("reduce_argmax_argmin", "reduce_variadic", "argmax / argmin (variadic value+index reduce)",
      f32(6, 11), np.array([3.0, 7.0, 7.0, -1.0, np.nan, 2.0], np.float32))
def _argmax(x, y):
    return jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.argmax(y), jnp.argmin(y)


@case("reduce_argmax_s32", "reduce_variadic", "argmax of s32 rows", ints(np.int32, 4, 9, lo=-5, hi=5))
def _argmax_i(x):
    return jnp.argmax(x, axis=1)


@case("reduce_multiply_min_max", "reduce", "prod / min / max reduces of f32", f32(5, 6) * 0.5 + 1.0)
def _prod(x):
    return jnp.prod(x, axis=1), jnp.min(x, axis=0), jnp.max(x)


@case("reduce_and_or", "reduce", "all / any (and/or reduce of pred)", f32(4, 7))
def _allany(x):
    return jnp.all(x > -1, axis=1), jnp.any(x > 1, axis=0)


@case("reduce_int", "reduce", "s32 sum (wrapping) / prod / max / min", ints(np.int32, 3, 5, lo=2**28, hi=2**30),
      ints(np.int32, 4, 6, lo=-4, hi=4))
def _redint(x, y):
    return jnp.sum(x, axis=1, dtype=jnp.int32), jnp.prod(y, axis=1), jnp.max(y, axis=0), jnp.min(y)


@case("reduce_window_int", "reduce_window", "s32 max-pool and sum-pool", ints(np.int32, 1, 6, 6, 2, lo=-99, hi=99))
def _rwint(x):
    mx = lax.reduce_window(x, jnp.iinfo(jnp.int32).min, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    sm = lax.reduce_window(x, 0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
    return mx, sm


@case("reduce_window_f32", "reduce_window", "f32 max-pool 3x3 stride 2 with padding", f32(2, 7, 7, 3))
def _rwf(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


@case("cumsum", "reduce_window", "cumsum / cummax along an axis (XLA writes a reduce-window)", f32(4, 9))
def _cumsum(x):
    return jnp.cumsum(x, axis=1), lax.cummax(x, axis=0)


# ---- convolutions ------------------------------------------------------------------------------------------


@case("conv_plain", "conv", "NHWC 3x3 conv, stride 1, SAME", f32(1, 8, 8, 3), f32(3, 3, 3, 4, scale=0.3))
def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


@case("conv_transposed", "conv", "conv_transpose stride 2 (lhs dilation)", f32(1, 5, 5, 4),
      f32(3, 3, 4, 2, scale=0.3))
def _convt(x, w):
    return lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


@case("conv_grouped", "conv", "grouped conv (feature_group_count=2)", f32(2, 6, 6, 4), f32(3, 3, 2, 6, scale=0.3))
def _convg(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=2)


@case("conv_depthwise_1d", "conv", "depthwise 1-D conv NCW, rhs dilation 2", f32(2, 4, 11), f32(4, 1, 3,
                                                                                                   scale=0.5))
def _convd(x, w):
    return lax.conv_general_dilated(x, w, (1,), [(2, 2)], rhs_dilation=(2,), feature_group_count=4)


# ---- dots --------------------------------------------------------------------------------------------------


@case("dot_s32", "dot_int", "s32 @ s32 matmul (exact, wrapping)", ints(np.int32, 5, 7, lo=-1000, hi=1000),
      ints(np.int32, 7, 3, lo=-1000, hi=1000))
def _dots32(a, b):
    return a @ b


@case("dot_s8_to_s32", "dot_int", "s8 @ s8 with s32 accumulation (preferred_element_type)", ints(np.int8, 6, 9),
      ints(np.int8, 9, 4))
def _dots8(a, b):
    return lax.dot(a, b, preferred_element_type=jnp.int32)


@case("dot_u8_param", "dot_int", "u8 input converted to f32 then matmul", ints(np.uint8, 4, 8), f32(8, 3))
def _dotu8(a, w):
    return a.astype(jnp.float32) @ w


_B, _H, _S, _D = 2, 4, 24, 16
for _spec in ("bhqd,bhkd->bhqk", "bqhd,bkhd->bhqk", "bqhd,bkhd->bqhk", "bhqk,bhkd->bhqd", "bhqk,bkhd->bqhd",
              "qbhd,kbhd->bhqk"):
    _lhs, _rhs = _spec.split("->")[0].split(",")
    _sizes = {"b": _B, "h": _H, "q": _S, "k": _S, "d": _D}
    _name = _spec.replace(",", "_").replace("->", "_to_")

    @case(f"dot_attention_{_name}", "dot_batched", f"einsum {_spec} (attention-shaped batched dot)",
          f32(*[_sizes[c] for c in _lhs]), f32(*[_sizes[c] for c in _rhs], scale=0.2))
    def _att(a, b, _spec=_spec):
        return jnp.einsum(_spec, a, b)


@case("dot_attention_full", "dot_batched", "softmax(q k^T / sqrt d) v with heads, as jax writes it",
      f32(2, 24, 4, 16), f32(2, 24, 4, 16), f32(2, 24, 4, 16))
def _attn(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 4.0
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


@case("dot_bf16_f32_acc", "dot_batched", "bf16 batched dot accumulating in f32",
      f32(3, 8, 16).astype(ml_dtypes.bfloat16), f32(3, 16, 5).astype(ml_dtypes.bfloat16))
def _dotbf(a, b):
    return lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32)


# ---- everyday modules --------------------------------------------------------------------------------------


@case("model_mlp", "model", "two-layer MLP with gelu and log_softmax", f32(8, 32), f32(32, 64, scale=0.2),
      f32(64), f32(64, 10, scale=0.2))
def _mlp(x, w1, b1, w2):
    return jax.nn.log_softmax(jax.nn.gelu(x @ w1 + b1) @ w2)


@case("model_layernorm", "model", "layer norm over the last axis", f32(6, 40), f32(40), f32(40))
def _ln(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


# ---- control flow on the ISA's loops and branches (added at the end: the inputs of the cases above keep their
# place in the random stream) ----


@case("while_fori_1000", "while", "fori_loop with a static trip count of 1000 (one loop body on chip)", f32(2, 3))
def _fori_1000(x):
    return lax.fori_loop(0, 1000, lambda i, c: c * 0.999 + i.astype(jnp.float32) * 0.001, x)


@case("while_doubling", "while", "while x < limit: x = x * 2 + 1 (s32, the limit an input)", np.int32(3),
      np.int32(100000))
def _doubling(x, limit):
    return lax.while_loop(lambda c: c < limit, lambda c: c * 2 + 1, x)


@case("while_multi", "while", "while sum(a) < 1000: a, b = a + b, 1.5 b (several carried tensors)",
      f32(4, 6, scale=0.5), f32(4, 6, scale=0.5))
def _while_multi(a, b):
    def body(c):
        return c[0] + jnp.abs(c[1]), c[1] * 1.5, c[2] + 1
    return lax.while_loop(lambda c: jnp.sum(c[0]) < 1000.0, body, (a, b, jnp.int32(0)))


@case("cond_matmul", "conditional", "lax.cond whose branches differ: a matmul, or tanh of a slice",
      np.float32(-0.5), f32(8, 16), f32(16, 8))
def _cond_matmul(t, x, w):
    return lax.cond(t > 0, lambda x, w: x @ w, lambda x, w: jnp.tanh(x[:, :8]), x, w)


@case("switch_matmul", "conditional", "lax.switch with a matmul branch, the index out of range",
      np.int32(5), f32(8, 8))
def _switch_matmul(i, x):
    return lax.switch(i, [lambda v: v @ v, lambda v: jnp.exp(v), lambda v: v - 1], x)


# ---- sort, top-k and integer cumsum (more shapes) ----------------------------------------------------------

_KEYS = np.array([[1.0, -0.0, np.nan, 2.0], [0.0, 1.0, 1.0, -np.inf], [1.0, -np.nan, 0.0, 2.0],
                  [np.inf, 1.0, -0.0, 2.0], [1.0, 3.0, 0.0, np.nan]], np.float32)


@case("sort_two_operands_axis0", "sort", "lax.sort of (f32 keys with NaN/-0/ties, s32 values) along the major "
      "axis, num_keys=1", _KEYS, ints(np.int32, 5, 4))
def _sort2(k, v):
    return lax.sort((k, v), dimension=0, num_keys=1)


@case("sort_descending", "sort", "jnp.sort / argsort descending along a non-minor dim of a 3-D array",
      np.round(f32(3, 6, 5), 1))
def _sortdesc(x):
    return jnp.sort(x, axis=1, descending=True), jnp.argsort(x, axis=0, descending=True, stable=True)


def _topk_rows() -> np.ndarray:
    x = np.round(f32(5, 300), 1)
    x[0, [3, 50, 299]] = [np.nan, -0.0, np.inf]
    x[1, :] = 0.0
    x[1, ::7] = -0.0
    x[2, 100:120] = 9.0
    return x


@case("topk_k16", "topk", "lax.top_k with k=16 of 300-wide rows (NaN, -0 vs +0, ties) and k=10 of bf16 and s32",
      _topk_rows(), f32(4, 40).astype(ml_dtypes.bfloat16), ints(np.int32, 2, 3, 50))
def _topk16(x, y, n):
    return lax.top_k(x, 16), lax.top_k(y, 10), lax.top_k(n, 10)


@case("cumsum_int32", "reduce_window", "jnp.cumsum of s32 (wrapping) and RoBERTa's position ids "
      "(cumsum(mask) * mask + padding_idx)", ints(np.int32, 3, 9, lo=-2**30, hi=2**30),
      ints(np.int32, 2, 11, lo=0, hi=1))
def _cumsum_i(x, mask):
    return jnp.cumsum(x, axis=1, dtype=jnp.int32), jnp.cumsum(mask, axis=1, dtype=jnp.int32) * mask + 1


# ---- exact semantics round 3: integer reductions across the major axis, windows over 3+ dims or with a runtime
# init, loop state written in place (added at the end: the inputs of the cases above keep their place) ----

@case("reduce_int_major", "reduce", "s32 max/min/sum and u8 max over the major axis of 300 rows (more than 128 "
      "partitions), values near the type's range", ints(np.int32, 300, 5), ints(np.uint8, 7, 1, 3))
def _reduce_int_major(x, y):
    return jnp.max(x, axis=0), jnp.min(x, axis=0), jnp.sum(x, axis=0, dtype=jnp.int32), jnp.max(y, axis=(0, 1))


@case("reduce_window_3d", "reduce_window", "lax.reduce_window max over a 3-D window (strided, padded) and a "
      "sum over 3 windowed dims of s32", f32(2, 5, 6, 7), ints(np.int32, 4, 3, 5, lo=-1000, hi=1000))
def _rw3d(x, n):
    m = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 3, 2), (1, 1, 2, 1), ((0, 0), (1, 0), (1, 1), (0, 1)))
    s = lax.reduce_window(n, np.int32(0), lax.add, (2, 2, 3), (1, 1, 1), ((0, 0), (0, 1), (1, 1)))
    return m, s


@case("reduce_window_init_arg", "reduce_window", "lax.reduce_window whose init value is an argument (max of f32 "
      "and add of s32)", f32(3, 9, 8), np.float32(0.25), ints(np.int32, 6, 10, lo=-50, hi=50), np.int32(7))
def _rw_init(x, a, n, b):
    return (lax.reduce_window(x, a, lax.max, (1, 3, 2), (1, 2, 2), "SAME"),
            lax.reduce_window(n, b, lax.add, (2, 3), (1, 1), "VALID"))


@case("while_swap_state", "while", "fori_loop of 40 trips: (a, b) -> (0.5 a + b, a), the old a carried on (loop "
      "state that must not be written in place), and a counter read by the other update", f32(4, 130),
      f32(4, 130))
def _while_swap(a, b):
    def body(i, c):
        return c[0] * 0.5 + c[1] + i.astype(jnp.float32) * 0.01, c[0]
    return lax.fori_loop(0, 40, body, (a, b))


@case("reverse_dtypes", "reverse", "jnp.flip of bf16 over two axes of 130 rows, of s8 and pred, of a size-1 axis",
      f32(130, 3, 2).astype(ml_dtypes.bfloat16), ints(np.int8, 1, 9), ints(np.int32, 4, 5, lo=0, hi=1) > 0)
def _reverse_dtypes(x, y, p):
    return jnp.flip(x, axis=(0, 2)), jnp.flip(y, axis=(0, 1)), jnp.flip(p, axis=1)


@case("shifts_s16_u32", "shift", "s16 and u32 shifts by amounts in and out of range (negative, = width, more)",
      ints(np.int16, 3, 6), ints(np.int16, 3, 6, lo=-3, hi=20), ints(np.uint32, 11), ints(np.uint32, 11, lo=0,
                                                                                              hi=40))
def _shifts_16_32(a, s, b, t):
    return (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s), lax.shift_right_logical(a, s),
            lax.shift_left(b, t), lax.shift_right_logical(b, t))


@case("call_nested", "call", "nested jitted helpers, one called twice, on a 0-d and a size-1 value",
      np.float32(1.5), f32(1, 7))
def _call_nested(s, x):
    @jax.jit
    def inner(v, w):
        return jnp.tanh(v) * w

    @jax.jit
    def outer(v, w):
        return inner(v, w) + inner(w, v)

    return outer(s, x), inner(s, s)
