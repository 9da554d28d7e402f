"""Views of constants (slices, transposes) read the right elements when the backend pre-arranges them."""

from __future__ import annotations

import pytest
import torch

import compiler
from tests.conftest import assert_close


class SlicedWeight(torch.nn.Module):
    """A dot against rows 32..63 of a [96, 40] weight: a slice of a 2-D constant at -O0."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(96, 40))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w[32:64].t() + self.w[0, :32]


@pytest.mark.parametrize("opt_level", [0, 2])
def test_slice_of_a_2d_constant_feeding_a_dot(opt_level):
    model = SlicedWeight().eval()
    x = torch.randn(5, 40)
    (out,) = compiler.compile(model, (x,), opt_level=opt_level).run(x, check=True)
    assert_close(out, model(x))
