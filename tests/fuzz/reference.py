"""References for an HLO module, besides the project's interpreter.

* ``torch_outputs``: the same computation built with eager torch ops in the instructions' dtypes (bf16 tensors
  stay bf16, so torch rounds where HLO does).
* ``exact_outputs``: float64 values, each with a bound ``err`` on how far a correct fp32/bf16 implementation can
  be from it (running error analysis: every rounding adds ``u * |value|``, monotone functions map the input
  interval, sums in fp32 add ``n * 2^-24 * sum |terms|``). ``check`` compares any result with it.

Both model the opcodes the fuzzer generates; anything else raises ``NotModeled``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hlo.ir import Computation, Instruction, Module, Quoted, SliceSpec

TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "s32": torch.int32, "pred": torch.bool}
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "s32": 0.0, "pred": 0.0}
ACCUMULATE = 2.0 ** -24  # dot and reduce accumulate in fp32
TRANSCENDENTAL = 8 * 2.0 ** -24  # relative error allowed to fp32 tanh/exp/log/... and the ACT engine's
SLACK = 4.0  # the bound is first-order: allow this factor on top
FLOOR = 1e-6  # plus this much of the output's scale (max(1, rms)), for results that are exactly zero


class NotModeled(Exception):
    """The module uses an opcode (or attribute) the references do not model."""


# ---- eager torch ------------------------------------------------------------------------------------------

_T_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "negate": torch.neg, "tanh": torch.tanh, "logistic": torch.sigmoid, "exponential": torch.exp,
    "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "abs": torch.abs, "sine": torch.sin,
    "cosine": torch.cos,
}
_T_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "power": torch.pow,
}
_T_CUSTOM = {"gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
_REDUCERS = {"add": "sum", "maximum": "amax", "minimum": "amin"}
_COMPARE = {"EQ": torch.eq, "NE": torch.ne, "LT": torch.lt, "LE": torch.le, "GT": torch.gt, "GE": torch.ge}


def _tensor(array: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype not in TORCH_DTYPES:
        raise NotModeled(f"element type {dtype}")
    return torch.from_numpy(np.asarray(array, np.float64).copy()).to(TORCH_DTYPES[dtype])


def _iota(inst: Instruction) -> torch.Tensor:
    dims, axis = inst.shape.dims, inst.attrs["iota_dimension"]
    view = [1] * len(dims)
    view[axis] = dims[axis]
    return torch.arange(dims[axis], dtype=torch.float64).reshape(view).expand(*dims)


def _direction(inst: Instruction) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    fn = _COMPARE.get(str(inst.attrs.get("direction")))
    if fn is None:
        raise NotModeled(f"{inst.where()}: direction")
    return fn


def _pad(x: torch.Tensor, text: object, value: torch.Tensor) -> torch.Tensor:
    """HLO pad: interior holes, then low/high edges (negative ones crop)."""
    from hlo.shape_inference import parse_padding

    config = parse_padding(text, x.dim())
    dilated = [n + max(n - 1, 0) * i for n, (_, _, i) in zip(x.shape, config)]
    full = [max(lo, 0) + d + max(hi, 0) for d, (lo, hi, _) in zip(dilated, config)]
    out = value.expand(*full).clone() if full else value.clone()
    out[tuple(slice(max(lo, 0), max(lo, 0) + d, i + 1) for d, (lo, _, i) in zip(dilated, config))] = x
    return out[tuple(slice(max(-lo, 0), f - max(-hi, 0)) for f, (lo, hi, _) in zip(full, config))]


def _custom_target(inst: Instruction) -> str:
    target = inst.attrs.get("custom_call_target")
    name = target.text if isinstance(target, Quoted) else ""
    if name not in _T_CUSTOM:
        raise NotModeled(f"custom-call {name!r}")
    return name


def _reducer(inst: Instruction) -> str:
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, Computation) or comp.root is None or comp.root.opcode not in _REDUCERS:
        raise NotModeled(f"{inst.where()}: reducer")
    return comp.root.opcode


def _broadcast(x: torch.Tensor, dims: Sequence[int], mapping: Sequence[int]) -> torch.Tensor:
    order = sorted(range(len(mapping)), key=lambda i: mapping[i])
    view = [1] * len(dims)
    for i in order:
        view[mapping[i]] = x.shape[i]
    return x.permute(order).reshape(view).expand(*dims) if dims else x.reshape(())


def _slice(x: torch.Tensor, spec: object) -> torch.Tensor:
    if not isinstance(spec, SliceSpec):
        raise NotModeled("slice without slice=")
    return x[tuple(slice(start, limit, stride) for start, limit, stride in spec.ranges)]


def _einsum_spec(inst: Instruction) -> str:
    """dot's dimension numbers as an einsum equation (result: batch, lhs free, rhs free)."""
    lhs, rhs = (o.shape.rank for o in inst.operands)
    lb, rb = inst.attrs.get("lhs_batch_dims", ()), inst.attrs.get("rhs_batch_dims", ())
    lc, rc = inst.attrs.get("lhs_contracting_dims", ()), inst.attrs.get("rhs_contracting_dims", ())
    letters = iter(string.ascii_letters)
    a = [next(letters) for _ in range(lhs)]
    b = [next(letters) for _ in range(rhs)]
    for i, j in zip(lb + lc, rb + rc):
        b[j] = a[i]
    out = [a[i] for i in lb] + [a[i] for i in range(lhs) if i not in lb + lc]
    out += [b[j] for j in range(rhs) if j not in rb + rc]
    return f"{''.join(a)},{''.join(b)}->{''.join(out)}"


