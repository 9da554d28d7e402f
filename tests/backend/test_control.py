"""HLO while and conditional on the ISA's control flow, against the HLO interpreter: a counted loop of 300 trips,
data-dependent loops, several carried tensors, nested loops, conditionals whose branches differ (pred and index,
an index out of range), and the pipeline's choice between unrolling/selecting and real control flow."""

from __future__ import annotations

import re

import numpy as np
import pytest

import compiler
from hlo.interpreter import evaluate
from hlo.parser import parse_module
from tests.backend.util import run_hlo


def counted_text(trips: int) -> str:
    """fori_loop(0, trips): x = x * 0.5 + i (as f32), carrying (i, x)."""
    return f"""HloModule counted
body {{
  p = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  half = f32[] constant(0.5)
  hb = f32[4,8] broadcast(half), dimensions={{}}
  xh = f32[4,8] multiply(x, hb)
  fi = f32[] convert(i)
  fb = f32[4,8] broadcast(fi), dimensions={{}}
  x1 = f32[4,8] add(xh, fb)
  ROOT t = (s32[], f32[4,8]) tuple(i1, x1)
}}
cond {{
  p = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY main {{
  x = f32[4,8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4,8]) tuple(zero, x)
  w = (s32[], f32[4,8]) while(init), condition=cond, body=body
  ROOT r = f32[4,8] get-tuple-element(w), index=1
}}
"""


DOUBLING = """HloModule doubling
body {
  p = (s32[], s32[]) parameter(0)
  x = s32[] get-tuple-element(p), index=0
  limit = s32[] get-tuple-element(p), index=1
  two = s32[] constant(2)
  one = s32[] constant(1)
  x2 = s32[] multiply(x, two)
  x3 = s32[] add(x2, one)
  ROOT t = (s32[], s32[]) tuple(x3, limit)
}
cond {
  p = (s32[], s32[]) parameter(0)
  x = s32[] get-tuple-element(p), index=0
  limit = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(x, limit), direction=LT
}
ENTRY main {
  x = s32[] parameter(0)
  limit = s32[] parameter(1)
  init = (s32[], s32[]) tuple(x, limit)
  w = (s32[], s32[]) while(init), condition=cond, body=body
  ROOT r = s32[] get-tuple-element(w), index=0
}
"""

# several carried tensors, a data-dependent exit on a reduction: while sum(a) < limit: a, b = a + b, b * 1.5
SEVERAL = """HloModule several
add_f32 {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT s = f32[] add(l, r)
}
body {
  p = (f32[8,16], f32[8,16], s32[]) parameter(0)
  a = f32[8,16] get-tuple-element(p), index=0
  b = f32[8,16] get-tuple-element(p), index=1
  k = s32[] get-tuple-element(p), index=2
  a1 = f32[8,16] add(a, b)
  c = f32[] constant(1.5)
  cb = f32[8,16] broadcast(c), dimensions={}
  b1 = f32[8,16] multiply(b, cb)
  one = s32[] constant(1)
  k1 = s32[] add(k, one)
  ROOT t = (f32[8,16], f32[8,16], s32[]) tuple(a1, b1, k1)
}
cond {
  p = (f32[8,16], f32[8,16], s32[]) parameter(0)
  a = f32[8,16] get-tuple-element(p), index=0
  zero = f32[] constant(0)
  s = f32[] reduce(a, zero), dimensions={0,1}, to_apply=add_f32
  limit = f32[] constant(5000)
  ROOT lt = pred[] compare(s, limit), direction=LT
}
ENTRY main {
  a = f32[8,16] parameter(0)
  b = f32[8,16] parameter(1)
  zero = s32[] constant(0)
  init = (f32[8,16], f32[8,16], s32[]) tuple(a, b, zero)
  w = (f32[8,16], f32[8,16], s32[]) while(init), condition=cond, body=body
  ra = f32[8,16] get-tuple-element(w), index=0
  rb = f32[8,16] get-tuple-element(w), index=1
  rk = s32[] get-tuple-element(w), index=2
  ROOT r = (f32[8,16], f32[8,16], s32[]) tuple(ra, rb, rk)
}
"""

# a conditional whose branches are different computations (a matmul, and an elementwise chain)
COND = """HloModule cond
matmul {
  p = (f32[16,32], f32[32,8]) parameter(0)
  x = f32[16,32] get-tuple-element(p), index=0
  w = f32[32,8] get-tuple-element(p), index=1
  ROOT d = f32[16,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
other {
  p = (f32[16,32], f32[32,8]) parameter(0)
  x = f32[16,32] get-tuple-element(p), index=0
  s = f32[16,8] slice(x), slice={[0:16], [0:8]}
  e = f32[16,8] exponential(s)
  ROOT n = f32[16,8] negate(e)
}
ENTRY main {
  t = f32[] parameter(0)
  x = f32[16,32] parameter(1)
  w = f32[32,8] parameter(2)
  zero = f32[] constant(0)
  flag = pred[] compare(t, zero), direction=GT
  args = (f32[16,32], f32[32,8]) tuple(x, w)
  ROOT c = f32[16,8] conditional(flag, args, args), true_computation=matmul, false_computation=other
}
"""

SWITCH = """HloModule switch
b0 {
  x = f32[8,8] parameter(0)
  ROOT d = f32[8,8] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
b1 {
  x = f32[8,8] parameter(0)
  ROOT t = f32[8,8] tanh(x)
}
b2 {
  x = f32[8,8] parameter(0)
  ROOT n = f32[8,8] negate(x)
}
ENTRY main {
  i = s32[] parameter(0)
  x = f32[8,8] parameter(1)
  ROOT c = f32[8,8] conditional(i, x, x, x), branch_computations={b0, b1, b2}
}
"""

