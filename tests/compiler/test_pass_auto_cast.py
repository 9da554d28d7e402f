"""auto_cast: matmult casts dot operands, all also elementwise ops, none nothing; bf16 and fp8."""

from __future__ import annotations

import pytest

from compiler.options import PassOptionError
from compiler.passes.precision.auto_cast import AutoCastPass
from compiler.passes.simplify.dce import DeadCodeElimination
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden


@pytest.mark.parametrize("mode, cast_type, case", [
    ("matmult", "bf16", "auto_cast_matmult"),
    ("all", "bf16", "auto_cast_all"),
    ("matmult", "fp8_e4m3", "auto_cast_fp8"),
])
def test_golden(mode, cast_type, case):
    # The inputs are N(0, 1) and dots sum 8 products: bf16 rounding (2^-8 relative) stays well under 0.1,
    # fp8 e4m3 (2^-4 relative) under 1.
    tolerance = 1.0 if cast_type == "fp8_e4m3" else 0.1
    run_golden(case, [AutoCastPass(mode, cast_type), DeadCodeElimination()], rtol=tolerance, atol=tolerance,
               source="auto_cast")


def test_none_changes_nothing():
    module = parse_with_constants((GOLDEN_DIR / "auto_cast.in.hlo").read_text())
    assert not AutoCastPass("none").run(module)


def test_bad_mode():
    with pytest.raises(PassOptionError, match="none, matmult, all"):
        AutoCastPass("everything")
