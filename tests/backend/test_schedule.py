"""Semaphores and streams: minimal waits, one signal per instruction; GEMM performance (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from backend import BackendOptions
from backend.schedule import ENGINE_SEMS
from tests.backend.util import BF16, bf16_round, mlp_text, mlp_weights, rand, run_hlo


@pytest.mark.parametrize("list_schedule", [True, False])
def test_waits_are_minimal_and_streams_in_order(list_schedule):
    sizes, batch = (100, 300, 10), 40
    consts = mlp_weights(sizes)
    _, result = run_hlo(mlp_text(sizes, batch), [rand(batch, 100)], consts,
                        options=BackendOptions(list_schedule=list_schedule))
    for inst in result.program.instructions:
        assert len(inst.signals) == 1
        sems = [s for s, _ in inst.waits]
        assert len(sems) == len(set(sems)), inst  # at most one wait per semaphore
        if inst.engine in ENGINE_SEMS:
            assert ENGINE_SEMS[inst.engine] not in sems, inst  # never on its own in-order stream
    assert "wait" in result.schedule


GEMM = """HloModule gemm
ENTRY %main (x: f32[{s},{s}]) -> f32[{s},{s}] {{
  %x = f32[{s},{s}] parameter(0)
  %xc = bf16[{s},{s}] convert(%x)
  %w = bf16[{s},{s}] constant({{...}}), data="w"
  ROOT %d = f32[{s},{s}] dot(%xc, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def test_gemm_512_checked():
    x, w = rand(512, 512, seed=1), rand(512, 512, seed=2, dtype=BF16)
    (out,), _ = run_hlo(GEMM.format(s=512), [x], {"w": w})
    np.testing.assert_allclose(out, bf16_round(x) @ w.astype(np.float32), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_gemm_2048_mfu():
    """2048^3 bf16 GEMM (f32 input auto-cast, bf16 weights): >= 80% of PE peak on the emulator."""
    from backend import compile_module
    from compiler.hlo.parser import parse_module
    from isa.emulator import run_program

    x, w = rand(2048, 2048, seed=1), rand(2048, 2048, seed=2, dtype=BF16)
    result = compile_module(parse_module(GEMM.format(s=2048), constants={"w": w}), "trn1")
    run = run_program(result.program, {"in0": x})
    ref = bf16_round(x) @ w.astype(np.float32)
    np.testing.assert_allclose(run.outputs["out0"], ref, rtol=1e-3, atol=1e-2)
    assert run.profile.mfu >= 0.80, run.profile.summary()
