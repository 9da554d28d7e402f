"""Shared test helpers: tolerances of design.md and small torch models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

TOLERANCES = {"f32": dict(rtol=1e-4, atol=1e-4), "bf16": dict(rtol=2e-2, atol=2e-2)}


def assert_close(actual: np.ndarray, expected, kind: str = "f32") -> None:
    """Compare an emulated result with torch eager, with design.md's tolerances."""
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().float().numpy()
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float32), expected, **TOLERANCES[kind])


class MLP(nn.Module):
    """Linear layers with an activation between them."""

    def __init__(self, sizes: tuple[int, ...], act: str = "relu", bias: bool = True):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(sizes, sizes[1:]))
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid(),
                    "gelu_tanh": nn.GELU(approximate="tanh")}[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = self.act(x)
        return x


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty compile cache in a temporary folder: tests never touch the user's
    ~/.cache/neuronc, and no test is served a program another test compiled (some patch the compiler)."""
    monkeypatch.setenv("NEURONC_CACHE_DIR", str(tmp_path_factory.mktemp("neuronc-cache")))
