"""int64 end to end (docs/integer-semantics.md, "64-bit integers"): the device keeps s64 in 8-byte integers that
GpSimd's integer mode computes on exactly, so values beyond 2^31 (and up to the whole int64 range) come back as
torch eager gives them, wrapping on overflow as torch's int64 does."""

from __future__ import annotations

import numpy as np
import torch

import compiler

BIG = torch.tensor([2**40, -2**62, 5, 7, -9, 3, 2**63 - 1, -2**63, 11, 0], dtype=torch.int64)
OTHER = torch.tensor([3, 2**62, -4, 7, 100, -2**45, 1, -1, 2**33, -7], dtype=torch.int64)


class Arith(torch.nn.Module):
    def forward(self, a, b):
        return (a + b, a - b, a * b, -a, a.abs(), torch.maximum(a, b), a > b, a == b,
                torch.where(a < b, a, b), a + (2**62 + 1), a * 3, torch.remainder(a, torch.where(b == 0, 1, b)))


class Index(torch.nn.Module):
    def forward(self, a, b):
        return (torch.arange(10) * (2**40) + a, a.max(), a.min(), a.sum(), (a > 0).long(), a.int().long(),
                a.float(), b.reshape(2, 5).sum(0), torch.argmax(b))


def _check(model: torch.nn.Module, *args: torch.Tensor) -> None:
    with torch.no_grad():
        want = model(*args)
    got = compiler.compile(model, args)(*args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert torch.equal(g, w), (g, w)


def test_int64_arithmetic_is_exact_over_the_whole_range_and_wraps():
    _check(Arith(), BIG, OTHER)


def test_int64_index_math_reductions_and_converts():
    _check(Index(), BIG, OTHER)


def test_int64_embedding_indices_and_large_values_through_run():
    emb = torch.nn.Embedding(20, 4)

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, ids, offset):
            return self.emb(ids), ids * offset

    ids = torch.tensor([[0, 19, 3], [7, 7, 1]], dtype=torch.int64)
    offset = torch.tensor(2**50, dtype=torch.int64)
    exe = compiler.compile(Lookup().eval(), (ids, offset))
    vectors, scaled = exe.run(ids, offset)
    np.testing.assert_allclose(vectors, emb(ids).detach().numpy(), rtol=1e-6)
    assert scaled.dtype == np.int64
    np.testing.assert_array_equal(scaled, (ids * offset).numpy())


class Scan(torch.nn.Module):
    def forward(self, a):
        return torch.cumsum(a, 1), torch.sort(a, 1)[0]


def test_int64_cumsum_and_sort_beyond_32_bits():
    a = torch.tensor([[2**40, -2**62, 5, 7], [-9, 3, 2**62, 11]], dtype=torch.int64)
    _check(Scan(), a)


class Pick(torch.nn.Module):
    def forward(self, x, i):
        return torch.index_select(x, 0, i), torch.flip(x, [1])


def test_int64_rows_moved_by_indirect_dma_keep_their_bytes():
    x = torch.tensor([[2**40, -5, 3], [7, 2**62, -2**63]], dtype=torch.int64)
    _check(Pick(), x, torch.tensor([1, 0, 1]))
