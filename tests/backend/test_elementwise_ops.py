"""Elementwise op classes with broadcasts: compare/select/abs/sign/clamp/iota/logical ops/pow, scalar
and vector operands on either side, pred and int values, size-1 and odd dims."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import TOL, body_module, rand, run_hlo

X = (130, 70)


def shp(dims, dtype="f32") -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


CASES = {  # name -> (HLO body over %p0 f32[130,70] and %p1 f32[70], numpy function)
    "abs": ("%r = f32[130,70] abs(%p0)", lambda x, v: np.abs(x)),
    "sign": ("%r = f32[130,70] sign(%p0)", lambda x, v: np.sign(x)),
    "neg_exp": ("%n = f32[130,70] negate(%p0)\n%r = f32[130,70] exponential(%n)", lambda x, v: np.exp(-x)),
    "expm1_log1p": ("%a = f32[130,70] abs(%p0)\n%l = f32[130,70] log-plus-one(%a)\n"
                    "%r = f32[130,70] exponential-minus-one(%l)", lambda x, v: np.abs(x)),
    "clamp": ("%lo = f32[] constant(-0.5)\n%hi = f32[] constant(0.7)\n%r = f32[130,70] clamp(%lo, %p0, %hi)",
              lambda x, v: np.clip(x, -0.5, 0.7)),
    "select_gt_row": ("%vb = f32[130,70] broadcast(%p1), dimensions={1}\n"
                      "%c = pred[130,70] compare(%p0, %vb), direction=GT\n"
                      "%r = f32[130,70] select(%c, %p0, %vb)", lambda x, v: np.maximum(x, v)),
    "scalar_minus_x": ("%two = f32[] constant(2)\n%tb = f32[130,70] broadcast(%two), dimensions={}\n"
                       "%r = f32[130,70] subtract(%tb, %p0)", lambda x, v: 2 - x),
    "scalar_over_x": ("%two = f32[] constant(2)\n%tb = f32[130,70] broadcast(%two), dimensions={}\n"
                      "%a = f32[130,70] abs(%p0)\n%r = f32[130,70] divide(%tb, %a)", lambda x, v: 2 / np.abs(x)),
    "pow_cube": ("%three = f32[] constant(3)\n%tb = f32[130,70] broadcast(%three), dimensions={}\n"
                 "%r = f32[130,70] power(%p0, %tb)", lambda x, v: x ** 3),
    "two_pow_x": ("%two = f32[] constant(2)\n%tb = f32[130,70] broadcast(%two), dimensions={}\n"
                  "%r = f32[130,70] power(%tb, %p0)", lambda x, v: 2.0 ** x),
    "logic": ("%z = f32[] constant(0)\n%zb = f32[130,70] broadcast(%z), dimensions={}\n"
              "%vb = f32[130,70] broadcast(%p1), dimensions={1}\n"
              "%a = pred[130,70] compare(%p0, %zb), direction=GE\n%b = pred[130,70] compare(%vb, %zb), direction=LT\n"
              "%o = pred[130,70] or(%a, %b)\n%n = pred[130,70] not(%o)\n%x = pred[130,70] xor(%n, %a)\n"
              "%r = f32[130,70] convert(%x)",
              lambda x, v: (~((x >= 0) | (v < 0)) ^ (x >= 0)).astype(np.float32)),
    "iota_mask": ("%i = s32[130,70] iota(), iota_dimension=0\n%j = s32[130,70] iota(), iota_dimension=1\n"
                  "%c = pred[130,70] compare(%i, %j), direction=GE\n%ninf = f32[] constant(-inf)\n"
                  "%nb = f32[130,70] broadcast(%ninf), dimensions={}\n%r = f32[130,70] select(%c, %p0, %nb)",
                  lambda x, v: np.where(np.tril(np.ones(X, bool)), x, -np.inf)),
    "vec_minus_x_col": ("%c = f32[130] slice(%p0), slice={[0:130], [3:4]}\n"
                        "%cb = f32[130,70] broadcast(%c), dimensions={0}\n%r = f32[130,70] subtract(%cb, %p0)",
                        lambda x, v: x[:, 3:4] - x),
}


@pytest.mark.parametrize("fused", ["kLoop", None], ids=["fused", "unfused"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_op(case, fused):
    body, fn = CASES[case]
    text = body_module([("p0", shp(X)), ("p1", shp((70,)))], "\n".join("  " + line for line in body.split("\n")),
                       shp(X), fused)
    x, v = rand(*X, seed=1), rand(70, seed=2)
    (out,), _ = run_hlo(text, [x, v])
    np.testing.assert_allclose(out, fn(x, v), rtol=1e-4, atol=1e-4)


def test_pred_and_int_outputs():
    body = """  %c = pred[33,5] compare(%p0, %p1), direction=LT
  %i = s32[33,5] convert(%p0)
  %two = s32[] constant(2)
  %tb = s32[33,5] broadcast(%two), dimensions={}
  %m = s32[33,5] multiply(%i, %tb)
  %t = (pred[33,5], s32[33,5]) tuple(%c, %m)"""
    text = body_module([("p0", "f32[33,5]"), ("p1", "f32[33,5]")], body, "(pred[33,5], s32[33,5])")
    x, y = rand(33, 5, seed=1) * 10, rand(33, 5, seed=2)
    (c, m), _ = run_hlo(text, [x, y])
    np.testing.assert_array_equal(c.astype(bool), x < y)
    np.testing.assert_array_equal(m, np.trunc(x).astype(np.int32) * 2)  # XLA's convert truncates


@pytest.mark.parametrize("dims,bdims,bshape", [
    ((1, 1), (0, 1), (1, 1)),
    ((257,), (0,), (257,)),
    ((3, 1, 200), (1,), (1,)),
    ((2, 129, 3), (0, 2), (2, 3)),
])
def test_broadcast_shapes(dims, bdims, bshape):
    body = f"""  %b = {shp(dims)} broadcast(%p1), dimensions={{{','.join(map(str, bdims))}}}
  %m = {shp(dims)} multiply(%p0, %b)
  %r = {shp(dims)} tanh(%m)"""
    text = body_module([("p0", shp(dims)), ("p1", shp(bshape))], body, shp(dims), "kLoop")
    x, b = rand(*dims, seed=1), rand(*bshape, seed=2)
    expand = b.reshape([dims[i] if i in bdims else 1 for i in range(len(dims))])
    (out,), _ = run_hlo(text, [x, b])
    np.testing.assert_allclose(out, np.tanh(x * expand), **TOL["f32"])


@pytest.mark.parametrize("dims,padding,value", [
    ((5, 7), "1_2x0_3", 0.0),
    ((130, 40), "2_-1x-3_1_2", -1.5),     # negative edges crop, interior padding spreads
    ((4, 3, 6), "0_0x1_1x2_0_1", 7.0),
    ((3, 3), "-3_0x0_0", 0.0),            # everything cropped away
])
def test_pad(dims, padding, value):
    import torch

    from hlo.shape_inference import parse_padding

    config = parse_padding(padding, len(dims))
    out_dims = [lo + hi + n + max(0, n - 1) * it for (lo, hi, it), n in zip(config, dims)]
    body = f"""  %v = f32[] constant({value})
  %r = f32[{','.join(map(str, out_dims))}] pad(%p0, %v), padding={padding}"""
    text = body_module([("p0", shp(dims))], body, shp(out_dims))
    x = rand(*dims, seed=1)
    (out,), _ = run_hlo(text, [x])
    t = torch.from_numpy(x)
    for axis, (lo, hi, it) in enumerate(config):  # interior, then edges (negative ones crop)
        if it:
            n = t.shape[axis]
            spread = torch.full([*t.shape[:axis], n + (n - 1) * it, *t.shape[axis + 1:]], value)
            spread.narrow(axis, 0, spread.shape[axis])[(slice(None),) * axis + (slice(None, None, it + 1),)] = t
            t = spread
        t = torch.nn.functional.pad(t.movedim(axis, -1), (lo, hi), value=value).movedim(-1, axis)
    np.testing.assert_array_equal(out, t.numpy())
