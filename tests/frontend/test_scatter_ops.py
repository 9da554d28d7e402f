"""torch's scatter family (scatter, scatter_add, index_add, index_put with accumulate) against eager: row and
element scatters through the indirect DMA, repeated indices accumulating."""

from __future__ import annotations

import pytest
import torch

import compiler


class Op(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


X, U = torch.randn(200, 6), torch.randn(5, 6)
ROWS = torch.tensor([3, 150, 3, 199, 0])  # repeated, the last row, the first
COLS = torch.tensor([[1, 2, 3, 4, 5, 0], [1, 1, 1, 0, 0, 0]])

CASES = {
    "index_add": (lambda x, i, u: x.index_add(0, i, u), (X, ROWS, U)),
    "index_put_accumulate": (lambda x, i, u: torch.index_put(x, (i,), u, accumulate=True), (X, ROWS, U)),
    "scatter_add": (lambda x, i, u: x.scatter_add(1, i, u), (X[:4], COLS, U[:2])),
    "scatter_src": (lambda x, i, u: x.scatter(0, i, u), (X[:9], torch.tensor([[8, 2, 3, 4, 5, 6]]), U[:1])),
    "scatter_value": (lambda x, i: x.scatter(1, i, 2.5), (X[:3], COLS[:1, :4])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_scatter_family_matches_eager(name):
    fn, args = CASES[name]
    exe = compiler.compile(Op(fn), args)
    assert any(i.opcode == "dma_indirect" for i in exe.program.instructions)
    torch.testing.assert_close(exe(*args), fn(*args), rtol=1e-5, atol=1e-5)
