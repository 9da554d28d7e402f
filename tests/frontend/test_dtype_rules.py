"""torch's dtype rules through the frontend, against torch eager: reductions of 0-d tensors, integer division
with rounding modes, floor/ceil of integers, bool arithmetic, any/all of uint8, replicate padding with
negative sides, argmax/argmin (NaN first, int64
values beyond 2^31), 16-bit vector norms accumulated in f32."""

from __future__ import annotations

import pytest
import torch

import compiler

CASES = {
    "0-d reductions": (lambda x: (x.sum(0), x.amax(-1), torch.argmax(x, 0), x.max(0)[1], x.all(0)),
                       [torch.tensor(3.5)]),
    "int div floor/trunc": (lambda x, y: (torch.div(x, y, rounding_mode="floor"),
                                          torch.div(x, y, rounding_mode="trunc"), x // y),
                            [torch.tensor([7, -7, 7, -7, 0, -9]), torch.tensor([2, 2, -2, -2, 3, 4])]),
    "floor/ceil of ints": (lambda x: (torch.floor(x), torch.ceil(x)), [torch.tensor([-3, 0, 5], dtype=torch.int32)]),
    "bool arithmetic": (lambda x, y: (x + y, x * y, torch.outer(x, y), torch.sign(x)),
                        [torch.tensor([True, False, True]), torch.tensor([True, True, False])]),
    "any/all of uint8": (lambda x: (x.any(), x.all(1)), [torch.tensor([[0, 3], [1, 1]], dtype=torch.uint8)]),
    "replicate pad with negative sides": (lambda x: (torch.nn.functional.pad(x, (-4, 5, 2, -1), "replicate"),
                                                    torch.nn.functional.pad(x[0], (1, -2), "replicate")),
                                          [torch.arange(24.0).reshape(1, 1, 4, 6)]),
    "integer pow (square and multiply, wraps)": (lambda x, y: (torch.pow(x, y), x ** 3),
                                                 [torch.tensor([2, -3, 5, 0, 1, 7, -1, 3], dtype=torch.int32),
                                                  torch.tensor([3, 5, 0, 4, 9, 20, 7, 40], dtype=torch.int32)]),
    "argmax NaN and int64": (lambda x, i: (torch.argmax(x, 1), torch.argmin(x, 1), torch.argmax(i), *i.min(0)),
                             [torch.tensor([[1.0, float("nan"), 3.0], [2.0, 5.0, 5.0]]),
                              torch.tensor([[3, 2**40], [-2**50, 7]])]),
    "f16 vector norm (squares beyond f16's range)": (
        lambda x: (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, dim=1), x.norm(dim=0)),
        [torch.tensor([[300.0, 400.0], [0.0, -1200.0]], dtype=torch.float16)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_dtype_rules_match_torch(name):
    fn, args = CASES[name]

    class M(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    want = M()(*args)
    got = compiler.compile(M(), tuple(args))(*args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert torch.equal(g, w), (g, w)
