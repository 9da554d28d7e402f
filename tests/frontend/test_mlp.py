"""MLPs through both capture paths: HLO structure, metadata, constants and numerics."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch
from torch import nn

import frontend
from hlo.interpreter import evaluate
from hlo.ir import Module
from tests.conftest import assert_close

THIS_FILE = os.path.abspath(__file__)
ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
        "gelu_tanh": lambda: nn.GELU(approximate="tanh")}
ACT_OPCODE = {"relu": "maximum", "gelu": "custom-call", "tanh": "tanh", "sigmoid": "logistic",
              "gelu_tanh": "custom-call"}


class Net(nn.Module):
    """Linear layers with an activation between them (defined here so metadata points at this file)."""

    def __init__(self, sizes: tuple[int, ...], act: str, bias: bool):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(sizes, sizes[1:]))
        self.act = ACTS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)  # LINEAR_LINE
            if i < len(self.layers) - 1:
                x = self.act(x)  # ACT_LINE
        return x


def _line(marker: str) -> int:
    with open(THIS_FILE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


CASES = [  # (act, sizes, batch, bias)
    ("relu", (100, 64, 10), 3, True),
    ("gelu", (100, 64, 10), 3, True),
    ("tanh", (100, 64, 32, 10), 3, False),
    ("sigmoid", (100, 64, 10), 3, True),
    ("gelu_tanh", (100, 32, 10), 3, False),
    ("relu", (784, 256, 128, 10), 200, True),
]


@functools.cache
def _imported(case: tuple, capture: str) -> tuple[Net, torch.Tensor, Module]:
    act, sizes, batch, bias = case
    torch.manual_seed(0)
    model, x = Net(sizes, act, bias), torch.randn(batch, sizes[0])
    return model, x, frontend.import_model(model, (x,), capture=capture)


@pytest.fixture(params=[(c, cap) for c in CASES for cap in ("export", "fx")],
                ids=lambda p: f"{p[0][0]}-{'x'.join(map(str, p[0][1]))}-b{p[0][2]}-{p[1]}")
def imported(request):
    case, capture = request.param
    return (case, capture, *_imported(case, capture))


def test_structure(imported):
    (act, sizes, batch, bias), capture, model, x, module = imported
    entry = module.entry
    assert module.name == "Net" and entry.name == "main"
    ops = [i.opcode for i in entry.instructions]
    n_layers = len(sizes) - 1
    assert ops.count("dot") == n_layers
    assert ops.count("transpose") == 0  # the weight transpose is folded into rhs_contracting_dims={1}
    assert ops.count(ACT_OPCODE[act]) == n_layers - 1
    dots = [i for i in entry.instructions if i.opcode == "dot"]
    for dot, (k, n) in zip(dots, zip(sizes, sizes[1:])):
        assert dot.attrs["lhs_contracting_dims"] == (1,) and dot.attrs["rhs_contracting_dims"] == (1,)
        assert dot.shape.dims == (batch, n) and dot.operands[1].shape.dims == (n, k)
    (param,) = entry.parameters
    assert param.shape.dtype == "f32" and param.shape.dims == (batch, sizes[0])
    assert entry.root.shape.dims == (batch, sizes[-1])
    if bias:
        bcasts = [i for i in entry.instructions if i.opcode == "broadcast" and i.operands[0].shape.rank == 1]
        assert len(bcasts) == n_layers and all(b.attrs["dimensions"] == (1,) for b in bcasts)
    customs = [i for i in entry.instructions if i.opcode == "custom-call"]
    assert {c.attrs["custom_call_target"].text for c in customs} <= {"gelu", "gelu_tanh"}


def test_constants_are_the_state_dict(imported):
    *_, model, x, module = imported
    consts = {i.attrs["data"].text: i for i in module.entry.instructions
              if i.opcode == "constant" and "data" in i.attrs}
    state = model.state_dict()
    assert set(consts) == set(state)
    for key, inst in consts.items():
        np.testing.assert_array_equal(inst.literal, state[key].numpy())


def test_metadata_points_at_this_file(imported):
    *_, module = imported
    computed = [i for i in module.entry.instructions if i.opcode not in ("parameter", "constant")]
    assert all(i.metadata.get("source_file") == THIS_FILE for i in computed)
    by_op = {}
    for i in computed:
        by_op.setdefault(i.metadata["op_name"], set()).add(i.metadata["source_line"])
    assert by_op["aten.linear"] == {_line("LINEAR_LINE")}
    act_ops = set(by_op) - {"aten.linear"}
    assert all(by_op[op] == {_line("ACT_LINE")} for op in act_ops)


def test_numerics_match_torch(imported):
    *_, model, x, module = imported
    (out,) = evaluate(module, [x.numpy()])
    with torch.no_grad():
        assert_close(out, model(x))


def test_printer_round_trip(imported):
    printer = pytest.importorskip("hlo.printer")
    parser = pytest.importorskip("hlo.parser")
    *_, module = imported
    text = printer.print_module(module)
    assert printer.print_module(parser.parse_module(text)) == text


def test_verifier_accepts(imported):
    verifier = pytest.importorskip("hlo.verifier")
    *_, module = imported
    verifier.verify_module(module)
