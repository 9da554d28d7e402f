"""The Tensor engine's products when the stationary tile has only its diagonal nonzero.

A depthwise convolution reaches PE as matmuls whose stationary tile is diagonal (one weight per channel,
zeros elsewhere): ConvNeXt's 7x7 depthwise layers are two thirds of its multiply-accumulates. For such a
tile every output element is a sum of K fp32 products of which at most one, ``w * x``, is nonzero, and
BLAS's value for it does not depend on how it orders or blocks the sum: its accumulator starts at +0, and
adding a zero product (+0 or -0) to +0 gives +0; the one product is rounded once (an FMA rounds
``w * x + 0``, as an fp32 multiply rounds ``w * x``), and a nonzero sum stays as it is under the zero
products that follow. So the product is ``w * x + 0`` computed elementwise (the ``+ 0`` turns a zero
product's -0 into +0): bit for bit what the BLAS chunks give, at the cost of a few passes over the moving
tile instead of K multiply-adds per element.

Two cases give other bits and take the BLAS path: a non-finite moving value (``0 * inf`` is NaN in every
output row whose weight for that row is zero), and a product that rounds to zero from a nonzero ``w`` and
``x`` (its -0 stays -0 or not depending on the signs of the zero products after it in BLAS's order): a
moving value below ``2**-150 / min |w|``, a subnormal for any weight above 2**-23, sends the whole tile to
BLAS. A non-finite weight keeps the tile on the BLAS path. tests/isa/test_emulator_pe.py compares both paths
bit for bit on signed zeros, subnormals, products that overflow and the cases left to BLAS.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
ZERO = F32(0)
ABS_BITS = 0x7FFFFFFF  # an fp32's bits without its sign
INF_BITS = 0x7F800000  # |x| bits at or above: inf or NaN
FLOAT_MAX = float(np.finfo(F32).max)


class DiagonalTile:
    """A diagonal stationary tile: its weights as a column, and the bits below which a moving value's |x| may
    give a product that rounds to zero."""

    __slots__ = ("weights", "tiny")

    def __init__(self, weights: np.ndarray):
        self.weights = weights  # [M, 1] fp32, finite
        # twice 2**-150 / min |w| (a margin for the rounding to fp32): above it no nonzero product rounds to zero;
        # 0 when every weight is zero
        nonzero = np.abs(weights[weights != 0])
        bound = 2.0 ** -149 / float(nonzero.min()) if nonzero.size else 0.0
        self.tiny = int(np.float32(min(bound, FLOAT_MAX)).view(np.uint32))


def diagonal_tile(stationary: np.ndarray) -> DiagonalTile | None:
    """The tile (``[K, M]`` or its transpose: the answer is the same) as a ``DiagonalTile`` when it is square,
    diagonal (zeros elsewhere, of either sign) and its diagonal is finite, else None. A few elements next to the
    diagonal reject a dense tile first."""
    m, k = stationary.shape
    if m != k or m < 2:
        return None
    item = stationary.item
    for row in (0, m // 3, min((2 * m) // 3, m - 2), m - 2):
        if item(row, row + 1) or item(row + 1, row):
            return None
    diagonal = stationary.diagonal()
    if np.count_nonzero(stationary != 0) != np.count_nonzero(diagonal) or not np.isfinite(diagonal).all():
        return None
    return DiagonalTile(diagonal.reshape(m, 1).copy())


def diagonal_product(tile: DiagonalTile, moving: np.ndarray, out: np.ndarray, bits: np.ndarray) -> bool:
    """``out[...] = stationary_t @ moving`` (``moving``: fp32 ``[K, N]``, C-contiguous) with the bits of the BLAS
    chunks; False (``out`` untouched) when BLAS must compute it: a moving value is not finite, or so small that
    a product may round to zero. ``bits``: a uint32 scratch array of the moving tile's shape."""
    np.bitwise_and(moving.view(np.uint32), ABS_BITS, out=bits)
    if bits.max(initial=0) >= INF_BITS:
        return False
    np.subtract(bits, 1, out=bits)  # a zero wraps to the largest value: the minimum is the smallest nonzero's
    if bits.min(initial=ABS_BITS) < tile.tiny - 1:
        return False
    np.multiply(tile.weights, moving, out=out)
    np.add(out, ZERO, out=out)  # -0 -> +0, as BLAS's sums that start at +0
    return True
