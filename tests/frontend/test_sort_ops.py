"""torch.sort / argsort / msort / topk compiled and emulated, against eager torch: values and indices, ties in
torch's stable=True order (topk: the first k of the stable sort), NaN, -0.0, more than 128 rows."""

from __future__ import annotations

import pytest
import torch

import compiler


def _data(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).float() * 0.5  # many ties
    flat = x.view(-1)
    k = torch.randperm(flat.numel(), generator=g)[:6]
    flat[k] = torch.tensor([float("nan"), -0.0, 0.0, float("-inf"), float("inf"), -0.0])[: len(k)]
    return x


class Sorts(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        v, i = torch.sort(x, dim=-1, stable=True)
        dv, di = torch.sort(x, dim=0, descending=True, stable=True)
        return v, i, dv, di, torch.argsort(x, dim=-1, stable=True), torch.msort(x)


class TopK(torch.nn.Module):
    def __init__(self, k: int, dim: int, largest: bool):
        super().__init__()
        self.k, self.dim, self.largest = k, dim, largest

    def forward(self, x: torch.Tensor):
        return torch.topk(x, self.k, dim=self.dim, largest=self.largest)


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 1), (5, 9), (130, 7)])
def test_sort_argsort_msort_match_eager_stable(shape):
    x = _data(*shape, seed=shape[0])
    got = compiler.compile(Sorts(), (x,), opt_level=2)(x)
    for g, w in zip(got, Sorts()(x), strict=True):
        _same(g, w)


@pytest.mark.parametrize("k,dim,largest", [(3, -1, True), (2, 0, False), (9, 1, True)])
def test_topk_matches_the_stable_sort(k, dim, largest):
    x = _data(6, 11, seed=k)
    values, indices = compiler.compile(TopK(k, dim, largest), (x,), opt_level=2)(x)
    sv, si = torch.sort(x, dim=dim, descending=largest, stable=True)
    _same(values, sv.narrow(dim, 0, k))
    _same(indices, si.narrow(dim, 0, k))
    assert indices.dtype == torch.int64
