"""Every integer elementwise op, every integer type: the compiled program equals the interpreter bit for bit
(the interpreter follows XLA: wrap, division/remainder/shift rules), or the compiler refuses it up front."""

from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.errors import NeuroncError
from hlo.interpreter import evaluate
from hlo.parser import parse_module

TYPES = {"s8": np.int8, "u8": np.uint8, "s16": np.int16, "u16": np.uint16, "s32": np.int32, "u32": np.uint32}
BINARY = ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or", "xor",
          "shift-left", "shift-right-logical", "shift-right-arithmetic")
UNARY = ("negate", "abs", "sign", "not", "popcnt", "count-leading-zeros")


def _values(np_type, seed: int) -> np.ndarray:
    info = np.iinfo(np_type)
    rng = np.random.default_rng(seed)
    x = rng.integers(info.min, info.max, size=24, endpoint=True, dtype=np.int64)
    x[:8] = [info.min, info.max, 0, 1, -1 if info.min else 2, 3, 7 if info.bits > 8 else 5, info.bits]
    return x.astype(np_type)


def _check(text: str, args: list[np.ndarray]) -> None:
    want = evaluate(parse_module(text), args)
    try:
        exe = compiler.compile(text, opt_level=2)
    except NeuroncError:
        return  # refused up front: allowed
    got = exe.run(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("hlo_type", TYPES)
@pytest.mark.parametrize("op", BINARY)
def test_binary(op, hlo_type):
    t = f"{hlo_type}[24]"
    text = f"HloModule m\nENTRY %e (a: {t}, b: {t}) -> {t} {{\n  %a = {t} parameter(0)\n  %b = {t} parameter(1)\n" \
           f"  ROOT %r = {t} {op}(%a, %b)\n}}\n"
    a, b = _values(TYPES[hlo_type], 1), _values(TYPES[hlo_type], 2)
    b[3] = 0
    _check(text, [a, b])


@pytest.mark.parametrize("hlo_type", TYPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, hlo_type):
    t = f"{hlo_type}[24]"
    text = f"HloModule m\nENTRY %e (a: {t}) -> {t} {{\n  %a = {t} parameter(0)\n  ROOT %r = {t} {op}(%a)\n}}\n"
    _check(text, [_values(TYPES[hlo_type], 3)])


@pytest.mark.parametrize("hlo_type", TYPES)
@pytest.mark.parametrize("direction", ["LT", "EQ", "GE"])
def test_compare_and_select(direction, hlo_type):
    t = f"{hlo_type}[24]"
    text = (f"HloModule m\nENTRY %e (a: {t}, b: {t}) -> ({t}, pred[24]) {{\n  %a = {t} parameter(0)\n"
            f"  %b = {t} parameter(1)\n  %c = pred[24] compare(%a, %b), direction={direction}\n"
            f"  %s = {t} select(%c, %a, %b)\n  ROOT %r = ({t}, pred[24]) tuple(%s, %c)\n}}\n")
    _check(text, [_values(TYPES[hlo_type], 4), _values(TYPES[hlo_type], 5)])
