"""Pooling kernels (reduce-window): max/min/add, 1-D/2-D, strides, padding, layouts, fused epilogues."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler.errors import CompilationError
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from tests.backend.util import BF16, TOL, rand, run_hlo, shape

IDENTITY = {"maximum": "-inf", "minimum": "inf", "add": "0"}


def reducer(op: str, dtype: str) -> str:
    return f"""%red (a: {dtype}[], b: {dtype}[]) -> {dtype}[] {{
  %a = {dtype}[] parameter(0)
  %b = {dtype}[] parameter(1)
  ROOT %r = {dtype}[] {op}(%a, %b)
}}
"""


def pool_text(dims, size, stride, pad, op: str, dtype: str = "f32", init: str | None = None) -> str:
    out = [(n + lo + hi - s) // st + 1 for n, s, st, (lo, hi) in zip(dims, size, stride, pad, strict=True)]
    window = (f"size={'x'.join(map(str, size))} stride={'x'.join(map(str, stride))} "
              f"pad={'x'.join(f'{lo}_{hi}' for lo, hi in pad)}")
    return f"""HloModule pool
{reducer(op, dtype)}
ENTRY %main (x: {shape(dtype, dims)}) -> {shape(dtype, out)} {{
  %x = {shape(dtype, dims)} parameter(0)
  %i = {dtype}[] constant({IDENTITY[op] if init is None else init})
  ROOT %y = {shape(dtype, out)} reduce-window(%x, %i), window={{{window}}}, to_apply=%red
}}
"""


def nchw(k, s, p):
    """Window over the spatial dims of an NCHW map."""
    return (1, 1, k, k), (1, 1, s, s), ((0, 0), (0, 0), (p, p), (p, p))


def check(text: str, x: np.ndarray, tol=None):
    (out,), result = run_hlo(text, [x])
    expected = evaluate(parse_module(text), [x])[0]
    if tol is None:
        np.testing.assert_array_equal(out, expected)
    else:
        np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), **tol)
    return out, result


def test_max_pool_2x2_s2_matches_torch():
    x = rand(2, 16, 8, 8, seed=1)
    out, _ = check(pool_text(x.shape, *nchw(2, 2, 0), "maximum"), x)
    np.testing.assert_array_equal(out, torch.nn.functional.max_pool2d(torch.from_numpy(x), 2).numpy())


def test_max_pool_3x3_s2_p1_matches_torch():
    x = rand(2, 16, 9, 11, seed=2)
    out, _ = check(pool_text(x.shape, *nchw(3, 2, 1), "maximum"), x)
    np.testing.assert_array_equal(out, torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1).numpy())


@pytest.mark.parametrize("channels", [24, 64, 100])
def test_row_groups_on_partitions(channels):
    """Fewer than 64 channels: groups of output rows side by side on the partitions (the last group
    partial; 24 channels: groups that compute engines cannot address alone, padding filled for all)."""
    x = rand(1, channels, 15, 13, seed=12)
    check(pool_text(x.shape, *nchw(3, 2, 1), "maximum"), x)


def test_sum_pool_3x3_s2_p1():
    """avg pooling is this sum divided by the counts (count_include_pad: by 9)."""
    x = rand(2, 16, 9, 11, seed=3)
    out, _ = check(pool_text(x.shape, *nchw(3, 2, 1), "add"), x, TOL["f32"])
    expected = torch.nn.functional.avg_pool2d(torch.from_numpy(x), 3, 2, 1).numpy() * 9
    np.testing.assert_allclose(out, expected, **TOL["f32"])


def test_avg_pool_fused_divide():
    """A kOutput fusion of the sum and its divide by a constant: the divide is the epilogue."""
    text = f"""HloModule m
{reducer("add", "f32")}
%fused (p0: f32[2,8,8,8]) -> f32[2,8,4,4] {{
  %p0 = f32[2,8,8,8] parameter(0)
  %z = f32[] constant(0)
  %s = f32[2,8,4,4] reduce-window(%p0, %z), window={{size=1x1x2x2 stride=1x1x2x2}}, to_apply=%red
  %four = f32[] constant(4)
  %fb = f32[2,8,4,4] broadcast(%four), dimensions={{}}
  ROOT %d = f32[2,8,4,4] divide(%s, %fb)
}}
ENTRY %main (x: f32[2,8,8,8]) -> f32[2,8,4,4] {{
  %x = f32[2,8,8,8] parameter(0)
  ROOT %y = f32[2,8,4,4] fusion(%x), kind=kOutput, calls=%fused
}}
"""
    x = rand(2, 8, 8, 8, seed=4)
    (out,), _ = run_hlo(text, [x])
    np.testing.assert_allclose(out, torch.nn.functional.avg_pool2d(torch.from_numpy(x), 2).numpy(), **TOL["f32"])


def test_global_average_sum_many_partitions():
    """A 7x7 window over 7x7 maps of 2 x 100 channels: 200 partitions in two tiles, one output each."""
    x = rand(2, 100, 7, 7, seed=5)
    check(pool_text(x.shape, *nchw(7, 1, 0), "add"), x, TOL["f32"])


def test_pool1d_and_min():
    x = rand(3, 40, 17, seed=6)
    check(pool_text(x.shape, (1, 1, 3), (1, 1, 2), ((0, 0), (0, 0), (1, 1)), "maximum"), x)
    check(pool_text(x.shape, (1, 1, 4), (1, 1, 3), ((0, 0), (0, 0), (0, 2)), "minimum"), x)


def test_nhwc_window_and_dilation():
    """Window over dims 1 and 2 of an NHWC map (channels minor: strided loads), with dilation."""
    x = rand(2, 9, 10, 5, seed=7)
    text = pool_text(x.shape, (1, 3, 3, 1), (1, 2, 1, 1), ((0, 0), (1, 1), (2, 2), (0, 0)), "maximum")
    text = text.replace("pad=", "rhs_dilate=1x1x2x1 pad=")
    text = text.replace("f32[2,5,12,5]", "f32[2,5,10,5]")  # the dilated window spans 5 columns
    check(text, x)


def test_strided_subsampling_window():
    """A 1x1 window with stride 2 and a 2x1 window: strided copies and reductions of one tap axis."""
    x = rand(2, 6, 9, 8, seed=11)
    check(pool_text(x.shape, (1, 1, 1, 1), (1, 1, 2, 2), ((0, 0),) * 4, "maximum"), x)
    check(pool_text(x.shape, (1, 1, 2, 1), (1, 1, 2, 1), ((0, 0),) * 4, "add"), x, TOL["f32"])


def test_init_value_that_is_not_the_identity():
    x = rand(2, 4, 6, 6, seed=8)
    check(pool_text(x.shape, *nchw(3, 2, 1), "maximum", init="0.25"), x)


def test_bf16_max_pool():
    x = rand(1, 32, 12, 12, seed=9, dtype=BF16)
    out, _ = check(pool_text(x.shape, *nchw(3, 2, 1), "maximum", dtype="bf16"), x)
    assert out.dtype == BF16


def test_large_map_in_bands():
    """300x300 maps need several input bands (rows of padding filled with -inf at both ends)."""
    x = rand(1, 4, 300, 300, seed=10)
    check(pool_text(x.shape, *nchw(3, 2, 1), "maximum"), x)


def test_unsupported_reducer_names_the_instruction():
    text = pool_text((1, 2, 4, 4), *nchw(2, 2, 0), "maximum").replace("maximum(%a, %b)", "subtract(%a, %b)")
    with pytest.raises(CompilationError, match=r"%y \(reduce-window\).*to_apply"):
        run_hlo(text, [rand(1, 2, 4, 4)])
