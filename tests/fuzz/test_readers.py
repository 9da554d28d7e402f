"""Robustness of the readers under mutated input (fixed-seed hypothesis budgets): whatever bytes a .neff holds
(re-signed, so that the checksum passes), whatever an .s or .hlo text says, loading, compiling and running
raise only the project's typed errors (NeuroncError, IsaError), never a bare exception."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler.errors import NeuroncError
from isa.errors import IsaError
from tests.fuzz.choices import RandomChooser
from tests.fuzz.generate import GenConfig, generate

TYPED = (NeuroncError, IsaError)
BUDGET = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
SMALL = 1 << 24  # run a mutated program only when its tensors are this small
BASE_HLO = """HloModule m
ENTRY %main (x: f32[4,32], y: f32[32,8]) -> f32[4,8] {
  %x = f32[4,32]{1,0} parameter(0)
  %y = f32[32,8]{1,0} parameter(1)
  %d = f32[4,8]{1,0} dot(f32[4,32]{1,0} %x, f32[32,8]{1,0} %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = f32[4,8]{1,0} tanh(f32[4,8]{1,0} %d)
}
"""
TOKENS = ["0", "1", "-1", "7", "128", "129", "512", "{", "}", "(", ")", ",", "%x", "%d", "f32", "bf16", "s32",
          "pred", "ROOT", "=", "[", "]", ":", "@", "sbuf", "psum", "hbm", "wait(s1>=1)", "signal(s9)", '"', "tanh",
          "add", "dot", "dimensions={1,0}", "1e39", "nan", "-inf", "\n", "\x00"]


@pytest.fixture(scope="module")
def base_exe():
    return compiler.compile(BASE_HLO)


def _run_if_small(program) -> None:
    from isa.emulator import run_program

    if sum(t.nbytes for t in program.tensors.values()) > SMALL:
        return
    rng = np.random.default_rng(0)
    inputs = {}
    for name in program.inputs:
        decl = program.tensors[name]
        if decl.dtype != "f32":
            return
        inputs[name] = np.asarray(rng.standard_normal(decl.shape), np.float32)
    run_program(program, inputs, check=True)


@st.composite
def _edits(draw, size: int, start: int = 0):
    """Up to four (position, kind, value) byte or text edits."""
    n = draw(st.integers(1, 4))
    return [(draw(st.integers(start, size - 1)), draw(st.integers(0, 3)), draw(st.integers(0, 255)))
            for _ in range(n)]


@BUDGET
@given(data=st.data())
def test_mutated_neff(base_exe, data):
    from isa import neff

    encoded = neff.encode(base_exe.program)
    body = bytearray(encoded[:-32])
    for pos, kind, value in data.draw(_edits(len(body), start=20)):
        if kind <= 1:
            body[pos] = value
        elif kind == 2:
            body[pos] ^= 1 << (value % 8)
        else:
            body[pos:pos + 4] = (b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x00\x80",
                                 b"\x01\x00\x00\x00")[value % 4]
    signed = bytes(body) + hashlib.sha256(body).digest()
    try:
        program = neff.decode(signed)
        _run_if_small(program)
    except TYPED:
        pass
    except ValueError as e:  # isa.target.load_target's error for a target name mangled in the header
        assert "unknown target" in str(e), e


def _mutate_text(text: str, edits) -> str:
    for pos, kind, value in edits:
        pos %= max(1, len(text))
        if kind == 0:
            text = text[:pos] + text[pos + 1 + value % 12:]
        elif kind == 1:
            text = text[:pos] + TOKENS[value % len(TOKENS)] + text[pos:]
        elif kind == 2:
            numbers = list(re.finditer(r"\d+", text))
            if numbers:
                m = numbers[value % len(numbers)]
                text = text[:m.start()] + ("0", "1", "2", "3", "5", "8", "16", "127", "128", "129")[value % 10] + \
                    text[m.end():]
        else:
            lines = text.split("\n")
            a, b = pos % len(lines), value % len(lines)
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


@BUDGET
@given(data=st.data())
def test_mutated_asm(base_exe, data):
    from isa.asm import parse_program

    text = base_exe.asm
    mutated = _mutate_text(text, data.draw(_edits(len(text))))
    try:
        _run_if_small(parse_program(mutated))
    except TYPED:
        pass
    except ValueError as e:
        assert "unknown target" in str(e), e


@pytest.fixture(scope="module")
def hlo_bases() -> list[str]:
    from hlo.printer import print_module

    return [BASE_HLO] + [print_module(generate(RandomChooser(f"readers:{i}"), GenConfig(max_elements=1 << 10,
                                                                                          max_ops=4)).module)
                         for i in range(8)]


@BUDGET
@given(data=st.data())
def test_mutated_hlo(hlo_bases, data):
    """A mutated module is refused with a typed error, or it is valid and compiles and runs cleanly."""
    from tests.fuzz.harness import random_inputs

    base = hlo_bases[data.draw(st.integers(0, len(hlo_bases) - 1))]
    mutated = _mutate_text(base, data.draw(_edits(len(base))))
    try:
        exe = compiler.compile(mutated, opt_level=data.draw(st.integers(0, 3)))
    except TYPED:
        return
    if sum(t.nbytes for t in exe.program.tensors.values()) <= SMALL:
        from hlo.parser import parse_module

        exe.run(*random_inputs(parse_module(mutated)), check=True)  # a module that compiles must run
