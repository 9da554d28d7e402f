"""Every rule of the lowering table against eager torch, through the HLO reference interpreter.

Each case of op_cases.py is captured on its paths ("export": torch.export with our decomposition table,
"core": torch.export with torch's full core-ATen table, "fx": fx tracing), lowered, verified, evaluated
and compared with eager torch; it must reach the ATen overloads it names. Together the cases name
every overload in the table.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_leaves

from frontend.capture import capture_export, capture_fx, quiet
from frontend.lowering import LOWERINGS, lower_graph, operators_used
from hlo.interpreter import evaluate
from hlo.verifier import verify_module
from tests.conftest import assert_close
from tests.frontend.op_cases import CASES, Case


def _capture(case: Case, capture: str, model: torch.nn.Module, inputs: tuple, ep):
    if capture == "fx":
        return capture_fx(model, inputs)
    if capture == "core":  # an ExportedProgram already in core ATen, as a user may pass one
        with quiet():
            ep = ep.run_decompositions()
    return capture_export(ep, inputs, case.name, keep=LOWERINGS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name.replace(" ", "-"))
def test_case_matches_torch(case: Case):
    torch.manual_seed(0)
    model, inputs = case.make().eval(), case.inputs()
    with torch.no_grad():
        expected = tree_leaves(model(*inputs))
    ep = None
    if {"export", "core"} & set(case.captures):
        with quiet():
            ep = torch.export.export(model, inputs)
    used: set[str] = set()
    for capture in case.captures:
        cap = _capture(case, capture, model, inputs, ep)
        used |= operators_used(cap)
        module = lower_graph(cap)
        verify_module(module)
        actual = evaluate(module, [t.numpy() for t in inputs])
        assert len(actual) == len(expected), capture
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert a.shape == tuple(e.shape), f"{capture} output {i}"
            assert str(a.dtype).replace("bfloat16", "bf16") in (str(e.dtype).removeprefix("torch."), "bf16"), \
                f"{capture} output {i}: {a.dtype} vs {e.dtype}"
            try:
                assert_close(a, e)
            except AssertionError as err:
                raise AssertionError(f"{capture} output {i}: {err}") from None
    missing = {f"aten.{op}" for op in case.ops} - used
    assert not missing, f"the case did not reach {sorted(missing)} (reached {sorted(used)})"


def test_cases_cover_the_table():
    declared = {f"aten.{op}" for case in CASES for op in case.ops}
    assert declared <= set(LOWERINGS), sorted(declared - set(LOWERINGS))
    assert set(LOWERINGS) <= declared, f"no case for {sorted(set(LOWERINGS) - declared)}"


def test_every_rule_takes_its_schema():
    """A rule is called with the overload's arguments in schema order: it must accept exactly that many."""
    import inspect

    from frontend.lowering import overload

    for name, rule in LOWERINGS.items():
        n = len(overload(name)._schema.arguments)
        sig = inspect.signature(rule)
        try:
            sig.bind(None, *([None] * n))
        except TypeError as e:
            raise AssertionError(f"{name}: {e}") from None
        params = [p for p in sig.parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
        required = [p for p in params if p.default is p.empty]
        assert len(required) <= n, f"{name}: the rule requires {len(required)} arguments, the schema has {n}"

