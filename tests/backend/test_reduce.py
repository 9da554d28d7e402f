"""Reductions along free axes (rows, DVE/ACT) and across partitions (columns: PE ones-matmul for sums,
POOL partition_reduce for max/min), any axes, awkward shapes, non-identity init values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import TOL, body_module, rand, run_hlo

NP = {"add": np.sum, "max": np.max, "min": np.min}
REDUCER = {"add": "add_f32", "max": "max_f32", "min": "min_f32"}
INIT = {"add": "0", "max": "-inf", "min": "inf"}


def shp(dims) -> str:
    return f"f32[{','.join(map(str, dims))}]"


def reduce_text(dims, axes, kind, init=None) -> str:
    out = tuple(d for i, d in enumerate(dims) if i not in axes)
    body = f"""  %init = f32[] constant({init if init is not None else INIT[kind]})
  %r = {shp(out)} reduce(%p0, %init), dimensions={{{','.join(map(str, axes))}}}, to_apply=%{REDUCER[kind]}"""
    return body_module([("p0", shp(dims))], body, shp(out))


@pytest.mark.parametrize("kind", ["add", "max", "min"])
@pytest.mark.parametrize("dims,axes", [
    ((300, 200), (1,)),       # rows: free-axis reduction
    ((300, 200), (0,)),       # columns: across partitions, 3 blocks of 128
    ((5, 130, 7), (0, 2)),    # two reduced axes, neither contiguous with the other
    ((4, 3, 520), (1,)),      # a middle axis: across partitions, F > 512 chunks
    ((1, 1000), (0, 1)),      # everything, to a scalar
    ((17,), (0,)),
    ((64, 1, 3), (1,)),       # a size-1 reduced axis
])
def test_reduce(kind, dims, axes):
    x = rand(*dims, seed=7)
    (out,), _ = run_hlo(reduce_text(dims, axes, kind), [x])
    np.testing.assert_allclose(out, NP[kind](x, axis=axes), rtol=1e-4, atol=1e-3)


def test_column_sum_uses_pe_and_max_uses_pool():
    dims = (300, 200)
    _, result = run_hlo(reduce_text(dims, (0,), "add"), [rand(*dims)])
    assert any(i.opcode == "multiply_moving" for i in result.program.instructions)
    _, result = run_hlo(reduce_text(dims, (0,), "max"), [rand(*dims)])
    assert any(i.opcode == "partition_reduce" for i in result.program.instructions)


@pytest.mark.parametrize("axes", [(0,), (1,)])
def test_reduce_with_init(axes):
    dims = (140, 33)
    x = rand(*dims, seed=3)
    (out,), _ = run_hlo(reduce_text(dims, axes, "add", init="2.5"), [x])
    np.testing.assert_allclose(out, x.sum(axis=axes) + 2.5, **TOL["f32"])
    (out,), _ = run_hlo(reduce_text(dims, axes, "max", init="0.5"), [x])
    np.testing.assert_allclose(out, np.maximum(x.max(axis=axes), 0.5), **TOL["f32"])


def test_mean_of_transposed_view():
    """reduce of a transposed parameter: the reduced logical axis is the stored minor one."""
    body = """  %t = f32[40,70] transpose(%p0), dimensions={1,0}
  %zero = f32[] constant(0)
  %r = f32[40] reduce(%t, %zero), dimensions={1}, to_apply=%add_f32"""
    x = rand(70, 40, seed=1)
    (out,), _ = run_hlo(body_module([("p0", "f32[70,40]")], body, "f32[40]"), [x])
    np.testing.assert_allclose(out, x.sum(0), **TOL["f32"])
