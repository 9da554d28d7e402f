"""Three-layer MLP modules (a chain of kOutput fusions) end to end on the emulator."""

from __future__ import annotations

import numpy as np
import pytest

from tests.backend.util import TOL, mlp_reference, mlp_text, mlp_weights, rand, run_hlo

SIZES = [((100, 300, 300, 10), 3), ((784, 300, 300, 10), 200)]


@pytest.mark.parametrize("sizes,batch", SIZES, ids=["3x100x300x10", "200x784x300x10"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_mlp(sizes, batch, dtype):
    consts = mlp_weights(sizes, dtype)
    x = rand(batch, sizes[0], seed=5)
    (out,), result = run_hlo(mlp_text(sizes, batch, "relu", dtype), [x], consts)
    expected = mlp_reference(x, consts, len(sizes) - 1, "relu", dtype)
    np.testing.assert_allclose(out, expected, **TOL[dtype])
    macs = sum(a * b for a, b in zip(sizes, sizes[1:], strict=False)) * batch
    assert result.program.meta["useful_macs"] == macs
    # hidden activations are stored feature-major for the next layer: no PE transpose after layer 0
    transposes = [i for i in result.program.instructions if "transpose" in i.comment]
    assert all(i.comment.startswith("k1.") or "identity" in i.comment for i in transposes)


def test_mlp_reports():
    sizes, batch = (100, 300, 10), 3
    consts = mlp_weights(sizes)
    _, result = run_hlo(mlp_text(sizes, batch), [rand(batch, 100)], consts)
    assert "peak SBUF" in result.memory_plan and "k1.h0" in result.memory_plan
    assert "== pe" in result.schedule and "wait" in result.schedule
    peak = result.program.meta["peak_sbuf_bytes"]
    assert 0 < peak <= 128 * 192 * 1024
