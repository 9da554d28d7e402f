"""Structural hashing (compiler/passes/structural.py): equal blocks hash equal whatever their names and
weights; a changed shape, dtype, attribute or opcode hashes differently; the repeated layers of a model are
found."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from compiler.passes.structural import block_hash, computation_hash, instruction_hashes, repeated_blocks
from frontend import import_model_with_signature
from hlo.ir import Shape
from hlo.parser import parse_module

TWO_BLOCKS = """HloModule m

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8] parameter(0)
  w1 = f32[8,8] constant({...}), data="w1"
  d1 = f32[4,8] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t1 = f32[4,8] tanh(d1)
  w2 = f32[8,8] constant({...}), data="w2"
  d2 = f32[4,8] dot(t1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t2 = f32[4,8] tanh(d2)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(t2, z), dimensions={1}, to_apply=add_f32
}
"""


def _module(text: str = TWO_BLOCKS):
    rng = np.random.default_rng(0)
    constants = {"w1": rng.standard_normal((8, 8)).astype(np.float32),
                 "w2": rng.standard_normal((8, 8)).astype(np.float32)}
    return parse_module(text, constants=constants)


def _named(module, name):
    return next(i for i in module.entry.instructions if i.name == name)


def test_equal_blocks_hash_equal_despite_names_and_weights():
    module = _module()
    entry = module.entry.instructions
    first = [i for i in entry if i.name in ("w1", "d1", "t1")]
    second = [i for i in entry if i.name in ("w2", "d2", "t2")]
    assert block_hash(first) == block_hash(second)
    hashes = instruction_hashes(module.entry)
    # the two weights differ in value only: same hash; the dots differ in what is below them
    assert hashes[_named(module, "w1").uid] == hashes[_named(module, "w2").uid]
    assert hashes[_named(module, "d1").uid] != hashes[_named(module, "d2").uid]


def test_names_do_not_change_the_hash():
    renamed = TWO_BLOCKS.replace("d1", "dot.7").replace("t1", "tanh.3").replace("add_f32", "sum")
    assert computation_hash(_module().entry) == computation_hash(_module(renamed).entry)


def test_a_changed_shape_attribute_opcode_or_dtype_hashes_differently():
    base = computation_hash(_module().entry)
    changed = [
        TWO_BLOCKS.replace("ROOT r = f32[4] reduce(t2, z), dimensions={1}",
                           "ROOT r = f32[8] reduce(t2, z), dimensions={0}"),  # attribute and shape
        TWO_BLOCKS.replace("t2 = f32[4,8] tanh(d2)", "t2 = f32[4,8] exponential(d2)"),  # opcode
        TWO_BLOCKS.replace("ROOT s = f32[] add(a, b)", "ROOT s = f32[] maximum(a, b)"),  # called computation
    ]
    for text in changed:
        assert computation_hash(_module(text).entry) != base, text
    module = _module()
    block = [i for i in module.entry.instructions if i.name in ("w1", "d1", "t1")]
    before = block_hash(block)
    block[2].shape = Shape.array("bf16", block[2].shape.dims)  # dtype
    assert block_hash(block) != before


class _Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class _Stack(nn.Module):
    def __init__(self, d: int = 16, layers: int = 5):
        super().__init__()
        self.blocks = nn.ModuleList(_Block(d) for _ in range(layers))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return torch.tanh(x)


def test_the_layers_of_a_model_are_found_as_repeated_blocks():
    torch.manual_seed(0)
    module, _ = import_model_with_signature(_Stack().eval(), (torch.randn(4, 16),))
    found = repeated_blocks(module.entry)
    assert found is not None and found.count == 5
    instructions = module.entry.instructions
    hashes = {block_hash(instructions[a:b]) for a, b in found.ranges()}
    assert hashes == {found.hash}
    # one layer with another width is not one of them
    torch.manual_seed(0)
    mixed = _Stack(layers=4).eval()
    mixed.blocks.append(_Block(16))
    mixed.blocks[2].fc1, mixed.blocks[2].fc2 = nn.Linear(16, 24), nn.Linear(24, 16)
    module, _ = import_model_with_signature(mixed, (torch.randn(4, 16),))
    found = repeated_blocks(module.entry)
    assert found is None or found.count == 2
