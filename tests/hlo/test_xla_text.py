"""HLO text as XLA writes it (``jax.jit(f).lower(...).compiler_ir('hlo').as_hlo_text()`` style: names
without ``%``, parameters between other instructions, ``/*index=N*/`` comments, metadata, sharding,
frontend_attributes, operand_precision...) parses, verifies, evaluates to the right numbers, and prints in
our canonical form, which is a fixed point of print(parse(.))."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hlo.interpreter import evaluate
from hlo.ir import Window
from hlo.parser import parse_module
from hlo.printer import print_module
from hlo.verifier import verify_module
from tests.hlo.test_hlo_text import structure

DATA = Path(__file__).parent / "data"
RNG = np.random.default_rng(7)


def load(name: str):
    module = parse_module((DATA / name).read_text(), source=name)
    verify_module(module)
    return module


@pytest.mark.parametrize("name", ["jax_mlp.hlo", "jax_cnn.hlo", "jax_index.hlo"])
def test_canonical_print_is_a_fixed_point(name):
    module = load(name)
    text = print_module(module)
    again = parse_module(text)
    assert print_module(again) == text
    assert structure(again) == structure(module)


def test_jax_mlp_log_softmax():
    module = load("jax_mlp.hlo")
    entry = module.entry
    assert entry.name == "main.40" and [p.name for p in entry.parameters] == ["Arg_0.1", "Arg_1.2", "Arg_2.3",
                                                                             "Arg_3.4"]
    dot = next(i for i in entry.instructions if i.name == "dot.5")
    assert dot.metadata["source_line"] == 7 and dot.metadata["op_name"].startswith("jit(mlp)/jit(main)/dot_general[")
    assert dot.attrs["frontend_attributes"] == '{grad_x="false",grad_y="false"}'
    assert entry.parameters[1].metadata == {"op_name": "params['w1']"}
    x, w1, b1, w2 = RNG.standard_normal((8, 16)), RNG.standard_normal((16, 32)), RNG.standard_normal(32), \
        RNG.standard_normal((32, 4))
    args = [a.astype(np.float32) for a in (x, w1, b1, w2)]
    out, lse = evaluate(module, args)
    logits = np.maximum(x @ w1 + b1, 0) @ w2
    np.testing.assert_allclose(out, torch.log_softmax(torch.from_numpy(logits), 1).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lse, np.log(np.exp(logits).sum(1)), rtol=1e-4)


def test_jax_cnn_conv_pool_dense():
    module = load("jax_cnn.hlo")
    conv = next(i for i in module.entry.instructions if i.opcode == "convolution")
    assert conv.attrs["window"] == Window.make((3, 3), pad=((1, 1), (1, 1)))
    assert module.attrs["is_scheduled"] is True
    x, k, b, w = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 8, 8, 3), (3, 3, 3, 4), (4,), (64, 10)))
    (out,) = evaluate(module, [x, k, b, w])
    y = F.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(k).permute(3, 2, 0, 1), torch.from_numpy(b),
                 padding=1)
    y = F.max_pool2d(F.relu(y), 2).permute(0, 2, 3, 1).reshape(2, 64)
    np.testing.assert_allclose(out, (y @ torch.from_numpy(w)).numpy(), rtol=1e-4, atol=1e-4)


def test_jax_index_ops():
    module = load("jax_index.hlo")
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([3, -1, 0, 9, 3, -10], np.int32)  # negative ids wrap as in jnp.take
    upd = RNG.standard_normal((6, 4)).astype(np.float32)
    logits = np.array([[1, 5, 5, 0, 2], [0, 0, 0, 0, 0], [-1, -2, 7, 7, 9]], np.float32)
    gathered, added, argmax, maxes, window, replaced = evaluate(module, [table, ids, upd, logits, np.int32(4)])
    wrapped = np.where(ids < 0, ids + 10, ids)
    np.testing.assert_array_equal(gathered, table[wrapped])
    want = table.copy()
    np.add.at(want, wrapped, upd)
    np.testing.assert_allclose(added, want, rtol=1e-6)
    assert argmax.tolist() == [1, 0, 4] and maxes.tolist() == [5, 0, 9]
    np.testing.assert_array_equal(window, logits[:, 3:5])  # start 4 is clamped to 3 so that 2 columns fit
    want = table.copy()
    want[2] = 7
    np.testing.assert_array_equal(replaced, want)
