"""Convolutional layers as real models write them, compiled from torch and checked against eager: batch norm and
relu as the convolution's epilogue, activations kept on chip between convolutions (read in place, or copied by
the engines when padded or cast), weights streamed per output-channel tile, depthwise/grouped/strided/padded/
1x1/odd sizes, patch embeddings. Every run is in checked mode (races and uninitialized reads)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import compiler

BF16_REL = 3e-2


def _check(model: nn.Module, x: torch.Tensor, rel: float, auto_cast: str = "matmult") -> compiler.Executable:
    torch.manual_seed(0)
    model = model.eval()
    for m in model.modules():  # batch norm with non-trivial statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    exe = compiler.compile(model, (x,), auto_cast=auto_cast, cache=False, quiet=True)
    with torch.no_grad():
        want = model(x).double()
    (got,) = exe.run(x, check=True)
    err = float(np.max(np.abs(got.astype(np.float64) - want.numpy())) / want.abs().max())
    assert err <= rel, err
    return exe


class ConvBnRelu(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True):
        super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                         *([nn.ReLU()] if relu else []))


class Bottleneck(nn.Module):
    """ResNet's bottleneck block (1x1, 3x3 strided, 1x1, projection shortcut)."""

    def __init__(self, cin: int, mid: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(ConvBnRelu(cin, mid, 1), ConvBnRelu(mid, mid, 3, stride),
                                  ConvBnRelu(mid, cout, 1, relu=False))
        self.shortcut = ConvBnRelu(cin, cout, 1, stride, relu=False)

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def test_bottleneck_chain_fuses_batch_norm_and_keeps_activations_on_chip():
    model = nn.Sequential(ConvBnRelu(3, 32, 7, 2), Bottleneck(32, 16, 64, 1), Bottleneck(64, 32, 128, 2))
    exe = _check(model, torch.randn(1, 3, 22, 18), BF16_REL)
    assert exe.hlo.count("kind=kOutput") >= 8  # every convolution with its batch norm (and relu) as epilogue
    assert "from chip" in exe.asm  # a padded or cast input copied from its on-chip image by the engines


def test_bottleneck_chain_fp32():
    _check(nn.Sequential(ConvBnRelu(5, 24, 3), Bottleneck(24, 8, 40, 2)), torch.randn(2, 5, 13, 11), 1e-4,
           auto_cast="none")


@pytest.mark.parametrize("cin, cout, k, stride, groups, size", [
    (96, 96, 7, 1, 96, (17, 15)),   # ConvNeXt's depthwise 7x7, odd sizes
    (48, 96, 3, 2, 48, (9, 10)),    # depthwise with a channel multiplier, strided
    (64, 64, 3, 1, 4, (8, 8)),      # grouped
    (150, 150, 3, 1, 3, (6, 7)),    # grouped, output-channel tiles not at multiples of 128 (batch norm per tile)
    (130, 70, 1, 2, 1, (7, 9)),     # strided 1x1 over two input-channel tiles
    (3, 40, 5, 1, 1, (11, 6)),      # few channels: taps folded into the contraction
])
def test_conv_forms_bf16(cin, cout, k, stride, groups, size):
    model = nn.Sequential(ConvBnRelu(cin, cin, 1), ConvBnRelu(cin, cout, k, stride, groups))
    exe = _check(model, torch.randn(1, cin, *size), BF16_REL)
    # depthwise: the diagonal stationaries are built on chip from the taps
    assert ("diagonal stationaries" in exe.asm) == (groups == cin == cout)


@pytest.mark.parametrize("patch, size, cin", [(4, (18, 22), 3), (2, (9, 8), 40)])
def test_patch_embedding_and_downsampling_convolutions(patch, size, cin):
    """Stride = kernel (ConvNeXt's 4x4 stem, 2x2 downsampling): folded copies load one row in `patch`."""
    model = nn.Sequential(nn.Conv2d(cin, 48, patch, patch), nn.ReLU(), nn.Conv2d(48, 32, 2, 2))
    _check(model, torch.randn(1, cin, *size), BF16_REL)


def test_streamed_weights_one_fetch_per_output_channel_tile():
    """Weights over the resident budget (9 x 1024 x 512 bf16: 72 KiB per partition) stream per output-channel
    tile, all its input-channel tiles in one fetch."""
    model = nn.Sequential(nn.Conv2d(1024, 512, 3, padding=1, bias=False), nn.ReLU())
    exe = _check(model, torch.randn(1, 1024, 4, 5), BF16_REL)
    assert " weights o384" in exe.asm


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block as HF writes it: depthwise 7x7, permute to channel-last, LayerNorm, Linear, GELU, Linear,
    layer scale, permute back, residual add; then a channel-first LayerNorm (permute, LayerNorm, permute) as in
    the downsampling layers."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) + 0.5)
        self.down_norm = nn.LayerNorm(dim, eps=1e-6)
        for ln in (self.norm, self.down_norm):  # non-trivial affine parameters
            ln.weight.data.uniform_(0.5, 1.5)
            ln.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        x = x + y.permute(0, 3, 1, 2)
        return self.down_norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@pytest.mark.parametrize("auto_cast, rel, batch", [("matmult", BF16_REL, 2), ("none", 1e-4, 1)])
def test_convnext_block_runs_channel_major(auto_cast, rel, batch):
    """The channel-last LayerNorm/MLP regions run channel-major (channel_major.py): no transpose is left, the
    Linears are 1x1 convolutions with GELU and layer scale + residual add in their epilogues."""
    torch.manual_seed(0)
    exe = _check(ConvNeXtBlock(96), torch.randn(batch, 96, 9, 11), rel, auto_cast)
    assert " transpose(" not in exe.hlo
    assert exe.hlo.count("convolution(") >= 7  # dwconv, 2 Linears, 2 x 2 channel sums
    assert "channel_major.centre96" in exe.hlo  # x - mean: one convolution by 96 I - ones


def test_channel_last_region_with_another_reader_is_left_channel_last():
    """A permuted value also read as channel-last (here: returned) keeps its transposes, and stays correct."""

    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(64)

        def forward(self, x):
            y = self.norm(x.permute(0, 2, 3, 1))
            return y.permute(0, 3, 1, 2) + 1.0, y

    model = Leaky().eval()
    x = torch.randn(1, 64, 5, 6)
    exe = compiler.compile(model, (x,), auto_cast="matmult", cache=False, quiet=True)
    got = exe.run(x, check=True)
    with torch.no_grad():
        want = model(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-4)
    assert " transpose(" in exe.hlo


def test_max_pool_reads_a_map_kept_on_chip_with_the_engines():
    """ResNet's stem: the max pool reads the convolution's output from its on-chip image lane to lane (engine
    copies into its band tiles, padding rows set to -inf), not by SBUF-to-SBUF DMAs; only the row group it
    stacks on the other 64 partitions (shifted rows: another lane) still moves by DMA."""
    model = nn.Sequential(ConvBnRelu(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), ConvBnRelu(64, 64, 1))
    exe = _check(model, torch.randn(1, 3, 30, 26), BF16_REL)
    pool_lines = [line for line in exe.asm.splitlines() if 'origin="reduce-window' in line]
    assert any("from chip" in line for line in pool_lines)
    assert not any(line.split()[0] == "sp.dma" and " +0 load" in line for line in pool_lines)
