"""Origins: the HLO name on each instruction and the program's origin table, in text and .neff."""

from __future__ import annotations

import json
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa import neff
from isa.asm import parse_program, print_program
from isa.errors import AsmError, ProgramError
from isa.program import Instruction, Origin, Program, Source
from tests.isa.test_asm import assert_same_program, programs
from tests.isa.test_neff import _join, _split

_HLO_NAMES = st.from_regex(r"[a-z][a-z0-9_.\-]{0,12}", fullmatch=True)
_FIELD = st.text(st.characters(blacklist_characters="|\n\r", blacklist_categories=("Cs",)), max_size=12)
_SOURCES = st.builds(Source, _FIELD, _FIELD, st.text(st.characters(blacklist_categories=("Cs",)), max_size=16))
_ORIGINS = st.builds(Origin, st.lists(_SOURCES, max_size=3).map(tuple), st.integers(0, 2**62),
                     st.integers(0, 2**62))


@st.composite
def tagged_programs(draw) -> Program:
    program = draw(programs(with_constants=True))
    names = draw(st.lists(_HLO_NAMES, unique=True, min_size=1, max_size=4))
    for inst in program.instructions:
        inst.origin = draw(st.sampled_from(["", *names]))
    program.origins = {name: draw(_ORIGINS) for name in names}
    return program


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tagged_programs())
def test_origins_round_trip_through_text_and_neff(program: Program) -> None:
    text = print_program(program)
    assert_same_program(parse_program(text, constants=program.constants), program)
    data = neff.encode(program)
    decoded = neff.decode(data)
    assert_same_program(decoded, program)
    assert neff.encode(decoded) == data


def _tagged() -> Program:
    program = Program("trn1", instructions=[Instruction("pe", "nop", origin="fusion.3", comment="c"),
                                            Instruction("act", "nop")])
    program.origins["fusion.3"] = Origin((Source("h.0.attn.c_attn", "aten.addmm", "gpt2.py:12"),
                                          Source("h.0.attn", "aten.add", "")), flops=1024, hbm_bytes=2048)
    return program


def test_text_form_of_origins() -> None:
    text = print_program(_tagged())
    assert ('.origin "fusion.3" flops=1024 hbm_bytes=2048 source="h.0.attn.c_attn|aten.addmm|gpt2.py:12" '
            'source="h.0.attn|aten.add|"') in text
    assert 'pe.nop origin="fusion.3"  ; c' in text
    assert "act.nop\n" in text  # no origin: nothing printed
    program = parse_program(text)
    assert program.origins["fusion.3"].modules == ("h.0.attn.c_attn", "h.0.attn")
    assert program.origins["fusion.3"].ops == ("aten.addmm", "aten.add")


@pytest.mark.parametrize(("line", "message"), [
    ('pe.nop origin=fusion', "origin must be given once, as a quoted HLO name"),
    ('pe.nop origin="a" origin="b"', "origin must be given once"),
    ('.origin "a" flops=1 flops=2', "duplicate 'flops' in .origin 'a'"),
    ('.origin "a" color="red"', ".origin has no field 'color'"),
    ('.origin "a" source="no separators"', "is not \"MODULE|OP|FILE:LINE\""),
    ('.origin "a" source=3', ".origin source expects a quoted"),
    ('.origin "a" flops=-1', "flops must be >= 0"),
    ('.origin "b"\n.origin "a"\n.origin "a"', "duplicate .origin 'a'"),
])
def test_bad_origins_are_refused_with_the_line(line: str, message: str) -> None:
    with pytest.raises(AsmError, match=f"^{2 + line.count(chr(10)) + 1}:.*{re.escape(message)}"):
        parse_program(f".target trn1\n; x\n{line}\n")


def test_a_separator_in_a_module_cannot_be_printed() -> None:
    program = Program("trn1", origins={"a": Origin((Source("a|b", "op", ""),))})
    with pytest.raises(ProgramError, match="contains '|'"):
        print_program(program)


def test_version_2_files_are_read_with_empty_origins() -> None:
    """A version 2 file has no origin per instruction and no origins table in its header."""
    _, _, sections = _split(neff.encode(_tagged()))
    header = json.loads(sections[1])
    del header["origins"]
    count, = struct.unpack_from("<I", sections[3])
    body, position = bytearray(sections[3][:4]), 4
    for _ in range(count):  # nop: head, no operands, 0 attributes, comment, origin, 0 waits, 0 signals
        head = sections[3][position:position + 4 + 1 + 4]
        body += head + sections[3][position + 13:position + 17]
        position += 17
    assert position == len(sections[3])
    old = _join({1: json.dumps(header).encode(), 2: sections[2], 3: bytes(body), 4: sections[4]}, version=2)
    program = neff.decode(old)
    assert [i.origin for i in program.instructions] == ["", ""] and program.origins == {}
    assert program.instructions[0].comment == "c"
