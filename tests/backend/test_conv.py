"""Convolution kernels: 1-D/2-D, strides, padding, dilation, groups (depthwise), bf16, epilogues, layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.kernels import conv_weights
from compiler.errors import CompilationError
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from isa.emulator import run_program
from tests.backend.util import BF16, TOL, rand, run_hlo, shape


def conv_text(x_dims, w_dims, out_dims, window: str, groups: int = 1, dtype: str = "f32", out_dtype: str = "f32",
              labels: str = "bf01_oi01->bf01", weight: str = "constant") -> str:
    """ROOT = convolution(x, w) with x a parameter and w a constant `w` (or parameter 1)."""
    x, w, out = shape(dtype, x_dims), shape(dtype, w_dims), shape(out_dtype, out_dims)
    params = f"x: {x}" + (f", w: {w}" if weight == "parameter" else "")
    w_line = (f"  %w = {w} parameter(1)" if weight == "parameter" else f'  %w = {w} constant({{...}}), data="w"')
    return f"""HloModule conv
ENTRY %main ({params}) -> {out} {{
  %x = {x} parameter(0)
{w_line}
  ROOT %y = {out} convolution(%x, %w), window={{{window}}}, dim_labels={labels}, feature_group_count={groups}
}}
"""


def torch_conv(x: np.ndarray, w: np.ndarray, stride=1, pad=0, dil=1, groups=1) -> np.ndarray:
    f = torch.nn.functional.conv2d if x.ndim == 4 else torch.nn.functional.conv1d
    return f(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(w.astype(np.float32)), stride=stride,
             padding=pad, dilation=dil, groups=groups).numpy()


def run_conv2d(n, c, h, w, o, k, stride=1, pad=0, dil=1, groups=1, dtype="f32", seed=1):
    kh, kw = k
    ho = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    wo = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    window = f"size={kh}x{kw} stride={stride}x{stride} pad={pad}_{pad}x{pad}_{pad} rhs_dilate={dil}x{dil}"
    np_dtype = BF16 if dtype == "bf16" else np.float32
    x = rand(n, c, h, w, seed=seed, dtype=np_dtype)
    wt = (rand(o, c // groups, kh, kw, seed=seed + 1) / np.sqrt(c // groups * kh * kw)).astype(np_dtype)
    (out,), result = run_hlo(conv_text((n, c, h, w), (o, c // groups, kh, kw), (n, o, ho, wo), window, groups, dtype),
                             [x], {"w": wt})
    return out, torch_conv(x, wt, stride, pad, dil, groups), result


CASES = {  # name: (n, c, h, w, o, (kh, kw), stride, pad, dilation, groups)
    "c3_3x3_pad1": (1, 3, 8, 8, 4, (3, 3), 1, 1, 1, 1),
    "1x1_multi_tile": (2, 200, 6, 6, 150, (1, 1), 1, 0, 1, 1),
    "7x7_s2_p3": (1, 3, 20, 22, 16, (7, 7), 2, 3, 1, 1),
    "dilation2": (1, 8, 12, 11, 8, (3, 3), 1, 2, 2, 1),
    "groups2": (2, 8, 10, 10, 12, (3, 3), 1, 1, 1, 2),
    "depthwise32": (1, 32, 10, 9, 32, (3, 3), 1, 1, 1, 32),
    "depthwise_multiplier2": (1, 12, 9, 9, 24, (3, 3), 2, 1, 1, 12),
    "batch2_s2_odd": (2, 5, 9, 7, 6, (3, 3), 2, 1, 1, 1),
    "rect_kernel_wide": (1, 4, 5, 40, 4, (1, 5), 1, 2, 1, 1),
    "tiles_300_to_260": (1, 300, 9, 9, 260, (3, 3), 1, 1, 1, 1),
    "pad_only_border": (1, 5, 6, 6, 4, (1, 1), 1, 2, 1, 1),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_conv2d_f32(case):
    n, c, h, w, o, k, stride, pad, dil, groups = CASES[case]
    out, expected, result = run_conv2d(n, c, h, w, o, k, stride, pad, dil, groups)
    np.testing.assert_allclose(out, expected, **TOL["f32"])
    ho, wo = expected.shape[2:]
    assert result.program.meta["useful_macs"] == n * o * ho * wo * (c // groups) * k[0] * k[1]


@pytest.mark.parametrize("case", ["c3_3x3_pad1", "7x7_s2_p3", "depthwise32", "tiles_300_to_260"])
def test_conv2d_bf16(case):
    n, c, h, w, o, k, stride, pad, dil, groups = CASES[case]
    out, expected, _ = run_conv2d(n, c, h, w, o, k, stride, pad, dil, groups, dtype="bf16")
    np.testing.assert_allclose(out, expected, **TOL["bf16"])


@pytest.mark.parametrize("fold", [(1, 1), (2, 1), (3, 1), (3, 2), (3, 3)], ids=str)
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_every_fold(monkeypatch, fold, dtype):
    """Each arrangement of shifted input copies on partitions (kernel rows, then columns, folded into
    the contraction), forced: row padding as zero rows, column padding clipped or zero columns."""
    monkeypatch.setattr(conv_weights, "folds", lambda cn, kernel, parts: [fold])
    out, expected, result = run_conv2d(2, 3, 13, 11, 5, (3, 3), 2, 2, 2, dtype=dtype)
    np.testing.assert_allclose(out, expected, **TOL[dtype])
    chunks = -(-3 // fold[0]) * -(-3 // fold[1])
    assert result.program.meta["useful_macs"] and sum(
        i.opcode == "multiply_moving" for i in result.program.instructions) == chunks


def test_conv2d_input_bands():
    """A 160x160 image does not fit one SBUF band: several bands, each with its halo rows."""
    out, expected, _ = run_conv2d(1, 3, 160, 160, 8, (7, 7), 2, 3)
    np.testing.assert_allclose(out, expected, **TOL["f32"])


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 1, 1, 1), (2, 2, 2, 1), (1, 0, 1, 4)])
def test_conv1d(stride, pad, dil, groups):
    n, c, length, o, k = 2, 8, 37, 12, 3
    lo = (length + 2 * pad - dil * (k - 1) - 1) // stride + 1
    x, w = rand(n, c, length, seed=3), rand(o, c // groups, k, seed=4)
    text = conv_text((n, c, length), (o, c // groups, k), (n, o, lo), f"size={k} stride={stride} pad={pad}_{pad} "
                     f"rhs_dilate={dil}", groups, labels="bf0_oi0->bf0")
    (out,), _ = run_hlo(text, [x], {"w": w})
    np.testing.assert_allclose(out, torch_conv(x, w, stride, pad, dil, groups), **TOL["f32"])


@pytest.mark.parametrize("groups,dtype", [(1, "f32"), (2, "f32"), (4, "bf16")])
def test_weights_as_parameter(groups, dtype):
    """Runtime weights are scattered into the stationary layout on chip (zeros between groups)."""
    n, c, h, w, o = 1, 8, 7, 6, 8
    np_dtype = BF16 if dtype == "bf16" else np.float32
    x, wt = rand(n, c, h, w, seed=5, dtype=np_dtype), rand(o, c // groups, 3, 3, seed=6, dtype=np_dtype)
    text = conv_text((n, c, h, w), (o, c // groups, 3, 3), (n, o, h, w), "size=3x3 pad=1_1x1_1", groups, dtype,
                     weight="parameter")
    (out,), _ = run_hlo(text, [x, wt])
    np.testing.assert_allclose(out, torch_conv(x, wt, 1, 1, 1, groups), **TOL[dtype])


def test_auto_cast_operands():
    """f32 input and weights converted to bf16 (auto-cast): the input (6 channels: a stem) is converted once
    before the conv's folded loads, the constant weight at compile time."""
    text = """HloModule m
ENTRY %main (x: f32[2,6,9,9]) -> f32[2,10,9,9] {
  %x = f32[2,6,9,9] parameter(0)
  %xc = bf16[2,6,9,9] convert(%x)
  %w = f32[10,6,3,3] constant({...}), data="w"
  %wc = bf16[10,6,3,3] convert(%w)
  ROOT %y = f32[2,10,9,9] convolution(%xc, %wc), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}
"""
    x, w = rand(2, 6, 9, 9, seed=7), rand(10, 6, 3, 3, seed=8)
    (out,), _ = run_hlo(text, [x], {"w": w})
    expected = torch_conv(x.astype(BF16), w.astype(BF16), 1, 1)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)


