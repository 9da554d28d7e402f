"""Dot kernels alone: shapes with partial tiles, contracting-dim variants, bf16, batched dots."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import BF16, TOL, bf16_round, dot_text, rand, run_hlo

SHAPES = [(3, 100, 300), (64, 256, 1024), (200, 784, 300), (1, 1, 1), (129, 130, 513)]


@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
def test_dot_f32(m, k, n):
    x, w = rand(m, k, seed=1), rand(k, n, seed=2)
    (out,), result = run_hlo(dot_text(m, k, n), [x, w])
    np.testing.assert_allclose(out, x @ w, **TOL["f32"])
    assert result.program.meta["useful_macs"] == m * k * n


@pytest.mark.parametrize("lhs_t,rhs_t", [(True, False), (False, True), (True, True)])
def test_contracting_dims(lhs_t, rhs_t):
    m, k, n = 70, 300, 150
    x = rand(k, m, seed=1) if lhs_t else rand(m, k, seed=1)
    w = rand(n, k, seed=2) if rhs_t else rand(k, n, seed=2)
    (out,), _ = run_hlo(dot_text(m, k, n, lhs_transposed=lhs_t, rhs_transposed=rhs_t), [x, w])
    np.testing.assert_allclose(out, (x.T if lhs_t else x) @ (w.T if rhs_t else w), **TOL["f32"])


@pytest.mark.parametrize("m,k,n", [(3, 100, 300), (129, 130, 513)], ids=lambda v: str(v))
def test_dot_bf16_operands(m, k, n):
    x, w = rand(m, k, seed=1, dtype=BF16), rand(k, n, seed=2, dtype=BF16)
    (out,), _ = run_hlo(dot_text(m, k, n, dtype="bf16"), [x, w])
    expected = x.astype(np.float32) @ w.astype(np.float32)
    np.testing.assert_allclose(out, expected, **TOL["bf16"])


def test_auto_cast_converts_parameter_and_constant():
    """lhs f32 parameter converted to bf16 (cast on chip after a PE-transpose load), rhs f32 constant
    converted to bf16 (cast at compile time)."""
    m, k, n = 130, 260, 200
    text = f"""HloModule m
ENTRY %main (x: f32[{m},{k}]) -> f32[{m},{n}] {{
  %x = f32[{m},{k}] parameter(0)
  %xc = bf16[{m},{k}] convert(%x)
  %w = f32[{k},{n}] constant({{...}}), data="w"
  %wc = bf16[{k},{n}] convert(%w)
  ROOT %dot = f32[{m},{n}] dot(%xc, %wc), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    x, w = rand(m, k, seed=1), rand(k, n, seed=2)
    (out,), result = run_hlo(text, [x], {"w": w})
    np.testing.assert_allclose(out, bf16_round(x) @ bf16_round(w), rtol=1e-4, atol=1e-3)
    assert {t.dtype for t in result.program.tensors.values() if t.kind == "const"} == {"bf16"}


def test_batched_dot():
    b, m, k, n = 3, 40, 150, 70
    dims = "lhs_contracting_dims={2}, rhs_contracting_dims={1}"
    text = f"""HloModule m
ENTRY %main (x: f32[{b},{m},{k}], y: f32[{b},{k},{n}]) -> f32[{b},{m},{n}] {{
  %x = f32[{b},{m},{k}] parameter(0)
  %y = f32[{b},{k},{n}] parameter(1)
  ROOT %dot = f32[{b},{m},{n}] dot(%x, %y), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, {dims}
}}
"""
    x, y = rand(b, m, k, seed=1), rand(b, k, n, seed=2)
    (out,), result = run_hlo(text, [x, y])
    np.testing.assert_allclose(out, x @ y, **TOL["f32"])
    assert result.program.meta["useful_macs"] == b * m * k * n


def test_dot_with_merged_free_dims():
    """[B, S, K] x [K, N]: the two free dims of lhs are merged into one M."""
    text = """HloModule m
ENTRY %main (x: f32[4,30,64], w: f32[64,50]) -> f32[4,30,50] {
  %x = f32[4,30,64] parameter(0)
  %w = f32[64,50] parameter(1)
  ROOT %dot = f32[4,30,50] dot(%x, %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}
"""
    x, w = rand(4, 30, 64, seed=1), rand(64, 50, seed=2)
    (out,), _ = run_hlo(text, [x, w])
    np.testing.assert_allclose(out, x @ w, **TOL["f32"])
