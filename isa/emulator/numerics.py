"""Arithmetic of the compute engines: activation functions, ALU and reduce ops, rounding on store.

Every compute result is evaluated in fp32 (float64 where numpy offers nothing better, then rounded)
and stored with round-to-nearest-even into the destination dtype (ml_dtypes casts are RNE);
fp8 saturates to its largest finite value, integers saturate to their range, pred stores value != 0.
A ``tensor_copy`` with ``round=zero`` converts to integers as XLA does: truncation toward zero, saturation,
NaN -> 0.

GpSimd's integer mode (``INT_ALU``): an ALU instruction on POOL whose operands are all integers (or pred)
computes exactly in 64-bit integers and keeps the low bits of the destination type (two's-complement
wrap), with XLA's rules for division, remainder and shifts.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from isa.dtypes import dtype as lookup_dtype

F32 = np.float32
Array = np.ndarray


# Numerical Recipes erfcc's coefficients, innermost first (Horner)
_ERFC_POLY = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
              1.00002368, -1.26551223)


def _erfc(x: Array) -> Array:
    """Complementary error function of a float64 array, fractional error < 1.2e-7 everywhere (Numerical Recipes
    erfcc): ``t = 1 / (1 + z/2)``, ``t * exp(-z*z + poly(t))`` for ``z = |x|``, ``2 - that`` where ``x < 0``.

    In place in three arrays instead of a temporary per operation (2x faster on ConvNeXt's GELUs): each
    operation is the formula's own, on the same operands, so every result but a NaN keeps the formula's bits (a NaN's
    sign is whatever numpy's SIMD loop passes on, as it was). tests/isa/test_activation_bits.py compares them."""
    z = np.abs(x)
    t = np.multiply(0.5, z)
    np.add(1.0, t, out=t)
    np.divide(1.0, t, out=t)
    poly = np.multiply(t, _ERFC_POLY[0])
    for c in _ERFC_POLY[1:-1]:
        np.add(c, poly, out=poly)
        np.multiply(t, poly, out=poly)
    np.add(_ERFC_POLY[-1], poly, out=poly)
    exponent = np.negative(z, out=z)
    exponent *= np.abs(x)  # -z * z
    exponent += poly
    np.exp(exponent, out=exponent)
    np.multiply(t, exponent, out=exponent)  # erfc(|x|)
    np.subtract(2.0, exponent, out=t)
    return np.where(x >= 0, exponent, t)  # (copyto's where= takes 5x longer)


def _gelu(x: Array) -> Array:
    x64 = x.astype(np.float64)
    half_x = np.multiply(x64, 0.5)
    np.negative(x64, out=x64)
    x64 /= np.sqrt(2.0)
    half_x *= _erfc(x64)  # x/2 * erfc(-x / sqrt 2)
    return half_x.astype(F32)


def _gelu_tanh(x: Array) -> Array:
    """``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` in fp32, in place in two arrays."""
    y = np.multiply(x, x)
    np.multiply(y, x, out=y)
    np.multiply(F32(0.044715), y, out=y)
    np.add(x, y, out=y)
    np.multiply(F32(np.sqrt(2.0 / np.pi)), y, out=y)
    np.tanh(y, out=y)
    np.add(F32(1), y, out=y)
    half_x = np.multiply(F32(0.5), x)
    return np.multiply(half_x, y, out=y)


def _sigmoid(x: Array) -> Array:
    return F32(0.5) * (F32(1) + np.tanh(F32(0.5) * x))


def _silu(x: Array) -> Array:
    return x * _sigmoid(x)


def _identity(x: Array) -> Array:
    return x


# activation func name -> fp32 array -> fp32 array (machine-model.md "Vector (DVE), Scalar (ACT)")
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "identity": _identity,
    "copy": _identity,
    "relu": lambda x: np.maximum(x, F32(0)),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: F32(1) / np.sqrt(x),
    "reciprocal": lambda x: np.reciprocal(x),
    "square": np.square,
    "silu": _silu,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "erf": lambda x: (F32(1) - _erfc(x.astype(np.float64))).astype(F32),
    "cbrt": np.cbrt,
    "floor": np.floor,
    "ceil": np.ceil,
    "round_even": np.rint,
    "round_afz": lambda x: np.sign(x) * np.floor(np.abs(x) + F32(0.5)),
    "abs": np.abs,
    "sign": np.sign,
}


def _as_bool(x: Array) -> Array:
    return x != 0


def _compare(fn: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    return lambda a, b: fn(a, b).astype(F32)


# comparison op -> predicate (bool result), shared by the ALU ops and affine_select
COMPARE: dict[str, Callable[[Array, Array], Array]] = {
    "is_equal": np.equal,
    "not_equal": np.not_equal,
    "is_gt": np.greater,
    "is_ge": np.greater_equal,
    "is_lt": np.less,
    "is_le": np.less_equal,
}

# ALU op -> (operand domain, function). "f32": inputs upcast to fp32; "int": inputs as int64
# (floats truncate toward zero), for the bitwise ops only.
ALU: dict[str, tuple[str, Callable[[Array, Array], Array]]] = {
    "add": ("f32", np.add),
    "subtract": ("f32", np.subtract),
    "multiply": ("f32", np.multiply),
    "divide": ("f32", np.divide),
    "max": ("f32", np.maximum),
    "min": ("f32", np.minimum),
    "pow": ("f32", np.power),
    **{name: ("f32", _compare(fn)) for name, fn in COMPARE.items()},
    "bitwise_and": ("int", np.bitwise_and),
    "bitwise_or": ("int", np.bitwise_or),
    "bitwise_xor": ("int", np.bitwise_xor),
    "logical_and": ("f32", lambda a, b: np.logical_and(_as_bool(a), _as_bool(b)).astype(F32)),
    "logical_or": ("f32", lambda a, b: np.logical_or(_as_bool(a), _as_bool(b)).astype(F32)),
}

# ---- GpSimd integer mode -------------------------------------------------------------------------------------
# Operands arrive as int64 holding the values of their types (a u64 value as its two's-complement bit pattern);
# results are exact modulo 2^64, wrapped to the destination type on store. `bits`/`signed` describe the first
# input's type (the shift width; u64 compares, divides and shifts on the unsigned values).


def wrap64(value: int) -> np.int64:
    """A Python integer modulo 2^64, as the int64 holding those bits."""
    value &= (1 << 64) - 1
    return np.int64(value - (1 << 64) if value >= 1 << 63 else value)


def _i64(a: Array) -> Array:
    return np.asarray(a, np.int64)


def _u64(a: Array) -> Array:
    """int64 bit patterns as the unsigned 64-bit values they hold."""
    return _i64(a).astype(np.uint64)


def _wide_unsigned(bits: int, signed: bool) -> bool:
    return bits == 64 and not signed


def _low_bits(a: Array, bits: int) -> Array:
    """The low `bits` of `a` as a non-negative value (the whole 64-bit pattern when bits == 64)."""
    return _i64(a) if bits == 64 else _i64(a) & ((1 << bits) - 1)


def _as_signed(a: Array, bits: int) -> Array:
    if bits == 64:
        return _i64(a)
    a = _i64(a) & ((1 << bits) - 1)
    return np.where(a >= (1 << (bits - 1)), a - (1 << bits), a)


def _shift_ok(b: Array, bits: int) -> tuple[Array, Array]:
    s = _i64(b)
    ok = (s >= 0) & (s < bits)
    return ok, np.where(ok, s, 0)


def _shift_left(a: Array, b: Array, bits: int, signed: bool) -> Array:
    ok, s = _shift_ok(b, bits)
    return np.where(ok, _low_bits(a, bits) << s, 0)


def _shift_right_logical(a: Array, b: Array, bits: int, signed: bool) -> Array:
    ok, s = _shift_ok(b, bits)
    if bits == 64:
        return np.where(ok, (_u64(a) >> s.astype(np.uint64)).astype(np.int64), 0)
    return np.where(ok, _low_bits(a, bits) >> s, 0)


def _shift_right_arith(a: Array, b: Array, bits: int, signed: bool) -> Array:
    ok, s = _shift_ok(b, bits)
    sa = _as_signed(a, bits)
    return np.where(ok, sa >> s, np.where(sa < 0, -1, 0))


def _int_divide(a: Array, b: Array, bits: int, signed: bool) -> Array:
    """Truncating division; x / 0 = -1 (all bits set); INT_MIN / -1 = INT_MIN after the wrap (XLA)."""
    a, b = _i64(a), _i64(b)
    if _wide_unsigned(bits, signed):
        ua, ub = _u64(a), _u64(b)
        return np.where(b == 0, -1, (ua // np.where(ub == 0, 1, ub)).astype(np.int64))
    safe = np.where((b == 0) | (b == -1), 1, b)
    r = np.fmod(a, safe)  # C remainder: the sign of a, so (a - r) / b is exact and truncates
    q = (a - r) // safe
    return np.where(b == 0, -1, np.where(b == -1, np.negative(a), q))  # -INT64_MIN wraps to INT64_MIN


def _int_remainder(a: Array, b: Array, bits: int, signed: bool) -> Array:
    """Remainder with the dividend's sign; x % 0 = x; INT_MIN % -1 = 0 (XLA)."""
    a, b = _i64(a), _i64(b)
    if _wide_unsigned(bits, signed):
        ua, ub = _u64(a), _u64(b)
        return np.where(b == 0, a, (ua % np.where(ub == 0, 1, ub)).astype(np.int64))
    safe = np.where((b == 0) | (b == -1), 1, b)
    return np.where(b == 0, a, np.where(b == -1, 0, np.fmod(a, safe)))


def _int(fn: Callable[[Array, Array], Array]) -> Callable[[Array, Array, int, bool], Array]:
    return lambda a, b, bits, signed: fn(a, b)


def _ordered(fn: Callable[[Array, Array], Array]) -> Callable[[Array, Array, int, bool], Array]:
    """An op that depends on the order of the values: on u64 it compares the unsigned values."""
    def run(a: Array, b: Array, bits: int, signed: bool) -> Array:
        if _wide_unsigned(bits, signed):
            return np.asarray(fn(_u64(a), _u64(b))).astype(np.int64)
        return np.asarray(fn(a, b)).astype(np.int64)

    return run


INT_ALU: dict[str, Callable[[Array, Array, int, bool], Array]] = {
    "add": _int(np.add), "subtract": _int(np.subtract), "multiply": _int(np.multiply),
    "divide": _int_divide, "remainder": _int_remainder,
    "max": _ordered(np.maximum), "min": _ordered(np.minimum),
    **{name: _ordered(fn) for name, fn in COMPARE.items()},
    "bitwise_and": _int(np.bitwise_and), "bitwise_or": _int(np.bitwise_or), "bitwise_xor": _int(np.bitwise_xor),
    "logical_and": _int(lambda a, b: ((a != 0) & (b != 0)).astype(np.int64)),
    "logical_or": _int(lambda a, b: ((a != 0) | (b != 0)).astype(np.int64)),
    "shift_left": _shift_left, "shift_right_logical": _shift_right_logical,
    "shift_right_arith": _shift_right_arith,
}


def _rem_f32(a: Array, b: Array) -> Array:
    return np.fmod(a, b)


def _shl32(a: Array, b: Array) -> Array:  # fp32 mode: the values as 32-bit signed integers
    return _as_signed(_shift_left(a, b, 32, True), 32)


def _shr_logical32(a: Array, b: Array) -> Array:
    return _as_signed(_shift_right_logical(a, b, 32, True), 32)


def _shr_arith32(a: Array, b: Array) -> Array:
    return _shift_right_arith(a, b, 32, True)


ALU.update({
    "remainder": ("f32", _rem_f32),
    "shift_left": ("int", _shl32),
    "shift_right_logical": ("int", _shr_logical32),
    "shift_right_arith": ("int", _shr_arith32),
})


def int_width(dtype_name: str) -> tuple[int, bool]:
    """(bits, signed) of an integer (or pred) machine dtype."""
    np_dtype = lookup_dtype(dtype_name).numpy
    if np_dtype.kind == "b":
        return 8, False
    return np_dtype.itemsize * 8, np_dtype.kind == "i"


def store_wrapped(dtype_name: str) -> Callable[[Array, Array], None]:
    """A store keeping the low bits of exact integer results (two's complement), pred as value != 0."""
    np_dtype = lookup_dtype(dtype_name).numpy

    def store(dst: Array, values: Array) -> None:
        values = np.asarray(values, np.int64)
        out = values != 0 if np_dtype.kind == "b" else values.astype(np_dtype)
        dst[...] = out.reshape(dst.shape)

    return store


# reduce op -> numpy reduction of an fp32 array over the given axes (dropped from the result)
REDUCE: dict[str, Callable[[Array, tuple[int, ...]], Array]] = {
    "add": lambda x, axes: np.sum(x, axis=axes, dtype=F32),
    "max": lambda x, axes: np.max(x, axis=axes),
    "min": lambda x, axes: np.min(x, axis=axes),
}


def read_f32(view: Array) -> Array:
    """The values of ``view`` flattened to ``[P, F]`` as fp32 (exact for every machine dtype but i32)."""
    flat = view.reshape(view.shape[0], -1)
    return flat.astype(F32)


def read_int(view: Array) -> Array:
    """The values of ``view`` as ``[P, F]`` int64 (floats truncate toward zero)."""
    flat = view.reshape(view.shape[0], -1)
    if flat.dtype.kind in "iu":
        return flat.astype(np.int64)
    return np.trunc(flat.astype(np.float64)).astype(np.int64)


def make_store(dtype_name: str, rounding: str = "nearest") -> Callable[[Array, Array], None]:
    """A function ``store(dst_view, values)`` rounding ``values`` into the dtype of ``dst_view``;
    ``rounding="zero"``: float -> integer truncates toward zero, saturates, and turns NaN into 0 (XLA)."""
    np_dtype = lookup_dtype(dtype_name).numpy
    if np_dtype.kind == "b":
        def store_pred(dst: Array, values: Array) -> None:
            dst[...] = (np.asarray(values) != 0).reshape(dst.shape)

        return store_pred
    if np_dtype.kind in "iu" and rounding == "zero":
        info = np.iinfo(np_dtype)

        def store_trunc(dst: Array, values: Array) -> None:
            if values.dtype.kind == "f":  # compare in float64: 2^63 and 2^64 are exact there, INT64_MAX is not
                x = np.trunc(np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
                low, high = x <= float(info.min), x >= float(info.max) + 1.0
                out = np.where(low | high, 0.0, x).astype(np_dtype)
                dst[...] = np.where(low, info.min, np.where(high, info.max, out)).astype(np_dtype).reshape(dst.shape)
                return
            dst[...] = np.clip(values, info.min, info.max).astype(np_dtype).reshape(dst.shape)

        return store_trunc
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)

        def store_int(dst: Array, values: Array) -> None:
            if values.dtype.kind == "f":
                values = np.rint(np.nan_to_num(values.astype(np.float64)))
            dst[...] = np.clip(values, info.min, info.max).astype(np_dtype).reshape(dst.shape)

        return store_int
    if dtype_name.startswith("fp8"):
        limit = float(ml_dtypes.finfo(np_dtype).max)

        def store_fp8(dst: Array, values: Array) -> None:
            # saturate: clip finite overflow (and inf) to the largest finite value; NaN stays NaN
            clipped = np.clip(values.astype(F32), -limit, limit)
            dst[...] = clipped.astype(np_dtype).reshape(dst.shape)

        return store_fp8

    def store_float(dst: Array, values: Array) -> None:
        if values.dtype != F32:
            values = values.astype(F32)
        dst[...] = values.reshape(dst.shape).astype(np_dtype, copy=False)

    return store_float
