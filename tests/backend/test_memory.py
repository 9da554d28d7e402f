"""Working-set planning: tensors between kernels kept in SBUF when they fit, spilled to HBM otherwise;
the memory plan lists every buffer, the HBM traffic per kernel and the peaks."""

from __future__ import annotations

import re

import numpy as np
import pytest

from backend import BackendOptions
from tests.backend.util import TOL, body_module, mlp_reference, mlp_text, mlp_weights, rand, run_hlo


def chain_text(rows: int, cols: int) -> str:
    """Three unfused elementwise ops and a row sum over f32[rows, cols] (-O0 style: one kernel each)."""
    s = f"f32[{rows},{cols}]"
    body = f"""  %a = {s} tanh(%p0)
  %b = {s} multiply(%a, %p0)
  %c = {s} exponential(%b)
  %zero = f32[] constant(0)
  %r = f32[{rows}] reduce(%c, %zero), dimensions={{1}}, to_apply=%add_f32"""
    return body_module([("p0", s)], body, f"f32[{rows}]")


def chain_reference(x: np.ndarray) -> np.ndarray:
    return np.exp(np.tanh(x) * x).sum(1)


def scratch_tensors(result) -> list[str]:
    return [n for n, t in result.program.tensors.items() if t.kind == "scratch"]


def test_intermediates_stay_on_chip_and_the_plan_says_so():
    x = rand(300, 500, seed=1)
    (out,), result = run_hlo(chain_text(300, 500), [x])
    np.testing.assert_allclose(out, chain_reference(x), rtol=1e-4)
    assert scratch_tensors(result) == []  # nothing between kernels touches HBM
    plan = result.memory_plan
    assert plan.count(" sbuf   k") == 3  # a, b, c: kept on chip, with their live ranges
    assert len(re.findall(r"^tensor s\d +image +sbuf", plan, re.M)) == 3
    assert re.search(r"^peak SBUF: \d+ bytes per partition", plan, re.M)
    assert re.search(r"^peak PSUM: \d+ of 8 banks", plan, re.M)
    total = re.search(r"^total\s+(\d+)\s+(\d+)", plan, re.M)
    # the input is read by the two kernels using it; only the result is written
    assert total is not None and int(total.group(1)) == 2 * x.nbytes and int(total.group(2)) == 300 * 4


def test_everything_through_hbm_when_asked():
    x = rand(300, 500, seed=1)
    (out,), result = run_hlo(chain_text(300, 500), [x], options=BackendOptions(keep_on_chip=False))
    np.testing.assert_allclose(out, chain_reference(x), rtol=1e-4)
    assert len(scratch_tensors(result)) == 3


def test_large_intermediates_spill_small_ones_stay():
    """rows of 24576 floats: each intermediate needs 96 KiB per partition, two would not fit beside the
    kernels' buffers: the planner keeps what fits and spills the rest."""
    x = rand(128, 24576, seed=2) * 0.5
    (out,), result = run_hlo(chain_text(128, 24576), [x])
    np.testing.assert_allclose(out, chain_reference(x), rtol=1e-4)
    spilled = scratch_tensors(result)
    assert 1 <= len(spilled) <= 2
    assert "spilled" in result.memory_plan


def test_mlp_activations_on_chip_and_weights_streamed_once():
    sizes, batch = (256, 512, 384, 10), 200
    consts = mlp_weights(sizes)
    x = rand(batch, sizes[0], seed=3)
    (out,), result = run_hlo(mlp_text(sizes, batch), [x], consts)
    np.testing.assert_allclose(out, mlp_reference(x, consts, 3, "relu"), **TOL["f32"])
    assert scratch_tensors(result) == []
    weights = sum(v.nbytes for v in consts.values())
    total = re.search(r"^total\s+(\d+)\s+(\d+)", result.memory_plan, re.M)
    assert total is not None
    # compulsory: weights, biases and input once (bias rows are broadcast to the partitions they feed)
    assert int(total.group(1)) <= 1.1 * (weights + x.nbytes) + 3 * 128 * 512 * 4


@pytest.mark.slow
def test_weights_larger_than_sbuf_stream_through():
    """Three 4096x4096 f32 layers: 192 MiB of weights for a 24 MiB SBUF; activations stay on chip."""
    sizes, batch = (4096, 4096, 4096, 4096), 64
    rng = np.random.default_rng(0)
    consts = {}
    for i in range(3):
        consts[f"w{i}"] = (rng.standard_normal((4096, 4096), dtype=np.float32) / 64).astype(np.float32)
        consts[f"b{i}"] = rng.standard_normal(4096).astype(np.float32)
    x = rand(batch, 4096, seed=4)
    (out,), result = run_hlo(mlp_text(sizes, batch), [x], consts, check=False)
    np.testing.assert_allclose(out, mlp_reference(x, consts, 3, "relu"), rtol=1e-3, atol=1e-3)
    assert scratch_tensors(result) == []


def test_layout_section_reports_transposes():
    from tests.backend.util import dot_text

    (out,), result = run_hlo(dot_text(300, 200, 100), [rand(300, 200, seed=1), rand(200, 100, seed=2)])
    layout = result.memory_plan.split("== layout")[1]
    assert re.search(r"k\d+\.dot stat: \[200, 300\] operand by 6 PE transposes", layout)
