"""Variadic reduces: independent combiners compile (split into plain reduces) and match the interpreter; any
other comparator is refused with a typed error before anything runs, never computed wrong."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.errors import CompilationError
from hlo.interpreter import evaluate
from hlo.parser import parse_module


def _text(body: str, init1: str = "-inf") -> str:
    return f"""HloModule v

%cmp {{
  %a0 = f32[] parameter(0)
  %a1 = f32[] parameter(1)
  %b0 = f32[] parameter(2)
  %b1 = f32[] parameter(3)
{body}}}

ENTRY %main {{
  %x = f32[4,6] parameter(0)
  %y = f32[4,6] parameter(1)
  %z = f32[] constant(0)
  %n = f32[] constant({init1})
  %r = (f32[4], f32[4]) reduce(%x, %y, %z, %n), dimensions={{1}}, to_apply=%cmp
  %g0 = f32[4] get-tuple-element(%r), index=0
  %g1 = f32[4] get-tuple-element(%r), index=1
  ROOT %o = (f32[4], f32[4]) tuple(%g0, %g1)
}}
"""


def test_independent_combiners_compile_and_match():
    text = _text("  %s = f32[] add(%a0, %b0)\n  %m = f32[] maximum(%b1, %a1)\n"
                 "  ROOT %t = (f32[], f32[]) tuple(%s, %m)\n")
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    want = evaluate(parse_module(text), [x, y])
    for level in (0, 2):
        got = compiler.compile(text, opt_level=level).run(x, y, check=True)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_coupled_comparator_is_refused_with_a_typed_error():
    # the smaller first value wins, carrying its second value along (an arg-min with a float payload)
    text = _text("  %lt = pred[] compare(%b0, %a0), direction=LT\n  %v = f32[] select(%lt, %b0, %a0)\n"
                 "  %p = f32[] select(%lt, %b1, %a1)\n  ROOT %t = (f32[], f32[]) tuple(%v, %p)\n", init1="0")
    for level in (0, 2):
        with pytest.raises(CompilationError, match="reduc"):
            compiler.compile(text, opt_level=level)
