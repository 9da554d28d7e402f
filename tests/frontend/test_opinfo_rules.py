"""Rules added for PyTorch's OpInfo samples, each against eager torch (integers and bools exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import compiler
from tests.conftest import assert_close


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _run(fn, *args):
    exe = compiler.compile(Fn(fn), args)
    got = exe.run(*args)
    want = fn(*args)
    return got, (list(want) if isinstance(want, tuple) else [want])


def _exact(fn, *args):
    got, want = _run(fn, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())


@pytest.mark.parametrize("dims", [(0, 1, 2), (1,), (0, 2), (1, 2), (0, 3), (1, 3)])
def test_flip_any_dims(dims):
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.int32).reshape(2, 3, 4, 5)
    _exact(lambda t: torch.flip(t, dims), x)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_middle_dims_and_0d(dim):
    x = torch.randn(3, 4, 5)
    idx = torch.tensor([2, 0, 2])
    _exact(lambda t: torch.index_select(t, dim, idx), x)
    _exact(lambda t: torch.index_select(t, 0, torch.tensor([0])), torch.tensor(7.0))


@pytest.mark.parametrize("kind", ["max", "min"])
def test_bool_max_min_along_dim(kind):
    x = torch.rand(4, 5, 3) > 0.6
    _exact(lambda t: getattr(torch, kind)(t, 1), x)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_integer_prod_wraps_exactly(dim):
    x = torch.randint(-9, 9, (7, 5, 6), dtype=torch.int32)
    x[3, 2, 1] = 0
    big = torch.randint(-(2 ** 31), 2 ** 31 - 1, (5, 3), dtype=torch.int64)  # products wrap mod 2^64
    _exact(lambda t: torch.prod(t, dim), x)
    _exact(lambda t: torch.prod(t, 0), big)


@pytest.mark.parametrize("case", ["rows", "broadcast", "mask2d", "inner", "accumulate_int", "none_true"])
def test_index_put_bool_mask(case):
    x = torch.randn(4, 3, 5)
    mask = torch.tensor([True, False, True, True])
    idx: tuple = (mask,)
    acc = False
    if case == "rows":
        v = torch.randn(3, 3, 5)
    elif case == "broadcast":
        v = torch.randn(5)
    elif case == "mask2d":
        mask = torch.rand(4, 3) > 0.5
        idx, v = (mask,), torch.randn(int(mask.sum()), 5)
    elif case == "inner":
        idx, v = (None, torch.tensor([True, False, True])), torch.randn(4, 2, 1)
    elif case == "accumulate_int":
        x, v, acc = torch.arange(60).reshape(4, 3, 5), torch.arange(15).reshape(3, 5), True
    else:
        idx, v = (torch.zeros(4, dtype=torch.bool),), torch.randn(3, 5)
    _exact(lambda t, u: torch.ops.aten.index_put.default(t, idx, u, acc), x, v)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_integer_cumsum_rows(dtype):
    """torch's cumsum of integers is s64: the scan's tiles hold 8-byte elements (they were sized for 4)."""
    x = torch.randint(0, 5, (3, 40)).to(dtype)
    _exact(lambda t: torch.cumsum(t, 1), x)
    _exact(lambda t: torch.cumsum(t.reshape(-1), 0), x)


def test_native_norm_statistics_in_input_dtype():
    x = torch.randn(2, 6, 3, dtype=torch.float16)
    got, want = _run(lambda t: torch.ops.aten.native_layer_norm(t, [3], None, None, 1e-5), x)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float16
        assert_close(g, w, "bf16")
    got, want = _run(lambda t: torch.ops.aten.native_group_norm(t, None, None, 2, 6, 3, 2, 1e-5), x)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float16
        assert_close(g, w, "bf16")
