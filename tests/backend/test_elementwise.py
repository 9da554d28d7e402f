"""kLoop fusions, unfused (-O0) graphs, layout ops between kernels, tuple outputs, errors."""

from __future__ import annotations

import numpy as np
import pytest

from backend import BackendOptions, compile_module
from compiler.errors import CompilationError
from hlo.parser import parse_module
from tests.backend.util import TOL, rand, run_hlo


def test_kloop_fusion():
    text = """HloModule m

%loop (p0: f32[130,700], p1: f32[130,700], p2: f32[700]) -> f32[130,700] {
  %p0 = f32[130,700] parameter(0)
  %p1 = f32[130,700] parameter(1)
  %p2 = f32[700] parameter(2)
  %t = f32[130,700] tanh(%p0)
  %m = f32[130,700] multiply(%t, %p1)
  %two = f32[] constant(2)
  %twos = f32[130,700] broadcast(%two), dimensions={}
  %s = f32[130,700] subtract(%twos, %m)
  %row = f32[130,700] broadcast(%p2), dimensions={1}
  %d = f32[130,700] divide(%s, %row)
  %e = f32[130,700] exponential(%d)
  ROOT %r = f32[130,700] sqrt(%e)
}

ENTRY %main (x: f32[130,700], y: f32[130,700], z: f32[700]) -> f32[130,700] {
  %x = f32[130,700] parameter(0)
  %y = f32[130,700] parameter(1)
  %z = f32[700] parameter(2)
  ROOT %f = f32[130,700] fusion(%x, %y, %z), kind=kLoop, calls=%loop
}
"""
    x, y, z = rand(130, 700, seed=1), rand(130, 700, seed=2), np.abs(rand(700, seed=3)) + 1
    (out,), _ = run_hlo(text, [x, y, z], options=BackendOptions(elementwise_free=256))
    np.testing.assert_allclose(out, np.sqrt(np.exp((2 - np.tanh(x) * y) / z)), **TOL["f32"])


def test_unfused_o0_graph():
    """dot, broadcast, add and maximum as separate instructions (no fusion at -O0)."""
    m, k, n = 50, 120, 90
    text = f"""HloModule m
ENTRY %main (x: f32[{m},{k}], w: f32[{n},{k}], b: f32[{n}]) -> f32[{m},{n}] {{
  %x = f32[{m},{k}] parameter(0)
  %w = f32[{n},{k}] parameter(1)
  %b = f32[{n}] parameter(2)
  %d = f32[{m},{n}] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  %bb = f32[{m},{n}] broadcast(%b), dimensions={{1}}
  %a = f32[{m},{n}] add(%d, %bb)
  %zero = f32[] constant(0)
  %zeros = f32[{m},{n}] broadcast(%zero), dimensions={{}}
  ROOT %r = f32[{m},{n}] maximum(%a, %zeros)
}}
"""
    x, w, b = rand(m, k, seed=1), rand(n, k, seed=2), rand(n, seed=3)
    (out,), result = run_hlo(text, [x, w, b], options=BackendOptions(keep_on_chip=False))
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), **TOL["f32"])
    assert sum(t.kind == "scratch" for t in result.program.tensors.values()) == 2
    (out,), result = run_hlo(text, [x, w, b])  # both intermediates stay on chip
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), **TOL["f32"])
    assert sum(t.kind == "scratch" for t in result.program.tensors.values()) == 0


def test_layout_ops_between_kernels():
    """transpose and reshape views between kernels; a transposed ROOT written in place by the dot."""
    text = """HloModule m
ENTRY %main (x: f32[64,96], w: f32[96,48], y: f32[48,64]) -> (f32[48,64], f32[8,8,48], f32[48,64]) {
  %x = f32[64,96] parameter(0)
  %w = f32[96,48] parameter(1)
  %y = f32[48,64] parameter(2)
  %d = f32[64,48] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[48,64] transpose(%d), dimensions={1,0}
  %s = f32[48,64] add(%t, %y)
  %r = f32[8,8,48] reshape(%d)
  %d2 = f32[64,48] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t2 = f32[48,64] transpose(%d2), dimensions={1,0}
  ROOT %out = (f32[48,64], f32[8,8,48], f32[48,64]) tuple(%s, %r, %t2)
}
"""
    x, w, y = rand(64, 96, seed=1), rand(96, 48, seed=2), rand(48, 64, seed=3)
    (s, r, t2), result = run_hlo(text, [x, w, y])
    d = x @ w
    np.testing.assert_allclose(s, d.T + y, **TOL["f32"])
    np.testing.assert_allclose(r, d.reshape(8, 8, 48), **TOL["f32"])
    np.testing.assert_allclose(t2, d.T, **TOL["f32"])


def test_tuple_outputs_parameter_constant_and_int():
    text = """HloModule m
ENTRY %main (x: f32[5,7], i: s32[300]) -> (f32[5,7], f32[5,7], s32[300], f32[2,3], f32[7,5]) {
  %x = f32[5,7] parameter(0)
  %i = s32[300] parameter(1)
  %n = s32[300] negate(%i)
  %c = f32[2,3] constant({{1,2,3},{4,5,6}})
  %xt = f32[7,5] transpose(%x), dimensions={1,0}
  %xb = bf16[5,7] convert(%x)
  %xf = f32[5,7] convert(%xb)
  ROOT %out = (f32[5,7], f32[5,7], s32[300], f32[2,3], f32[7,5]) tuple(%x, %xf, %n, %c, %xt)
}
"""
    x = rand(5, 7)
    i = np.arange(300, dtype=np.int32) - 150
    (ox, oxf, on, oc, oxt), _ = run_hlo(text, [x, i])
    np.testing.assert_array_equal(ox, x)
    np.testing.assert_allclose(oxf, x, rtol=1e-2)
    np.testing.assert_array_equal(on, -i)
    np.testing.assert_array_equal(oc, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(oxt, x.T)


def test_rank3_elementwise_with_broadcasts():
    text = """HloModule m
ENTRY %main (x: f32[4,33,20], v: f32[33]) -> f32[4,33,20] {
  %x = f32[4,33,20] parameter(0)
  %v = f32[33] parameter(1)
  %vb = f32[4,33,20] broadcast(%v), dimensions={1}
  %a = f32[4,33,20] add(%x, %vb)
  ROOT %g = f32[4,33,20] custom-call(%a), custom_call_target="gelu_tanh"
}
"""
    import torch

    x, v = rand(4, 33, 20, seed=1), rand(33, seed=2)
    (out,), _ = run_hlo(text, [x, v])
    expected = torch.nn.functional.gelu(torch.from_numpy(x + v[:, None]), approximate="tanh").numpy()
    np.testing.assert_allclose(out, expected, **TOL["f32"])


@pytest.mark.parametrize("body,what", [
    ('ROOT %r = f32[4,4] custom-call(%x), custom_call_target="softmax"', "custom-call 'softmax'"),
])
def test_unsupported_ops_name_the_instruction(body, what):
    module = parse_module(f"""HloModule m
ENTRY %main {{
  %x = f32[4,4] parameter(0)
  {body}
}}
""")
    with pytest.raises(CompilationError, match=what.replace("(", r"\(").replace(")", r"\)")):
        compile_module(module, "trn1")
