"""Provenance in HLO metadata: module paths and merged origins print and parse back; the helpers."""

from __future__ import annotations

from hlo.ir import Instruction, Shape
from hlo.parser import parse_module
from hlo.printer import print_module
from hlo.provenance import Provenance, all_provenances, merge_provenance, own_provenance, provenances

TEXT = """HloModule m

%fused_computation (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  %c = f32[] constant(2), metadata={op_name="aten.mul" module="h.9"}
  %b = f32[2]{0} broadcast(f32[] %c), dimensions={}, metadata={op_name="aten.mul" module="h.9"}
  %e = f32[2]{0} exponential(%p), metadata={op_name="exp" module="h.0" source_file="m.py" source_line=7 merged="h.2||"}
  ROOT %m = f32[2]{0} multiply(f32[2]{0} %e, f32[2]{0} %b), metadata={op_name="mul" module="h" merged="h.1|mul|m.py:9"}
}

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0), metadata={op_name="x"}
  ROOT %fusion = f32[2]{0} fusion(%x), kind=kLoop, calls=%fused_computation,
    metadata={op_name="mul" module="h" merged="h.1|mul|m.py:9"}
}
"""


def test_metadata_with_module_and_merged_origins_round_trips():
    module = parse_module(TEXT)
    again = parse_module(print_module(module))
    assert print_module(again) == print_module(module)
    m = again.computation("fused_computation").root
    assert m.metadata == {"op_name": "mul", "module": "h", "merged": "h.1|mul|m.py:9"}
    assert provenances(m) == (Provenance("h", "mul"), Provenance("h.1", "mul", "m.py:9"))


def test_a_fusion_has_the_origins_of_all_it_fused_but_not_of_its_constants():
    """Its own (the root's, merged ones included) and the own origin of each instruction it fused: the
    exp's merged origin h.2 (a CSE of an instruction the fusion pass may have duplicated) is left out."""
    fusion = parse_module(TEXT).entry.root
    assert all_provenances(fusion) == (Provenance("h", "mul"), Provenance("h.1", "mul", "m.py:9"),
                                       Provenance("h.0", "exp", "m.py:7"))


def test_merge_keeps_each_origin_once():
    a = Instruction("a", "add", Shape.array("f32", (2,)), metadata={"op_name": "aten.add", "module": "h.0"})
    b = Instruction("b", "add", Shape.array("f32", (2,)), metadata={"op_name": "aten.add", "module": "h.1",
                                                                     "source_file": "f;|.py", "source_line": 3})
    merge_provenance(a, b)
    merge_provenance(a, b)
    merge_provenance(a, a)
    assert own_provenance(a) == Provenance("h.0", "aten.add")
    assert provenances(a) == (Provenance("h.0", "aten.add"), Provenance("h.1", "aten.add", "f,|.py:3"))
    empty = Instruction("c", "add", Shape.array("f32", (2,)))
    merge_provenance(a, empty)
    assert provenances(empty) == () and "merged" not in empty.metadata


def test_what_only_constant_operands_feed_is_left_out_of_a_fusion():
    """CSE shares broadcast(mask) between the layers; fused into layer 1's fusion it says layer 0."""
    module = parse_module("""HloModule m

%fused (p0: pred[2], p1: f32[2]) -> f32[2] {
  %p0 = pred[2]{0} parameter(0)
  %p1 = f32[2]{0} parameter(1)
  %nm = pred[2]{0} not(%p0), metadata={op_name="aten.sdpa" module="h.0.attn"}
  %z = f32[] constant(0)
  %zb = f32[2]{0} broadcast(%z), dimensions={}
  ROOT %s = f32[2]{0} select(%nm, %p1, %zb), metadata={op_name="aten.sdpa" module="h.1.attn"}
}

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  %mask = pred[2]{0} constant({1, 0})
  ROOT %f = f32[2]{0} fusion(%mask, %x), kind=kLoop, calls=%fused, metadata={op_name="aten.sdpa" module="h.1.attn"}
}
""")
    assert all_provenances(module.entry.root) == (Provenance("h.1.attn", "aten.sdpa"),)
