"""Programs the compiler really emits survive the text and binary forms unchanged.

A few MLPs (the bundled example, bf16 auto-cast, -O0, trn2) are compiled with ``compiler.compile``;
each ``exe.program`` is printed and assembled again, encoded and decoded again, and the copies
must equal the original (attributes the backend left at their defaults are filled in by both
forms, as the table says) and print and encode to the same text and bytes. The assembled copy
also runs on the emulator in checked mode to the original's outputs.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import compiler
from isa import neff
from isa.asm import parse_program, print_program
from isa.emulator import run_program
from isa.instructions import OPCODES
from isa.program import Program
from tests.isa.test_asm import assert_same_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class SmallMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(96, 160)
        self.fc2 = torch.nn.Linear(160, 40)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc2(torch.nn.functional.gelu(self.fc1(x)))) * 0.5 + x[:, :40]


def _example_mlp():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import mlp
    finally:
        sys.path.remove(str(EXAMPLES))
    return mlp.get_model()


def _small():
    torch.manual_seed(3)
    return SmallMLP().eval(), (torch.randn(24, 96),)


CASES = {
    "example-mlp": (_example_mlp, {}),
    "small-bf16": (_small, {"auto_cast": "matmult"}),
    "small-O0": (_small, {"opt_level": 0}),
    "small-trn2": (_small, {"target": "trn2"}),
}


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request):
    make, options = CASES[request.param]
    model, inputs = make()
    return compiler.compile(model, inputs, **options)


def with_defaults(program: Program) -> Program:
    """``program`` with every attribute the backend left out filled with its table default."""
    instructions = [replace(i, attrs={a.name: i.attrs.get(a.name, a.default) for a in OPCODES[i.opcode].attrs})
                    for i in program.instructions]
    return replace(program, instructions=instructions)


def test_print_and_assemble_round_trip(compiled):
    program = compiled.program
    text = print_program(program)
    assembled = parse_program(text, constants=program.constants)
    assert_same_program(assembled, with_defaults(program))
    assert [i.line for i in assembled.instructions] == list(
        range(len(text.splitlines()) - len(program.instructions) + 1, len(text.splitlines()) + 1))
    assert print_program(assembled) == text


def test_encode_and_decode_round_trip(compiled):
    program = compiled.program
    data = neff.encode(program)
    decoded = neff.decode(data)
    assert_same_program(decoded, with_defaults(program))
    assert neff.encode(decoded) == data
    assert print_program(decoded) == print_program(program)


def test_the_assembled_copy_computes_the_same_outputs(compiled):
    program = compiled.program
    copy = parse_program(print_program(program), constants=program.constants)
    inputs = dict(zip(program.inputs, compiled.random_inputs(seed=1), strict=True))
    original = run_program(program, inputs).outputs
    again = run_program(copy, inputs, check=True).outputs
    for name in program.outputs:
        np.testing.assert_array_equal(again[name], original[name])
