"""Row kernels: softmax, layer norm and RMS norm as one kernel each (fused) and op by op (unfused),
over awkward shapes: rows not a multiple of 128, size-1 dims, rank 3/4, long rows."""

from __future__ import annotations

import numpy as np
import pytest

from backend import BackendOptions
from tests.backend.util import BF16, TOL, body_module, rand, run_hlo


def shp(dims, dtype="f32") -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def softmax_body(dims: tuple[int, ...], dtype: str = "f32") -> str:
    """Softmax over the last axis of p0 (computed in f32, as the frontend does for half types)."""
    rows, full = dims[:-1], dims
    keep = ",".join(map(str, range(len(rows))))
    last = len(dims) - 1
    cvt = f"  %x = {shp(full)} convert(%p0)\n" if dtype != "f32" else f"  %x = {shp(full)} copy(%p0)\n"
    out = f"  %y = {shp(full, dtype)} convert(%dv)" if dtype != "f32" else f"  %y = {shp(full)} copy(%dv)"
    return cvt + f"""  %ninf = f32[] constant(-inf)
  %m = {shp(rows)} reduce(%x, %ninf), dimensions={{{last}}}, to_apply=%max_f32
  %mb = {shp(full)} broadcast(%m), dimensions={{{keep}}}
  %sub = {shp(full)} subtract(%x, %mb)
  %e = {shp(full)} exponential(%sub)
  %zero = f32[] constant(0)
  %sum = {shp(rows)} reduce(%e, %zero), dimensions={{{last}}}, to_apply=%add_f32
  %sb = {shp(full)} broadcast(%sum), dimensions={{{keep}}}
  %dv = {shp(full)} divide(%e, %sb)
{out}
"""


def norm_body(dims: tuple[int, ...], rms: bool, affine: bool, eps: float = 1e-5) -> str:
    """Layer norm (or RMS norm) over the last axis of p0 with weight p1 (and bias p2 for layer norm)."""
    rows, full = dims[:-1], dims
    keep = ",".join(map(str, range(len(rows))))
    last = len(dims) - 1
    n = dims[-1]
    lines = ["  %zero = f32[] constant(0)", f"  %inv = f32[] constant({1.0 / n!r})",
             f"  %invb = {shp(rows)} broadcast(%inv), dimensions={{}}",
             f"  %eps = f32[] constant({eps!r})", f"  %epsb = {shp(rows)} broadcast(%eps), dimensions={{}}"]
    if rms:
        lines += [f"  %c = {shp(full)} copy(%p0)"]
    else:
        lines += [f"  %s1 = {shp(rows)} reduce(%p0, %zero), dimensions={{{last}}}, to_apply=%add_f32",
                  f"  %mean = {shp(rows)} multiply(%s1, %invb)",
                  f"  %meanb = {shp(full)} broadcast(%mean), dimensions={{{keep}}}",
                  f"  %c = {shp(full)} subtract(%p0, %meanb)"]
    lines += [f"  %sq = {shp(full)} multiply(%c, %c)",
              f"  %s2 = {shp(rows)} reduce(%sq, %zero), dimensions={{{last}}}, to_apply=%add_f32",
              f"  %var = {shp(rows)} multiply(%s2, %invb)",
              f"  %ve = {shp(rows)} add(%var, %epsb)",
              f"  %rstd = {shp(rows)} rsqrt(%ve)",
              f"  %rb = {shp(full)} broadcast(%rstd), dimensions={{{keep}}}",
              f"  %nrm = {shp(full)} multiply(%c, %rb)"]
    if affine:
        lines += [f"  %wb = {shp(full)} broadcast(%p1), dimensions={{{last}}}",
                  f"  %scaled = {shp(full)} multiply(%nrm, %wb)"]
        if not rms:
            lines += [f"  %bb = {shp(full)} broadcast(%p2), dimensions={{{last}}}",
                      f"  %out = {shp(full)} add(%scaled, %bb)"]
        else:
            lines += [f"  %out = {shp(full)} copy(%scaled)"]
    else:
        lines += [f"  %out = {shp(full)} copy(%nrm)"]
    return "\n".join(lines)


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def norm_ref(x, w, b, rms: bool, eps: float = 1e-5):
    c = x if rms else x - x.mean(-1, keepdims=True)
    out = c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    out = out * w if w is not None else out
    return out + b if b is not None else out


