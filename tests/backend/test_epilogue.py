"""kOutput fusions: dot + bias + activation epilogues, f32 and bf16 operands, both orientations."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import BF16, TOL, act_fn, layer_computation, rand, run_hlo


def fused_layer_text(m: int, k: int, n: int, act: str, dtype: str, feature_major: bool = False) -> str:
    """One Linear layer as a kOutput fusion. With feature_major the result feeds a second dot that
    contracts its minor axis, so the backend stores it transposed (orientation A)."""
    comp = layer_computation("layer", m, k, n, act, dtype)
    x, w = f"{dtype}[{m},{k}]", f"{dtype}[{n},{k}]"
    lines = [f"  %x = {x} parameter(0)", f"  %w = {w} parameter(1)", f"  %b = f32[{n}] parameter(2)"]
    if not feature_major:
        lines.append(f"  ROOT %h = f32[{m},{n}] fusion(%x, %w, %b), kind=kOutput, calls=%layer")
    else:
        lines += [f"  %h = f32[{m},{n}] fusion(%x, %w, %b), kind=kOutput, calls=%layer",
                  f"  %eye = f32[{n},{n}] parameter(3)",
                  f"  ROOT %out = f32[{m},{n}] dot(%h, %eye), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"]
    params = f"x: {x}, w: {w}, b: f32[{n}]" + (f", eye: f32[{n},{n}]" if feature_major else "")
    return (f"HloModule layer\n\n{comp}\nENTRY %main ({params}) -> f32[{m},{n}] {{\n" + "\n".join(lines) + "\n}\n")


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "none"])
@pytest.mark.parametrize("feature_major", [False, True], ids=["rowmajor", "featuremajor"])
def test_epilogue_f32(act, feature_major):
    m, k, n = 70, 200, 150
    x, w, b = rand(m, k, seed=1), rand(n, k, seed=2) / 10, rand(n, seed=3)
    inputs = [x, w, b] + ([np.eye(n, dtype=np.float32)] if feature_major else [])
    (out,), result = run_hlo(fused_layer_text(m, k, n, act, "f32", feature_major), inputs)
    np.testing.assert_allclose(out, act_fn(act)(x @ w.T + b), **TOL["f32"])
    if feature_major and act in ("relu", "tanh", "sigmoid", "gelu"):
        # bias + activation straight out of PSUM: one ACT instruction per output tile
        acts = [i for i in result.program.instructions if i.opcode == "activation" and i.comment.startswith("k1.")
                and "transpose" not in i.comment]
        assert acts and all(i.operands["src"].memory == "psum" and "bias" in i.operands for i in acts)


@pytest.mark.parametrize("act", ["relu", "gelu", "tanh", "sigmoid"])
def test_epilogue_bf16(act):
    m, k, n = 129, 300, 260
    x, w, b = rand(m, k, seed=1, dtype=BF16), (rand(n, k, seed=2) / 10).astype(BF16), rand(n, seed=3)
    (out,), _ = run_hlo(fused_layer_text(m, k, n, act, "bf16"), [x, w, b])
    expected = act_fn(act)(x.astype(np.float32) @ w.astype(np.float32).T + b)
    np.testing.assert_allclose(out, expected, **TOL["bf16"])


def test_residual_scale_and_convert_epilogue():
    """dot * 0.5 + residual, converted to bf16 and back: all in the epilogue of one kernel."""
    m, k, n = 40, 64, 96
    text = f"""HloModule m

%fused (p0: f32[{m},{k}], p1: f32[{k},{n}], p2: f32[{m},{n}]) -> f32[{m},{n}] {{
  %p0 = f32[{m},{k}] parameter(0)
  %p1 = f32[{k},{n}] parameter(1)
  %p2 = f32[{m},{n}] parameter(2)
  %d = f32[{m},{n}] dot(%p0, %p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %half = f32[] constant(0.5)
  %halves = f32[{m},{n}] broadcast(%half), dimensions={{}}
  %s = f32[{m},{n}] multiply(%d, %halves)
  %r = f32[{m},{n}] add(%s, %p2)
  %c = bf16[{m},{n}] convert(%r)
  ROOT %e = f32[{m},{n}] convert(%c)
}}

ENTRY %main (x: f32[{m},{k}], w: f32[{k},{n}], res: f32[{m},{n}]) -> f32[{m},{n}] {{
  %x = f32[{m},{k}] parameter(0)
  %w = f32[{k},{n}] parameter(1)
  %res = f32[{m},{n}] parameter(2)
  ROOT %f = f32[{m},{n}] fusion(%x, %w, %res), kind=kOutput, calls=%fused
}}
"""
    x, w, r = rand(m, k, seed=1), rand(k, n, seed=2), rand(m, n, seed=3)
    (out,), _ = run_hlo(text, [x, w, r])
    expected = (x @ w * 0.5 + r).astype(BF16).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=1e-2, atol=1e-2)
