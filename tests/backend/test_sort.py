"""The sort and top-k kernels against the HLO interpreter (checked emulation, -O0 and -O2): sizes 1, odd,
more than 128 rows, NaN, -0.0 and ties, several operands, descending, TOTALORDER, any sorted dimension."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import compiler
from backend.kernels import sort as sort_kernel
from compiler.errors import CompilationError
from hlo.interpreter import evaluate
from hlo.parser import parse_module

BF16 = np.dtype(ml_dtypes.bfloat16)


def _shape(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


# comparator bodies over %a0 %b0 (operand 0) [%a1 %b1 (operand 1)]; {t} is operand 0's type
COMPARATORS = {
    "lt": "  ROOT %r = pred[] compare(%a0, %b0), direction=LT\n",
    "gt": "  ROOT %r = pred[] compare(%a0, %b0), direction=GT\n",
    "total": "  ROOT %r = pred[] compare(%a0, %b0), direction=LT, type=TOTALORDER\n",
    "total_desc": "  ROOT %r = pred[] compare(%a0, %b0), direction=GT, type=TOTALORDER\n",
    # jax's jnp.sort: -0 -> +0 and NaN -> +NaN, then a TOTALORDER compare
    "jax": """  %nan = {t}[] constant(nan)
  %zero = {t}[] constant(0)
  %na = pred[] compare(%a0, %a0), direction=NE
  %za = pred[] compare(%a0, %zero), direction=EQ
  %ca0 = {t}[] select(%za, %zero, %a0)
  %ca = {t}[] select(%na, %nan, %ca0)
  %nb = pred[] compare(%b0, %b0), direction=NE
  %zb = pred[] compare(%b0, %zero), direction=EQ
  %cb0 = {t}[] select(%zb, %zero, %b0)
  %cb = {t}[] select(%nb, %nan, %cb0)
  ROOT %r = pred[] compare(%ca, %cb), direction=LT, type=TOTALORDER
""",
    # two keys, lexicographic: operand 0 ascending, then operand 1 descending
    "lex": """  %lt0 = pred[] compare(%a0, %b0), direction=LT
  %eq0 = pred[] compare(%a0, %b0), direction=EQ
  %gt1 = pred[] compare(%a1, %b1), direction=GT
  %and = pred[] and(%eq0, %gt1)
  ROOT %r = pred[] or(%lt0, %and)
""",
    # a key computed from one operand: sort by |x| (negated: largest magnitude first)
    "negabs": """  %xa = {t}[] abs(%a0)
  %na = {t}[] negate(%xa)
  %xb = {t}[] abs(%b0)
  %nb = {t}[] negate(%xb)
  ROOT %r = pred[] compare(%na, %nb), direction=LT