def _layout(inst: Instruction, x: torch.Tensor, args: list) -> torch.Tensor | None:
    """The layout ops, shared by both references (they only move values)."""
    op = inst.opcode
    if op == "broadcast":
        return _broadcast(x, inst.shape.dims, inst.attrs.get("dimensions", ()))
    if op == "transpose":
        return x.permute(*inst.attrs["dimensions"])
    if op in ("reshape", "bitcast"):
        return x.reshape(inst.shape.dims)
    if op == "slice":
        return _slice(x, inst.attrs.get("slice"))
    if op == "concatenate":
        return torch.cat(args, dim=inst.attrs["dimensions"][0])
    if op == "copy":
        return x
    return None


def _walk(module: Module, inputs: Sequence[np.ndarray], step: Callable) -> list:
    entry = module.entry
    if entry is None or entry.root is None:
        raise NotModeled("module without an entry computation")
    env: dict[int, object] = {}
    for inst in entry.post_order():
        if inst.opcode == "parameter":
            env[inst.uid] = step(inst, [np.asarray(inputs[inst.parameter_number or 0])])
        elif inst.opcode == "tuple":
            env[inst.uid] = [env[o.uid] for o in inst.operands]
        else:
            env[inst.uid] = step(inst, [env[o.uid] for o in inst.operands])
    root = env[entry.root.uid]
    return list(root) if isinstance(root, list) else [root]


def _torch_step(inst: Instruction, args: list) -> torch.Tensor:
    op, dtype = inst.opcode, inst.shape.dtype
    if op == "parameter":
        return _tensor(args[0], dtype)
    if op == "constant":
        if inst.literal is None:
            raise NotModeled(f"{inst.where()}: constant without data")
        return _tensor(inst.literal, dtype)
    moved = _layout(inst, args[0], args) if args else None
    if moved is not None:
        return moved
    if op == "convert":
        return args[0].to(TORCH_DTYPES[dtype])
    if op in _T_UNARY:
        return _T_UNARY[op](args[0])
    if op in _T_BINARY:
        return _T_BINARY[op](args[0], args[1])
    if op == "custom-call":
        return _T_CUSTOM[_custom_target(inst)](args[0])
    if op == "dot":
        a, b = args
        if a.dtype != TORCH_DTYPES[dtype]:  # bf16 x bf16 -> f32: the products are exact in f32
            a, b = a.to(TORCH_DTYPES[dtype]), b.to(TORCH_DTYPES[dtype])
        return torch.einsum(_einsum_spec(inst), a, b)
    if op == "reduce":
        x, init = args
        axes = tuple(inst.attrs["dimensions"])
        kind = _reducer(inst)
        if kind == "add":
            return torch.sum(x, dim=axes) + init
        reduced = getattr(torch, _REDUCERS[kind])(x, dim=axes)
        return torch.maximum(reduced, init) if kind == "maximum" else torch.minimum(reduced, init)
    if op == "iota":
        return _iota(inst).to(TORCH_DTYPES[dtype])
    if op == "compare":
        return _direction(inst)(args[0], args[1])
    if op == "select":
        return torch.where(args[0], args[1], args[2])
    if op == "clamp":
        low, x, high = args
        return torch.minimum(torch.maximum(x, low), high)
    if op == "pad":
        return _pad(args[0], inst.attrs.get("padding"), args[1])
    raise NotModeled(f"{inst.where()}: opcode {op}")


def _to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    from hlo.ir import numpy_dtype

    return t.detach().float().numpy().astype(numpy_dtype(dtype))


