"""The compile-time layout of constant matmul operands (kernels/operands.py `_tile_blocks`): the transposed
weight path (nn.Linear's [out, in] read as [K, C], built block by block through a scratch array) gives the
same flat layout, element for element, as its definition, grouped or not (a group's blocks are written
straight to their grouped place on that path; `_group_blocks` regroups the others)."""

import mmap

import numpy as np
import pytest

from backend.kernels import operands
from backend.kernels.operands import _group_blocks, _tile_blocks


def _reference(arr: np.ndarray, block: int, parts: int) -> np.ndarray:
    """TiledConst's layout by its definition: per batch, per column block of width w, [parts][K // parts][w]
    then the [K % parts][w] rest."""
    *_, K, C = arr.shape
    full = K // parts
    out = []
    for a in arr.reshape(-1, K, C):
        for c0 in range(0, C, block):
            blk = a[:, c0:c0 + block]
            w = blk.shape[1]
            out.append(blk[:full * parts].reshape(full, parts, w).transpose(1, 0, 2).reshape(-1))
            out.append(blk[full * parts:].reshape(-1))
    return np.concatenate(out)


@pytest.mark.parametrize("shape,block,group", [((256, 1000), 128, 1), ((384, 777), 64, 1), ((2, 128, 513), 512, 1),
                                               ((300, 40), 16, 1), ((100, 70), 32, 1), ((256, 1000), 128, 3),
                                               ((2, 128, 1100), 256, 2), ((384, 512), 64, 8)])
def test_transposed_weight_layout(shape, block, group):
    rng = np.random.default_rng(0)
    *batch, K, C = shape
    weight = rng.standard_normal((*batch, C, K)).astype(np.float32)  # [out, in]
    view = np.swapaxes(weight, -1, -2)  # read as [K, C]: K is the short stride
    assert view.strides[-2] < view.strides[-1]
    expected = _group_blocks(_reference(np.ascontiguousarray(view), block, 128), K, C, block, group, 128)
    np.testing.assert_array_equal(_tile_blocks(view, "f32", block, 128, group), expected)
    half = _tile_blocks(view, "f16", block, 128, group)  # the cast happens on the way
    np.testing.assert_array_equal(half, expected.astype(np.float16))
    plain = _tile_blocks(np.ascontiguousarray(view), "f32", block, 128, group)  # C contiguous: the other path
    np.testing.assert_array_equal(plain, expected)


def test_large_layout_in_mapped_memory(monkeypatch):
    """From _FRESH_MAPPED bytes the layout is written into populated anonymous memory (lowered here so that
    a small case takes that path): the same values, a writable array of the compute dtype."""
    monkeypatch.setattr(operands, "_FRESH_MAPPED", 0)
    weight = np.random.default_rng(2).standard_normal((300, 256)).astype(np.float32)
    view = weight.T
    got = _tile_blocks(view, "f32", 128, 128, 2)
    assert isinstance(got.base.obj, mmap.mmap) and got.flags.writeable and got.dtype == np.float32
    expected = _group_blocks(_reference(np.ascontiguousarray(view), 128, 128), 256, 300, 128, 2, 128)
    np.testing.assert_array_equal(got, expected)
