"""docs/isa.md is generated from the tables and must never go stale."""

from __future__ import annotations

from pathlib import Path

from isa.asm import parse_program, print_program
from isa.docgen import EXAMPLE, generate
from isa.instructions import OPCODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "isa.md"


def test_docs_isa_md_is_up_to_date() -> None:
    assert DOC.read_text() == generate(), "docs/isa.md is stale: run `python -m isa.docgen > docs/isa.md`"


def test_every_instruction_operand_and_attribute_is_documented() -> None:
    text = generate()
    for spec in OPCODES.values():
        section = text.split(f"### `{spec.name}`\n", 1)[1].split("\n### ", 1)[0]
        assert spec.doc in section and f"Cost class: `{spec.cost}`" in section
        for name in [o.name for o in spec.operands] + [a.name for a in spec.attrs]:
            assert f"| `{name}` |" in section, (spec.name, name)


def test_the_documented_example_assembles_and_round_trips() -> None:
    program = parse_program(EXAMPLE)
    assert print_program(program) == EXAMPLE
    assert {i.opcode for i in program.instructions} >= {"dma", "load_stationary", "multiply_moving"}
    assert EXAMPLE in generate()
