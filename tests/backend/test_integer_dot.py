"""Integer dots of every width, exact (compiler/passes/expand/integer_dot_expander.py): 8-bit limbs on PE, K in
chunks whose fp32 partial sums stay below 2^24, recombined with shifts and wrapping adds on GpSimd. Checked
against the HLO interpreter (XLA's wrap semantics)."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from hlo.interpreter import evaluate
from hlo.parser import parse_module


def _dot(t: str, r: str, m: int, k: int, n: int) -> str:
    return f"""HloModule m
ENTRY %e (a: {t}[{m},{k}], b: {t}[{k},{n}]) -> {r}[{m},{n}] {{
  %a = {t}[{m},{k}] parameter(0)
  %b = {t}[{k},{n}] parameter(1)
  ROOT %d = {r}[{m},{n}] dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


@pytest.mark.parametrize("t,r,k", [("s32", "s32", 5), ("s32", "s32", 300), ("s64", "s64", 7), ("s8", "s8", 9),
                                   ("u8", "u8", 600), ("s8", "s32", 2000)])
def test_integer_dot_matches_the_interpreter_with_wrap(t, r, k):
    text = _dot(t, r, 3, k, 4)
    np_t = {"s32": np.int32, "s64": np.int64, "s8": np.int8, "u8": np.uint8}[t]
    info = np.iinfo(np_t)
    rng = np.random.default_rng(k)
    a = rng.integers(info.min, info.max, (3, k), dtype=np_t, endpoint=True)
    b = rng.integers(info.min, info.max, (k, 4), dtype=np_t, endpoint=True)
    (want,) = evaluate(parse_module(text), [a, b])
    (got,) = compiler.compile(text, opt_level=2).run(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_s8_result_wraps_instead_of_saturating():
    a = np.full((1, 4), 100, np.int8)
    b = np.full((4, 1), 100, np.int8)
    (got,) = compiler.compile(_dot("s8", "s8", 1, 4, 1), opt_level=2).run(a, b)
    assert int(got[0, 0]) == np.int64(40000).astype(np.int8)
