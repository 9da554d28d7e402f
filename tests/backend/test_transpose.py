"""Materialized transposes: PE transposes of 128x128 blocks for large floating-point tensors (odd sizes,
rank 3 and 4 permutations, bf16, a cast), strided DMA for small or integer ones."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import BF16, body_module, rand, run_hlo


def transpose_text(dims, perm, dtype="f32", out_dtype=None) -> str:
    out_dims = [dims[p] for p in perm]
    s_in, s_out = f"{dtype}[{','.join(map(str, dims))}]", f"{out_dtype or dtype}[{','.join(map(str, out_dims))}]"
    body = f"  %t = {dtype}[{','.join(map(str, out_dims))}] transpose(%p0), dimensions={{{','.join(map(str, perm))}}}"
    if out_dtype:
        body += f"\n  %c = {s_out} convert(%t)"
    return body_module([("p0", s_in)], body, s_out)


@pytest.mark.parametrize("dims,perm", [
    ((130, 257), (1, 0)),
    ((3, 200, 70), (0, 2, 1)),
    ((64, 5, 300), (2, 1, 0)),
    ((2, 3, 129, 40), (0, 3, 1, 2)),
    ((1, 600), (1, 0)),
    ((7, 9), (1, 0)),          # small: a strided DMA
])
def test_transpose(dims, perm):
    x = rand(*dims, seed=1)
    (out,), result = run_hlo(transpose_text(dims, perm), [x])
    np.testing.assert_array_equal(out, x.transpose(perm))


def test_large_transpose_runs_on_pe():
    x = rand(300, 520, seed=2)
    (out,), result = run_hlo(transpose_text((300, 520), (1, 0)), [x])
    np.testing.assert_array_equal(out, x.T)
    assert sum(i.opcode == "transpose" for i in result.program.instructions) == 3 * 5
    dmas = [i for i in result.program.instructions if i.opcode == "dma"]
    runs = [min(i.operands["dst"].contiguous_bytes(), i.operands["src"].contiguous_bytes()) for i in dmas]
    assert min(runs) >= 8 * 4  # no per-element descriptors (520 = 4 x 128 + 8 columns)


def test_bf16_and_converting_transposes():
    x = rand(140, 260, seed=3).astype(BF16)
    (out,), _ = run_hlo(transpose_text((140, 260), (1, 0), "bf16"), [x])
    np.testing.assert_array_equal(out, x.T)
    (out,), _ = run_hlo(transpose_text((140, 260), (1, 0), "bf16", "f32"), [x])
    np.testing.assert_array_equal(out, x.T.astype(np.float32))


def test_integer_transpose():
    x = np.arange(150 * 90, dtype=np.int32).reshape(150, 90) - 7000
    (out,), _ = run_hlo(transpose_text((150, 90), (1, 0), "s32"), [x])
    np.testing.assert_array_equal(out, x.T)