""",
}


def sort_text(dtypes: list[str], dims: tuple[int, ...], axis: int, cmp: str, stable: bool = True) -> str:
    params = "".join(f"  %a{i} = {t}[] parameter({2 * i})\n  %b{i} = {t}[] parameter({2 * i + 1})\n"
                     for i, t in enumerate(dtypes))
    body = COMPARATORS[cmp].format(t=dtypes[0])
    shapes = [_shape(t, dims) for t in dtypes]
    result = shapes[0] if len(dtypes) == 1 else f"({', '.join(shapes)})"
    args = ", ".join(f"%x{i}" for i in range(len(dtypes)))
    entry = "".join(f"  %x{i} = {s} parameter({i})\n" for i, s in enumerate(shapes))
    stable_attr = ", is_stable=true" if stable else ""
    sort = f"sort({args}), dimensions={{{axis}}}{stable_attr}, to_apply=%cmp"
    if len(dtypes) == 1:
        tail = f"  ROOT %s = {result} {sort}\n"
    else:  # as XLA writes it: the tuple's elements, then a tuple of them
        tail = f"  %s = {result} {sort}\n" + "".join(
            f"  %g{i} = {s} get-tuple-element(%s), index={i}\n" for i, s in enumerate(shapes))
        tail += f"  ROOT %t = {result} tuple({', '.join(f'%g{i}' for i in range(len(dtypes)))})\n"
    return f"HloModule sort\n\n%cmp {{\n{params}{body}}}\n\nENTRY %main {{\n{entry}{tail}}}\n"


def _values(dtype: str, dims: tuple[int, ...], seed: int, special: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype in ("s32", "u8", "s8"):
        lo, hi = {"s32": (-2**31, 2**31), "u8": (0, 256), "s8": (-128, 128)}[dtype]
        base = rng.integers(lo, hi, dims, dtype=np.int64)
        base.reshape(-1)[::3] = rng.integers(0, 4, base.size)[: base.reshape(-1)[::3].size]  # ties
        return base.astype({"s32": np.int32, "u8": np.uint8, "s8": np.int8}[dtype])
    np_dtype = {"f32": np.float32, "bf16": BF16, "f16": np.float16}[dtype]
    x = rng.integers(-4, 4, dims).astype(np.float32) * 0.5  # many ties
    flat = x.reshape(-1)
    if special and flat.size > 4:
        k = rng.choice(flat.size, min(flat.size, 8), replace=False)
        flat[k] = [np.nan, -0.0, 0.0, -np.inf, np.inf, -np.nan, -0.0, 3e38][: len(k)]
    with np.errstate(over="ignore"):
        return x.astype(np_dtype)


def _check(text: str, inputs: list[np.ndarray], levels=(0, 2)) -> None:
    want = evaluate(parse_module(text), inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    for level in levels:
        got = compiler.compile(text, opt_level=level).run(*inputs, check=True)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8),
                                          err_msg=f"-O{level}\n{text}")


@pytest.mark.parametrize("dims,axis", [((1,), 0), ((7,), 0), ((3, 5), 1), ((3, 5), 0), ((130, 9), 1),
                                       ((2, 3, 6), 1)])
@pytest.mark.parametrize("cmp", ["jax", "total", "lt"])
def test_sort_f32_matches_the_interpreter_bit_for_bit(dims, axis, cmp):
    x = _values("f32", dims, seed=sum(dims) + axis, special=cmp != "lt")
    _check(sort_text(["f32"], dims, axis, cmp), [x], levels=(2,) if cmp == "lt" else (0, 2))


@pytest.mark.parametrize("cmp", ["total_desc", "gt", "negabs"])
def test_sort_descending_and_derived_keys(cmp):
    x = _values("f32", (4, 11), seed=3, special=cmp == "total_desc")
    _check(sort_text(["f32"], (4, 11), 1, cmp), [x], levels=(2,))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_sort_16_bit_floats_total_order(dtype):
    x = _values(dtype, (5, 13), seed=4)
    _check(sort_text([dtype], (5, 13), 1, "jax"), [x], levels=(2,))


def test_sort_two_operands_is_stable_and_carries_values():
    keys = _values("s32", (6, 17), seed=5)
    keys[:, ::2] = 7  # many equal keys: the values must keep their order
    vals = np.arange(6 * 17, dtype=np.float32).reshape(6, 17)
    _check(sort_text(["s32", "f32"], (6, 17), 1, "lt"), [keys, vals])


def test_sort_two_keys_lexicographic_and_unstable_flag():
    k0 = np.random.default_rng(6).integers(0, 3, (3, 20)).astype(np.int32)
    k1 = np.random.default_rng(7).integers(-2**31, 2**31, (3, 20), dtype=np.int64).astype(np.int32)
    k1[:, :5] = 9
    _check(sort_text(["s32", "s32"], (3, 20), 1, "lex", stable=False), [k0, k1], levels=(2,))


def test_sort_large_s32_keys_are_exact():
    x = np.array([2**31 - 1, 2**24 + 1, 2**24, -2**31, 2**24 + 3, -(2**24) - 1, 0, 2**24 + 2], np.int32)
    _check(sort_text(["s32"], (8,), 0, "lt"), [x], levels=(2,))


def test_sort_refuses_a_comparator_it_cannot_split():
    text = sort_text(["f32", "f32"], (5,), 0, "lt").replace(
        "  ROOT %r = pred[] compare(%a0, %b0), direction=LT\n",
        "  %u = f32[] add(%a0, %a1)\n  %v = f32[] add(%b0, %b1)\n"
        "  ROOT %r = pred[] compare(%u, %v), direction=LT, type=TOTALORDER\n")
    with pytest.raises(CompilationError, match="TOTALORDER"):
        compiler.compile(text, opt_level=2)


def topk_text(dtype: str, dims: tuple[int, ...], k: int, largest: bool = True) -> str:
    x = _shape(dtype, dims)
    out = dims[:-1] + (k,)
    v, i = _shape(dtype, out), _shape("s32", out)
    flag = "true" if largest else "false"
    return (f"HloModule topk\n\nENTRY %main {{\n  %x = {x} parameter(0)\n"
            f"  %t = ({v}, {i}) topk(%x), k={k}, largest={flag}\n"
            f"  %v = {v} get-tuple-element(%t), index=0\n  %i = {i} get-tuple-element(%t), index=1\n"
            f"  ROOT %r = ({v}, {i}) tuple(%v, %i)\n}}\n")


@pytest.mark.parametrize("dtype,dims,k", [("f32", (3, 17), 4), ("f32", (1,), 1), ("f32", (130, 9), 9),
                                          ("bf16", (2, 5, 12), 3), ("s32", (4, 33), 10), ("u8", (3, 40), 5)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_the_interpreter(dtype, dims, k, largest):
    x = _values(dtype, dims, seed=k + len(dims))
    _check(topk_text(dtype, dims, k, largest), [x], levels=(0, 2) if dims == (3, 17) else (2,))


def test_topk_long_rows_are_split_over_partitions():
    x = _values("f32", (3, 5000), seed=11)
    x[1, 4990:] = 9.0  # ties near the end of a row, in the last (partial) partition
    x[2, :] = 1.5
    _check(topk_text("f32", (3, 5000), 12), [x])


@pytest.mark.parametrize("cmp", ["jax", "lt"])
def test_passes_split_into_chunks_match(monkeypatch, cmp):
    """Every pass evaluated in pieces of at most 4 pairs (as long rows are, in pieces of 1024)."""
    monkeypatch.setattr(sort_kernel, "CHUNK", 4)
    x = _values("f32", (3, 37), seed=13, special=cmp == "jax")
    _check(sort_text(["f32"], (3, 37), 1, cmp), [x], levels=(2,))


@pytest.mark.slow
def test_long_rows_are_sorted_in_chunks():
    """N = 4096: every pass is evaluated in pieces of at most 1024 pairs (the temporaries stay small)."""
    x = np.random.default_rng(12).standard_normal((2, 3000)).astype(np.float32)
    x[:, 100:200] = 0.25  # ties
    got = compiler.compile(sort_text(["f32"], (2, 3000), 1, "lt"), opt_level=2).run(x, check=True)[0]
    np.testing.assert_array_equal(got, np.sort(x, axis=1))
