"""Depthwise convolutions with taps computed off PE (backend/kernels/depthwise.py), in checked mode against eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from backend.kernels.conv_weights import SuperGroup, spread_tiles
from backend.kernels.depthwise import plan_split
from isa.target import load_target
from tests.backend.test_conv_chains import _check


@pytest.mark.parametrize("channels, size, kernel, dilation, auto_cast, rel", [
    (160, (20, 18), 7, 1, "matmult", 3e-2),  # a full and a partial channel tile, ConvNeXt's kernel
    (64, (12, 13), 7, 1, "none", 1e-4),      # fp32: PE 4x slower, more taps off PE
    (32, (3, 700), 3, 1, "matmult", 3e-2),   # rows wider than a block: blocks are pieces of rows
    (48, (15, 14), 5, 2, "matmult", 3e-2),   # dilated
    (192, (7, 7), 7, 1, "matmult", 3e-2),    # ConvNeXt's stage 3: every tap a single product joined by PE
    (130, (6, 9), 5, 1, "matmult", 3e-2),    # singles, a partial channel tile, clipped taps
])
def test_depthwise_taps_off_pe_match_eager(channels, size, kernel, dilation, auto_cast, rel):
    torch.manual_seed(0)
    pad = dilation * (kernel // 2)
    model = nn.Sequential(nn.Conv2d(channels, channels, 1),
                          nn.Conv2d(channels, channels, kernel, padding=pad, dilation=dilation, groups=channels))
    exe = _check(model, torch.randn(1, channels, *size), rel, auto_cast)
    assert "off-PE taps" in exe.asm  # the sums of the taps computed off PE join the accumulation
    if auto_cast == "matmult" and size[0] * size[1] < 128:  # small blocks: singles, no diagonal stationary
        assert "single" in exe.asm and "diagonal" not in exe.asm


def test_plan_split_covers_every_tap_once():
    target = load_target("trn1")
    full = [24, 17, 31, 10, 38, 3, 45]  # the centre column of a 7x7 kernel, centre first
    clipped = [t for t in range(49) if t not in full]
    split = plan_split(target, 49, full, clipped, 448, 7, 96, "bf16")
    assert split is not None and split.chains
    taps = sorted([*split.pe, *(t for c in split.chains for t in c.taps)])
    assert taps == list(range(49))
    assert full[0] in split.pe  # PE starts its accumulations with a full tap
    for chain in split.chains:
        if chain.mode == "add":
            assert chain.taps[0] in full and chain.taps[-1] in full
    # fp32: PE is 4x slower, the engines take more taps; a tiny block stays on PE
    wide = plan_split(target, 49, full, clipped, 448, 7, 96, "f32")
    assert wide is not None and len(wide.pe) < len(split.pe)
    # a tiny block: every tap a single product joined by PE (no diagonal stationary), a full tap first
    tiny = plan_split(target, 49, full, clipped, 49, 1, 128, "bf16")
    assert tiny is not None and not tiny.pe and [c.mode for c in tiny.chains] == ["single"]
    assert sorted(tiny.chains[0].taps) == list(range(49)) and tiny.chains[0].taps[0] == full[0]
    # few channels: the diagonals are cheap, PE alone stays best
    assert plan_split(target, 49, full, clipped, 49, 1, 8, "bf16") is None


@pytest.mark.parametrize("channels, size, kernel, dilation, auto_cast, rel, ranges", [
    (96, (24, 20), 7, 1, "matmult", 3e-2, (2, 4)),  # ConvNeXt stage 0: 64 channels x 2 row ranges, 32 x 4
    (192, (8, 10), 7, 1, "matmult", 3e-2, (2,)),    # stage 1: a full tile and 64 channels x 2 ranges (singles)
    (64, (12, 10), 3, 2, "matmult", 3e-2, (2,)),    # dilated
    (64, (6, 7), 7, 1, "none", 1e-4, (2,)),         # fp32
    (40, (12, 9), 7, 1, "matmult", 3e-2, ()),       # 40-channel ranges would start off the engines' partition starts
])
def test_depthwise_spread_tiles_match_eager(channels, size, kernel, dilation, auto_cast, rel, ranges):
    """Depthwise tiles of <= 64 channels hold several ranges of output rows side by side on the partitions
    (conv_weights.spread_tiles): the input's ranges loaded by DMA, the results stored from their partitions."""
    torch.manual_seed(0)
    pad = dilation * (kernel // 2)
    model = nn.Sequential(nn.Conv2d(channels, channels, 1), nn.Conv2d(
        channels, channels, kernel, padding=pad, dilation=dilation, groups=channels, bias=False))
    exe = _check(model, torch.randn(1, channels, *size), rel, auto_cast)
    for spread in (2, 4):
        assert (f"copy ({spread - 1}, 0)" in exe.asm) == (spread in ranges)


def test_spread_tiles_plan():
    sgs = [SuperGroup(((0, 96),), ((0, 96),), 1, 1)]
    assert [(sg.ci, sg.spread) for sg in spread_tiles(sgs, 56, 128)] == [(((0, 64),), 2), (((64, 32),), 4)]
    # rows that do not divide: fewer ranges; a tile of 128 channels stays as it is
    sgs = [SuperGroup(((0, 128),), ((0, 128),), 1, 1), SuperGroup(((128, 64),), ((128, 64),), 1, 1)]
    assert [sg.spread for sg in spread_tiles(sgs, 27, 128)] == [1, 1]
    assert [sg.spread for sg in spread_tiles(sgs, 28, 128)] == [1, 2]
