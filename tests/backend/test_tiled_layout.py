"""The compile-time layout of constant matmul operands (kernels/operands.py `_tile_blocks`): the transposed
weight path (nn.Linear's [out, in] read as [K, C], built block by block through a scratch array) gives the
same flat layout, element for element, as its definition."""

import numpy as np
import pytest

from backend.kernels.operands import _tile_blocks


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


@pytest.mark.parametrize("shape,block", [((256, 1000), 128), ((384, 777), 64), ((2, 128, 513), 512),
                                         ((300, 40), 16), ((100, 70), 32)])
def test_transposed_weight_layout(shape, block):
    rng = np.random.default_rng(0)
    *batch, K, C = shape
    weight = rng.standard_normal((*batch, C, K)).astype(np.float32)  # [out, in]
    view = np.swapaxes(weight, -1, -2)  # read as [K, C]: K is the short stride
    assert view.strides[-2] < view.strides[-1]
    got = _tile_blocks(view, "f32", block, 128)
    np.testing.assert_array_equal(got, _reference(np.ascontiguousarray(view), block, 128))
    half = _tile_blocks(view, "f16", block, 128)  # the cast happens on the way
    np.testing.assert_array_equal(half, _reference(np.ascontiguousarray(view), block, 128).astype(np.float16))
