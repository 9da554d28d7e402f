"""The interpreter's convolution, reduce-window, gather, scatter and dynamic slices against torch, with
the exact attribute forms the frontend emits (see the top of hlo/shape_inference.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hlo.interpreter import evaluate, to_dtype
from hlo.ir import Window
from hlo.parser import parse_module
from hlo.printer import format_window, print_module
from hlo.verifier import verify_module

COMBINERS = """
%add (_a: f32[], _b: f32[]) -> f32[] {
  %_a = f32[] parameter(0)
  %_b = f32[] parameter(1)
  ROOT %_s = f32[] add(%_a, %_b)
}

%max (_c: f32[], _d: f32[]) -> f32[] {
  %_c = f32[] parameter(0)
  %_d = f32[] parameter(1)
  ROOT %_m = f32[] maximum(%_c, %_d)
}

%second (_e: f32[], _f: f32[]) -> f32[] {
  %_e = f32[] parameter(0)
  ROOT %_f = f32[] parameter(1)
}

%axpy (_g: f32[], _h: f32[]) -> f32[] {
  %_g = f32[] parameter(0)
  %_h = f32[] parameter(1)
  %_two = f32[] constant(2)
  %_h2 = f32[] multiply(%_h, %_two)
  ROOT %_r = f32[] add(%_g, %_h2)
}
"""


def run(body: str, params: str, *args) -> list[np.ndarray]:
    """Evaluate an entry computation written as HLO lines (parameters ``name: shape, ...``); the module
    must verify and print back to the same text."""
    decls = [p.split(":") for p in params.split(", ")] if params else []
    lines = [f"  %{n.strip()} = {s.strip()} parameter({i})" for i, (n, s) in enumerate(decls)]
    text = ("HloModule t\n" + COMBINERS + "\nENTRY %main {\n" + "\n".join(lines) + "\n  "
            + body.strip().replace("\n", "\n  ") + "\n}\n")
    module = parse_module(text)
    verify_module(module)
    assert print_module(parse_module(print_module(module))) == print_module(module)
    return evaluate(module, list(args))


RNG = np.random.default_rng(0)


def rand(*dims: int) -> np.ndarray:
    return RNG.standard_normal(dims).astype(np.float32)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


# ---- convolution -----------------------------------------------------------------------------------------


def test_conv2d_nchw_stride_pad_dilation():
    x, w = rand(2, 3, 9, 8), rand(4, 3, 3, 2)
    (out,) = run("ROOT %c = f32[2,4,5,4] convolution(%x, %w), window={size=3x2 stride=2x2 pad=1_1x0_1 "
                 "rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01", "x: f32[2,3,9,8], w: f32[4,3,3,2]", x, w)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 1)))
    want = F.conv2d(t(padded), t(w), stride=2, dilation=(1, 2)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_conv2d_nhwc_depthwise_groups():
    x, w = rand(1, 6, 6, 4), rand(3, 3, 1, 8)  # HWIO with I = C / groups, O = 8 (2 per group)
    (out,) = run("ROOT %c = f32[1,6,6,8] convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, "
                 "dim_labels=b01f_01io->b01f, feature_group_count=4", "x: f32[1,6,6,4], w: f32[3,3,1,8]", x, w)
    want = F.conv2d(t(x.transpose(0, 3, 1, 2)), t(w.transpose(3, 2, 0, 1)), padding=1, groups=4)
    np.testing.assert_allclose(out, want.numpy().transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_conv1d_transposed_via_lhs_dilation_and_reversal():
    # conv_transpose1d(x, w, stride=2) == conv over x dilated by 2, padded k-1, with the flipped kernel
    x, w = rand(1, 2, 5), rand(2, 3, 3)  # torch: w is (in, out, k)
    (out,) = run("ROOT %c = f32[1,3,11] convolution(%x, %w), window={size=3 pad=2_2 lhs_dilate=2 rhs_reversal=1}, "
                 "dim_labels=bf0_io0->bf0", "x: f32[1,2,5], w: f32[2,3,3]", x, w)
    np.testing.assert_allclose(out, F.conv_transpose1d(t(x), t(w), stride=2).numpy(), rtol=1e-5, atol=1e-5)


def test_conv_batch_group_count():
    # batch_group_count: the batch splits into groups, each group convolves with its share of the outputs
    x, w = rand(4, 3, 5), rand(6, 3, 2)
    (out,) = run("ROOT %c = f32[2,6,4] convolution(%x, %w), window={size=2}, dim_labels=bf0_oi0->bf0, "
                 "batch_group_count=2", "x: f32[4,3,5], w: f32[6,3,2]", x, w)
    want = np.concatenate([F.conv1d(t(x[:2]), t(w[:3])).numpy(), F.conv1d(t(x[2:]), t(w[3:])).numpy()], axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_conv_bf16_accumulates_in_f32():
    x, w = rand(1, 8, 4, 4).astype(ml_dtypes.bfloat16), rand(2, 8, 1, 1).astype(ml_dtypes.bfloat16)
    (out,) = run("ROOT %c = f32[1,2,4,4] convolution(%x, %w), window={size=1x1}, dim_labels=bf01_oi01->bf01",
                 "x: bf16[1,8,4,4], w: bf16[2,8,1,1]", x, w)
    want = F.conv2d(t(x.astype(np.float32)), t(w.astype(np.float32))).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


# ---- reduce-window ---------------------------------------------------------------------------------------


def test_max_pool_with_padding_skips_the_padding():
    x = rand(1, 2, 7, 7)
    (out,) = run("%ninf = f32[] constant(-inf)\nROOT %p = f32[1,2,4,4] reduce-window(%x, %ninf), "
                 "window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, to_apply=%max", "x: f32[1,2,7,7]", x)
    np.testing.assert_array_equal(out, F.max_pool2d(t(x), 3, 2, padding=1).numpy())


def test_avg_pool_sum_and_non_identity_init():
    x = rand(1, 3, 6, 6)
    (out,) = run("%zero = f32[] constant(0)\nROOT %p = f32[1,3,3,3] reduce-window(%x, %zero), "
                 "window={size=1x1x2x2 stride=1x1x2x2}, to_apply=%add", "x: f32[1,3,6,6]", x)
    np.testing.assert_allclose(out / 4, F.avg_pool2d(t(x), 2).numpy(), rtol=1e-6)
    # padding positions are skipped, not filled with init: init 10 is added once per window
    (out,) = run("%ten = f32[] constant(10)\nROOT %p = f32[4] reduce-window(%v, %ten), window={size=2 pad=1_1}, "
                 "to_apply=%add", "v: f32[3]", np.array([1, 2, 3], np.float32))
    assert out.tolist() == [11, 13, 15, 13]


def test_reduce_window_generic_combiner_and_dilations():
    v = np.arange(1, 7, dtype=np.float32)
    (out,) = run("%zero = f32[] constant(0)\nROOT %p = f32[4] reduce-window(%v, %zero), window={size=2 rhs_dilate=2}, "
                 "to_apply=%axpy", "v: f32[6]", v)
    assert out.tolist() == [2 * (1 + 3), 2 * (2 + 4), 2 * (3 + 5), 2 * (4 + 6)]
    (out,) = run("%zero = f32[] constant(0)\nROOT %p = f32[5] reduce-window(%v, %zero), window={size=1 lhs_dilate=2}, "
                 "to_apply=%add", "v: f32[3]", v[:3])
    assert out.tolist() == [1, 0, 2, 0, 3]


# ---- gather / scatter ------------------------------------------------------------------------------------


def test_embedding_gather():
    table, ids = rand(10, 4), np.array([[3, 0, 9], [9, 1, 1]], np.int32)
    (out,) = run("ROOT %g = f32[2,3,4] gather(%w, %i), offset_dims={2}, collapsed_slice_dims={0}, "
                 "start_index_map={0}, index_vector_dim=2, slice_sizes={1,4}", "w: f32[10,4], i: s32[2,3]",
                 table, ids)
    np.testing.assert_array_equal(out, F.embedding(t(ids).long(), t(table)).numpy())


def test_gather_clamps_and_keeps_slices():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    starts = np.array([[0, 0], [3, 4], [-2, 1]], np.int32)  # out of range starts are clamped
    (out,) = run("ROOT %g = f32[3,2,2] gather(%x, %s), offset_dims={1,2}, collapsed_slice_dims={}, "
                 "start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,2}", "x: f32[4,5], s: s32[3,2]", x, starts)
    np.testing.assert_array_equal(out, [x[0:2, 0:2], x[2:4, 3:5], x[0:2, 1:3]])


def test_torch_gather_along_dim_1_with_batching_dims():
    x, idx = rand(3, 5), np.array([[4, 0], [1, 1], [2, 3]], np.int64)
    (out,) = run("ROOT %g = f32[3,2] gather(%x, %i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, "
                 "operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}",
                 "x: f32[3,5], i: s64[3,2]", x, idx)
    np.testing.assert_array_equal(out, torch.gather(t(x), 1, t(idx)).numpy())


def test_scatter_add_replace_generic_and_drops_out_of_bounds():
    base, upd = rand(6, 3), rand(4, 3)
    ids = np.array([[1], [4], [1], [7]], np.int32)  # 7 is out of bounds: dropped
    dims = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1"
    params = "x: f32[6,3], i: s32[4,1], u: f32[4,3]"
    (add,) = run(f"ROOT %s = f32[6,3] scatter(%x, %i, %u), {dims}, to_apply=%add", params, base, ids, upd)
    want = t(base).index_add(0, t(ids[:3, 0]).long(), t(upd[:3])).numpy()
    np.testing.assert_allclose(add, want, rtol=1e-6)
    (rep,) = run(f"ROOT %s = f32[6,3] scatter(%x, %i, %u), {dims}, to_apply=%second", params,
                 base, np.array([[1], [4], [2], [7]], np.int32), upd)
    want = base.copy()
    want[[1, 4, 2]] = upd[:3]
    np.testing.assert_array_equal(rep, want)
    (gen,) = run(f"ROOT %s = f32[6,3] scatter(%x, %i, %u), {dims}, to_apply=%axpy", params, base, ids, upd)
    np.testing.assert_allclose(gen, base + (want_add := (add - base)) * 2, rtol=1e-5, atol=1e-6)
    assert want_add.shape == (6, 3)


def test_scatter_scalar_updates_index_put():
    x = np.zeros((3, 4), np.float32)
    ids = np.array([[0, 1], [2, 3]], np.int32)
    (out,) = run("%v = f32[2] constant({5, 7})\nROOT %s = f32[3,4] scatter(%x, %i, %v), update_window_dims={}, "
                 "inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%second",
                 "x: f32[3,4], i: s32[2,2]", x, ids)
    assert out[0, 1] == 5 and out[2, 3] == 7 and out.sum() == 12


# ---- dynamic slices and others ---------------------------------------------------------------------------


def test_dynamic_slice_and_update_clamp():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    ds, dus = run("""
        %i = s32[] constant(3)
        %j = s32[] constant(-1)
        %ds = f32[2,3] dynamic-slice(%x, %i, %j), dynamic_slice_sizes={2,3}
        %u = f32[2,2] constant({ {-1, -2}, {-3, -4} })
        %dus = f32[4,5] dynamic-update-slice(%x, %u, %i, %i)
        ROOT %t = (f32[2,3], f32[4,5]) tuple(%ds, %dus)""", "x: f32[4,5]", x)
    np.testing.assert_array_equal(ds, x[2:4, 0:3])
    want = x.copy()
    want[2:4, 3:5] = [[-1, -2], [-3, -4]]
    np.testing.assert_array_equal(dus, want)


def test_f8e4m3fn_conversion_saturates():
    big = np.array([1000.0, -1e9, np.inf, 448.0, 1.0, np.nan], np.float32)
    (out,) = run("ROOT %c = f8e4m3fn[6] convert(%x)", "x: f32[6]", big)
    vals = out.astype(np.float32)
    assert vals[:5].tolist() == [448, -448, 448, 448, 1] and np.isnan(vals[5])
    (prod,) = run("%c = f8e4m3fn[2] convert(%x)\nROOT %m = f8e4m3fn[2] multiply(%c, %c)", "x: f32[2]",
                  np.array([300.0, 2.0], np.float32))
    assert prod.astype(np.float32).tolist() == [448, 4]
    e5m2 = to_dtype(np.array([70000.0, -np.inf], np.float32), np.dtype(ml_dtypes.float8_e5m2))
    assert e5m2.astype(np.float32).tolist() == [57344, -57344]


def test_call_and_new_unary_ops():
    v = np.array([0.5, 1.0, 2.0], np.float32)
    c, l1p, em1 = run("""
        %s = f32[] constant(1.5)
        %c = f32[] call(%s, %s), to_apply=%add
        %l = f32[3] log-plus-one(%v)
        %e = f32[3] exponential-minus-one(%v)
        ROOT %t = (f32[], f32[3], f32[3]) tuple(%c, %l, %e)""", "v: f32[3]", v)
    assert c == 3
    np.testing.assert_allclose(l1p, np.log1p(v), rtol=1e-6)
    np.testing.assert_allclose(em1, np.expm1(v), rtol=1e-6)


@pytest.mark.parametrize("window, text", [
    (Window.make((3, 3), stride=(2, 2), pad=((1, 1), (1, 1))), "{size=3x3 stride=2x2 pad=1_1x1_1}"),
    (Window.make((2,), lhs_dilate=(2,), rhs_dilate=(3,)), "{size=2 lhs_dilate=2 rhs_dilate=3}"),
    (Window.make((1, 2), pad=((0, 0), (-1, 2))), "{size=1x2 pad=0_0x-1_2}"),
    (Window(), "{}"),
])
def test_window_text(window, text):
    assert format_window(window) == text


def test_bitcast_follows_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same, flipped = run("""
        %same = f32[3,2]{1,0} bitcast(%x)
        %flipped = f32[3,2]{0,1} bitcast(%x)
        ROOT %t = (f32[3,2]{1,0}, f32[3,2]{0,1}) tuple(%same, %flipped)""", "x: f32[2,3]", x)
    np.testing.assert_array_equal(same, x.reshape(3, 2))
    np.testing.assert_array_equal(flipped, x.T)  # row-major bytes read column-major: the transpose


@pytest.mark.parametrize("lhs, rhs, out", [("b01f", "01io", "b01f"), ("f0b1", "i1o0", "1fb0"),
                                           ("1b0f", "o10i", "0b1f")])
def test_conv_any_dim_labels(lhs, rhs, out):
    x, w = rand(2, 3, 7, 6), rand(5, 3, 3, 2)  # canonical bf01 / oi01
    canonical = {"b": 0, "f": 1, "0": 2, "1": 3}
    kernel = {"o": 0, "i": 1, "0": 2, "1": 3}
    xl = x.transpose([canonical[c] for c in lhs])
    wl = w.transpose([kernel[c] for c in rhs])
    want = F.conv2d(t(np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 0)))), t(w), stride=(2, 1)).numpy()  # b f 0 1
    want = want.transpose([canonical[c] for c in out])
    shape = ",".join(map(str, want.shape))
    (got,) = run(f"ROOT %c = f32[{shape}] convolution(%x, %w), window={{size=3x2 stride=2x1 pad=1_0x0_0}}, "
                 f"dim_labels={lhs}_{rhs}->{out}", f"x: f32[{','.join(map(str, xl.shape))}], "
                 f"w: f32[{','.join(map(str, wl.shape))}]", xl, wl)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
