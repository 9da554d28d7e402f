"""Whole hand-built programs: a matmul with K accumulation and bias, PSUM read by DVE, strided DMA,
input checking. (Per-opcode, per-dtype numerics: test_golden.py.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from isa.emulator import run_program
from isa.errors import InputError
from tests.isa.emulator_helpers import hb, ins, program, ps, sb

NP_DT = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "i32": np.int32,
         "fp8e4": ml_dtypes.float8_e4m3fn, "fp8e5": ml_dtypes.float8_e5m2}
rng = np.random.default_rng(1234)


def rand(shape, lo=-3.0, hi=3.0) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def test_dma_strided_transpose_and_hbm_to_hbm():
    """A [16, 8] HBM tensor read column-wise into 8 partitions, then copied HBM->HBM."""
    x = rand((16, 8))
    insts = [
        ins("sp", "dma", dst=sb(0, 8, 0, [[1, 16]]), src=hb("x", 0, [[1, 8], [8, 16]]), queue=3, signals=[0]),
        ins("sp", "dma", dst=hb("t", 0, [[16, 8], [1, 16]]), src=sb(0, 8, 0, [[1, 16]]), waits=[(0, 1)],
            queue=5, signals=[1]),
        ins("sp", "dma", dst=hb("c", 0, [[8, 16], [1, 8]]), src=hb("x", 0, [[8, 16], [1, 8]]), queue=7),
    ]
    prog = program([("x", "input", "f32", (16, 8)), ("t", "output", "f32", (8, 16)),
                    ("c", "output", "f32", (16, 8))], insts)
    out = run_program(prog, {"x": x}, check=True).outputs
    np.testing.assert_array_equal(out["t"], x.T)
    np.testing.assert_array_equal(out["c"], x)


def matmul_program(moving_dt: str, K: int = 128, M: int = 64, N: int = 256):
    """y = relu(w^T @ x + b) with the contraction split in two K tiles accumulated in PSUM."""
    size = 4 if moving_dt == "f32" else 2
    x_row, w_row = N * size, M * size
    insts = [
        ins("sp", "dma", dst=sb(0, K, 0, [[1, N]], moving_dt), src=hb("x", 0, [[N, K], [1, N]], moving_dt),
            queue=0, signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 4096, [[1, N]], moving_dt),
            src=hb("x", K * x_row, [[N, K], [1, N]], moving_dt), queue=1, signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 8192, [[1, M]], moving_dt), src=hb("w", 0, [[M, K], [1, M]], moving_dt),
            queue=2, signals=[0]),
        ins("sp", "dma", dst=sb(0, K, 12288, [[1, M]], moving_dt),
            src=hb("w", K * w_row, [[M, K], [1, M]], moving_dt), queue=3, signals=[0]),
        ins("sp", "dma", dst=sb(0, M, 16384, [[1, 1]]), src=hb("b", 0, [[1, M], [1, 1]]), queue=4, signals=[0]),
        ins("pe", "load_stationary", src=sb(0, K, 8192, [[1, M]], moving_dt), waits=[(0, 5)]),
        ins("pe", "multiply_moving", dst=ps(0, M, 0, [[1, N]]), src=sb(0, K, 0, [[1, N]], moving_dt), acc=0),
        ins("pe", "load_stationary", src=sb(0, K, 12288, [[1, M]], moving_dt)),
        ins("pe", "multiply_moving", dst=ps(0, M, 0, [[1, N]]), src=sb(0, K, 4096, [[1, N]], moving_dt),
            acc=1, signals=[1]),
        ins("act", "activation", dst=sb(0, M, 20480, [[1, N]]), src=ps(0, M, 0, [[1, N]]),
            bias=sb(0, M, 16384, [[1, 1]]), func="relu", waits=[(1, 1)], signals=[2]),
        ins("sp", "dma", dst=hb("y", 0, [[N, M], [1, N]]), src=sb(0, M, 20480, [[1, N]]), queue=0,
            waits=[(2, 1)]),
    ]
    tensors = [("x", "input", moving_dt, (2 * K, N)), ("w", "input", moving_dt, (2 * K, M)),
               ("b", "input", "f32", (M, 1)), ("y", "output", "f32", (M, N))]
    return program(tensors, insts)


@pytest.mark.parametrize("dt", ["bf16", "f32"])
def test_matmul_program_with_k_accumulation_and_bias(dt):
    K, M, N = 128, 64, 256
    x = rand((2 * K, N)).astype(NP_DT[dt])
    w = rand((2 * K, M)).astype(NP_DT[dt])
    b = rand((M, 1))
    result = run_program(matmul_program(dt), {"x": x, "w": w, "b": b}, check=True)
    ref = np.maximum(w.astype(np.float64).T @ x.astype(np.float64) + b, 0)
    np.testing.assert_allclose(result.outputs["y"], ref, rtol=1e-4, atol=1e-4)
    assert result.outputs["y"].dtype == np.float32 and result.outputs["y"].shape == (M, N)


def test_psum_tile_read_by_vector_engine_and_constants():
    """A constant tensor DMA'd in, a matmul against the identity (transpose) and a DVE read of PSUM."""
    x = rand((32, 64))
    eye = np.eye(32, dtype=np.float32)
    insts = [
        ins("sp", "dma", dst=sb(0, 32, 0, [[1, 64]]), src=hb("x", 0, [[64, 32], [1, 64]]), signals=[0]),
        ins("sp", "dma", dst=sb(0, 32, 512, [[1, 32]]), src=hb("eye", 0, [[32, 32], [1, 32]]), queue=1,
            signals=[0]),
        ins("pe", "load_stationary", src=sb(0, 32, 0, [[1, 64]]), waits=[(0, 2)]),
        ins("pe", "multiply_moving", dst=ps(0, 64, 2048, [[1, 32]]), src=sb(0, 32, 512, [[1, 32]]),
            signals=[1]),
        ins("dve", "tensor_scalar", dst=sb(0, 64, 1024, [[1, 32]]), src=ps(0, 64, 2048, [[1, 32]]),
            op="multiply", scalar=2.0, waits=[(1, 1)], signals=[2]),
        ins("sp", "dma", dst=hb("y", 0, [[32, 64], [1, 32]]), src=sb(0, 64, 1024, [[1, 32]]), waits=[(2, 1)]),
    ]
    prog = program([("x", "input", "f32", (32, 64)), ("eye", "const", "f32", (32, 32)),
                    ("y", "output", "f32", (64, 32))], insts, constants={"eye": eye})
    out = run_program(prog, {"x": x}, check=True).outputs["y"]
    np.testing.assert_allclose(out, 2 * x.T, rtol=1e-6)


