"""Beyond the MLP: attention, layer norm, softmax, reductions, shape ops, more activations."""

from __future__ import annotations

import functools
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import frontend
from frontend.capture import KEEP_WHOLE, capture_export
from hlo.interpreter import evaluate
from hlo.ir import Module
from tests.conftest import assert_close

THIS_FILE = os.path.abspath(__file__)


class Block(nn.Module):
    """A pre-norm transformer block with causal SDPA, mean-pooled."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        x = x + self.mlp(self.ln2(x))
        return x.mean(dim=1)


class Attention(nn.Module):
    """Hand-written attention with a boolean mask buffer, plus a log_softmax of the last row."""

    def __init__(self, t: int = 8):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).bool())

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~self.mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return p @ v, torch.log_softmax(s[..., -1, :], dim=-1)


class Misc(nn.Module):
    """Elementwise math, comparisons, select, clamp, cat/slice, reductions, bmm, addmm, casts."""

    def forward(self, x, y):
        a = F.silu(x) + F.leaky_relu(y, 0.2) - F.elu(x) * F.relu6(y)
        b = torch.clamp(a, -1.5, 2.0) ** 2 + torch.exp(-x.abs()) + torch.rsqrt(y * y + 1)
        c = torch.where(x > y, b, 2 - a) / (1 + x.pow(2))
        d = torch.cat([c, x.unsqueeze(0).squeeze(0)], dim=1)[:, 1:-1:2]
        e = d.sum(dim=-1, keepdim=True) + d.amax(dim=1, keepdim=True) - d.var(dim=1, keepdim=True)
        f = torch.bmm(x.view(2, 3, 8), y.view(2, 8, 3)).flatten(1)
        g = (x.to(torch.bfloat16) * 2).float().sum() + x.mean()
        return e * c.sigmoid(), f.t(), g, torch.addmm(x[:, :6].sum(0), x, y.t())


class Embed(nn.Module):
    """Token + position embeddings (one-hot dots over iota), padding and more unary math."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(50, 16), nn.Embedding(8, 16)

    def forward(self, idx):
        h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        h = F.pad(h, (1, 2))
        return torch.log1p(h.abs()) + torch.expm1(h) * torch.sign(h) + torch.erf(h)


class Kitchen(nn.Module):
    """The remaining elementwise, comparison, creation and view rules."""

    def forward(self, x, n):
        a = torch.div(x * 7, 2, rounding_mode="floor") + torch.div(x * 7, 2, rounding_mode="trunc")
        b = torch.maximum(x.sin(), x.cos()) - torch.minimum(x.floor(), x.ceil()) + (3 - x).reciprocal()
        c = torch.where((x >= 0) & (x != 1) | (x <= -1), 1.0, x) + torch.ones_like(x) * torch.zeros(3, 1)
        d = x.view(x.size(0), 1, -1).expand(3, 2, 4).permute(2, 0, 1).flatten(1).amin(1)
        e = F.hardtanh(x, -0.5, 0.5) + x.unsqueeze(0).squeeze().T.T
        return a + b + c + e, d, n.sum(), (n > 2).logical_not(), torch.full((2,), 1.5) + n[:2]