STEM = """HloModule m
ENTRY %main (x: f32[1,C,32,32]) -> f32[1,16,16,16] {
  %x = f32[1,C,32,32] parameter(0)
  %xc = bf16[1,C,32,32] convert(%x)
  %w = bf16[16,C,7,7] constant({...}), data="w"
  ROOT %y = f32[1,16,16,16] convolution(%xc, %w), window={size=7x7 stride=2x2 pad=3_3x3_3}, dim_labels=bf01_oi01->bf01
}
"""


@pytest.mark.parametrize("channels,converted_once", [(3, True), (32, False)])
def test_stem_input_converted_once(channels, converted_once):
    """An image of few channels read through a convert: its folded copies load the converted bf16 tensor
    (one conversion, half the bytes per copy) instead of each casting the f32 input after its load; wider
    inputs keep the cast on chip."""
    x, w = rand(1, channels, 32, 32, seed=3), rand(16, channels, 7, 7, seed=4).astype(BF16)
    (out,), result = run_hlo(STEM.replace("C", str(channels)), [x], {"w": w})
    expected = torch_conv(x.astype(BF16), w, 2, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)
    insts = result.program.instructions
    input_bytes = sum(i.operands["src"].nbytes for i in insts
                      if i.opcode == "dma" and i.operands["src"].tensor == "in0")
    if converted_once:  # read once, to convert it (the 3-channel stem folds its taps into 21 or more copies)
        assert input_bytes == x.nbytes
    assert any(".copy" in i.comment for i in insts) == converted_once