@pytest.mark.parametrize("given,match", [
    ({}, "missing input 'x'"),
    ({"x": np.zeros((2, 8), np.float32), "z": np.zeros(1)}, "unknown input"),
    ({"x": np.zeros((2, 9), np.float32)}, r"input 'x': expected f32\[2, 8\].*given float32\[2, 9\]"),
    ({"x": np.zeros((2, 8), np.float64)}, r"given float64"),
])
def test_wrong_inputs_raise_input_error(given, match):
    prog = program([("x", "input", "f32", (2, 8)), ("y", "output", "f32", (2, 8))],
                   [ins("sp", "dma", dst=hb("y", 0, [[8, 2], [1, 8]]), src=hb("x", 0, [[8, 2], [1, 8]]))])
    with pytest.raises(InputError, match=match):
        run_program(prog, given)


@st.composite
def strided_reads(draw):
    """An in-bounds HBM pattern over a flat 256-element tensor: partition pair plus two free pairs."""
    parts = draw(st.integers(1, 8))
    dims = [(draw(st.integers(0, 9)), draw(st.integers(1, 5))) for _ in range(2)]
    pstride = draw(st.integers(0, 12))
    reach = pstride * (parts - 1) + sum(s * (c - 1) for s, c in dims)
    offset = draw(st.integers(0, 255 - reach)) if reach <= 255 else None
    return parts, pstride, dims, offset


@settings(max_examples=40, deadline=None)
@given(strided_reads(), st.sampled_from(["f32", "bf16"]))
def test_strided_dma_matches_numpy_as_strided(case, dt):
    parts, pstride, dims, offset = case
    assume(offset is not None)
    size = 4 if dt == "f32" else 2
    free = dims[0][1] * dims[1][1]
    flat = np.arange(256, dtype=np.float32).astype(NP_DT[dt])
    insts = [ins("sp", "dma", dst=sb(0, parts, 0, [[1, free]], dt),
                 src=hb("x", offset * size, [[pstride, parts], *dims], dt), signals=[0]),
             ins("sp", "dma", dst=hb("y", 0, [[free, parts], [1, free]], dt), src=sb(0, parts, 0, [[1, free]], dt),
                 waits=[(0, 1)])]
    prog = program([("x", "input", dt, (256,)), ("y", "output", dt, (parts, free))], insts)
    out = run_program(prog, {"x": flat}, check=True).outputs["y"]
    shape = (parts, dims[0][1], dims[1][1])
    strides = tuple(s * size for s in (pstride, dims[0][0], dims[1][0]))
    ref = np.lib.stride_tricks.as_strided(flat[offset:], shape, strides).reshape(parts, free)
    np.testing.assert_array_equal(out, ref)