NESTED = """HloModule nested
inner_body {
  p = (s32[], f32[4,4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  x = f32[4,4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j1 = s32[] add(j, one)
  c = f32[] constant(1)
  cb = f32[4,4] broadcast(c), dimensions={}
  x1 = f32[4,4] add(x, cb)
  ROOT t = (s32[], f32[4,4]) tuple(j1, x1)
}
inner_cond {
  p = (s32[], f32[4,4]) parameter(0)
  j = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(j, n), direction=LT
}
outer_body {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,4] get-tuple-element(p), index=1
  zero = s32[] constant(0)
  init = (s32[], f32[4,4]) tuple(zero, x)
  w = (s32[], f32[4,4]) while(init), condition=inner_cond, body=inner_body
  x1 = f32[4,4] get-tuple-element(w), index=1
  two = f32[] constant(2)
  tb = f32[4,4] broadcast(two), dimensions={}
  x2 = f32[4,4] multiply(x1, tb)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4,4]) tuple(i1, x2)
}
outer_cond {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[4,4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4,4]) tuple(zero, x)
  w = (s32[], f32[4,4]) while(init), condition=outer_cond, body=outer_body
  ROOT r = f32[4,4] get-tuple-element(w), index=1
}
"""


def unique_names(text: str) -> str:
    """The HLO text with every instruction name prefixed by its computation's (names are module-wide in HLO; the
    texts here use no instruction name that is also an opcode, attribute or computation name)."""
    out: list[str] = []
    block: list[str] | None = None
    tag = ""
    for line in text.splitlines():
        head = re.match(r"(ENTRY )?(\w+) \{$", line)
        if head:
            tag, block = head.group(2), []
            out.append(line)
        elif block is None or line != "}":
            (out if block is None else block).append(line)
        else:
            names = [m.group(2) for m in (re.match(r"\s+(ROOT )?(\w+) =", x) for x in block) if m]
            pattern = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b")
            prefix = tag + "_"
            out.extend(pattern.sub(lambda n, prefix=prefix: prefix + n.group(1), x) for x in block)
            out.append(line)
            block = None
    return "\n".join(out) + "\n"


def expected(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    out = evaluate(parse_module(unique_names(text)), inputs)
    return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]


def check(text: str, inputs: list[np.ndarray], exact: bool = False) -> list[np.ndarray]:
    got, _ = run_hlo(unique_names(text), inputs)
    for g, e in zip(got, expected(text, inputs), strict=True):
        if exact:
            np.testing.assert_array_equal(g.reshape(e.shape), e)
        else:
            np.testing.assert_allclose(g.reshape(e.shape), e, rtol=1e-4, atol=1e-4)
    return got


def test_counted_loop_of_300_trips_is_one_body() -> None:
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    check(counted_text(300), [x])
    sizes = {len(compiler.compile(unique_names(counted_text(n)), opt_level=2).program.instructions)
             for n in (30, 300, 3000)}
    assert len(sizes) == 1  # the program text does not grow with the trip count


@pytest.mark.parametrize("x,limit", [(0, 1000), (5, 6), (7, 7), (100, 3), (-3, 2_000_000), (1, 2**31 - 1)])
def test_data_dependent_loop_while_x_below_limit(x: int, limit: int) -> None:
    got = check(DOUBLING, [np.int32(x), np.int32(limit)], exact=True)
    assert int(got[0].reshape(())) >= limit or (x >= limit and int(got[0].reshape(())) == x)


def test_loop_carrying_several_tensors() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((8, 16)).astype(np.float32), rng.random((8, 16)).astype(np.float32)
    got = check(SEVERAL, [a, b])
    assert int(got[2].reshape(())) > 1  # the loop ran several trips


def test_nested_loops() -> None:
    x = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)
    check(NESTED, [x])


@pytest.mark.parametrize("t", [1.5, -2.0])
def test_conditional_runs_only_the_chosen_branch(t: float) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
    check(COND, [np.float32(t), x, w])
    # the branch not taken never runs: its matmul is absent from the profile of the false case
    exe = compiler.compile(unique_names(COND), opt_level=2)
    assert any(i.opcode == "branch" for i in exe.program.instructions)
    _, profile = exe.run_with_profile(np.float32(t), x, w)
    assert ("pe.multiply_moving" in profile.instruction_counts) == (t > 0)


@pytest.mark.parametrize("index", [0, 1, 2, 7, -1])
def test_switch_on_an_index_out_of_range_takes_the_last_branch(index: int) -> None:
    x = np.random.default_rng(4).standard_normal((8, 8)).astype(np.float32)
    check(SWITCH, [np.int32(index), x])


def test_the_pipeline_picks_unrolling_and_selects_when_cheap() -> None:
    small = compiler.compile(unique_names(counted_text(5)), opt_level=2).program
    assert not any(i.label for i in small.instructions)  # unrolled: no loop
    large = compiler.compile(unique_names(counted_text(300)), opt_level=2).program
    assert any(i.opcode == "loop" for i in large.instructions)
    cheap = COND.replace("ROOT d = f32[16,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                         "s2 = f32[16,8] slice(x), slice={[0:16], [8:16]}\n  ROOT d = f32[16,8] sine(s2)")
    program = compiler.compile(unique_names(cheap), opt_level=2).program
    assert not any(i.opcode == "branch" for i in program.instructions)