def test_nhwc_labels_reversal_and_bf16_output():
    """dim_labels other than NCHW (strided loads and stores), a reversed window, a bf16 result."""
    window = "window={size=3x3 pad=0_1x1_1 rhs_reversal=1x0}"
    text = f"""HloModule m
ENTRY %main (x: f32[2,7,8,5]) -> bf16[2,6,8,4] {{
  %x = f32[2,7,8,5] parameter(0)
  %w = f32[3,3,5,4] constant({{...}}), data="w"
  ROOT %y = bf16[2,6,8,4] convolution(%x, %w), {window}, dim_labels=b01f_01io->b01f
}}
"""
    x, w = rand(2, 7, 8, 5, seed=9), rand(3, 3, 5, 4, seed=10)
    (out,), _ = run_hlo(text, [x], {"w": w})
    expected = evaluate(parse_module(text, constants={"w": w}), [x])[0]
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), **TOL["bf16"])


def test_fused_bias_relu_epilogue():
    """A kOutput fusion rooted at relu(conv + bias): bias per output channel = per partition."""
    text = """HloModule m
%fused (p0: f32[2,16,10,10], p1: f32[24,16,3,3], p2: f32[24]) -> f32[2,24,10,10] {
  %p0 = f32[2,16,10,10] parameter(0)
  %p1 = f32[24,16,3,3] parameter(1)
  %p2 = f32[24] parameter(2)
  %c = f32[2,24,10,10] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %b = f32[2,24,10,10] broadcast(%p2), dimensions={1}
  %s = f32[2,24,10,10] add(%c, %b)
  %z = f32[] constant(0)
  %zb = f32[2,24,10,10] broadcast(%z), dimensions={}
  ROOT %r = f32[2,24,10,10] maximum(%s, %zb)
}
ENTRY %main (x: f32[2,16,10,10]) -> f32[2,24,10,10] {
  %x = f32[2,16,10,10] parameter(0)
  %w = f32[24,16,3,3] constant({...}), data="w"
  %bias = f32[24] constant({...}), data="b"
  ROOT %y = f32[2,24,10,10] fusion(%x, %w, %bias), kind=kOutput, calls=%fused
}
"""
    x, w, bias = rand(2, 16, 10, 10, seed=11), rand(24, 16, 3, 3, seed=12), rand(24, seed=13)
    (out,), result = run_hlo(text, [x], {"w": w, "b": bias})
    expected = np.maximum(torch_conv(x, w, 1, 1) + bias[None, :, None, None], 0)
    np.testing.assert_allclose(out, expected, **TOL["f32"])
    acts = [i for i in result.program.instructions if i.opcode == "activation"]
    assert acts and all(i.attrs["func"] == "relu" and "bias" in i.operands for i in acts)


def test_unfused_bias_relu_graph():
    """The same layer unfused: convolution, then broadcast add and maximum as their own kernels."""
    text = """HloModule m
ENTRY %main (x: f32[1,8,9,9]) -> f32[1,8,9,9] {
  %x = f32[1,8,9,9] parameter(0)
  %w = f32[8,8,3,3] constant({...}), data="w"
  %bias = f32[8] constant({...}), data="b"
  %c = f32[1,8,9,9] convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  %bb = f32[1,8,9,9] broadcast(%bias), dimensions={1}
  %s = f32[1,8,9,9] add(%c, %bb)
  %z = f32[] constant(0)
  %zb = f32[1,8,9,9] broadcast(%z), dimensions={}
  ROOT %r = f32[1,8,9,9] maximum(%s, %zb)
}
"""
    x, w, bias = rand(1, 8, 9, 9, seed=14), rand(8, 8, 3, 3, seed=15), rand(8, seed=16)
    (out,), _ = run_hlo(text, [x], {"w": w, "b": bias})
    np.testing.assert_allclose(out, np.maximum(torch_conv(x, w, 1, 1) + bias[None, :, None, None], 0), **TOL["f32"])


