"""Provenance in HLO metadata: module paths and merged origins print and parse back; the helpers."""

from __future__ import annotations

from hlo.ir import Instruction, Shape
from hlo.parser import parse_module
from hlo.printer import print_module
from hlo.provenance import Provenance, all_provenances, merge_provenance, own_provenance, provenances

TEXT = """HloModule m

%fused_computation (param_0: f32[2]) -> f32[2] {
  %param_0 = f32[2]{0} parameter(0), metadata={op_name="x"}
  %c = f32[] constant(2), metadata={op_name="aten.mul" module="h.9"}
  %b = f32[2]{0} broadcast(f32[] %c), dimensions={}, metadata={op_name="aten.mul" module="h.9"}
  %e = f32[2]{0} exponential(f32[2]{0} %param_0), metadata={op_name="exp" module="h.0" source_file="m.py" source_line=7}
  ROOT %m = f32[2]{0} multiply(f32[2]{0} %e, f32[2]{0} %b), metadata={op_name="mul" module="h" merged="h.1|mul|m.py:9"}
}

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0), metadata={op_name="x"}
  ROOT %fusion = f32[2]{0} fusion(%x), kind=kLoop, calls=%fused_computation, metadata={op_name="mul" module="h"}
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
    fusion = parse_module(TEXT).entry.root
    assert all_provenances(fusion) == (Provenance("h", "mul"), Provenance("h.0", "exp", "m.py:7"),
                                       Provenance("h.1", "mul", "m.py:9"))


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