def torch_outputs(module: Module, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The module evaluated with eager torch ops in its own dtypes."""
    with torch.no_grad():
        outs = _walk(module, inputs, _torch_step)
    root = module.entry.root
    shapes = root.shape.tuple_shapes if root.shape.is_tuple else (root.shape,)
    return [_to_numpy(t, s.dtype) for t, s in zip(outs, shapes)]


# ---- float64 with error bounds ----------------------------------------------------------------------------


@dataclass
class Bounded:
    value: torch.Tensor  # float64
    err: torch.Tensor  # float64, >= 0: a correct implementation is within err of value


def _monotone(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Bounded], tuple]:
    def apply(x: Bounded) -> tuple[torch.Tensor, torch.Tensor]:
        v = fn(x.value)
        spread = torch.maximum((fn(x.value + x.err) - v).abs(), (fn(x.value - x.err) - v).abs())
        return v, torch.nan_to_num(spread, nan=torch.inf)
    return apply


def _gelu_like(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Bounded], tuple]:
    return lambda x: (fn(x.value), 1.13 * x.err)  # |gelu'| <= 1.13


_B_UNARY = {
    "tanh": _monotone(torch.tanh), "logistic": _monotone(torch.sigmoid), "exponential": _monotone(torch.exp),
    "log": _monotone(torch.log), "sqrt": _monotone(torch.sqrt), "rsqrt": _monotone(torch.rsqrt),
    "gelu": _gelu_like(F.gelu), "gelu_tanh": _gelu_like(lambda x: F.gelu(x, approximate="tanh")),
}


def _b_binary(op: str, a: Bounded, b: Bounded) -> tuple[torch.Tensor, torch.Tensor]:
    x, ex, y, ey = a.value, a.err, b.value, b.err
    if op in ("add", "subtract"):
        return (x + y if op == "add" else x - y), ex + ey
    if op in ("maximum", "minimum"):
        return (torch.maximum(x, y) if op == "maximum" else torch.minimum(x, y)), torch.maximum(ex, ey)
    if op == "multiply":
        return x * y, x.abs() * ey + y.abs() * ex + ex * ey
    if op == "divide":
        v = x / y
        room = y.abs() - ey
        return v, torch.where(room > 0, (ex + v.abs() * ey) / room.clamp_min(1e-300), torch.inf)
    if op == "power":
        v = torch.pow(x, y)
        spread = torch.zeros_like(v)
        for sx in (-1, 1):
            for sy in (-1, 1):
                spread = torch.maximum(spread, (torch.pow(x + sx * ex, y + sy * ey) - v).abs())
        return v, torch.nan_to_num(spread, nan=torch.inf)
    raise NotModeled(f"binary {op}")


_CAST_OPS = frozenset(_T_UNARY) | frozenset(_T_BINARY) | {"custom-call", "select", "clamp", "convert"}


def _bounded_step(inst: Instruction, args: list, auto_cast: str = "none") -> Bounded:
    op, dtype = inst.opcode, inst.shape.dtype
    if dtype not in UNIT_ROUNDOFF:
        raise NotModeled(f"{inst.where()}: element type {dtype}")
    u = UNIT_ROUNDOFF[dtype]
    if op in ("parameter", "constant"):
        data = args[0] if op == "parameter" else inst.literal
        if data is None:
            raise NotModeled(f"{inst.where()}: constant without data")
        v = torch.from_numpy(np.asarray(data, np.float64).copy())
        return Bounded(v, torch.zeros_like(v))
    if args and (moved := _layout(inst, args[0].value, [a.value for a in args])) is not None:
        return Bounded(moved, _layout(inst, args[0].err, [a.err for a in args]))
    cast_all = auto_cast == "all" and dtype == "f32" and op in _CAST_OPS
    if cast_all or (auto_cast != "none" and op == "dot"):  # what --auto-cast rounds to bf16
        args = [Bounded(a.value, a.err + UNIT_ROUNDOFF["bf16"] * a.value.abs()) if o.shape.dtype == "f32" else a
                for a, o in zip(args, inst.operands)]
        u = UNIT_ROUNDOFF["bf16"] if cast_all else u
    if op in ("iota", "compare", "select", "clamp", "pad"):
        return _bounded_selection(inst, args)
    rel = u
    if op in ("convert", "negate"):
        v, e = (-args[0].value if op == "negate" else args[0].value), args[0].err
    elif op in _B_UNARY or op == "custom-call":
        v, e = _B_UNARY[op if op != "custom-call" else _custom_target(inst)](args[0])
        rel = u + TRANSCENDENTAL
    elif op in _T_BINARY:
        v, e = _b_binary(op, args[0], args[1])
    elif op == "dot":
        (a, b), spec = args, _einsum_spec(inst)
        k = max(1, int(np.prod([inst.operands[0].shape.dims[i] for i in inst.attrs["lhs_contracting_dims"]])))
        v = torch.einsum(spec, a.value, b.value)
        magnitude = torch.einsum(spec, a.value.abs(), b.value.abs())
        e = (torch.einsum(spec, a.value.abs(), b.err) + torch.einsum(spec, a.err, b.value.abs())
             + torch.einsum(spec, a.err, b.err) + k * ACCUMULATE * magnitude)
    elif op == "reduce":
        (x, init), axes, kind = args, tuple(inst.attrs["dimensions"]), _reducer(inst)
        if kind == "add":
            n = int(np.prod([x.value.shape[i] for i in axes]))
            v = torch.sum(x.value, dim=axes) + init.value
            e = torch.sum(x.err, dim=axes) + n * ACCUMULATE * torch.sum(x.value.abs(), dim=axes)
        else:
            pick = torch.amax if kind == "maximum" else torch.amin
            both = torch.maximum if kind == "maximum" else torch.minimum
            v = both(pick(x.value, dim=axes), init.value)
            e = torch.amax(x.err, dim=axes)
    else:
        raise NotModeled(f"{inst.where()}: opcode {op}")
    return Bounded(v, e + rel * v.abs())


def _bounded_selection(inst: Instruction, args: list[Bounded]) -> Bounded:
    """Ops that pick values. A compare's err is 1 where its operands are too close to call: a select
    there may return either operand."""
    op = inst.opcode
    if op == "iota":
        v = _iota(inst)
        return Bounded(v, torch.zeros_like(v))
    if op == "compare":
        (x, y) = args
        close = ((x.value - y.value).abs() < x.err + y.err).to(torch.float64)
        return Bounded(_direction(inst)(x.value, y.value).to(torch.float64), close)
    if op == "select":
        p, a, b = args
        pick = p.value > 0.5
        e = torch.where(pick, a.err, b.err) + p.err * ((a.value - b.value).abs() + torch.maximum(a.err, b.err))
        return Bounded(torch.where(pick, a.value, b.value), e)
    if op == "clamp":
        low, x, high = args
        v = torch.minimum(torch.maximum(x.value, low.value), high.value)
        return Bounded(v, torch.maximum(torch.maximum(x.err, low.err), high.err))
    x, value = args  # pad
    text = inst.attrs.get("padding")
    return Bounded(_pad(x.value, text, value.value), _pad(x.err, text, value.err))


def exact_outputs(module: Module, inputs: Sequence[np.ndarray], auto_cast: str = "none") -> list[Bounded]:
    """float64 values of the module's outputs with their rounding-error bounds (for a compilation with
    ``--auto-cast auto_cast`` to bf16: dot operands, and with "all" every fp32 elementwise op, in bf16)."""
    if auto_cast not in ("none", "matmult", "all"):
        raise NotModeled(f"auto_cast={auto_cast}")
    with torch.no_grad():
        return _walk(module, inputs, lambda inst, args: _bounded_step(inst, args, auto_cast))


def check(actual: np.ndarray, exact: Bounded, dtype: str) -> str | None:
    """None when ``actual`` is within SLACK * err (+ FLOOR * scale) of ``exact`` everywhere it is finite,
    else one line naming the worst element."""
    from hlo.ir import numpy_dtype

    want_shape = tuple(exact.value.shape)
    if tuple(actual.shape) != want_shape or actual.dtype != numpy_dtype(dtype):
        return f"got {actual.dtype}{list(actual.shape)}, expected {dtype}{list(want_shape)}"
    value, err = exact.value.numpy(), exact.err.numpy()
    finite = np.isfinite(value) & np.isfinite(err)
    if not finite.any():
        return None
    scale = max(1.0, float(np.sqrt(np.mean(np.square(value[finite])))))
    got = actual.astype(np.float64)
    tolerance = SLACK * err + FLOOR * scale
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(got - value) <= tolerance)
    if not bad.any():
        return None
    excess = np.where(bad, np.nan_to_num(np.abs(got - value), nan=np.inf) / np.maximum(tolerance, 1e-300), 0)
    at = np.unravel_index(int(np.argmax(excess)), value.shape)
    where = list(int(i) for i in at)
    return (f"{int(bad.sum())} of {value.size} elements off; worst at {where}: got {got[at]:.6g}, "
            f"expected {value[at]:.6g} +- {tolerance[at]:.3g}")
