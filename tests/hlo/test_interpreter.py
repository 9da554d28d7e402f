"""The reference interpreter against numpy (and torch for gelu), one test or case per opcode."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from hlo.interpreter import EvaluationError, erf, evaluate
from hlo.parser import parse_module
from hlo.verifier import verify_module

REDUCERS = """
%add {
  %_a = f32[] parameter(0)
  %_b = f32[] parameter(1)
  ROOT %_s = f32[] add(%_a, %_b)
}

%softish {
  %_c = f32[] parameter(0)
  %_d = f32[] parameter(1)
  %_e = f32[] exponential(%_d)
  ROOT %_t = f32[] add(%_c, %_e)
}

%argmax {
  %_v0 = f32[] parameter(0)
  %_i0 = s32[] parameter(1)
  %_v1 = f32[] parameter(2)
  %_i1 = s32[] parameter(3)
  %_gt = pred[] compare(%_v1, %_v0), direction=GT
  %_v = f32[] select(%_gt, %_v1, %_v0)
  %_i = s32[] select(%_gt, %_i1, %_i0)
  ROOT %_r = (f32[], s32[]) tuple(%_v, %_i)
}

%fused {
  %_p0 = f32[3,4] parameter(0)
  %_p1 = f32[4] parameter(1)
  %_bc = f32[3,4] broadcast(%_p1), dimensions={1}
  %_m = f32[3,4] multiply(%_p0, %_bc)
  ROOT %_n = f32[3,4] negate(%_m)
}
"""


def run(body: str, params: str, *args) -> list[np.ndarray]:
    """Evaluate an entry computation written as HLO lines, with parameters ``name: shape, ...``."""
    decls = [p.split(":") for p in params.split(", ")] if params else []
    lines = [f"  %{n.strip()} = {s.strip()} parameter({i})" for i, (n, s) in enumerate(decls)]
    module = parse_module("HloModule t\n" + REDUCERS + "\nENTRY %main {\n" + "\n".join(lines) + "\n  "
                          + body.strip().replace("\n", "\n  ") + "\n}\n")
    verify_module(module)
    return evaluate(module, list(args))


RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = RNG.standard_normal((3, 4)).astype(np.float32)
P = np.abs(X) + 0.5


@pytest.mark.parametrize("op, fn, arg", [
    ("abs", np.abs, X), ("negate", np.negative, X), ("exponential", np.exp, X), ("log", np.log, P),
    ("tanh", np.tanh, X), ("logistic", lambda v: 1 / (1 + np.exp(-v)), X), ("sqrt", np.sqrt, P),
    ("rsqrt", lambda v: 1 / np.sqrt(v), P), ("erf", np.vectorize(math.erf), X), ("sine", np.sin, X),
    ("cosine", np.cos, X), ("floor", np.floor, X * 3), ("ceil", np.ceil, X * 3),
    ("round-nearest-even", np.rint, np.array([[0.5, 1.5, 2.5, -0.5]] * 3, np.float32)), ("sign", np.sign, X),
])
def test_unary(op, fn, arg):
    (out,) = run(f"ROOT %r = f32[3,4] {op}(%x)", "x: f32[3,4]", arg)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, fn(arg.astype(np.float64)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op, fn", [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum), ("power", np.power), ("remainder", np.fmod),
])
def test_binary(op, fn):
    a, b = (P, Y) if op == "power" else (X, Y)
    (out,) = run(f"ROOT %r = f32[3,4] {op}(%a, %b)", "a: f32[3,4], b: f32[3,4]", a, b)
    np.testing.assert_allclose(out, fn(a, b), rtol=1e-6)


def test_integer_power_of_negative_exponents_is_xlas():
    """Negative exponents: 1 for x == 1, +-1 for x == -1 by parity, else 0 (numpy raises); others wrap."""
    x = np.array([1, -1, -1, 2, 0, 3, 7, 2], np.int32)
    y = np.array([-3, -3, -2, -1, -5, 2, 40, 31], np.int32)
    (out,) = run("ROOT %r = s32[8] power(%a, %b)", "a: s32[8], b: s32[8]", x, y)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [1, -1, 1, 0, 0, 9, pow(7, 40, 2**32) - 2**32, -2**31])


def test_integer_and_logical_ops():
    a = np.array([7, -7, 6, -1], np.int32)
    b = np.array([2, 2, -4, 3], np.int32)
    q, r, x, n = run("""
        %q = s32[4] divide(%a, %b)
        %r = s32[4] remainder(%a, %b)
        %x = s32[4] xor(%a, %b)
        %n = s32[4] not(%a)
        ROOT %t = (s32[4], s32[4], s32[4], s32[4]) tuple(%q, %r, %x, %n)""", "a: s32[4], b: s32[4]", a, b)
    assert q.tolist() == [3, -3, -1, 0] and r.tolist() == [1, -1, 2, -1]
    assert x.tolist() == (a ^ b).tolist() and n.tolist() == (~a).tolist()
    t = np.array([True, False, True, False])
    u = np.array([True, True, False, False])
    o, nd = run("%o = pred[4] or(%t, %u)\n%a = pred[4] and(%t, %u)\nROOT %r = (pred[4], pred[4]) tuple(%o, %a)",
                "t: pred[4], u: pred[4]", t, u)
    assert o.tolist() == [True, True, True, False] and nd.tolist() == [True, False, False, False]


def test_compare_select_clamp():
    c, s, k = run("""
        %c = pred[3,4] compare(%x, %y), direction=GE
        %s = f32[3,4] select(%c, %x, %y)
        %lo = f32[] constant(-0.5)
        %hi = f32[] constant(0.5)
        %k = f32[3,4] clamp(%lo, %x, %hi)
        ROOT %t = (pred[3,4], f32[3,4], f32[3,4]) tuple(%c, %s, %k)""", "x: f32[3,4], y: f32[3,4]", X, Y)
    np.testing.assert_array_equal(c, X >= Y)
    np.testing.assert_array_equal(s, np.maximum(X, Y))
    np.testing.assert_array_equal(k, np.clip(X, -0.5, 0.5))


def test_convert_iota_and_bf16_rounding():
    big = np.array([1.7, -2.9, 1e10, np.nan], np.float32)
    i, b, io = run("""
        %i = s32[4] convert(%x)
        %b = bf16[4] convert(%x)
        %io = s32[2,3] iota(), iota_dimension=1
        ROOT %t = (s32[4], bf16[4], s32[2,3]) tuple(%i, %b, %io)""", "x: f32[4]", big)
    assert i.tolist() == [1, -2, 2**31 - 1, 0]
    assert b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(b[:3], big[:3].astype(ml_dtypes.bfloat16))
    assert io.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_shape_ops():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    outs = run("""
        %bc = f32[5,3,2] broadcast(%v), dimensions={2,1}
        %tr = f32[4,2,3] transpose(%x), dimensions={2,0,1}
        %rs = f32[6,4] reshape(%x)
        %sl = f32[1,2,2] slice(%x), slice={[1:2], [0:3:2], [1:4:2]}
        %cat = f32[2,3,8] concatenate(%x, %x), dimensions={2}
        ROOT %t = (f32[5,3,2], f32[4,2,3], f32[6,4], f32[1,2,2], f32[2,3,8]) tuple(%bc, %tr, %rs, %sl, %cat)""",
               "x: f32[2,3,4], v: f32[2,3]", x, X[:2, :3])
    np.testing.assert_array_equal(outs[0], np.broadcast_to(X[:2, :3].T[None], (5, 3, 2)))
    np.testing.assert_array_equal(outs[1], x.transpose(2, 0, 1))
    np.testing.assert_array_equal(outs[2], x.reshape(6, 4))
    np.testing.assert_array_equal(outs[3], x[1:2, 0:3:2, 1:4:2])
    np.testing.assert_array_equal(outs[4], np.concatenate([x, x], axis=2))


def test_broadcast_transposing_mapping():
    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = run("ROOT %b = f32[3,4,2] broadcast(%v), dimensions={2,0}", "v: f32[2,3]", v)
    np.testing.assert_array_equal(out, np.broadcast_to(v.T[:, None, :], (3, 4, 2)))


def test_pad_with_interior_and_negative_edges():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    (out,) = run("%z = f32[] constant(-1)\nROOT %p = f32[5,4] pad(%x, %z), padding=1_2x-1_0_1", "x: f32[2,3]", x)
    expected = np.full((5, 5), -1, np.float32)
    expected[1:3, 0:5:2] = x
    np.testing.assert_array_equal(out, expected[:, 1:])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_dot_with_batch_dims(dtype):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float32
    a = RNG.standard_normal((2, 5, 3)).astype(np_dtype)
    b = RNG.standard_normal((3, 2, 4)).astype(np_dtype)
    (out,) = run("ROOT %d = f32[2,5,4] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                 "rhs_batch_dims={1}, rhs_contracting_dims={0}", f"a: {dtype}[2,5,3], b: {dtype}[3,2,4]", a, b)
    expected = np.einsum("bmk,kbn->bmn", a.astype(np.float64), b.astype(np.float64))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)  # inputs exact in bf16, fp32 accumulate


def test_dot_bf16_result_is_rounded():
    a = RNG.standard_normal((4, 64)).astype(ml_dtypes.bfloat16)
    (out,) = run("ROOT %d = bf16[4,4] dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
                 "a: bf16[4,64]", a)
    wide = a.astype(np.float32)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out, (wide @ wide.T).astype(ml_dtypes.bfloat16))


def test_reduce_fast_path_and_generic_fallback():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    s, g = run("""
        %z = f32[] constant(0)
        %s = f32[4] reduce(%x, %z), dimensions={0,2}, to_apply=%add
        %g = f32[3] reduce(%x, %z), dimensions={1,2}, to_apply=%softish
        ROOT %t = (f32[4], f32[3]) tuple(%s, %g)""", "x: f32[3,4,5]", x)
    np.testing.assert_allclose(s, x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g, np.exp(x).sum(axis=(1, 2)), rtol=1e-5)


def test_variadic_reduce_argmax():
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    v, i = run("""
        %io = s32[3,6] iota(), iota_dimension=1
        %ninf = f32[] constant(-inf)
        %zero = s32[] constant(0)
        ROOT %r = (f32[3], s32[3]) reduce(%x, %io, %ninf, %zero), dimensions={1}, to_apply=%argmax""",
               "x: f32[3,6]", x)
    np.testing.assert_array_equal(v, x.max(axis=1))
    np.testing.assert_array_equal(i, x.argmax(axis=1))


def test_fusion_and_tuple_root():
    a, b = run("""
        %f = f32[3,4] fusion(%x, %v), kind=kLoop, calls=%fused
        %t = (f32[3,4], f32[4]) tuple(%f, %v)
        %g = f32[3,4] get-tuple-element(%t), index=0
        ROOT %r = (f32[3,4], f32[4]) tuple(%g, %v)""", "x: f32[3,4], v: f32[4]", X, Y[0])
    np.testing.assert_array_equal(a, -(X * Y[0]))
    np.testing.assert_array_equal(b, Y[0])


@pytest.mark.parametrize("target, approximate", [("gelu", "none"), ("gelu_tanh", "tanh")])
def test_gelu_custom_calls_match_torch(target, approximate):
    x = (RNG.standard_normal((8, 33)) * 4).astype(np.float32)
    (out,) = run(f'ROOT %g = f32[8,33] custom-call(%x), custom_call_target="{target}"', "x: f32[8,33]", x)
    expected = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_erf_is_float64_accurate():
    x = np.concatenate([np.linspace(-7, 7, 2001), [0.0, 1e-300, -1e-8, np.inf, -np.inf]])
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), expected, rtol=2e-15, atol=1e-300)
    assert np.isnan(erf(np.array([np.nan])))[0]


def test_bad_inputs_and_unknown_custom_call():
    with pytest.raises(EvaluationError, match="takes 1 arguments, got 0"):
        run("ROOT %r = f32[3,4] negate(%x)", "x: f32[3,4]")
    with pytest.raises(EvaluationError, match=r"%x expects shape \[3, 4\], got \[4, 3\]"):
        run("ROOT %r = f32[3,4] negate(%x)", "x: f32[3,4]", X.T)
    with pytest.raises(EvaluationError, match="expects f32, got complex64"):
        run("ROOT %r = f32[3,4] negate(%x)", "x: f32[3,4]", np.zeros((3, 4), np.complex64))
    (out,) = run("ROOT %r = f32[3,4] negate(%x)", "x: f32[3,4]", X.astype(np.float64))  # same kind: cast
    assert out.dtype == np.float32
    with pytest.raises(EvaluationError, match=r'%g \(custom-call\): no implementation of custom_call_target="swish"'):
        run('ROOT %g = f32[3,4] custom-call(%x), custom_call_target="swish"', "x: f32[3,4]", X)


def test_every_opcode_with_a_shape_rule_has_an_interpreter_rule():
    from hlo.interpreter import OPS
    from hlo.shape_inference import RULES

    assert set(RULES) - {"parameter"} == set(OPS)