def instructions_of(result, prefix: str) -> list:
    return [i for i in result.program.instructions if i.engine != "sp" and i.comment.startswith(prefix)]


@pytest.mark.parametrize("dims", [(200, 300), (1, 7), (3, 1, 129), (2, 3, 5, 64), (128, 1)])
@pytest.mark.parametrize("fused", ["kInput", None], ids=["fused", "unfused"])
def test_softmax(dims, fused):
    text = body_module([("p0", shp(dims))], softmax_body(dims), shp(dims), fused)
    x = rand(*dims, seed=2) * 3
    (out,), result = run_hlo(text, [x])
    np.testing.assert_allclose(out, softmax_ref(x), **TOL["f32"])
    if fused and dims == (200, 300):
        # per 128-row tile: max, negated max, exp with its row sum on ACT, divide
        ops = sorted(i.opcode for i in instructions_of(result, "k1.f[0]"))
        assert ops == ["activation", "tensor_reduce", "tensor_scalar", "tensor_scalar"]


def test_softmax_bf16_io():
    dims = (130, 96)
    text = body_module([("p0", shp(dims, "bf16"))], softmax_body(dims, "bf16"), shp(dims, "bf16"), "kInput")
    x = (rand(*dims, seed=4) * 2).astype(BF16)
    (out,), _ = run_hlo(text, [x])
    np.testing.assert_allclose(out.astype(np.float32), softmax_ref(x.astype(np.float32)), **TOL["bf16"])


def test_softmax_with_mask_and_scale_masked_rows():
    """scale * x + mask (with -inf) then softmax: a causal pattern over [heads, T, T]."""
    h, t = 3, 40
    dims = (h, t, t)
    body = f"""  %sc = f32[] constant(0.125)
  %scb = {shp(dims)} broadcast(%sc), dimensions={{}}
  %xs = {shp(dims)} multiply(%p0, %scb)
  %mb0 = {shp(dims)} broadcast(%p1), dimensions={{1,2}}
  %xm = {shp(dims)} add(%xs, %mb0)
""" + softmax_body(dims).replace("copy(%p0)", "copy(%xm)")
    text = body_module([("p0", shp(dims)), ("p1", shp((t, t)))], body, shp(dims), "kInput")
    x = rand(*dims, seed=3)
    mask = np.triu(np.full((t, t), -np.inf, dtype=np.float32), 1)
    (out,), _ = run_hlo(text, [x, mask])
    np.testing.assert_allclose(out, softmax_ref(x * 0.125 + mask), **TOL["f32"])


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dims", [(130, 768), (2, 5, 33), (1, 1)])
@pytest.mark.parametrize("fused", ["kInput", None], ids=["fused", "unfused"])
def test_norms(rms, dims, fused):
    n = dims[-1]
    params = [("p0", shp(dims)), ("p1", shp((n,)))] + ([] if rms else [("p2", shp((n,)))])
    text = body_module(params, norm_body(dims, rms, affine=True), shp(dims), fused)
    x, w, b = rand(*dims, seed=1) * 2 + 0.5, rand(n, seed=2), rand(n, seed=3)
    inputs = [x, w] + ([] if rms else [b])
    (out,), result = run_hlo(text, inputs)
    np.testing.assert_allclose(out, norm_ref(x, w, None if rms else b, rms), rtol=1e-4, atol=2e-4)
    if fused:
        assert sum(1 for name in result.program.tensors if name.startswith("s")) == 0  # no HBM intermediates


def test_long_rows_reduce_in_chunks():
    """A sum of squares over rows longer than the budget: chunked reduction, accumulated."""
    dims = (4, 50000)
    body = f"""  %sq = {shp(dims)} multiply(%p0, %p0)
  %zero = f32[] constant(0)
  %r = f32[4] reduce(%sq, %zero), dimensions={{1}}, to_apply=%add_f32"""
    text = body_module([("p0", shp(dims))], body, "f32[4]", "kInput")
    x = rand(*dims, seed=5)
    (out,), _ = run_hlo(text, [x], options=BackendOptions(elementwise_budget_bytes=64 * 1024))
    np.testing.assert_allclose(out, (x.astype(np.float64) ** 2).sum(1), rtol=1e-4)
