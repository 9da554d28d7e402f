"""The elementwise product of a diagonal stationary tile (isa.emulator.pe) against the BLAS
chunks the emulator otherwise runs, bit for bit; the BLAS chunks with the stationary tile's transpose as a view
against those with its contiguous copy."""

from __future__ import annotations

import numpy as np
import pytest

from isa.emulator import run_program
from isa.emulator.kernels import BLAS_CHUNK_MACS, VIEW_COLUMNS
from isa.emulator.pe import diagonal_product, diagonal_tile
from tests.isa.emulator_helpers import hb, ins, program, ps, sb


@pytest.fixture(autouse=True)
def _quiet_overflow():
    """The emulator runs its numerics with numpy's floating-point warnings off; so do these."""
    with np.errstate(all="ignore"):
        yield


def scratch(moving: np.ndarray) -> np.ndarray:
    return np.empty(moving.shape, dtype=np.uint32)


def blas(stationary_t: np.ndarray, moving: np.ndarray) -> np.ndarray:
    """The products as ``isa.emulator.kernels._multiply_moving`` computes them: stacked BLAS chunks."""
    m, k = stationary_t.shape
    n = moving.shape[1]
    step = max(1, BLAS_CHUNK_MACS // max(1, k * m))
    whole = n - n % step
    out = np.empty((m, n), dtype=np.float32)
    if whole:
        np.matmul(stationary_t, moving[:, :whole].reshape(k, whole // step, step).transpose(1, 0, 2),
                  out=out[:, :whole].reshape(m, whole // step, step).transpose(1, 0, 2))
    if whole < n:
        np.matmul(stationary_t, moving[:, whole:], out=out[:, whole:])
    return out


def magnitudes(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Values of either sign with magnitudes in [scale, 2 * scale)."""
    signs = np.where(rng.integers(0, 2, size=shape) == 1, 1.0, -1.0)
    return (signs * rng.uniform(1.0, 2.0, size=shape) * scale).astype(np.float32)


def special_moving(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """Normal values with signed zeros, subnormals, huge and small magnitudes sprinkled in."""
    x = magnitudes(rng, (k, n), 1.0)
    picks = rng.integers(0, 7, size=(k, n))
    x[picks == 0] = 0.0
    x[picks == 1] = -0.0
    x[picks == 2] = magnitudes(rng, (k, n), 1e-39)[picks == 2]  # subnormal
    x[picks == 3] = magnitudes(rng, (k, n), 1e30)[picks == 3]
    x[picks == 4] = magnitudes(rng, (k, n), 1e-30)[picks == 4]
    return x


def diagonal(rng: np.random.Generator, size: int) -> np.ndarray:
    """Weights of either sign, signed zeros, weights whose products overflow or are subnormal."""
    weights = magnitudes(rng, (size,), 0.5)
    weights[::7] = -0.0
    weights[1::11] = 0.0
    weights[2::13] = magnitudes(rng, (size,), 1e-3)[2::13]  # subnormal products of the subnormal moving values
    weights[3::17] = magnitudes(rng, (size,), 1e30)[3::17]  # products that overflow to infinity
    return np.diag(weights)


@pytest.mark.parametrize("k, n", [(128, 49), (128, 196), (96, 440), (64, 350), (128, 16), (3, 5)])
def test_diagonal_tile_gives_the_bits_of_blas(k, n):
    rng = np.random.default_rng(k * 1000 + n)
    stationary_t = diagonal(rng, k)
    moving = special_moving(rng, k, n)
    tile = diagonal_tile(stationary_t)
    assert tile is not None
    out = np.full((k, n), np.nan, dtype=np.float32)
    assert diagonal_product(tile, moving, out, scratch(moving))
    expected = blas(stationary_t, moving)
    assert out.tobytes() == expected.tobytes()
    assert not np.signbit(out[out == 0]).any()  # BLAS's accumulator starts at +0: no -0
    if k >= 64:  # the cases are there: overflow and subnormal products
        assert np.isinf(out).any() and (np.abs(out[(out != 0) & np.isfinite(out)]) < np.finfo(np.float32).tiny).any()


@pytest.mark.parametrize("weight, value", [(1e-30, 1e-20), (1e-3, 1e-44), (2.0 ** -20, 2.0 ** -130)])
def test_products_that_may_round_to_zero_are_left_to_blas(weight, value):
    """A nonzero product that rounds to zero keeps BLAS's sign of zero, which depends on its order of the sum."""
    rng = np.random.default_rng(5)
    stationary_t = diagonal(rng, 64)
    stationary_t[9, 9] = weight
    moving = special_moving(rng, 64, 30)
    moving[9, 4] = -value
    out = np.zeros((64, 30), dtype=np.float32)
    assert not diagonal_product(diagonal_tile(stationary_t), moving, out, scratch(moving))
    assert not out.any()  # untouched


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_moving_value_is_left_to_blas(bad):
    rng = np.random.default_rng(3)
    stationary_t = diagonal(rng, 32)
    moving = special_moving(rng, 32, 40)
    moving[7, 9] = bad
    out = np.zeros((32, 40), dtype=np.float32)
    assert not diagonal_product(diagonal_tile(stationary_t), moving, out, scratch(moving))
    assert not out.any()  # untouched


def test_dense_rectangular_and_non_finite_tiles_are_not_diagonal():
    rng = np.random.default_rng(4)
    assert diagonal_tile(rng.standard_normal((128, 128)).astype(np.float32)) is None
    for row, col in ((3, 5), (0, 1), (15, 0)):
        tile = diagonal(rng, 16)
        tile[row, col] = 1.0
        assert diagonal_tile(tile) is None
    assert diagonal_tile(np.eye(16, 8, dtype=np.float32)) is None  # not square
    assert diagonal_tile(np.zeros((16, 16), dtype=np.float32)).tiny == 0  # all zero: nothing rounds to zero
    for bad in (np.inf, np.nan):
        tile = diagonal(rng, 16)
        tile[2, 2] = bad
        assert diagonal_tile(tile) is None


def diagonal_then_dense_program(K: int = 64, N: int = 256):
    """y = w1^T @ x1 + w0^T @ x0 accumulated in PSUM (w0 [K, K] diagonal, w1 dense), copied out by ACT."""
    row = N * 4
    insts = [
        ins("sp", "dma", dst=sb(0, K, 0, [[1, N]]), src=hb("x", 0, [[N, K], [1, N]]), queue=0, signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 4096, [[1, N]]), src=hb("x", K * row, [[N, K], [1, N]]), queue=1,
            signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 8192, [[1, K]]), src=hb("w", 0, [[K, K], [1, K]]), queue=2, signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 12288, [[1, K]]), src=hb("w", K * K * 4, [[K, K], [1, K]]), queue=3,
            signals=[0]),
        ins("pe", "load_stationary", src=sb(0, K, 8192, [[1, K]]), waits=[(0, 4)]),
        ins("pe", "multiply_moving", dst=ps(0, K, 0, [[1, N]]), src=sb(0, K, 0, [[1, N]]), acc=0),
        ins("pe", "load_stationary", src=sb(0, K, 12288, [[1, K]])),
        ins("pe", "multiply_moving", dst=ps(0, K, 0, [[1, N]]), src=sb(0, K, 4096, [[1, N]]), acc=1, signals=[1]),
        ins("act", "activation", dst=sb(0, K, 20480, [[1, N]]), src=ps(0, K, 0, [[1, N]]), func="identity",
            waits=[(1, 1)], signals=[2]),
        ins("sp", "dma", dst=hb("y", 0, [[N, K], [1, N]]), src=sb(0, K, 20480, [[1, N]]), queue=0, waits=[(2, 1)]),
    ]
    return program([("x", "input", "f32", (2 * K, N)), ("w", "input", "f32", (2 * K, K)),
                    ("y", "output", "f32", (K, N))], insts)


@pytest.mark.parametrize("k, m", [(128, 128), (64, 128), (128, 64), (100, 128), (128, 1), (3, 17), (1, 128)])
@pytest.mark.parametrize("columns", [1, 2, 3, 8, 32])
def test_a_transposed_view_gives_the_bits_of_the_contiguous_transpose(k, m, columns):
    """Chunks of a multiple of VIEW_COLUMNS moving columns, as the emulator stacks them: BLAS sums each product in
    the same order whether the stationary tile's transpose is a view or a contiguous copy (signed zeros,
    subnormals and overflowing products included)."""
    rng = np.random.default_rng(k * 100 + m + columns)
    stationary = special_moving(rng, k, m)  # [K, M]
    step = columns * VIEW_COLUMNS
    moving = special_moving(rng, k, 4 * step)
    chunks = moving.reshape(k, 4, step).transpose(1, 0, 2)
    assert (np.matmul(stationary.T, chunks).tobytes()
            == np.matmul(np.ascontiguousarray(stationary.T), chunks).tobytes())


@pytest.mark.parametrize("moving_inf", [False, True])
@pytest.mark.parametrize("K, N", [(64, 256), (100, 250), (128, 300)])
def test_emulated_diagonal_matmul_gives_the_bits_of_blas(moving_inf, K, N):
    """Through the emulator: the diagonal tile elementwise, or (an inf in its moving tile) on BLAS with its transpose
    made when needed; the dense tile after it on BLAS (chunks of 64, 26 and 16 columns: the transpose as a view
    for 64 and 16, a copy for 26 and for the 12 columns left after the 16-column chunks of N=300)."""
    rng = np.random.default_rng(6)
    w0 = diagonal(rng, K)
    w1 = special_moving(rng, K, K)
    x = special_moving(rng, 2 * K, N)
    if moving_inf:
        x[7, 11] = np.inf
    out = run_program(diagonal_then_dense_program(K, N), {"x": x, "w": np.concatenate([w0, w1])}).outputs["y"]
    expected = blas(np.ascontiguousarray(w1.T), x[K:]) + blas(np.ascontiguousarray(w0.T), x[:K])
    assert out.tobytes() == expected.tobytes()
