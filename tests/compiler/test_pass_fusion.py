"""fusion: matmul epilogues (kOutput), elementwise loops (kLoop), and the recorded decisions."""

from __future__ import annotations

from compiler.passes.fusion.fusion_pass import FusionDecision, FusionPass
from hlo.parser import parse_module
from tests.compiler.golden.harness import run_golden


def test_golden():
    run_golden("fusion", [FusionPass()], rtol=1e-6, atol=1e-6)


def test_decisions_name_pairs_and_reasons():
    fusion = FusionPass()
    module = parse_module("""HloModule m
ENTRY %main (x: f32[2,3], w: f32[4,3]) -> (f32[2,4], f32[2,4]) {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[4,3]{1,0} parameter(1)
  %dot.1 = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[4,3]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  %add.3 = f32[2,4]{1,0} add(f32[2,4]{1,0} %dot.1, f32[2,4]{1,0} %dot.1)
  %t = f32[2,4]{1,0} tanh(f32[2,4]{1,0} %add.3)
  %e = f32[2,4]{1,0} exponential(f32[2,4]{1,0} %add.3)
  ROOT %out = (f32[2,4]{1,0}, f32[2,4]{1,0}) tuple(f32[2,4]{1,0} %t, f32[2,4]{1,0} %e)
}
""")
    assert fusion.run(module)
    assert FusionDecision("dot.1", "add.3", True, "residual add of %dot.1", "kOutput") in fusion.decisions
    refused = [d for d in fusion.decisions if not d.fused]
    assert {(d.producer, d.consumer) for d in refused} >= {("add.3", "t"), ("add.3", "e")}
    assert all("has 2 users" in d.reason for d in refused if d.producer == "add.3")
    assert str(refused[0]).startswith("REFUSED kOutput %add.3 -> %")


def test_nothing_to_fuse_reports_unchanged():
    module = parse_module("""HloModule m
ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(f32[2]{0} %x)
}
""")
    fusion = FusionPass()
    assert not fusion.run(module)
    assert fusion.decisions == []


def test_golden_rows():
    """softmax and layer norm as one kInput fusion each, a dot epilogue through reshapes (sunk into the
    dot), a softmax whose rows are too long refused, a long reduction with a prologue still fused."""
    run_golden("fusion_rows", [FusionPass()], rtol=1e-5, atol=1e-6)


def test_golden_attention():
    """The frontend's attention (dots over merged heads with reshapes around) as one kCustom fusion."""
    run_golden("fusion_attention", [FusionPass()], rtol=1e-5, atol=1e-6)


def test_golden_rows_cost():
    """The cost strategy: the softmax whose rows are too long for one kernel recomputes exp in the row-sum
    and normalize kernels instead of writing it to memory."""
    run_golden("fusion_rows_cost", [FusionPass(strategy="cost")], rtol=1e-5, atol=1e-6, source="fusion_rows")
