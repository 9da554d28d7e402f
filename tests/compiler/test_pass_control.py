"""Golden tests of the control-flow passes (compiler/passes/control): call inlining, full unrolling of counted
loops, conditionals as selects; and the trip counts the unroller recognizes."""

from __future__ import annotations

from compiler.passes.control.call_inliner import CallInliner
from compiler.passes.control.conditional_to_select import ConditionalToSelect
from compiler.passes.control.while_unroller import WhileUnroller, trip_count
from hlo.parser import parse_module
from tests.compiler.golden.harness import GOLDEN_DIR, run_golden


def test_call_inliner_golden():
    module = run_golden("control_call_inliner", [CallInliner()], source="control")
    assert not any(i.opcode == "call" for i in module.all_instructions())


def test_while_unroller_golden():
    module = run_golden("control_while_unroller", [CallInliner(), WhileUnroller()], source="control")
    assert not any(i.opcode == "while" for i in module.all_instructions())


def test_conditional_to_select_golden():
    module = run_golden("control_conditional_to_select", [CallInliner(), ConditionalToSelect()], source="control")
    assert not any(i.opcode == "conditional" for i in module.all_instructions())


def test_long_loops_stay_loops():
    module = parse_module((GOLDEN_DIR / "control.in.hlo").read_text())
    (loop,) = [i for i in module.all_instructions() if i.opcode == "while"]
    assert trip_count(loop) == 3
    assert not WhileUnroller(max_trips=2).run(module)
    assert any(i.opcode == "while" for i in module.all_instructions())