def test_pe_utilization_3x3_64_to_64():
    """ResNet's 3x3 64->64 layer on 56x56 in bf16: kernel rows folded into K (C_in 64 -> K 128)."""
    out, expected, result = run_conv2d(1, 64, 56, 56, 64, (3, 3), 1, 1, dtype="bf16")
    np.testing.assert_allclose(out, expected, **TOL["bf16"])
    profile = run_program(result.program, {"in0": rand(1, 64, 56, 56, dtype=BF16)}).profile
    matmuls = profile.instruction_counts["pe.multiply_moving"]
    assert matmuls == 7 * 6  # 7 blocks of 8 rows x (2 row chunks x 3 kernel columns)
    assert profile.mfu > 0.15


@pytest.mark.parametrize("attr,message", [
    ("window={size=3x3 lhs_dilate=2x2}", "base dilation"),
    ("window={size=3x3}, batch_group_count=2", "batch_group_count"),
])
def test_unsupported_forms_name_the_instruction(attr, message):
    out = "f32[1,4,13,13]" if "lhs_dilate" in attr else "f32[1,4,7,7]"
    batch = 2 if "batch_group" in attr else 1
    text = f"""HloModule m
ENTRY %main (x: f32[{batch},4,9,9]) -> {out} {{
  %x = f32[{batch},4,9,9] parameter(0)
  %w = f32[4,4,3,3] constant({{...}}), data="w"
  ROOT %bad = {out} convolution(%x, %w), {attr}, dim_labels=bf01_oi01->bf01
}}
"""
    with pytest.raises(CompilationError, match=rf"%bad \(convolution\).*{message}"):
        run_hlo(text, [rand(batch, 4, 9, 9)], {"w": rand(4, 4, 3, 3)})


def test_batch_norm_epilogue_is_one_tensor_scalar():
    """(conv - mean) * scale + residual, relu (a ResNet bottleneck's end): the subtract and the multiply by
    per-channel vectors are one tensor_scalar reading PSUM (op, op1), not a DVE subtract then an ACT multiply."""
    text = """HloModule m

%fused (x: f32[1,16,10,10], w: f32[32,16,1,1], m: f32[32], s: f32[32], r: f32[1,32,10,10]) -> f32[1,32,10,10] {
  %x = f32[1,16,10,10] parameter(0)
  %w = f32[32,16,1,1] parameter(1)
  %m = f32[32] parameter(2)
  %s = f32[32] parameter(3)
  %r = f32[1,32,10,10] parameter(4)
  %c = f32[1,32,10,10] convolution(%x, %w), window={size=1x1}, dim_labels=bf01_oi01->bf01
  %mb = f32[1,32,10,10] broadcast(%m), dimensions={1}
  %sub = f32[1,32,10,10] subtract(%c, %mb)
  %sb = f32[1,32,10,10] broadcast(%s), dimensions={1}
  %mul = f32[1,32,10,10] multiply(%sub, %sb)
  %add = f32[1,32,10,10] add(%mul, %r)
  %zero = f32[] constant(0)
  %zeros = f32[1,32,10,10] broadcast(%zero), dimensions={}
  ROOT %relu = f32[1,32,10,10] maximum(%add, %zeros)
}

ENTRY %main (x: f32[1,16,10,10], w: f32[32,16,1,1], m: f32[32], s: f32[32], r: f32[1,32,10,10]) -> f32[1,32,10,10] {
  %px = f32[1,16,10,10] parameter(0)
  %pw = f32[32,16,1,1] parameter(1)
  %pm = f32[32] parameter(2)
  %ps = f32[32] parameter(3)
  %pr = f32[1,32,10,10] parameter(4)
  ROOT %f = f32[1,32,10,10] fusion(%px, %pw, %pm, %ps, %pr), kind=kOutput, calls=%fused
}
"""
    x, w, r = rand(1, 16, 10, 10, seed=1), rand(32, 16, 1, 1, seed=2), rand(1, 32, 10, 10, seed=3)
    mean, scale = rand(32, seed=4), rand(32, seed=5)
    (out,), result = run_hlo(text, [x, w, mean, scale, r])
    conv = torch_conv(x, w)
    expected = np.maximum((conv - mean[:, None, None]) * scale[:, None, None] + r, 0)
    np.testing.assert_allclose(out, expected, **TOL["f32"])
    insts = [i for i in result.program.instructions if i.origin == "f"]
    pairs = [i for i in insts if i.opcode == "tensor_scalar" and i.attrs.get("op1") == "multiply"]
    assert pairs and all(i.attrs["op"] == "subtract" and i.operands["src"].memory == "psum" for i in pairs)
    assert not [i for i in insts if i.opcode == "activation" and i.comment.endswith("multiply")]
