"""Classifier heads of CNNs kept on chip (compiler/passes/fusion/channel_major.py, pooled regions): global average
pooling, ConvNeXt's LayerNorm over channels and the classifier run channel-major, so the pooled vector and the
normalized features stay in SBUF between the head's kernels (no HBM round trip to move the channels from the
partitions onto one partition and back). Checked mode against eager."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import compiler

BF16_REL = 3e-2


class Head(nn.Module):
    """A convolution, then a head: mean over the pixels, optionally a LayerNorm over channels, a Linear."""

    def __init__(self, cin: int, channels: int, classes: int, norm: bool):
        super().__init__()
        self.conv = nn.Conv2d(cin, channels, 3, padding=1)
        self.norm = nn.LayerNorm(channels, eps=1e-6) if norm else nn.Identity()
        self.fc = nn.Linear(channels, classes)
        if norm:
            self.norm.weight.data.uniform_(0.5, 1.5)
            self.norm.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        return self.fc(self.norm(torch.relu(self.conv(x)).mean([-2, -1])))


def _run(model: nn.Module, x: torch.Tensor, auto_cast: str, rel: float) -> compiler.Executable:
    model = model.eval()
    exe = compiler.compile(model, (x,), auto_cast=auto_cast, cache=False, quiet=True)
    with torch.no_grad():
        want = model(x).double().numpy()
    (got,) = exe.run(x, check=True)
    assert got.shape == want.shape
    err = float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))
    assert err <= rel, err
    return exe


def _head_lines(exe: compiler.Executable) -> list[str]:
    """The instructions of the head's kernel (the fusion calling fused_head)."""
    name = re.search(r"%(\S+) = \S+ fusion\(.*calls=%fused_head", exe.hlo).group(1)
    return [line for line in exe.asm.splitlines() if f'origin="{name}"' in line]


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("auto_cast, rel", [("matmult", BF16_REL), ("none", 1e-4)])
def test_pooled_head_runs_channel_major(norm, auto_cast, rel):
    torch.manual_seed(0)
    exe = _run(Head(8, 256, 40, norm), torch.randn(1, 8, 6, 5), auto_cast, rel)
    assert "kind=kCustom, calls=%fused_head" in exe.hlo  # pooling, norm and classifier: one kernel
    head = _head_lines(exe)
    stores = [line for line in head if line.startswith("sp.dma") and "dst=hbm" in line]
    assert stores and all("dst=hbm:out0" in line and "[0,1]" in line for line in stores), stores  # rows of classes
    assert not any("pixels" in line for line in head)  # the feature map read in place, on chip


def test_pooled_head_batch_two():
    torch.manual_seed(1)
    _run(Head(4, 96, 24, True), torch.randn(2, 4, 5, 5), "matmult", BF16_REL)


def test_pooled_features_read_elsewhere_stay_unfused():
    """A head whose pooled features are also returned is left to the other kernels (and stays correct)."""

    class Both(Head):
        def forward(self, x):
            pooled = torch.relu(self.conv(x)).mean([-2, -1])
            return self.fc(self.norm(pooled)), pooled

    torch.manual_seed(2)
    model = Both(8, 128, 16, True).eval()
    x = torch.randn(1, 8, 5, 4)
    exe = compiler.compile(model, (x,), auto_cast="matmult", cache=False, quiet=True)
    got = exe.run(x, check=True)
    with torch.no_grad():
        want = model(x)
    assert "fused_head" not in exe.hlo
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=BF16_REL, atol=BF16_REL * float(w.abs().max()))
