"""Repeated layers rolled into a loop (compiler/passes/control/layer_roller.py): the IR in and out (golden), the
reasons a candidate is not rolled, and whole models against eager with the loop compiled once."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.passes.control.layer_roller import LayerRoller
from hlo.printer import print_module
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden
from tests.models.util import BOUNDS, example, rel_errors


def test_roll_layers_golden():
    module = run_golden("roll_layers", [LayerRoller()], rtol=1e-6, atol=1e-6)
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    body = loop.attrs["body"]
    assert sum(i.opcode == "dot" for i in body.instructions) == 1  # one layer in the body
    assert not any(i.opcode == "dot" for i in module.entry.instructions)


def _edited(old: str, new: str) -> str:
    text = (GOLDEN_DIR / "roll_layers.in.hlo").read_text()
    assert old in text
    return text.replace(old, new)


def test_a_layer_of_another_structure_is_left_out():
    # layer 2 has a different activation: layers 0 and 1 are rolled, layer 2 stays as it is
    module = parse_with_constants(_edited("%act.2 = f32[2,8]{1,0} tanh(", "%act.2 = f32[2,8]{1,0} exponential("))
    roller = LayerRoller()
    assert roller.run(module)
    assert any("layers.* 0..1: rolled 2 layers" in line for line in roller.decision_lines())
    assert sum(i.opcode == "dot" for i in module.entry.instructions) == 1


def test_reasons_for_not_rolling():
    # every layer a different structure
    module = parse_with_constants(_edited("%act.1 = f32[2,8]{1,0} tanh(", "%act.1 = f32[2,8]{1,0} exponential(")
                                  .replace("%act.2 = f32[2,8]{1,0} tanh(", "%act.2 = f32[2,8]{1,0} negate("))
    roller = LayerRoller()
    before = print_module(module)
    assert not roller.run(module)
    assert print_module(module) == before
    assert any("layers 0 and 1 differ in structure" in line for line in roller.decision_lines())
    # a per-layer input that is neither a weight nor the previous layer's output (layer 2 adds x, not bias)
    module = parse_with_constants(_edited("add(%mul.2, %bias)", "add(%mul.2, %x)"))
    roller = LayerRoller()
    assert not roller.run(module)
    assert any("differs per layer and is neither a weight constant nor the previous layer's output" in line
               for line in roller.decision_lines()), roller.decision_lines()


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_rolled_models_match_eager(name):
    """Tiny HF models at 3 layers (GPT-2 with its KV cache: stacked loop outputs): the layers run as one loop on
    chip, the results are eager's."""
    model, args, kwargs = example(name, layers=3, tiny=True)
    with torch.no_grad():
        want = model(*args, **kwargs)
    exe = compiler.compile(model, args, example_kwargs=kwargs, roll_layers=True, cache=False, quiet=True)
    assert any(i.opcode == "loop" for i in exe.program.instructions)
    got = exe(*args, **kwargs)
    assert type(got) is type(want)
    errors = rel_errors(got, want)
    assert max(errors) <= BOUNDS["none"], errors
