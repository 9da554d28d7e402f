"""Loop state written in place (backend/loop_state.py): results go straight into their state element when nothing
read later sees the change, else through a copy per trip; either way the loop computes what the interpreter does."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from hlo.interpreter import evaluate
from hlo.parser import parse_module

TRIPS = 20  # above the unroller's 16: a loop on chip


def _module(state: str, body: str, results: str) -> str:
    types = ", ".join(["s32[]"] + state.split(";"))
    params = "\n".join(f"  %s{k} = {t} get-tuple-element(%p), index={k + 1}" for k, t in enumerate(state.split(";")))
    entry_params = ", ".join(f"x{k}: {t}" for k, t in enumerate(state.split(";")))
    entry_loads = "\n".join(f"  %x{k} = {t} parameter({k})" for k, t in enumerate(state.split(";")))
    xs = ", ".join(f"%x{k}" for k in range(len(state.split(";"))))
    outs = ", ".join(state.split(";"))
    gtes = "\n".join(f"  %y{k} = {t} get-tuple-element(%w), index={k + 1}" for k, t in enumerate(state.split(";")))
    ys = ", ".join(f"%y{k}" for k in range(len(state.split(";"))))
    return f"""HloModule m
%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}
%body (p: ({types})) -> ({types}) {{
  %p = ({types}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
{params}
{body}
  ROOT %r = ({types}) tuple(%i1, {results})
}}
%cond (q: ({types})) -> pred[] {{
  %q = ({types}) parameter(0)
  %ci = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant({TRIPS})
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}}
ENTRY %e ({entry_params}) -> ({outs}) {{
{entry_loads}
  %zero = s32[] constant(0)
  %init = ({types}) tuple(%zero, {xs})
  %w = ({types}) while(%init), condition=%cond, body=%body
{gtes}
  ROOT %o = ({outs}) tuple({ys})
}}
"""


CASES = {
    # x' = x * 0.5 + y, y' = old x (a view of the state read after x is written: x keeps its copy)
    "swap": ("f32[6,5];f32[6,5]", """  %h = f32[] constant(0.5)
  %hb = f32[6,5] broadcast(%h), dimensions={}
  %m = f32[6,5] multiply(%s0, %hb)
  %x = f32[6,5] add(%m, %s1)""", "%x, %s0"),
    # a scalar counter read (broadcast) by the other result: the counter goes in place after that reader
    "reader": ("f32[];f32[130,3]", """  %c = f32[] constant(1)
  %j = f32[] add(%s0, %c)
  %jb = f32[130,3] broadcast(%s0), dimensions={}
  %x = f32[130,3] add(%s1, %jb)""", "%j, %x"),
    # a transposed view of the element in the kernel writing it: never in place
    "transpose": ("f32[200,200]", """  %t = f32[200,200] transpose(%s0), dimensions={1,0}
  %h = f32[] constant(0.25)
  %hb = f32[200,200] broadcast(%h), dimensions={}
  %m = f32[200,200] multiply(%t, %hb)
  %x = f32[200,200] add(%s0, %m)""", "%x"),
    # a reduction of the element broadcast back into it (not elementwise): never in place
    "reduce": ("f32[9,4]", """  %z = f32[] constant(0)
  %sum = f32[9] reduce(%s0, %z), dimensions={1}, to_apply=%add
  %sb = f32[9,4] broadcast(%sum), dimensions={0}
  %h = f32[] constant(0.125)
  %hb = f32[9,4] broadcast(%h), dimensions={}
  %x = f32[9,4] multiply(%sb, %hb)""", "%x"),
    # a row of a stacked output written at the trip counter (a rolled layer loop's KV cache): in place
    "update_row": (f"f32[8];f32[{TRIPS},8]", """  %h = f32[] constant(0.5)
  %hb = f32[8] broadcast(%h), dimensions={}
  %x = f32[8] add(%s0, %hb)
  %row = f32[1,8] reshape(%x)
  %z0 = s32[] constant(0)
  %u = f32[20,8] dynamic-update-slice(%s1, %row, %i, %z0)""", "%x, %u"),
}


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_state_matches_the_interpreter(name, level):
    state, body, results = CASES[name]
    text = _module(state, body, results)
    rng = np.random.default_rng(3)
    shapes = [tuple(int(d) for d in t[4:-1].split(",") if d) for t in state.split(";")]
    inputs = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    expected = evaluate(parse_module(text), inputs)
    exe = compiler.compile(text, opt_level=level)
    got = exe.run(*inputs)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-4)
    assert sum(1 for i in exe.program.instructions if i.opcode == "loop") >= 1  # a loop on chip, not unrolled


def test_counted_loop_writes_its_state_in_place():
    """The counter and an elementwise update go in place: no carry copy in the program."""
    state, body, results = CASES["reader"]
    exe = compiler.compile(_module(state, body, results), opt_level=2)
    assert not any(".carry" in i.comment for i in exe.program.instructions)


def test_row_update_of_the_state_goes_in_place():
    """A dynamic-update-slice of its own state element writes the row in place: no copy of the whole element."""
    state, body, results = CASES["update_row"]
    exe = compiler.compile(_module(state, body, results), opt_level=2)
    comments = [i.comment for i in exe.program.instructions]
    assert not any(".carry" in c or ".operand" in c for c in comments)
