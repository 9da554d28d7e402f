"""The activation functions the emulator computes in place (isa.emulator.numerics) give the bits of their
formulas written out with a temporary per operation (the emulator's earlier code), for every result but a NaN's
sign: numpy's SIMD loops do not fix which NaN operand an operation passes on."""

from __future__ import annotations

import numpy as np
import pytest

from isa.emulator.numerics import ACTIVATIONS

F32 = np.float32


def erfc_formula(x: np.ndarray) -> np.ndarray:
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(-z * z + poly)
    return np.where(x >= 0, ans, 2.0 - ans)


FORMULAS = {
    "gelu": lambda x: (0.5 * x.astype(np.float64) * erfc_formula(-x.astype(np.float64) / np.sqrt(2.0))).astype(F32),
    "erf": lambda x: (F32(1) - erfc_formula(x.astype(np.float64))).astype(F32),
    "gelu_tanh": lambda x: F32(0.5) * x * (F32(1) + np.tanh(F32(np.sqrt(2.0 / np.pi))
                                                             * (x + F32(0.044715) * (x * x * x)))),
}


def inputs(seed: int, shape: tuple[int, int]) -> np.ndarray:
    """Normal values at several scales with zeros, subnormals, infinities, the largest floats and NaNs."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.choice([1e-20, 0.1, 1.0, 3.0, 30.0], size=shape)).astype(F32)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-45, 3e38, -3e38, 5.5, -27.0],
                        dtype=F32)
    x.reshape(-1)[:specials.size] = specials
    return x


@pytest.mark.parametrize("func", sorted(FORMULAS))
@pytest.mark.parametrize("shape", [(1, 13), (128, 196), (96, 448)])
def test_in_place_activation_gives_the_bits_of_its_formula(func, shape):
    x = inputs(len(func) * 1000 + shape[1], shape)
    with np.errstate(all="ignore"):
        got, want = ACTIVATIONS[func](x), FORMULAS[func](x)
    assert got.dtype == want.dtype == F32 and got.shape == x.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    numbers = ~np.isnan(want)
    assert got[numbers].tobytes() == want[numbers].tobytes()