def _inputs(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "Block":
        return Block(), (torch.randn(2, 8, 32),)
    if name == "Kitchen":
        return Kitchen(), (torch.randn(3, 4), torch.arange(4, dtype=torch.int32))
    if name == "Embed":
        return Embed(), (torch.randint(0, 50, (2, 8)),)
    if name == "Attention":
        return Attention(), tuple(torch.randn(2, 4, 8, 16) for _ in range(3))
    return Misc(), (torch.randn(6, 8), torch.randn(6, 8))


MODELS = ["Block", "Attention", "Misc", "Embed", "Kitchen"]


@functools.cache
def _imported(name: str, capture: str) -> tuple[nn.Module, tuple, Module]:
    model, inputs = _inputs(name)
    return model, inputs, frontend.import_model(model, inputs, capture=capture)


@pytest.mark.parametrize("capture", ["export", "fx"])
@pytest.mark.parametrize("name", MODELS)
def test_numerics_match_torch(name, capture):
    model, inputs, module = _imported(name, capture)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = evaluate(module, [t.numpy() for t in inputs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == tuple(e.shape)
        assert_close(a, e)


@pytest.mark.parametrize("capture", ["export", "fx"])
@pytest.mark.parametrize("name", MODELS)
def test_verifier_and_round_trip(name, capture):
    verifier = pytest.importorskip("hlo.verifier")
    printer = pytest.importorskip("hlo.printer")
    parser = pytest.importorskip("hlo.parser")
    *_, module = _imported(name, capture)
    verifier.verify_module(module)
    text = printer.print_module(module)
    assert printer.print_module(parser.parse_module(text)) == text


def test_decomposition_keeps_fusable_ops_whole():
    model, inputs = _inputs("Block")
    graph = capture_export(model, inputs).graph
    ops = {str(n.target) for n in graph.nodes if n.op == "call_function"}
    assert {"aten.linear.default", "aten.layer_norm.default", "aten.gelu.default",
            "aten.scaled_dot_product_attention.default"} <= ops
    assert not ops & {"aten.addmm.default", "aten.native_layer_norm.default", "aten.bmm.default"}
    assert all(str(op) in frontend.supported_operators() for op in KEEP_WHOLE)


def test_attention_dots_fold_the_key_transpose():
    *_, module = _imported("Attention", "export")
    dots = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert [d.shape.dims for d in dots] == [(8, 8, 8), (8, 8, 16)]
    qk = dots[0]
    assert qk.attrs["lhs_batch_dims"] == (0,) and qk.attrs["rhs_contracting_dims"] == (2,)
    assert not any(i.opcode == "transpose" for i in module.entry.instructions)
    assert {c.attrs["data"].text for c in module.entry.instructions if "data" in c.attrs} == {"mask"}


def test_softmax_is_the_stable_pattern():
    *_, module = _imported("Attention", "export")
    ops = [i.opcode for i in module.entry.instructions]
    start = ops.index("reduce")
    assert ops[start:start + 6] == ["reduce", "broadcast", "subtract", "exponential", "constant", "reduce"]
    reducers = {i.attrs["to_apply"].root.opcode for i in module.entry.instructions if i.opcode == "reduce"}
    assert reducers == {"maximum", "add"}


def test_block_metadata_names_aten_ops_and_lines():
    *_, module = _imported("Block", "export")
    names = {i.metadata.get("op_name") for i in module.entry.instructions}
    assert {"aten.linear", "aten.layer_norm", "aten.scaled_dot_product_attention", "aten.gelu",
            "aten.mean"} <= names
    sdpa = [i for i in module.entry.instructions if i.metadata.get("op_name") == "aten.scaled_dot_product_attention"]
    src = open(THIS_FILE).read().splitlines()
    assert all(i.metadata["source_file"] == THIS_FILE for i in sdpa)
    assert "scaled_dot_product_attention" in src[sdpa[0].metadata["source_line"] - 1]


def test_exported_program_is_accepted_and_named():
    model, inputs = _inputs("Attention")
    ep = torch.export.export(model, inputs)
    module = frontend.import_model(ep, inputs)
    assert module.name == "Attention"
    assert len(module.entry.parameters) == 3 and module.entry.root.opcode == "tuple"


def test_bf16_model_keeps_bf16():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU()).to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    module = frontend.import_model(model, (x,), capture="fx")
    pytest.importorskip("hlo.verifier").verify_module(module)
    entry = module.entry
    assert entry.parameters[0].shape.dtype == "bf16" and entry.root.shape.dtype == "bf16"
    weight = next(i for i in entry.instructions if i.attrs.get("data") and i.attrs["data"].text == "0.weight")
    assert weight.shape.dtype == "bf16"
    np.testing.assert_array_equal(weight.literal.astype(np.float32), model[0].weight.float().detach().numpy())
